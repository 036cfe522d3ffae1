/* Machine limits a preload is measured against (bench/preload.py). Each mode
 * prints one JSON line; GB/s are 10^9 bytes per second, medians over runs.
 *
 *   ceil_preload h2d MIB RUNS DEVICE
 *       pinned host -> device copies (cuMemHostAlloc, cuMemcpyHtoDAsync on one
 *       stream, then cuStreamSynchronize), through the CUDA driver API loaded
 *       at run time: the link's limit. With the CUDA driver test double this
 *       measures memcpy and says so ("double": true).
 *   ceil_preload pagecache THREADS CHUNK FILE...
 *       the files' bytes read with pread by THREADS threads into a buffer of
 *       CHUNK bytes each, chunk by chunk as the preload's copy threads read:
 *       the page cache's limit (the files must be cached: the caller reads
 *       them first).
 *   ceil_preload mmapcopy FILE...
 *       one thread copying each file from a fresh mmap into fresh memory:
 *       what a process that maps a model and copies it pays ("gbps"); and
 *       the same copy again, both mappings now populated: the memory's own
 *       rate from the page cache ("warm_gbps").
 *   ceil_preload direct DEPTH CHUNK FILE...
 *       O_DIRECT reads of CHUNK bytes with io_uring, DEPTH in flight across
 *       the files: the disk's limit at the loader's queue depth (the caller
 *       drops the files from the page cache first; O_DIRECT reads the disk
 *       either way).
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ceil.h"

static void die(const char *what)
{
    fprintf(stderr, "ceil_preload: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* ---- h2d ------------------------------------------------------------------ */

#ifdef TENSORD_CUDA
#include "cuda_api.h" /* the daemon's own loader: dlopen + cuGetProcAddress */

static int mode_h2d(size_t mib, int runs, int ordinal)
{
    struct cuda_api c;
    char why[256], name[256] = "";
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    void *host;
    CUdeviceptr d;
    size_t n = mib << 20;
    if (cuda_api_load(&c, why, sizeof(why)) < 0) {
        printf("{\"error\":\"%s\"}\n", "no usable CUDA driver");
        return 0;
    }
    if (c.Init(0) || c.DeviceGet(&dev, ordinal) || c.DevicePrimaryCtxRetain(&ctx, dev) ||
        c.CtxSetCurrent(ctx) || c.MemHostAlloc(&host, n, 0) || c.MemAlloc(&d, n) ||
        c.StreamCreate(&s, 0)) {
        printf("{\"error\":\"CUDA setup failed\"}\n");
        return 0;
    }
    c.DeviceGetName(name, sizeof(name), dev);
    memset(host, 0x5a, n);
    double *gbps = calloc((size_t)runs, sizeof(*gbps));
    c.MemcpyHtoDAsync(d, host, n, s); /* warm up */
    c.StreamSynchronize(s);
    for (int i = 0; i < runs; i++) {
        double t0 = ceil_now();
        c.MemcpyHtoDAsync(d, host, n, s);
        c.StreamSynchronize(s);
        gbps[i] = (double)n / (ceil_now() - t0) / 1e9;
    }
    for (char *p = name; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = ' ';
    printf("{\"device\":\"%s\",\"double\":%s,\"bytes\":%zu,\"median_gbps\":%.3f}\n", name,
           strstr(name, "test double") ? "true" : "false", n, ceil_median(gbps, runs));
    c.MemFree(d);
    c.MemFreeHost(host);
    free(gbps);
    return 0;
}
#else
static int mode_h2d(size_t mib, int runs, int ordinal)
{
    (void)mib, (void)runs, (void)ordinal;
    printf("{\"error\":\"built without the CUDA headers\"}\n");
    return 0;
}
#endif

/* ---- files ------------------------------------------------------------------ */

struct files {
    int n;
    int *fd;
    uint64_t *size;
    uint64_t total;
};

static void open_files(struct files *f, char **paths, int n, int flags)
{
    f->n = n;
    f->fd = calloc((size_t)n, sizeof(*f->fd));
    f->size = calloc((size_t)n, sizeof(*f->size));
    f->total = 0;
    for (int i = 0; i < n; i++) {
        struct stat sb;
        f->fd[i] = open(paths[i], O_RDONLY | flags);
        if (f->fd[i] < 0 || fstat(f->fd[i], &sb) < 0)
            die(paths[i]);
        f->size[i] = (uint64_t)sb.st_size;
        f->total += f->size[i];
    }
}

/* The chunks of every file, in file order, shared by the threads. */
struct pc_job {
    struct files *f;
    size_t chunk;
    pthread_mutex_t lock;
    int file;
    uint64_t off;
};

static int next_chunk(struct pc_job *j, int *fi, uint64_t *off, size_t *len)
{
    pthread_mutex_lock(&j->lock);
    while (j->file < j->f->n && j->off >= j->f->size[j->file]) {
        j->file++;
        j->off = 0;
    }
    int ok = j->file < j->f->n;
    if (ok) {
        *fi = j->file;
        *off = j->off;
        uint64_t left = j->f->size[j->file] - j->off;
        *len = left < j->chunk ? (size_t)left : j->chunk;
        j->off += *len;
    }
    pthread_mutex_unlock(&j->lock);
    return ok;
}

static void *pc_thread(void *arg)
{
    struct pc_job *j = arg;
    char *buf = aligned_alloc(4096, (j->chunk + 4095) / 4096 * 4096);
    int fi;
    uint64_t off;
    size_t len;
    memset(buf, 0, j->chunk); /* fault the buffer in, as pinned memory is */
    while (next_chunk(j, &fi, &off, &len))
        for (size_t got = 0; got < len;) {
            ssize_t r = pread(j->f->fd[fi], buf + got, len - got, (off_t)(off + got));
            if (r <= 0)
                die("pread");
            got += (size_t)r;
        }
    free(buf);
    return NULL;
}

static int mode_pagecache(int threads, size_t chunk, char **paths, int n)
{
    struct files f;
    open_files(&f, paths, n, 0);
    struct pc_job j = {.f = &f, .chunk = chunk};
    pthread_mutex_init(&j.lock, NULL);
    pthread_t *t = calloc((size_t)threads, sizeof(*t));
    double t0 = ceil_now();
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, pc_thread, &j);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double secs = ceil_now() - t0;
    printf("{\"threads\":%d,\"bytes\":%llu,\"gbps\":%.3f}\n", threads,
           (unsigned long long)f.total, (double)f.total / secs / 1e9);
    return 0;
}

static int mode_mmapcopy(char **paths, int n)
{
    struct files f;
    open_files(&f, paths, n, 0);
    double fresh = 0, warm = 0;
    unsigned sink = 0;
    for (int i = 0; i < n; i++) {
        size_t sz = (size_t)f.size[i];
        if (!sz)
            continue;
        double t0 = ceil_now();
        char *src = mmap(NULL, sz, PROT_READ, MAP_SHARED, f.fd[i], 0);
        char *dst = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (src == MAP_FAILED || dst == MAP_FAILED)
            die("mmap");
        memcpy(dst, src, sz);
        double t1 = ceil_now();
        src[0] == 0 ? sink++ : sink--;
        memcpy(dst, src, sz); /* both mappings populated now */
        double t2 = ceil_now();
        sink += (unsigned char)dst[sz / 2];
        fresh += t1 - t0;
        warm += t2 - t1;
        munmap(src, sz);
        munmap(dst, sz);
    }
    printf("{\"threads\":1,\"bytes\":%llu,\"gbps\":%.3f,\"warm_gbps\":%.3f,\"sink\":%u}\n",
           (unsigned long long)f.total, (double)f.total / fresh / 1e9,
           (double)f.total / warm / 1e9, sink & 1);
    return 0;
}

static int mode_direct(unsigned depth, size_t chunk, char **paths, int n)
{
    struct files f;
    struct io_uring ring;
    open_files(&f, paths, n, O_DIRECT);
    chunk = (chunk + 4095) / 4096 * 4096;
    if (io_uring_queue_init(depth, &ring, 0) < 0)
        die("io_uring_queue_init");
    char *bufs = aligned_alloc(4096, (size_t)depth * chunk);
    memset(bufs, 0, (size_t)depth * chunk);
    int fi = 0;
    uint64_t off = 0, bytes = 0;
    unsigned inflight = 0, slot_free[64], nfree = depth < 64 ? depth : 64;
    for (unsigned i = 0; i < nfree; i++)
        slot_free[i] = i;
    double t0 = ceil_now();
    for (;;) {
        while (nfree > 0 && fi < n) {
            if (off >= f.size[fi]) {
                fi++;
                off = 0;
                continue;
            }
            unsigned s = slot_free[--nfree];
            struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
            io_uring_prep_read(sqe, f.fd[fi], bufs + (size_t)s * chunk, (unsigned)chunk, off);
            io_uring_sqe_set_data64(sqe, s);
            off += chunk;
            inflight++;
        }
        if (!inflight)
            break;
        io_uring_submit(&ring);
        struct io_uring_cqe *cqe;
        if (io_uring_wait_cqe(&ring, &cqe) < 0)
            die("io_uring_wait_cqe");
        if (cqe->res < 0) {
            errno = -cqe->res;
            die("O_DIRECT read");
        }
        bytes += (uint64_t)cqe->res;
        slot_free[nfree++] = (unsigned)io_uring_cqe_get_data64(cqe);
        io_uring_cqe_seen(&ring, cqe);
        inflight--;
    }
    double secs = ceil_now() - t0;
    printf("{\"depth\":%u,\"chunk\":%zu,\"bytes\":%llu,\"gbps\":%.3f}\n", depth, chunk,
           (unsigned long long)bytes, (double)bytes / secs / 1e9);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "h2d") == 0)
        return mode_h2d(strtoul(argv[2], NULL, 10), atoi(argv[3]), atoi(argv[4]));
    if (argc >= 5 && strcmp(argv[1], "pagecache") == 0)
        return mode_pagecache(atoi(argv[2]), strtoul(argv[3], NULL, 10), argv + 4, argc - 4);
    if (argc >= 3 && strcmp(argv[1], "mmapcopy") == 0)
        return mode_mmapcopy(argv + 2, argc - 2);
    if (argc >= 5 && strcmp(argv[1], "direct") == 0) {
        unsigned depth = (unsigned)atoi(argv[2]);
        if (depth < 1 || depth > 64) {
            fprintf(stderr, "ceil_preload: depth 1..64\n");
            return 2;
        }
        return mode_direct(depth, strtoul(argv[3], NULL, 10), argv + 4, argc - 4);
    }
    fprintf(stderr, "usage: ceil_preload h2d MIB RUNS DEVICE | pagecache THREADS CHUNK FILE... |"
                    " mmapcopy FILE... | direct DEPTH CHUNK FILE...\n");
    return 2;
}
