/* Tests for core/gpu/gpu_load.c: the read -> staging ring -> copy pipeline on
 * the host backend. A shard read from a file lands byte for byte with the
 * right checksum, with io_uring and without it; and an io_uring failure in
 * the middle of a shard never returns while a read is still in flight into
 * a staging buffer (which the caller then frees): the file here is a pipe,
 * whose reads stay pending until someone writes, so a read left behind
 * would swallow bytes written after the loader returned. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu/gpu.h"
#include "gpu/gpu_load.h"
#include "gpu/ipc_proto.h"
#include "test.h"
#include "util.h"

static char tmpl[] = "/tmp/tensord-gpu-load-XXXXXX";

/* A file of n bytes (after a 100-byte prefix, so the data is unaligned). */
static int data_file(unsigned char **data, size_t n)
{
    int fd = mkstemp(tmpl);
    CHECK(fd >= 0);
    unlink(tmpl);
    memcpy(tmpl + strlen(tmpl) - 6, "XXXXXX", 6);
    *data = xmalloc(n);
    for (size_t i = 0; i < n; i++)
        (*data)[i] = (unsigned char)(i * 7 + (i >> 9));
    char pre[100] = {0};
    CHECK(write(fd, pre, sizeof(pre)) == (ssize_t)sizeof(pre));
    CHECK(write(fd, *data, n) == (ssize_t)n);
    return fd;
}

static void load_and_compare(int use_ring)
{
    const size_t n = 200000;
    unsigned char *data;
    int fd = data_file(&data, n);
    struct gpu_backend *be = gpu_host_new();
    struct gpu_alloc a = {.fd = -1};
    struct gpu_loader l;
    struct st_error err = {0};
    _Atomic uint64_t progress = 0;
    CHECK(be->ops->alloc(be, 0, n, 0, "t", &a, &err) == 0);
    CHECK(gpu_loader_init(&l, be, 0, 3, 4096, NULL, &progress, &err) == 0);
    if (!use_ring && l.have_ring) {
        io_uring_queue_exit(&l.ring);
        l.have_ring = 0;
    }
    uint64_t sum = 0;
    CHECK(gpu_loader_shard(&l, fd, -1, 100, n, &a, &sum, &err) == 0);
    CHECK(sum == ipc_tsum_final(ipc_tsum_add(0, data, n, 0), n));
    CHECK(atomic_load(&progress) == n);
    CHECK(be->ops->finish(be, &a, &err) == 0);
    CHECK(gpu_loader_verify(&l, fd, 100, n, &a, &err) == 0);
    gpu_loader_close(&l);
    unsigned char *back = xmalloc(n);
    CHECK(pread(a.fd, back, n, 0) == (ssize_t)n && memcmp(back, data, n) == 0);
    be->ops->free(be, &a);
    be->ops->destroy(be);
    free(back);
    free(data);
    close(fd);
}

TEST(shard_through_io_uring)
{
    load_and_compare(1);
}

TEST(shard_through_pread)
{
    load_and_compare(0);
}

static int waits;

/* io_uring_wait_cqe that fails the first time, as a broken ring would. */
static int failing_wait(struct io_uring *ring, struct io_uring_cqe **cqe)
{
    if (waits++ == 0)
        return -EIO;
    return io_uring_wait_cqe(ring, cqe);
}

TEST(ring_error_leaves_no_read_in_flight)
{
    int p[2];
    CHECK(pipe(p) == 0);
    struct gpu_backend *be = gpu_host_new();
    struct gpu_alloc a = {.fd = -1};
    struct gpu_loader l;
    struct st_error err = {0};
    CHECK(be->ops->alloc(be, 0, 3 * 4096, 0, "t", &a, &err) == 0);
    CHECK(gpu_loader_init(&l, be, 0, 3, 4096, NULL, NULL, &err) == 0);
    if (!l.have_ring) {
        fprintf(stderr, "  (no io_uring here: nothing to test)\n");
    } else {
        uint64_t sum;
        waits = 0;
        l.wait_cqe = failing_wait;
        /* Three reads of the (empty) pipe are queued; the wait fails. */
        CHECK(gpu_loader_shard(&l, p[0], -1, 0, 3 * 4096, &a, &sum, &err) < 0);
        CHECK_CONTAINS(err.message, "io_uring_wait_cqe");
        CHECK(!l.unsafe);
        /* Nothing may still be reading: bytes written now stay in the pipe. */
        char buf[100];
        memset(buf, 'x', sizeof(buf));
        CHECK(write(p[1], buf, sizeof(buf)) == (ssize_t)sizeof(buf));
        usleep(100000);
        int queued = -1;
        CHECK(ioctl(p[0], FIONREAD, &queued) == 0);
        CHECK(queued == (int)sizeof(buf));
    }
    gpu_loader_close(&l);
    be->ops->free(be, &a);
    be->ops->destroy(be);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    RUN(shard_through_io_uring);
    RUN(shard_through_pread);
    RUN(ring_error_leaves_no_read_in_flight);
    return TEST_SUMMARY();
}
