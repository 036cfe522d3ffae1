/* Tests for mirror/mirror_store.c (the state file of a partial mirrored
 * file, the blobs' names) and the parsers the mirror reads its upstream
 * with: mirror/upstream.c's header lines and encoding, mirror/mirror_ask.c's
 * file metadata, mirror/mirror_model.c's repo document. The expected values
 * are written out by hand from the formats (mirror_store.h, the Hub's
 * headers and documents as huggingface_hub reads them). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mirror.h"
#include "mirror_ask.h"
#include "mirror_repo.h"
#include "mirror_store.h"
#include "test.h"
#include "upstream.h"
#include "util.h"

static const char SHA[] = "9235ad6a0a1b2c3d4e5f60718293a4b5c6d7e8f90123456789abcdef01234567";

TEST(keys)
{
    struct mirror_id id;
    char key[72];
    char s[80];
    snprintf(s, sizeof(s), "sha256-%s", SHA);
    CHECK(mirror_key_parse(s, strlen(s), &id) == 0 && id.kind == MIRROR_SHA256);
    CHECK(id.digest[0] == 0x92 && id.digest[31] == 0x67);
    mirror_key(&id, key);
    CHECK_STR(key, s);
    CHECK(mirror_key_parse("gitsha1-0123456789abcdef0123456789abcdef01234567", 48, &id) == 0 &&
          id.kind == MIRROR_GIT_SHA1 && id.digest[19] == 0x67);
    mirror_key(&id, key);
    CHECK_STR(key, "gitsha1-0123456789abcdef0123456789abcdef01234567");
    /* Capitals, other lengths, other names: not a blob's. */
    s[7] = 'A';
    CHECK(mirror_key_parse(s, strlen(s), &id) == -EINVAL);
    CHECK(mirror_key_parse(s, 70, &id) == -EINVAL);
    CHECK(mirror_key_parse("sha1-0123", 9, &id) == -EINVAL);
    CHECK(mirror_key_parse("x.state", 7, &id) == -EINVAL);
}

/* A state file made, a bit set, read back and parsed; then broken ways. */
TEST(state_file_round_trip)
{
    char dir[] = "/tmp/tensord-mstate-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(mkdirat(dfd, "blobs", 0755) == 0);
    struct mirror_id id = {.kind = MIRROR_SHA256, .size = 10 * 65536 + 1};
    char key[72];
    memset(id.digest, 0xab, 32);
    mirror_key(&id, key);
    struct st_error err;
    int fd = mirror_state_create(dfd, key, &id, 65536, &err);
    CHECK(fd >= 0);
    CHECK(mirror_state_put(fd, 9, 0x02) == 0);  /* block 9: byte 1, bit 1 */
    CHECK(mirror_state_put(fd, 10, 0x06) == 0); /* blocks 9 and 10 */
    close(fd);
    char *buf;
    int64_t len = mirror_state_read(dfd, key, &buf);
    CHECK_EQ_U64(len, MIRROR_STATE_HEADER + 2);
    struct mirror_id got;
    uint64_t block;
    const uint8_t *bits;
    CHECK(mirror_state_parse(buf, (size_t)len, key, &got, &block, &bits, &err) == 0);
    CHECK_EQ_U64(got.size, id.size);
    CHECK_EQ_U64(block, 65536);
    CHECK(memcmp(got.digest, id.digest, 32) == 0 && got.kind == MIRROR_SHA256);
    CHECK(bits[0] == 0 && bits[1] == 0x06);
    /* A bit past the last block (11 blocks: bits 0..10 of bytes 0..1). */
    buf[MIRROR_STATE_HEADER + 1] = 0x08;
    CHECK(mirror_state_parse(buf, (size_t)len, key, &got, &block, &bits, &err) == -EINVAL);
    CHECK_CONTAINS(err.message, "past the last block");
    buf[MIRROR_STATE_HEADER + 1] = 0x06;
    /* Another key, a short file, another version, junk in the header. */
    char other[72];
    memcpy(other, key, sizeof(other));
    other[10] = other[10] == 'a' ? 'b' : 'a';
    CHECK(mirror_state_parse(buf, (size_t)len, other, &got, &block, &bits, &err) == -EINVAL);
    CHECK(mirror_state_parse(buf, (size_t)len - 1, key, &got, &block, &bits, &err) == -EINVAL);
    CHECK(mirror_state_parse(buf, 100, key, &got, &block, &bits, &err) == -EINVAL);
    buf[21] = '2'; /* "tensord-mirror-state 2" */
    CHECK(mirror_state_parse(buf, (size_t)len, key, &got, &block, &bits, &err) == -EINVAL);
    buf[21] = '1';
    buf[MIRROR_STATE_HEADER - 1] = 'x';
    CHECK(mirror_state_parse(buf, (size_t)len, key, &got, &block, &bits, &err) == -EINVAL);
    free(buf);
    char path[200];
    snprintf(path, sizeof(path), "blobs/%s.state", key);
    unlinkat(dfd, path, 0);
    unlinkat(dfd, "blobs", AT_REMOVEDIR);
    close(dfd);
    rmdir(dir);
}

/* A block size that is not a multiple of 4096, or a size of too many blocks. */
TEST(state_bounds)
{
    char head[MIRROR_STATE_HEADER + 1];
    char key[80];
    snprintf(key, sizeof(key), "sha256-%s", SHA);
    struct mirror_id got;
    uint64_t block;
    const uint8_t *bits;
    struct st_error err;
    const char *bad[] = {"size 10\nblock 1000\n", "size 1152921504606846976\nblock 4096\n",
                         "size 10\nblock 2147483648\n", "size 10\n", "size -1\nblock 4096\n",
                         "size 99999999999999999999999\nblock 4096\n"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        memset(head, '\n', sizeof(head));
        int n = snprintf(head, sizeof(head), "tensord-mirror-state 1\nkey %s\n%s", key, bad[i]);
        head[n] = '\n';
        CHECK(mirror_state_parse(head, MIRROR_STATE_HEADER + 1, key, &got, &block, &bits,
                                 &err) == -EINVAL);
    }
    /* The good one, for contrast: 10 bytes, one block, one bitmap byte. */
    memset(head, '\n', sizeof(head));
    int n = snprintf(head, sizeof(head), "tensord-mirror-state 1\nkey %s\nsize 10\nblock 4096\n",
                     key);
    head[n] = '\n';
    head[MIRROR_STATE_HEADER] = 1;
    CHECK(mirror_state_parse(head, MIRROR_STATE_HEADER + 1, key, &got, &block, &bits, &err) == 0);
}

static struct upstream_answer answer(const char *const *lines)
{
    struct upstream_answer a;
    memset(&a, 0, sizeof(a));
    for (; *lines; lines++)
        upstream_answer_header(&a, *lines, strlen(*lines));
    return a;
}

/* Headers as the Hub sends them for an LFS file's redirect to its CDN,
 * and as tensord sends them for a small file. */
TEST(upstream_headers)
{
    const char *hub[] = {"HTTP/1.1 302 Found\r\n",
                         "x-repo-commit: 0123456789abcdef0123456789abcdef01234567\r\n",
                         "X-Linked-Etag:  \"9235ad6a0a1b2c3d4e5f60718293a4b5c6d7e8f90123456789abcdef01234567\"\r\n",
                         "X-Linked-Size: 2352\r\n", "ETag: W/\"abc\"\r\n",
                         "Content-Range: bytes 10-19/2352\r\n", "Retry-After: 99999\r\n",
                         "X-Error-Code: \x01" "bad\r\n", NULL};
    struct upstream_answer a = answer(hub);
    CHECK(a.status == 302);
    CHECK_STR(a.commit, "0123456789abcdef0123456789abcdef01234567");
    CHECK_STR(a.linked_etag, SHA);
    CHECK(a.has_linked_size && a.linked_size == 2352);
    CHECK_STR(a.etag, "abc");
    CHECK(a.has_range && a.range_start == 10 && a.range_end == 19 && a.range_total == 2352);
    CHECK(a.retry_after == 3600);
    CHECK_STR(a.error_code, ""); /* a control byte: not taken */
    struct mirror_meta meta;
    struct st_error err;
    a.redirected_away = 1;
    CHECK(mirror_meta_from_answer(&a, &meta, &err) == 0);
    CHECK(meta.status == 200 && meta.lfs && meta.id.kind == MIRROR_SHA256 &&
          meta.id.size == 2352 && meta.id.digest[0] == 0x92);
    /* A redirect that stays (a branch's, not followed): not an answer about the file. */
    a.redirected_away = 0;
    CHECK(mirror_meta_from_answer(&a, &meta, &err) == 0 && meta.status == 302);
    /* A new status line starts a new answer. */
    const char *two[] = {"HTTP/1.1 302 Found\r\n", "X-Linked-Size: 5\r\n", "HTTP/2 200 \r\n",
                         "Content-Length: 73\r\n", "ETag: \"dc4d5ad001c2915f004b39d1466d18311fcba772\"\r\n",
                         "X-Repo-Commit: 0123456789abcdef0123456789abcdef01234567\r\n",
                         "Content-Range: bytes 5-1/9\r\n", NULL};
    a = answer(two);
    CHECK(a.status == 200 && !a.has_linked_size && a.has_length && a.length == 73);
    CHECK(!a.has_range); /* an end before its start */
    CHECK(mirror_meta_from_answer(&a, &meta, &err) == 0);
    CHECK(!meta.lfs && meta.id.kind == MIRROR_GIT_SHA1 && meta.id.size == 73 &&
          meta.id.digest[0] == 0xdc);
    /* A found file whose hash the mirror cannot check, or with no commit. */
    const char *weak[] = {"HTTP/1.1 200 OK\r\n", "Content-Length: 3\r\n", "ETag: \"1-2\"\r\n",
                          "X-Repo-Commit: 0123456789abcdef0123456789abcdef01234567\r\n", NULL};
    a = answer(weak);
    CHECK(mirror_meta_from_answer(&a, &meta, &err) == -EPROTO);
    CHECK_CONTAINS(err.message, "could not check");
    const char *nocommit[] = {"HTTP/1.1 200 OK\r\n", "Content-Length: 3\r\n",
                              "ETag: \"dc4d5ad001c2915f004b39d1466d18311fcba772\"\r\n", NULL};
    a = answer(nocommit);
    CHECK(mirror_meta_from_answer(&a, &meta, &err) < 0);
    /* An error is passed on as it came. */
    const char *e404[] = {"HTTP/1.1 404 Not Found\r\n", "X-Error-Code: EntryNotFound\r\n",
                          "X-Error-Message: Entry not found\r\n", NULL};
    a = answer(e404);
    CHECK(mirror_meta_from_answer(&a, &meta, &err) == 0 && meta.status == 404);
    CHECK_STR(meta.error_code, "EntryNotFound");
    CHECK_STR(meta.error_message, "Entry not found");
}

/* Values longer than the fixed fields: a Link is kept whole (the Hub's
 * pagination names the next page's whole URL), a message is cut at a
 * character's start, a Cache-Control or commit that does not fit is
 * dropped (cut short it would say something else). */
TEST(upstream_long_headers)
{
    char link[4200], msg[400], cache[300], line[4400];
    int n = snprintf(link, sizeof(link), "<https://hub.example/api/models?cursor=");
    while (n < 4000)
        link[n++] = 'x';
    snprintf(link + n, sizeof(link) - (size_t)n, ">; rel=\"next\"");
    memset(msg, 0, sizeof(msg));
    for (size_t i = 0; i + 2 < 390; i += 2)
        memcpy(msg + i, "\xc3\xa9", 2); /* 'é' */
    memset(cache, 'a', sizeof(cache) - 1);
    cache[sizeof(cache) - 1] = '\0';
    struct upstream_answer a;
    memset(&a, 0, sizeof(a));
    const char *status = "HTTP/1.1 200 OK\r\n";
    upstream_answer_header(&a, status, strlen(status));
    snprintf(line, sizeof(line), "Link: %s\r\n", link);
    upstream_answer_header(&a, line, strlen(line));
    snprintf(line, sizeof(line), "X-Error-Message: %s\r\n", msg);
    upstream_answer_header(&a, line, strlen(line));
    snprintf(line, sizeof(line), "Cache-Control: %s\r\n", cache);
    upstream_answer_header(&a, line, strlen(line));
    CHECK(a.link && strcmp(a.link, link) == 0);
    CHECK(strlen(a.error_message) == sizeof(a.error_message) - 2); /* 127 whole 'é' */
    CHECK(strncmp(a.error_message, msg, strlen(a.error_message)) == 0);
    CHECK_STR(a.cache_control, "");
    /* A second Link replaces the first; a new status line frees it. */
    const char *next = "Link: <x>\r\n", *bad = "Link: <a\x01>\r\n";
    upstream_answer_header(&a, next, strlen(next));
    CHECK_STR(a.link, "<x>");
    upstream_answer_header(&a, status, strlen(status));
    CHECK(a.link == NULL && a.status == 200);
    upstream_answer_header(&a, bad, strlen(bad));
    CHECK(a.link == NULL); /* a control byte: not taken */
    upstream_answer_free(&a);
}

TEST(upstream_encoding)
{
    char out[64];
    size_t n = 0;
    CHECK(upstream_encode(out, sizeof(out), &n, "org/ü b&c#%.txt", 1) == 0);
    CHECK_STR(out, "org/%C3%BC%20b%26c%23%25.txt");
    n = 0;
    CHECK(upstream_encode(out, sizeof(out), &n, "refs/pr/1", 0) == 0);
    CHECK_STR(out, "refs%2Fpr%2F1");
    n = 0;
    CHECK(upstream_encode(out, 8, &n, "abcdefghijk", 1) == -1 && strlen(out) < 8);
}

TEST(repo_document)
{
    static const char doc[] =
        "{\"_id\":\"org/m\",\"sha\":\"04a9c39bb024bbe15873f31b2117e0399aeecf18\",\"cardData\":{\"a\":[1,2]},"
        "\"siblings\":[{\"rfilename\":\"config.json\",\"size\":73,\"blobId\":\"dc4d5ad001c2915f004b39d1466d18311fcba772\"},"
        "{\"rfilename\":\"model.safetensors.index.json\",\"size\":300,\"blobId\":\"0123456789abcdef0123456789abcdef01234567\"},"
        "{\"rfilename\":\"model-00001-of-00002.safetensors\",\"size\":2352,\"blobId\":\"ff8fb4508d297c51d4bcbdae21beb796b8b6d021\","
        "\"lfs\":{\"sha256\":\"9235ad6a0a1b2c3d4e5f60718293a4b5c6d7e8f90123456789abcdef01234567\",\"size\":2352,\"pointerSize\":129}},"
        "{\"rfilename\":\"unet/x.safetensors\",\"size\":1,\"lfs\":{\"sha256\":\"9235ad6a0a1b2c3d4e5f60718293a4b5c6d7e8f90123456789abcdef01234567\",\"size\":1}},"
        "{\"rfilename\":\"nohash.safetensors\",\"size\":5},{\"rfilename\":\"README.md\"}],\"spaces\":[]}";
    struct mirror_repo r;
    struct st_error err;
    CHECK(mirror_repo_parse(doc, strlen(doc), &r, &err) == 0);
    CHECK_STR(r.commit, "04a9c39bb024bbe15873f31b2117e0399aeecf18");
    CHECK(r.n == 6);
    if (r.n == 6) { /* sorted by name, bytes */
        CHECK_STR(r.files[0].name, "README.md");
        CHECK(!r.files[0].has_id && !r.files[0].has_size);
        CHECK_STR(r.files[1].name, "config.json");
        CHECK(r.files[1].has_id && r.files[1].id.kind == MIRROR_GIT_SHA1 && r.files[1].size == 73);
        CHECK_STR(r.files[2].name, "model-00001-of-00002.safetensors");
        CHECK(r.files[2].id.kind == MIRROR_SHA256 && r.files[2].id.size == 2352 && r.files[2].lfs &&
              r.files[2].id.digest[0] == 0x92);
        CHECK_STR(r.files[3].name, "model.safetensors.index.json");
        CHECK_STR(r.files[4].name, "nohash.safetensors");
        CHECK(!r.files[4].has_id && r.files[4].has_size && r.files[4].size == 5);
        CHECK_STR(r.files[5].name, "unet/x.safetensors");
        CHECK(mirror_repo_find(&r, "unet/x.safetensors") == &r.files[5]);
        CHECK(mirror_repo_find(&r, "unet") == NULL);
    }
    mirror_repo_clear(&r);
    /* Not JSON, no commit, a duplicate key, trailing bytes, names that are
     * not paths in a repo, a name twice. */
    const char *bad[] = {"{", "{\"siblings\":[]}", "{\"sha\":\"x\",\"sha\":\"y\"}",
                         "{\"sha\":\"04a9c39bb024bbe15873f31b2117e0399aeecf18\"} x",
                         "{\"sha\":\"04A9C39BB024BBE15873F31B2117E0399AEECF18\"}", "[]",
                         "{\"sha\":\"04a9c39bb024bbe15873f31b2117e0399aeecf18\",\"siblings\":[1]}",
                         "{\"sha\":\"04a9c39bb024bbe15873f31b2117e0399aeecf18\",\"siblings\":[{\"rfilename\":\"../x\"}]}",
                         "{\"sha\":\"04a9c39bb024bbe15873f31b2117e0399aeecf18\",\"siblings\":[{\"rfilename\":\"/etc\"}]}",
                         "{\"sha\":\"04a9c39bb024bbe15873f31b2117e0399aeecf18\",\"siblings\":[{\"rfilename\":\"a//b\"}]}",
                         "{\"sha\":\"04a9c39bb024bbe15873f31b2117e0399aeecf18\",\"siblings\":[{\"rfilename\":\"\"}]}",
                         "{\"sha\":\"04a9c39bb024bbe15873f31b2117e0399aeecf18\",\"siblings\":[{\"rfilename\":\"a\\u0001\"}]}",
                         "{\"sha\":\"04a9c39bb024bbe15873f31b2117e0399aeecf18\",\"siblings\":[{\"rfilename\":\"a\"},{\"rfilename\":\"a\"}]}"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        CHECK(mirror_repo_parse(bad[i], strlen(bad[i]), &r, &err) == -EINVAL);
        CHECK(r.files == NULL && r.n == 0 && err.message[0]);
    }
}

int main(void)
{
    RUN(keys);
    RUN(state_file_round_trip);
    RUN(state_bounds);
    RUN(upstream_headers);
    RUN(upstream_long_headers);
    RUN(upstream_encoding);
    RUN(repo_document);
    return TEST_SUMMARY();
}
