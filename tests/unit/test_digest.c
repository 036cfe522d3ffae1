/* digest: SHA-256 and git blob ids of files read through a descriptor,
 * against published vectors and `git hash-object`; any block size gives
 * the same digest; a short file or a stop gives no digest at all. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "digest.h"
#include "test.h"
#include "util.h"

static char dir[] = "/tmp/test_digest.XXXXXX";

static int file_with(const char *name, const void *data, size_t n)
{
    char *path = xasprintf("%s/%s", dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    free(path);
    CHECK(fd >= 0);
    CHECK(n == 0 || write(fd, data, n) == (ssize_t)n);
    return fd;
}

static const char *hex_of(const uint8_t *d, size_t n)
{
    static char buf[2 * DIGEST_SHA256_LEN + 1];
    digest_hex(d, n, buf);
    return buf;
}

TEST(known_vectors)
{
    char buf[64];
    struct digest_result r;
    int fd = file_with("empty", "", 0);
    CHECK(digest_fd(fd, 0, buf, sizeof(buf), NULL, NULL, &r) == 0);
    CHECK_STR(hex_of(r.sha256, 32), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(r.has_git_sha1);
    CHECK_STR(hex_of(r.git_sha1, 20), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
    close(fd);
    fd = file_with("abc", "abc", 3);
    CHECK(digest_fd(fd, 3, buf, sizeof(buf), NULL, NULL, &r) == 0);
    CHECK_STR(hex_of(r.sha256, 32), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    close(fd);
    fd = file_with("hello", "hello\n", 6); /* printf 'hello\n' | git hash-object --stdin */
    CHECK(digest_fd(fd, 6, buf, sizeof(buf), NULL, NULL, &r) == 0);
    CHECK_STR(hex_of(r.git_sha1, 20), "ce013625030ba8dba906f756967f9e9ca394464a");
    close(fd);
}

TEST(block_size_does_not_matter)
{
    size_t n = 100000;
    unsigned char *data = xmalloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (unsigned char)(i * 131 + (i >> 8));
    int fd = file_with("data", data, n);
    struct digest_result a, b;
    char *big = xmalloc(1 << 20), small[7];
    CHECK(digest_fd(fd, n, big, 1 << 20, NULL, NULL, &a) == 0);
    CHECK(digest_fd(fd, n, small, sizeof(small), NULL, NULL, &b) == 0);
    CHECK(memcmp(a.sha256, b.sha256, 32) == 0);
    CHECK(memcmp(a.git_sha1, b.git_sha1, 20) == 0);
    close(fd);
    free(big);
    free(data);
}

TEST(large_files_have_no_git_id)
{
    int fd = file_with("big", "", 0);
    CHECK(ftruncate(fd, (off_t)DIGEST_GIT_SHA1_MAX + 1) == 0); /* sparse: zeros */
    char *buf = xmalloc(1 << 20);
    struct digest_result r;
    CHECK(digest_fd(fd, DIGEST_GIT_SHA1_MAX + 1, buf, 1 << 20, NULL, NULL, &r) == 0);
    CHECK(!r.has_git_sha1);
    CHECK(ftruncate(fd, (off_t)DIGEST_GIT_SHA1_MAX) == 0);
    CHECK(digest_fd(fd, DIGEST_GIT_SHA1_MAX, buf, 1 << 20, NULL, NULL, &r) == 0);
    CHECK(r.has_git_sha1);
    close(fd);
    free(buf);
}

static int stop_at_second(void *ctx, size_t n)
{
    (void)n;
    return ++*(int *)ctx >= 2;
}

TEST(short_file_or_stop_gives_nothing)
{
    char buf[4];
    struct digest_result r;
    static const uint8_t zero[32];
    int fd = file_with("short", "0123456789", 10);
    CHECK(digest_fd(fd, 11, buf, sizeof(buf), NULL, NULL, &r) == -ENODATA);
    CHECK(memcmp(r.sha256, zero, 32) == 0 && !r.has_git_sha1);
    int calls = 0;
    CHECK(digest_fd(fd, 10, buf, sizeof(buf), stop_at_second, &calls, &r) == -ECANCELED);
    CHECK(calls == 2);
    CHECK(memcmp(r.sha256, zero, 32) == 0 && !r.has_git_sha1);
    close(fd);
    CHECK(digest_fd(-1, 10, buf, sizeof(buf), NULL, NULL, &r) == -EBADF);
}

/* Stops the pass every third block. */
static int stop_every_third(void *ctx, size_t n)
{
    (void)n;
    return ++*(int *)ctx % 3 == 0;
}

TEST(a_stopped_pass_resumes_where_it_stopped)
{
    size_t n = 100000;
    uint8_t *data = xmalloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i * 31 + (i >> 9));
    int fd = file_with("resume", data, n);
    char buf[4096];
    struct digest_result whole, resumed;
    CHECK(digest_fd(fd, n, buf, sizeof(buf), NULL, NULL, &whole) == 0);
    struct digest_pass *p = digest_pass_new(n);
    int calls = 0, stops = 0, rc;
    uint64_t last = 0;
    while ((rc = digest_pass_run(p, fd, buf, sizeof(buf), stop_every_third, &calls)) ==
           -ECANCELED) {
        CHECK(digest_pass_offset(p) >= last); /* never back to an earlier byte */
        last = digest_pass_offset(p);
        stops++;
    }
    CHECK(rc == 0 && stops > 5);
    /* each byte was read once: one pace call per block, plus one per stop */
    CHECK_EQ_U64(calls, (n + sizeof(buf) - 1) / sizeof(buf) + (size_t)stops);
    digest_pass_final(p, &resumed);
    CHECK(memcmp(whole.sha256, resumed.sha256, 32) == 0);
    CHECK(whole.has_git_sha1 && resumed.has_git_sha1);
    CHECK(memcmp(whole.git_sha1, resumed.git_sha1, 20) == 0);
    digest_pass_free(digest_pass_new(n)); /* one never run */
    CHECK(digest_pass_new(UINT64_MAX) == NULL);
    close(fd);
    free(data);
}

TEST(hex_round_trip)
{
    uint8_t in[3] = {0x00, 0xab, 0xff}, out[3];
    char hex[7];
    digest_hex(in, 3, hex);
    CHECK_STR(hex, "00abff");
    CHECK(digest_unhex(hex, 3, out) == 0 && memcmp(in, out, 3) == 0);
    CHECK(digest_unhex("00ABff", 3, out) == -EINVAL); /* one spelling only */
    CHECK(digest_unhex("00ab", 3, out) == -EINVAL);   /* stops at the NUL */
    CHECK(digest_unhex("00abfg", 3, out) == -EINVAL);
}

TEST(sha256_hex_of_a_string)
{
    char hex[65];
    digest_sha256_hex("abc", 3, hex); /* FIPS 180-2's first example */
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    digest_sha256_hex("", 0, hex);
    CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

int main(void)
{
    CHECK(mkdtemp(dir) != NULL);
    RUN(known_vectors);
    RUN(block_size_does_not_matter);
    RUN(large_files_have_no_git_id);
    RUN(short_file_or_stop_gives_nothing);
    RUN(a_stopped_pass_resumes_where_it_stopped);
    RUN(hex_round_trip);
    RUN(sha256_hex_of_a_string);
    char *cmd = xasprintf("rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    free(cmd);
    return TEST_SUMMARY();
}
