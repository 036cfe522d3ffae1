/* Unit tests for server/handlers/h_hub.c through the loopback driver: a repo's
 * answers wait for its content hashes (the request is suspended, the
 * hasher calls back, the request is dispatched again) or say when to come
 * back; files by branch (302 to the commit's URL, with the linked ETag and
 * size of an LFS file) and by commit (the bytes, git's blob id or the
 * SHA-256 as ETag, computed here with OpenSSL); the Hub's errors, byte for
 * byte. */
#include <openssl/sha.h>
#include <sys/time.h>

#include "loopback.h"

static char root[64];
static const char config_json[] = "{\"model_type\": \"t\"}\n";
static char git_id[41], st_sha[65], st_bytes[256];
static size_t st_size;

static void hex(const unsigned char *md, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", md[i]);
}

static void make_repo(const char *at)
{
    static const char json[] = "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    lb_write_st(at, "r/model.safetensors", json, "\1\2\3\4", 4);
    lb_write(at, "r/config.json", config_json, strlen(config_json));
    lb_write(at, "r/sub/a b.txt", "x\n", 2);
}

static void make_root(void)
{
    lb_new_root(root, sizeof(root));
    make_repo(root);
    lb_write(root, "r2/config.json", config_json, strlen(config_json));
    /* git's blob id: SHA-1 of "blob <size>\0" and the bytes. */
    char *obj = xasprintf("blob %zu%c%s", strlen(config_json), 0, config_json);
    size_t n = strlen("blob 20") + 1 + strlen(config_json);
    unsigned char md[32];
    SHA1((const unsigned char *)obj, n, md);
    hex(md, 20, git_id);
    free(obj);
    char *p = xasprintf("%s/r/model.safetensors", root);
    int fd = open(p, O_RDONLY);
    ssize_t got = read(fd, st_bytes, sizeof(st_bytes));
    close(fd);
    st_size = (size_t)got;
    SHA256((const unsigned char *)st_bytes, st_size, md);
    hex(md, 32, st_sha);
    free(p);
}

#define HUB_ERR(msg) "Content-Type: application/json\r\n" "X-Error-Code: " msg "\r\n"

TEST(files_by_branch_and_commit)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_get(&s, "/r/resolve/main/model.safetensors", NULL);
    CHECK_EQ_U64(r.status, 302);
    char commit[41] = "";
    snprintf(commit, sizeof(commit), "%s", lb_header(&r, "X-Repo-Commit"));
    CHECK(strlen(commit) == 40 && strspn(commit, "0123456789abcdef") == 40);
    char *head = xasprintf("Content-Type: text/plain; charset=utf-8\r\n"
                           "Location: /r/resolve/%s/model.safetensors\r\nX-Repo-Commit: %s\r\n"
                           "Cache-Control: no-cache\r\nX-Linked-Etag: \"%s\"\r\n"
                           "X-Linked-Size: %zu\r\n",
                           commit, commit, st_sha, st_size);
    char *body = xasprintf("Found. Redirecting to /r/resolve/%s/model.safetensors\n", commit);
    CHECK_ANSWER(r, 302, head, body);
    lb_free(&r);
    free(head);
    free(body);

    r = lb_get(&s, "/r/raw/main/sub/a%20b.txt", NULL); /* a small file: no linked headers */
    head = xasprintf("Content-Type: text/plain; charset=utf-8\r\n"
                     "Location: /r/raw/%s/sub/a%%20b.txt\r\nX-Repo-Commit: %s\r\n"
                     "Cache-Control: no-cache\r\n", commit, commit);
    CHECK_STR(r.head, head);
    lb_free(&r);
    free(head);

    char *target = xasprintf("/r/resolve/%s/config.json", commit);
    r = lb_get(&s, target, NULL);
    head = xasprintf("Content-Type: application/json\r\nAccept-Ranges: bytes\r\n"
                     "Cache-Control: public, max-age=31536000, immutable\r\n"
                     "Content-Disposition: attachment; filename=\"config.json\"; "
                     "filename*=UTF-8''config.json\r\nX-Repo-Commit: %s\r\nETag: \"%s\"\r\n",
                     commit, git_id);
    CHECK_ANSWER(r, 200, head, config_json);
    lb_free(&r);
    free(head);
    char *inm = xasprintf("If-None-Match: \"%s\"", git_id);
    const char *const h304[] = {inm, NULL};
    r = lb_get(&s, target, h304);
    CHECK_EQ_U64(r.status, 304);
    lb_free(&r);
    free(inm);
    free(target);

    target = xasprintf("/r/raw/%s/model.safetensors", commit);
    static const char *const range[] = {"Range: bytes=0-7", NULL};
    r = lb_get(&s, target, range);
    CHECK_EQ_U64(r.status, 206);
    head = xasprintf("Content-Type: application/octet-stream\r\nContent-Range: bytes 0-7/%zu\r\n"
                     "Accept-Ranges: bytes\r\nCache-Control: public, max-age=31536000, immutable\r\n"
                     "Content-Disposition: inline; filename=\"model.safetensors\"; "
                     "filename*=UTF-8''model.safetensors\r\nX-Repo-Commit: %s\r\n"
                     "X-Linked-Etag: \"%s\"\r\nX-Linked-Size: %zu\r\nETag: \"%s\"\r\n",
                     st_size, commit, st_sha, st_size, st_sha);
    CHECK_STR(r.head, head);
    CHECK(r.len == 8 && memcmp(r.body, st_bytes, 8) == 0);
    lb_free(&r);
    free(head);
    free(target);

    target = xasprintf("/r/resolve/%s/nope.json", commit);
    r = lb_get(&s, target, NULL);
    head = xasprintf(HUB_ERR("EntryNotFound") "X-Error-Message: nope.json does not exist in repo "
                     "r at revision %s\r\nX-Repo-Commit: %s\r\n", commit, commit);
    body = xasprintf("{\"error\":\"nope.json does not exist in repo r at revision %s\"}\n",
                     commit);
    CHECK_ANSWER(r, 404, head, body);
    lb_free(&r);
    free(head);
    free(body);
    free(target);
    lb_stop(&s);
}

TEST(errors)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_get(&s, "/r/resolve/v2/config.json", NULL);
    CHECK_ANSWER(r, 404, HUB_ERR("RevisionNotFound") "X-Error-Message: Invalid rev id: v2\r\n",
                 "{\"error\":\"Invalid rev id: v2\"}\n");
    lb_free(&r);
    r = lb_get(&s, "/r/resolve/0123456789012345678901234567890123456789/config.json", NULL);
    CHECK_EQ_U64(r.status, 404); /* a commit id, but not this repo's */
    CHECK_STR(lb_header(&r, "X-Error-Code"), "RevisionNotFound");
    lb_free(&r);
    r = lb_get(&s, "/nope/resolve/main/config.json", NULL);
    CHECK_ANSWER(r, 404, HUB_ERR("RepoNotFound") "X-Error-Message: Repository not found: nope\r\n",
                 "{\"error\":\"Repository not found: nope\"}\n");
    lb_free(&r);
    r = lb_get(&s, "/api/datasets/d/e", NULL);
    CHECK_ANSWER(r, 404,
                 HUB_ERR("RepoNotFound") "X-Error-Message: Repository not found: d/e (tensord "
                                         "serves models only: no datasets, no spaces)\r\n",
                 "{\"error\":\"Repository not found: d/e (tensord serves models only: no datasets, "
                 "no spaces)\"}\n");
    lb_free(&r);
    lb_stop(&s);
}

TEST(waits_for_hashes)
{
    char r2[64];
    lb_new_root(r2, sizeof(r2));
    make_repo(r2);
    /* Files written in the last 2 s are hashed once they are 2 s old
     * (hasher.h): a request now waits for them. */
    lb_touch(r2, "r/config.json");
    struct lb_server s;
    static const char *const wait1[] = {"hash_wait=1", NULL};
    lb_start(&s, r2, 0, wait1);
    struct lb_answer r = lb_get(&s, "/api/models/r", NULL); /* waits 1 s, then says when */
    CHECK(r.waited);
    CHECK_EQ_U64(r.status, 503);
    const char *want = "{\"error\":\"repo r: the content hashes of its files are being "
                       "computed; retry in ";
    CHECK(strncmp(r.body, want, strlen(want)) == 0);
    CHECK(lb_header(&r, "Retry-After") != NULL);
    lb_free(&r);
    lb_stop(&s);

    static const char *const wait5[] = {"hash_wait=5", NULL};
    lb_start(&s, r2, 0, wait5);
    r = lb_get(&s, "/api/models/r/refs", NULL); /* waits until they are hashed */
    CHECK_EQ_U64(r.status, 200);
    CHECK(r.waited);
    lb_free(&r);
    lb_stop(&s);

    lb_start(&s, r2, LB_NO_HASHER, NULL); /* nothing to wait for */
    r = lb_get(&s, "/r/resolve/main/config.json", NULL);
    CHECK_ANSWER(r, 503,
                 "Content-Type: application/json\r\nX-Error-Message: repo r: the content hashes "
                 "of its files are being computed; retry in 1 s\r\nRetry-After: 1\r\n",
                 "{\"error\":\"repo r: the content hashes of its files are being computed; retry "
                 "in 1 s\"}\n");
    CHECK(!r.waited);
    lb_free(&r);
    lb_stop(&s);
    lb_remove_root(r2);
}

TEST(file_changed_since_hashed)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_get(&s, "/r2/resolve/main/config.json", NULL);
    char *target = xasprintf("/r2/resolve/%s/config.json", lb_header(&r, "X-Repo-Commit"));
    lb_free(&r);
    char *p = xasprintf("%s/r2/config.json", root);
    struct timeval tv[2] = {{1, 0}, {1, 0}};
    utimes(p, tv);
    r = lb_get(&s, target, NULL);
    CHECK_ANSWER(r, 503,
                 "Content-Type: application/json\r\nX-Error-Message: config.json changed on disk "
                 "since it was hashed; retry once the daemon has rescanned it\r\nRetry-After: 1\r\n",
                 "{\"error\":\"config.json changed on disk since it was hashed; retry once the "
                 "daemon has rescanned it\"}\n");
    CHECK(r.rescan);
    lb_free(&r);
    free(p);
    free(target);
    lb_stop(&s);
}

int main(void)
{
    make_root();
    RUN(files_by_branch_and_commit);
    RUN(errors);
    RUN(waits_for_hashes);
    RUN(file_changed_since_hashed); /* last: it writes a file of the root */
    lb_remove_root(root);
    return TEST_SUMMARY();
}
