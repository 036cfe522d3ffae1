/* Unit tests for server/handlers/h_blob.c through the loopback driver: a served
 * file by its SHA-256 (computed here with OpenSSL) once the hasher knows
 * it, immutable, with Range and conditional requests; the digests it
 * refuses; a file written since it was hashed; byte for byte. */
#include <openssl/sha.h>

#include "h_mirror.h"
#include "loopback.h"

static char root[64], sha[65];
static const char text[] = "{\"hello\": \"blob\"}\n";

static void make_root(void)
{
    lb_new_root(root, sizeof(root));
    lb_write(root, "r/config.json", text, strlen(text));
    lb_write(root, "r/copy.json", text, strlen(text)); /* the same content twice: one answer */
    unsigned char md[32];
    SHA256((const unsigned char *)text, strlen(text), md);
    for (int i = 0; i < 32; i++)
        sprintf(sha + 2 * i, "%02x", md[i]);
}

TEST(by_digest)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    char *target = xasprintf("/v1/blobs/sha256:%s", sha);
    char *head = xasprintf("Content-Type: application/octet-stream\r\nAccept-Ranges: bytes\r\n"
                           "Cache-Control: public, max-age=31536000, immutable\r\n"
                           "Docker-Content-Digest: sha256:%s\r\nETag: \"sha256:%s\"\r\n",
                           sha, sha);
    struct lb_answer r = lb_get(&s, target, NULL);
    CHECK_ANSWER(r, 200, head, text);
    lb_free(&r);
    static const char *const range[] = {"Range: bytes=2-6", NULL};
    r = lb_get(&s, target, range);
    CHECK_EQ_U64(r.status, 206);
    CHECK_STR(r.body, "hello");
    lb_free(&r);
    char *inm = xasprintf("If-None-Match: \"sha256:%s\"", sha);
    const char *const h304[] = {inm, NULL};
    r = lb_request(&s, "HEAD", target, h304, NULL);
    CHECK_EQ_U64(r.status, 304);
    lb_free(&r);
    free(inm);
    free(head);
    free(target);
    lb_stop(&s);
}

TEST(refused_and_unknown)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_get(&s, "/v1/blobs/md5:00", NULL);
    CHECK_ANSWER(r, 404, "Content-Type: application/json\r\n",
                 "{\"error\":{\"code\":\"blob_not_found\",\"message\":\"only sha256 digests are "
                 "served, not \\\"md5:00\\\"\"}}\n");
    lb_free(&r);
    r = lb_get(&s, "/v1/blobs/sha256:ABC", NULL);
    CHECK_ANSWER(r, 400, "Content-Type: application/json\r\n",
                 "{\"error\":{\"code\":\"bad_digest\",\"message\":\"a digest is sha256: and 64 "
                 "lowercase hex digits, not \\\"sha256:ABC\\\"\"}}\n");
    lb_free(&r);
    char zero[65];
    memset(zero, '0', 64);
    zero[64] = '\0';
    char *target = xasprintf("/v1/blobs/sha256:%s", zero);
    char *body = xasprintf("{\"error\":{\"code\":\"blob_not_found\",\"message\":\"no served file "
                           "has the content sha256:%s (or its hash is not computed yet)\"}}\n",
                           zero);
    r = lb_get(&s, target, NULL);
    CHECK_ANSWER(r, 404, "Content-Type: application/json\r\n", body);
    lb_free(&r);
    free(body);
    free(target);
    lb_stop(&s);
    /* Before its hash is known, a file is not found by it: never guessed. */
    lb_start(&s, root, LB_NO_HASHER, NULL);
    target = xasprintf("/v1/blobs/sha256:%s", sha);
    r = lb_get(&s, target, NULL);
    CHECK_EQ_U64(r.status, 404);
    lb_free(&r);
    free(target);
    lb_stop(&s);
}

TEST(written_since_hashed)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    lb_touch(root, "r/config.json");
    lb_touch(root, "r/copy.json");
    char *target = xasprintf("/v1/blobs/sha256:%s", sha);
    struct lb_answer r = lb_get(&s, target, NULL);
    CHECK_ANSWER(r, 503, "Content-Type: application/json\r\nRetry-After: 1\r\n",
                 "{\"error\":{\"code\":\"file_changed\",\"message\":\"the file changed on disk "
                 "since it was validated; retry once the daemon has rescanned it\"}}\n");
    CHECK(r.rescan);
    lb_free(&r);
    free(target);
    lb_stop(&s);
}

int main(void)
{
    make_root();
    RUN(by_digest);
    RUN(refused_and_unknown);
    RUN(written_since_hashed); /* last: it touches the root's files */
    lb_remove_root(root);
    return TEST_SUMMARY();
}
