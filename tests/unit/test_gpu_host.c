/* Tests for the host (memfd) backend and finding devices by name: staging copies,
 * writes, sealing, read-back. The loader is tested in test_gpu_load.c and
 * test_gpu_plan.c, the manager on top of them in test_gpu_manager.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu.h"
#include "gpu_files.h"

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

/* write(): synchronous, bounded, safe on disjoint ranges from several
 * threads (the page-cache copy threads use it), refused once sealed. */
TEST(host_write)
{
    struct gpu_backend *b = gpu_host_new();
    struct gpu_alloc a = {.fd = -1};
    struct st_error err = {0};
    unsigned char *src = pattern(3 << 20, 4);
    CHECK(b->ops->write != NULL);
    CHECK(b->ops->alloc(b, 0, 3 << 20, 0, "w", &a, &err) == 0);
    CHECK(b->ops->write(b, &a, 1 << 20, src + (1 << 20), 2 << 20, &err) == 0);
    CHECK(b->ops->write(b, &a, 0, src, 1 << 20, &err) == 0);
    CHECK(b->ops->write(b, &a, (3 << 20) - 10, src, 11, &err) < 0); /* past size */
    CHECK_CONTAINS(err.message, "outside the allocation");
    CHECK(b->ops->write(b, &a, UINT64_MAX - 2, src, 4, &err) < 0); /* offset wraps */
    CHECK(b->ops->finish(b, &a, &err) == 0);
    CHECK(b->ops->write(b, &a, 0, src, 1, &err) < 0); /* sealed against writes */
    unsigned char *back = xmalloc(3 << 20);
    CHECK(b->ops->read_back(b, &a, 0, back, 3 << 20, &err) == 0);
    CHECK(memcmp(back, src, 3 << 20) == 0);
    b->ops->free(b, &a);
    b->ops->destroy(b);
    free(back);
    free(src);
}

TEST(device_names)
{
    struct gpu_backend *b = gpu_host_new();
    CHECK(gpu_find_device(b, 0, NULL) == 0 && gpu_find_device(b, 1, NULL) == -1);
    b->ops->destroy(b);
    struct st_error reason = {0};
    struct gpu_backend *c = gpu_cuda_probe(&reason);
    if (!c)
        CHECK(reason.code == ST_ERR_NO_DEVICE && reason.message[0]); /* no GPU: a reason */
    else
        c->ops->destroy(c);
}

int main(void)
{
    if (gpu_files_setup() < 0)
        return 1;
    RUN(host_alloc_seal_read_back);
    RUN(host_write);
    RUN(device_names);
    gpu_files_teardown();
    return TEST_SUMMARY();
}
