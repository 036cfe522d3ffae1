/* gpu_host: the memfd backend. Each shard lives in a memfd that the loader
 * fills with pwrite(); finish() seals it (no shrink, grow or write, and no
 * further seals), so workers that receive the fd can map it read-only and
 * trust that the bytes never change.
 *
 * Writing with pwrite() rather than through a mapping is what makes the
 * load fast: shmem allocates each page in its write path, where a mapping
 * would take a page fault per 4 KiB and zero the page before the copy
 * overwrote it (measured on a 2-core VM: 2.0 GB/s against 1.2 for memcpy
 * into a fresh mapping, docs/PERFORMANCE.md). */
#include "gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fileio.h"
#include "machine.h"
#include "util.h"

struct gpu_stage {
    unsigned nbuf;
    size_t bytes;
    void *mem;                 /* nbuf * bytes, one anonymous mapping */
};

static uint64_t page_round(uint64_t n)
{
    uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    if (n == 0)
        n = 1; /* a zero-length memfd cannot be mapped: keep one page */
    return (n + pg - 1) / pg * pg;
}

static int host_alloc(struct gpu_backend *b, int dev, uint64_t size, int legacy, const char *label,
                      struct gpu_alloc *a, struct st_error *err)
{
    (void)b;
    (void)dev;
    (void)legacy; /* legacy CUDA IPC has no host equivalent */
    char name[200];
    snprintf(name, sizeof(name), "tensord:%s", label);
    a->size = size;
    a->alloc_size = page_round(size);
    a->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (a->fd < 0) {
        return st_error_fail(err, ST_ERR_IO, "memfd_create: %s", strerror(errno));
    }
    if (ftruncate(a->fd, (off_t)a->alloc_size) < 0) {
        return st_error_fail(err, ST_ERR_DEVICE_MEMORY, "memfd of %llu bytes: %s",
                             (unsigned long long)a->alloc_size, strerror(errno));
    }
    return 0;
}

static void host_free(struct gpu_backend *b, struct gpu_alloc *a)
{
    (void)b;
    if (a->fd >= 0)
        close(a->fd);
    a->fd = -1;
}

/* pwrite of the whole range: shmem takes short writes only when memory runs
 * out (then the error is ENOSPC or ENOMEM). */
static int host_write(struct gpu_backend *b, struct gpu_alloc *a, uint64_t off, const void *src,
                      size_t len, struct st_error *err)
{
    (void)b;
    if (a->fd < 0 || off > a->size || len > a->size - off) {
        return st_error_fail(err, ST_ERR_IO, "copy of %zu bytes at %llu outside the allocation",
                             len, (unsigned long long)off);
    }
    const char *p = src;
    while (len > 0) {
        ssize_t n = pwrite(a->fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : ENOSPC;
            return st_error_fail(err, e == ENOSPC || e == ENOMEM ? ST_ERR_DEVICE_MEMORY : ST_ERR_IO,
                                 "writing %zu bytes at %llu into the memfd: %s", len,
                                 (unsigned long long)off, strerror(e));
        }
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

static struct gpu_stage *host_stage_open(struct gpu_backend *b, int dev, unsigned nbuf,
                                         size_t bytes, struct st_error *err)
{
    (void)b;
    (void)dev;
    struct gpu_stage *s = xcalloc(1, sizeof(*s));
    s->nbuf = nbuf;
    s->bytes = bytes;
    s->mem = mmap(NULL, (size_t)nbuf * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                  -1, 0);
    if (s->mem == MAP_FAILED) {
        st_error_fail(err, ST_ERR_NO_MEMORY, "staging buffers (%u x %zu bytes): %s", nbuf, bytes,
                      strerror(errno));
        free(s);
        return NULL;
    }
    return s;
}

static void *host_stage_buf(struct gpu_stage *s, unsigned i)
{
    return (char *)s->mem + (size_t)i * s->bytes;
}

/* The copy is synchronous: buffers are free again as soon as it returns. */
static int host_stage_copy(struct gpu_stage *s, unsigned i, struct gpu_alloc *a, uint64_t off,
                           const void *src, size_t len, struct st_error *err)
{
    (void)s;
    (void)i;
    return host_write(NULL, a, off, src, len, err);
}

static int host_stage_wait(struct gpu_stage *s, unsigned i, struct st_error *err)
{
    (void)s;
    (void)i;
    (void)err;
    return 0;
}

static void host_stage_close(struct gpu_stage *s)
{
    if (!s)
        return;
    munmap(s->mem, (size_t)s->nbuf * s->bytes);
    free(s);
}

static int host_finish(struct gpu_backend *b, struct gpu_alloc *a, struct st_error *err)
{
    (void)b;
    if (fcntl(a->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
        return st_error_fail(err, ST_ERR_IO, "sealing the memfd: %s", strerror(errno));
    }
    return 0;
}

static int host_read_back(struct gpu_backend *b, struct gpu_alloc *a, uint64_t off, void *dst,
                          size_t len, struct st_error *err)
{
    (void)b;
    int rc = fileio_pread_full(a->fd, dst, len, off);
    if (rc < 0) {
        return st_error_fail(err, ST_ERR_IO, "reading the memfd back: %s",
                 rc == -ENODATA ? "short" : strerror(-rc));
    }
    return 0;
}

/* What the machine and this process's cgroups can still give, less a
 * sixteenth of the memory this process may use (at least
 * GPU_RESERVE_HOST_MIN, at most GPU_RESERVE_HOST_MAX): a memfd is shmem,
 * which neither the page cache's reclaim nor (without swap) anything else
 * gives back, so a preload past this would end with the OOM killer. */
static int host_mem_available(struct gpu_backend *b, int dev, uint64_t *bytes,
                              struct st_error *err)
{
    (void)b;
    (void)dev;
    struct machine_memory m;
    int rc = machine_memory(&m);
    if (rc < 0)
        return st_error_fail(err, ST_ERR_IO, "reading /proc/meminfo: %s", strerror(-rc));
    uint64_t reserve = m.total / 16;
    reserve = reserve < GPU_RESERVE_HOST_MIN ? GPU_RESERVE_HOST_MIN
              : reserve > GPU_RESERVE_HOST_MAX ? GPU_RESERVE_HOST_MAX : reserve;
    *bytes = m.available > reserve ? m.available - reserve : 0;
    return 0;
}

static void host_destroy(struct gpu_backend *b)
{
    free(b);
}

static const struct gpu_backend_ops host_ops = {
    .alloc = host_alloc,
    .free = host_free,
    .stage_open = host_stage_open,
    .stage_buf = host_stage_buf,
    .stage_copy = host_stage_copy,
    .stage_wait = host_stage_wait,
    .stage_close = host_stage_close,
    .write = host_write,
    .finish = host_finish,
    .read_back = host_read_back,
    .mem_available = host_mem_available,
    .destroy = host_destroy,
};

struct gpu_backend *gpu_host_new(void)
{
    struct gpu_backend *b = xcalloc(1, sizeof(*b));
    b->ops = &host_ops;
    b->name = "host";
    b->kind = DEVICE_HOST;
    b->handle_type = "memfd";
    b->alloc_round = (uint64_t)sysconf(_SC_PAGESIZE);
    b->n_devices = 1;
    b->devices[0].index = 0;
    b->devices[0].numa_node = -1;
    snprintf(b->devices[0].uuid, sizeof(b->devices[0].uuid), "host");
    snprintf(b->devices[0].name, sizeof(b->devices[0].name), "host memory (memfd)");
    long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
    b->devices[0].memory_bytes = pages > 0 && pg > 0 ? (uint64_t)pages * (uint64_t)pg : 0;
    return b;
}
