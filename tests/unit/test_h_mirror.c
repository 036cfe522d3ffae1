/* Unit tests for server/handlers/h_mirror.c: a pull-through mirror (driven by the
 * loopback driver) of an upstream that is a real tensord front in the
 * same process, over a loopback socket. Its answers wait for the mirror's
 * jobs and are dispatched again: the /api documents passed through as the
 * upstream answers them, a file by branch redirected to its commit, by
 * commit its bytes fetched through the cache (read here as they arrive),
 * a HEAD that fetches nothing, the upstream's 404 passed on in the Hub's
 * dialect, a complete mirrored file by digest, a preload without GPU
 * sharing, and an upstream that cannot be reached: 504 when strict, the
 * last answers it gave (marked stale) when serving what the cache holds. */
#include <openssl/sha.h>
#include <signal.h>

#include "h_mirror.h"
#include "h_mirror_int.h"
#include "mirror_job.h"
#include "log.h"
#include "loopback.h"
#include "mirror_start.h"

static char up_root[64], mirror_root[64], cache[64];
static const char config_json[] = "{\"model_type\": \"mirrored\"}\n";

static char commit[41]; /* r's, as the upstream named it */

static void start_mirror(struct lb_server *s, const char *upstream, const char *offline)
{
    char opt1[128], opt2[128], opt3[64];
    snprintf(opt1, sizeof(opt1), "upstream=%s", upstream);
    snprintf(opt2, sizeof(opt2), "mirror_cache_dir=%s", cache);
    snprintf(opt3, sizeof(opt3), "mirror_offline=%s", offline);
    const char *const opts[] = {opt1, opt2, opt3, NULL};
    lb_start(s, mirror_root, LB_NO_HASHER, opts);
    char err[256];
    int rc;
    s->srv.mirror = mirror_start(&s->cfg, &rc, err, sizeof(err));
    CHECK(rc == 0 && s->srv.mirror != NULL);
}

TEST(through_the_upstream)
{
    struct lb_server up, m;
    lb_start(&up, up_root, LB_HASHED, NULL);
    unsigned port = lb_listen(&up);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u", port);
    start_mirror(&m, url, "serve-cached");

    /* A document: passed through as the upstream answers it. */
    struct lb_answer want = lb_get(&up, "/api/models/r", NULL);
    struct lb_answer r = lb_get(&m, "/api/models/r", NULL);
    CHECK(r.waited);
    CHECK_EQ_U64(r.status, 200);
    CHECK_STR(r.body, want.body);
    CHECK(lb_header(&r, "X-Tensord-Stale") == NULL && lb_header(&r, "Age") == NULL);
    char etag[64];
    snprintf(commit, sizeof(commit), "%s", lb_header(&want, "X-Repo-Commit"));
    snprintf(etag, sizeof(etag), "%s", lb_header(&want, "ETag"));
    char *head = xasprintf("Content-Type: application/json\r\nX-Repo-Commit: %s\r\n"
                           "Cache-Control: no-cache\r\nETag: %s\r\n", commit, etag);
    CHECK_STR(r.head, head);
    free(head);
    lb_free(&r);
    lb_free(&want);

    /* A file by branch: to its commit's URL. */
    r = lb_get(&m, "/r/resolve/main/config.json", NULL);
    char *loc = xasprintf("/r/resolve/%s/config.json", commit);
    CHECK_EQ_U64(r.status, 302);
    CHECK_STR(lb_header(&r, "Location"), loc);
    CHECK_STR(lb_header(&r, "X-Repo-Commit"), commit);
    lb_free(&r);

    /* By commit: the bytes, fetched into the cache as they are read. */
    struct lb_answer up_file = lb_get(&up, loc, NULL);
    r = lb_get(&m, loc, NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK_STR(r.body, config_json);
    snprintf(etag, sizeof(etag), "%s", lb_header(&up_file, "ETag"));
    CHECK_STR(lb_header(&r, "ETag"), etag);
    CHECK_STR(lb_header(&r, "X-Repo-Commit"), commit);
    CHECK_STR(lb_header(&r, "Cache-Control"), "public, max-age=31536000, immutable");
    lb_free(&r);
    lb_free(&up_file);
    r = lb_request(&m, "HEAD", loc, NULL, NULL); /* headers only: nothing opened */
    CHECK(r.status == 200 && r.length == strlen(config_json) && r.len == 0);
    lb_free(&r);
    static const char *const range[] = {"Range: bytes=2-11", NULL};
    r = lb_get(&m, loc, range);
    CHECK_EQ_U64(r.status, 206);
    CHECK_STR(r.body, "model_type");
    lb_free(&r);
    free(loc);

    /* The upstream's errors, passed on in its dialect. */
    r = lb_get(&m, "/r/resolve/main/nope.json", NULL);
    CHECK_EQ_U64(r.status, 404);
    CHECK_STR(lb_header(&r, "X-Error-Code"), "EntryNotFound");
    CHECK(strncmp(r.body, "{\"error\":\"nope.json does not exist in repo r", 43) == 0);
    lb_free(&r);
    r = lb_get(&m, "/api/models/nope", NULL);
    CHECK_EQ_U64(r.status, 404);
    CHECK_STR(lb_header(&r, "X-Error-Code"), "RepoNotFound");
    lb_free(&r);

    /* An LFS file: its bytes, then, complete, by its SHA-256. */
    loc = xasprintf("/r/resolve/%s/model.safetensors", commit);
    up_file = lb_get(&up, loc, NULL);
    r = lb_get(&m, loc, NULL);
    CHECK(r.status == 200 && r.len == up_file.len && r.len > 8 &&
          memcmp(r.body, up_file.body, r.len) == 0);
    lb_free(&r);
    free(loc);
    unsigned char md[32];
    char hex[65];
    SHA256((const unsigned char *)up_file.body, up_file.len, md);
    lb_free(&up_file);
    for (int i = 0; i < 32; i++)
        sprintf(hex + 2 * i, "%02x", md[i]);
    char *blob = xasprintf("/v1/blobs/sha256:%s", hex);
    r = lb_get(&m, blob, NULL);
    CHECK_EQ_U64(r.status, 200);
    snprintf(etag, sizeof(etag), "\"sha256:%.40s", hex);
    CHECK(strncmp(lb_header(&r, "ETag"), etag, strlen(etag)) == 0);
    CHECK_EQ_U64(r.len, 8 + 53 + 4);
    lb_free(&r);
    free(blob);

    /* A preload needs GPU sharing. */
    r = lb_request(&m, "POST", "/v1/models/r/gpu", NULL, "{\"device\": \"host\"}");
    CHECK_ANSWER(r, 503, "Content-Type: application/json\r\nRetry-After: 1\r\n",
                 "{\"error\":{\"code\":\"gpu_unavailable\",\"message\":\"GPU sharing is not "
                 "running in this daemon\"}}\n");
    lb_free(&r);
    lb_stop(&m);
    lb_stop(&up);
}

TEST(unreachable_upstream)
{
    /* A port nothing listens on. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&a, &alen) == 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u", ntohs(a.sin_port));
    close(fd);

    /* strict: nothing the cache holds is answered without the upstream. */
    struct lb_server m;
    start_mirror(&m, url, "strict");
    struct lb_answer r = lb_get(&m, "/api/models/r", NULL);
    CHECK(r.waited);
    CHECK_EQ_U64(r.status, 504); /* it cannot be reached: no 502's "bad answer" */
    CHECK(strncmp(r.body, "{\"error\":\"upstream: ", 20) == 0);
    CHECK(strstr(r.body, "cannot be reached") != NULL);
    CHECK(lb_header(&r, "X-Error-Code") == NULL);
    lb_free(&r);
    r = lb_get(&m, "/r/resolve/main/config.json", NULL);
    CHECK_EQ_U64(r.status, 504);
    lb_free(&r);
    lb_stop(&m);

    /* serve-cached: the last answers the upstream gave (the cache's names
     * outlive the mirror that kept them), marked stale; the file by commit
     * from the cache; what it never gave, 504. */
    start_mirror(&m, url, "serve-cached");
    r = lb_get(&m, "/api/models/r", NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK(strstr(r.body, commit) != NULL);
    CHECK(lb_header(&r, "X-Tensord-Stale") != NULL && lb_header(&r, "Age") != NULL);
    lb_free(&r);
    r = lb_get(&m, "/r/resolve/main/config.json", NULL);
    CHECK_EQ_U64(r.status, 302);
    CHECK_STR(lb_header(&r, "X-Repo-Commit"), commit);
    CHECK(lb_header(&r, "X-Tensord-Stale") != NULL);
    lb_free(&r);
    char *loc = xasprintf("/r/resolve/%s/config.json", commit);
    r = lb_get(&m, loc, NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK_STR(r.body, config_json);
    lb_free(&r);
    free(loc);
    r = lb_get(&m, "/api/models/never", NULL);
    CHECK_EQ_U64(r.status, 504);
    lb_free(&r);
    lb_stop(&m);
}

/* A wait the mirror's queue refused (full: -EAGAIN; stopping: -ECANCELED)
 * answers 503 in the route's dialect, each with Retry-After
 * MIRROR_JOB_RETRY_AFTER; a request that did not wait, or whose wait ran,
 * is not refused. */
TEST(refused_in_each_dialect)
{
    static const struct {
        enum mirror_dialect d;
        int why;
        const char *code;
    } cases[] = {
        {MD_TENSORD, -EAGAIN, "busy"},  {MD_TENSORD, -ECANCELED, "stopping"},
        {MD_HUB, -EAGAIN, NULL},        {MD_HUB, -ECANCELED, NULL},
        {MD_S3, -EAGAIN, "SlowDown"},   {MD_S3, -ECANCELED, "SlowDown"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct request_view v = {.waited = 1, .wait_result = cases[i].why};
        struct answer a;
        answer_init(&a);
        CHECK(mirror_answer_refused(&v, &a, cases[i].d) == &a);
        CHECK(a.kind == ANSWER_ERROR && a.status == HTTP_SERVICE_UNAVAILABLE);
        CHECK_EQ_U64(a.error.retry_after, MIRROR_JOB_RETRY_AFTER);
        CHECK(a.error.hub == (cases[i].d == MD_HUB) && a.error.s3 == (cases[i].d == MD_S3));
        CHECK(cases[i].code ? a.error.code && strcmp(a.error.code, cases[i].code) == 0
                            : a.error.code == NULL);
        CHECK_STR(a.error.message, cases[i].why == -EAGAIN
                                       ? "too many questions to the mirror's upstream wait: retry"
                                       : "the mirror is stopping");
        answer_free(&a);
    }
    struct request_view fresh = {.waited = 0}, ran = {.waited = 1, .wait_result = 0};
    struct answer a;
    answer_init(&a);
    CHECK(mirror_answer_refused(&fresh, &a, MD_HUB) == NULL && a.kind == ANSWER_NONE);
    CHECK(mirror_answer_refused(&ran, &a, MD_S3) == NULL && a.kind == ANSWER_NONE);
    answer_free(&a);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    log_init("warn", "off");
    lb_new_root(up_root, sizeof(up_root));
    lb_new_root(mirror_root, sizeof(mirror_root));
    lb_new_root(cache, sizeof(cache));
    lb_write(up_root, "r/config.json", config_json, strlen(config_json));
    lb_write_st(up_root, "r/model.safetensors",
                "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", "\1\2\3\4", 4);
    RUN(through_the_upstream);
    RUN(unreachable_upstream);
    RUN(refused_in_each_dialect);
    lb_remove_root(up_root);
    lb_remove_root(mirror_root);
    lb_remove_root(cache);
    return TEST_SUMMARY();
}
