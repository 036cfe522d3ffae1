/* Tests for the host (memfd) backend, the staging-ring loader and device
 * names: sealing, ring sizes and unaligned data through io_uring with and
 * without O_DIRECT (and the pread fallback), truncated files, cancel, verify.
 * The manager on top of them is tested in test_gpu_manager.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu/gpu.h"
#include "gpu/gpu_load.h"
#include "gpu/ipc_proto.h"
#include "test.h"
#include "util.h"

static char tmpdir[] = "/tmp/tensord-gpu-unit-XXXXXX";

static unsigned char *pattern(size_t n, unsigned seed)
{
    unsigned char *p = xmalloc(n ? n : 1);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
    return p;
}

/* Writes head bytes of junk then data; returns the fd (read-only). */
static int data_file(const char *name, size_t head, const unsigned char *data, size_t n)
{
    char *path = xasprintf("%s/%s", tmpdir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    unsigned char *junk = pattern(head, 99);
    CHECK(fd >= 0);
    CHECK(write(fd, junk, head) == (ssize_t)head);
    CHECK(write(fd, data, n) == (ssize_t)n);
    close(fd);
    fd = open(path, O_RDONLY);
    free(junk);
    free(path);
    return fd;
}

static int direct_fd(const char *name)
{
    char *path = xasprintf("%s/%s", tmpdir, name);
    int fd = open(path, O_RDONLY | O_DIRECT);
    free(path);
    return fd;
}

TEST(host_alloc_seal_read_back)
{
    struct gpu_backend *b = gpu_host_new();
    struct gpu_alloc a = {.fd = -1};
    struct st_error err = {0};
    CHECK(b->n_devices == 1 && strcmp(b->handle_type, "memfd") == 0);
    CHECK(b->ops->alloc(b, 0, 10000, 0, "t", &a, &err) == 0);
    CHECK(a.alloc_size >= 10000 && a.alloc_size % 4096 == 0);
    struct gpu_stage *s = b->ops->stage_open(b, 0, 2, 8192, &err);
    unsigned char *src = pattern(10000, 1);
    memcpy(b->ops->stage_buf(s, 1), src, 8192);
    CHECK(b->ops->stage_copy(s, 1, &a, 0, b->ops->stage_buf(s, 1), 8192, &err) == 0);
    CHECK(b->ops->stage_copy(s, 0, &a, 8192, src + 8192, 10000 - 8192, &err) == 0);
    CHECK(b->ops->stage_copy(s, 0, &a, 9000, src, 2000, &err) < 0); /* past size */
    CHECK(b->ops->stage_wait(s, 1, &err) == 0);
    b->ops->stage_close(s);
    CHECK(b->ops->finish(b, &a, &err) == 0);
    int seals = fcntl(a.fd, F_GET_SEALS);
    CHECK((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)) ==
          (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL));
    CHECK(mmap(NULL, a.alloc_size, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0) == MAP_FAILED);
    CHECK(ftruncate(a.fd, 0) < 0);
    void *ro = mmap(NULL, a.alloc_size, PROT_READ, MAP_SHARED, a.fd, 0);
    CHECK(ro != MAP_FAILED && memcmp(ro, src, 10000) == 0);
    unsigned char back[100];
    CHECK(b->ops->read_back(b, &a, 9900, back, 100, &err) == 0);
    CHECK(memcmp(back, src + 9900, 100) == 0);
    munmap(ro, a.alloc_size);
    b->ops->free(b, &a);
    CHECK(a.fd == -1);
    b->ops->free(b, &a); /* twice is harmless */
    b->ops->destroy(b);
    free(src);
}

/* Loads n bytes at offset head of a file through a ring of nbuf x chunk and
 * checks the bytes, the checksum and verify. mode: 0 buffered, 1 O_DIRECT,
 * 2 pread fallback. */
static void load_case(size_t head, size_t n, unsigned nbuf, size_t chunk, int mode)
{
    struct gpu_backend *b = gpu_host_new();
    struct gpu_loader l;
    struct gpu_alloc a = {.fd = -1};
    struct st_error err = {0};
    atomic_int cancel = 0;
    _Atomic uint64_t progress = 0;
    unsigned char *src = pattern(n, (unsigned)(head + n));
    int fd = data_file("load.bin", head, src, n), dfd = mode == 1 ? direct_fd("load.bin") : -1;
    uint64_t sum = 0;
    CHECK(b->ops->alloc(b, 0, n, 0, "load", &a, &err) == 0);
    CHECK(gpu_loader_init(&l, b, 0, nbuf, chunk, &cancel, &progress, &err) == 0);
    if (mode == 2) { /* as if io_uring were unavailable */
        if (l.have_ring)
            io_uring_queue_exit(&l.ring);
        l.have_ring = 0;
    }
    int rc = gpu_loader_shard(&l, fd, dfd, head, n, &a, &sum, &err);
    if (rc != 0)
        fprintf(stderr, "  head %zu n %zu nbuf %u chunk %zu mode %d: %s\n", head, n, nbuf, chunk,
                mode, err.message);
    CHECK(rc == 0);
    CHECK_EQ_U64(atomic_load(&progress), n);
    CHECK_EQ_U64(sum, ipc_tsum_final(ipc_tsum_add(0, src, n, 0), n));
    CHECK(b->ops->finish(b, &a, &err) == 0);
    CHECK(gpu_loader_verify(&l, fd, head, n, &a, &err) == 0);
    /* verify against other bytes names the first difference */
    if (n > 1 && head > 0) {
        CHECK(gpu_loader_verify(&l, fd, head - 1, n, &a, &err) < 0);
        CHECK_CONTAINS(err.message, "differs");
        CHECK(err.code == ST_ERR_DEVICE);
    }
    if (mode == 1 && dfd >= 0)
        CHECK(strcmp(l.io_mode, "io_uring+O_DIRECT") == 0 || strcmp(l.io_mode, "io_uring") == 0);
    if (mode == 2)
        CHECK_STR(l.io_mode, "pread");
    unsigned char *got = xmalloc(n ? n : 1);
    CHECK(b->ops->read_back(b, &a, 0, got, n, &err) == 0);
    CHECK(memcmp(got, src, n) == 0);
    gpu_loader_close(&l);
    b->ops->free(b, &a);
    b->ops->destroy(b);
    close(fd);
    if (dfd >= 0)
        close(dfd);
    free(got);
    free(src);
}

TEST(loader_ring_shapes)
{
    static const size_t heads[] = {0, 8, 4096, 5000};
    static const size_t sizes[] = {0, 1, 4095, 4096, 4097, 200000};
    for (int mode = 0; mode < 3; mode++)
        for (size_t h = 0; h < ARRAY_LEN(heads); h++)
            for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
                load_case(heads[h], sizes[s], 1, 4096, mode);
                load_case(heads[h], sizes[s], 3, 8192, mode);
            }
    load_case(123, 3 << 20, 4, 64 << 10, 1); /* many laps of the ring */
}

TEST(loader_truncated_file_and_cancel)
{
    struct gpu_backend *b = gpu_host_new();
    struct gpu_loader l;
    struct gpu_alloc a = {.fd = -1};
    struct st_error err = {0};
    atomic_int cancel = 0;
    uint64_t sum;
    unsigned char *src = pattern(50000, 5);
    int fd = data_file("short.bin", 100, src, 50000), dfd = direct_fd("short.bin");
    CHECK(b->ops->alloc(b, 0, 60000, 0, "short", &a, &err) == 0);
    CHECK(gpu_loader_init(&l, b, 0, 2, 4096, &cancel, NULL, &err) == 0);
    CHECK(gpu_loader_shard(&l, fd, dfd, 100, 60000, &a, &sum, &err) < 0);
    CHECK_CONTAINS(err.message, "shorter than its header says");
    CHECK(err.code == ST_ERR_IO);
    atomic_store(&cancel, 1);
    CHECK(gpu_loader_shard(&l, fd, dfd, 100, 50000, &a, &sum, &err) == -ECANCELED);
    gpu_loader_close(&l);
    b->ops->free(b, &a);
    b->ops->destroy(b);
    close(fd);
    if (dfd >= 0)
        close(dfd);
    free(src);
}

TEST(device_names)
{
    enum gpu_kind k;
    int idx;
    const char *uuid;
    CHECK(gpu_parse_device("host", &k, &idx, &uuid) == 0 && k == GPU_KIND_HOST);
    CHECK(gpu_parse_device("cuda", &k, &idx, &uuid) == 0 && k == GPU_KIND_CUDA && idx == 0);
    CHECK(gpu_parse_device("cuda:3", &k, &idx, &uuid) == 0 && idx == 3 && !uuid);
    CHECK(gpu_parse_device("GPU-0a1b2c3d-aaaa-bbbb-cccc-0123456789ab", &k, &idx, &uuid) == 0 &&
          uuid && idx == -1);
    CHECK(gpu_parse_device("", &k, &idx, &uuid) < 0);
    CHECK(gpu_parse_device("cuda:", &k, &idx, &uuid) < 0);
    CHECK(gpu_parse_device("cuda:-1", &k, &idx, &uuid) < 0);
    CHECK(gpu_parse_device("cuda:99999", &k, &idx, &uuid) < 0);
    CHECK(gpu_parse_device("cuda:1x", &k, &idx, &uuid) < 0);
    CHECK(gpu_parse_device("GPU-zz", &k, &idx, &uuid) < 0);
    CHECK(gpu_parse_device("tpu", &k, &idx, &uuid) < 0);
    struct gpu_backend *b = gpu_host_new();
    CHECK(gpu_find_device(b, 0, NULL) == 0 && gpu_find_device(b, 1, NULL) == -1);
    b->ops->destroy(b);
    char reason[256] = "";
    struct gpu_backend *c = gpu_cuda_probe(reason, sizeof(reason));
    if (!c)
        CHECK(reason[0] != '\0'); /* no GPU here: there is a reason */
    else
        c->ops->destroy(c);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(host_alloc_seal_read_back);
    RUN(loader_ring_shapes);
    RUN(loader_truncated_file_and_cancel);
    RUN(device_names);
    char *cmd = xasprintf("rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    free(cmd);
    return TEST_SUMMARY();
}
