/* Tests for core/body/body.c: the two kinds of data in a file (one span, a slice
 * plan) read at every offset and length against the bytes they stand for,
 * and which spans can go out with sendfile. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "body.h"
#include "test.h"
#include "util.h"

/* A temp file of n bytes, byte i = (i * 13 + salt) & 0xff. */
static int pattern_file(size_t n, int salt)
{
    char path[] = "/tmp/test_body_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    uint8_t *b = xmalloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 13 + (size_t)salt);
    CHECK(write(fd, b, n) == (ssize_t)n);
    free(b);
    return fd;
}

static uint8_t at(size_t i, int salt)
{
    return (uint8_t)(i * 13 + (size_t)salt);
}

/* Reads every [off, off + len) of b and compares with want[0..size). */
static int reads_match(const struct body *b, const uint8_t *want)
{
    uint64_t size = body_size(b);
    uint8_t buf[512];
    for (uint64_t off = 0; off <= size; off++)
        for (uint64_t len = 0; off + len <= size && len <= sizeof(buf); len += 1 + len / 3) {
            if (body_read(b, off, buf, (size_t)len) != 0 || memcmp(buf, want + off, len) != 0) {
                fprintf(stderr, "  mismatch at %llu+%llu\n", (unsigned long long)off,
                        (unsigned long long)len);
                return 0;
            }
        }
    return 1;
}

TEST(span_and_plan)
{
    int fd = pattern_file(100, 1);
    uint8_t want[64];
    memcpy(want, "PREFIX", 6);
    for (int i = 0; i < 20; i++)
        want[6 + i] = at((size_t)(30 + i), 1);
    struct body b = {.prefix = "PREFIX", .prefix_len = 6, .fd = fd, .data_off = 30, .data_len = 20};
    CHECK(reads_match(&b, want));
    int sfd;
    uint64_t off;
    CHECK(body_file_span(&b, 8, 10, &sfd, &off) == 1 && sfd == fd && off == 32);
    CHECK(body_file_span(&b, 4, 10, &sfd, &off) == 0); /* starts in the prefix */
    /* a plan: [10, 10] U8, column 3 reversed */
    struct slice_plan plan;
    struct st_error err;
    uint64_t shape[2] = {10, 10};
    CHECK(slice_plan_build("::-1,3", 6, DT_U8, 2, shape, &plan, &err) == 0);
    b = (struct body){.prefix = "P", .prefix_len = 1, .fd = fd, .data_off = 0, .data_len = 10,
                      .plan = &plan};
    want[0] = 'P';
    for (int i = 0; i < 10; i++)
        want[1 + i] = at((size_t)((9 - i) * 10 + 3), 1);
    CHECK(reads_match(&b, want));
    CHECK(body_file_span(&b, 1, 1, &sfd, &off) == 0);
    close(fd);
}

int main(void)
{
    RUN(span_and_plan);
    return TEST_SUMMARY();
}
