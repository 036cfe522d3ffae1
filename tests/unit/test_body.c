/* Tests for core/body.c: the three kinds of data (one span, a slice plan,
 * many pieces from several files) read at every offset and length against
 * the bytes they stand for, and which spans can go out with sendfile. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "body.h"
#include "test.h"
#include "util.h"

/* Opens dirfd/name as the registry does a file it serves (never blocking on a
 * FIFO) and makes it a served descriptor with fileio_regular. */
static int open_regular(int dirfd, const char *name, struct fileio_stat *st)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    return fd < 0 ? -errno : fileio_regular(fd, st);
}


/* A temp file of n bytes, byte i = (i * 13 + salt) & 0xff. */
static int pattern_file(size_t n, int salt, struct fileio_stat *st)
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
    if (st) {
        char self[64];
        snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
        int again = open_regular(AT_FDCWD, self, st);
        CHECK(again >= 0);
        close(again);
    }
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
    int fd = pattern_file(100, 1, NULL);
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

TEST(pieces)
{
    struct fileio_stat st1, st2;
    int f1 = pattern_file(200, 1, &st1), f2 = pattern_file(200, 2, &st2);
    /* F16 [4, 5] at offset 40 of f2, columns ::-2 */
    struct slice_plan plan;
    struct st_error err;
    uint64_t shape[2] = {4, 5};
    CHECK(slice_plan_build(":,::-2", 6, DT_F16, 2, shape, &plan, &err) == 0);
    struct slice_runs *runs = xmalloc(slice_runs_size(&plan));
    slice_runs_init(runs, &plan);
    struct body_piece pcs[3] = {
        {.at = 0, .len = 17, .fd = f1, .st = &st1, .file_off = 5},
        {.at = 17, .len = plan.nbytes, .fd = f2, .st = &st2, .file_off = 40, .runs = runs},
        {.at = 17 + plan.nbytes, .len = 9, .fd = f1, .st = NULL, .file_off = 190},
    };
    struct body b = {.prefix = "HDR", .prefix_len = 3, .fd = -1,
                     .data_len = 17 + plan.nbytes + 9, .pieces = pcs, .n_pieces = 3};
    uint8_t want[128];
    size_t n = 0;
    memcpy(want, "HDR", 3);
    n = 3;
    for (int i = 0; i < 17; i++)
        want[n++] = at((size_t)(5 + i), 1);
    for (int r = 0; r < 4; r++)
        for (int c = 4; c >= 0; c -= 2)
            for (int k = 0; k < 2; k++)
                want[n++] = at((size_t)(40 + (r * 5 + c) * 2 + k), 2);
    for (int i = 0; i < 9; i++)
        want[n++] = at((size_t)(190 + i), 1);
    CHECK(n == body_size(&b));
    CHECK(reads_match(&b, want));
    /* sendfile only inside one contiguous piece */
    int sfd;
    uint64_t off;
    CHECK(body_file_span(&b, 3, 17, &sfd, &off) == 1 && sfd == f1 && off == 5);
    CHECK(body_file_span(&b, 3, 18, &sfd, &off) == 0);
    CHECK(body_file_span(&b, 21, 2, &sfd, &off) == 0);    /* strided */
    CHECK(body_file_span(&b, 3 + 17 + plan.nbytes + 1, 8, &sfd, &off) == 1 && off == 191);
    /* a file that changed: its pieces fail, others still read */
    CHECK(write(f2, "x", 1) == 1); /* appends at the end: size changes */
    uint8_t buf[16];
    CHECK(body_read(&b, 3, buf, 10) == 0);
    CHECK(body_read(&b, 3 + 17, buf, 4) == -ENODATA);
    CHECK(body_read(&b, 3 + 10, buf, 12) == -ENODATA);
    free(runs);
    close(f1);
    close(f2);
}

int main(void)
{
    RUN(span_and_plan);
    RUN(pieces);
    return TEST_SUMMARY();
}
