/* gpu_load: moves a plan's chunks (gpu/gpu_plan.h) from the files into
 * backend allocations.
 *
 * Two movers run side by side:
 *
 *   - page cache: `threads` copy threads take the plan's page-cache chunks
 *     in turn and read them with preadv2(RWF_NOWAIT), which copies from the
 *     page cache and never waits for the disk. With a backend that takes
 *     plain writes (host) a thread reads into a small buffer of its own and
 *     writes that into the allocation; otherwise (cuda) it owns two staging
 *     buffers, fills one while the other's copy to the device runs. Bytes
 *     a thread finds missing (evicted meanwhile, or a plan that could only
 *     guess) are handed to the disk queue;
 *   - disk: the calling thread reads the plan's disk chunks, and what was
 *     handed over, with io_uring (O_DIRECT where the file system serves it,
 *     buffered otherwise, pread where io_uring is missing), `depth` reads in
 *     flight across every shard, each into a staging buffer whose copy to the
 *     allocation starts as soon as its read completes.
 *
 * Staging layout: buffers [0, depth) are the disk reads', and with a backend
 * that has no `write`, buffers [depth + 2t, depth + 2t + 2) are copy thread
 * t's (gpu_load_stage_buffers). Each buffer holds a chunk plus O_DIRECT
 * alignment slack (gpu_load_stage_bytes). The ring belongs to the caller,
 * which may keep it for the next load (gpu/gpu_preload.c keeps one per
 * device).
 *
 * Upstream chunks (bytes a mirror is still fetching, gpu_plan.h) go to the
 * copy threads after the page-cache chunks, in the plan's order: a thread
 * waits on the gate until the chunk's bytes are in the file, then copies
 * them as a page-cache chunk (the fetcher has just written them there),
 * handing to the disk queue what the page cache no longer holds. The
 * allocation checksums (ipc_tsum) are summed from the bytes on the way,
 * each piece right after it was read, while it is still in the cache. */
#ifndef TENSORD_GPU_LOAD_H
#define TENSORD_GPU_LOAD_H

#include <liburing.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu.h"
#include "gpu_plan.h"

#define GPU_LOAD_ALIGN 4096   /* O_DIRECT offset/length/buffer alignment */
#define GPU_LOAD_MAX_THREADS 64
#define GPU_LOAD_MAX_DEPTH 64

/* One shard to fill. */
struct gpu_load_shard {
    int fd;                    /* the file, buffered */
    const void *gate_file;     /* the gate's name for the file (upstream chunks); may be NULL */
    int direct_fd;             /* the same file opened with O_DIRECT, or negative */
    uint64_t data_start, size; /* the data buffer in the file */
    struct gpu_alloc *a;       /* where it goes */
    uint64_t checksum;         /* out: ipc_tsum of the bytes */
};

/* What a load did. */
struct gpu_load_stats {
    uint64_t bytes[GPU_SRC_COUNT]; /* bytes that came from the page cache, the disk, and the
                                    * upstream chunks (waited for, then read) */
    uint64_t handed_over;      /* of the disk bytes, those the plan had put on the page cache */
    char disk_io[32];          /* "io_uring+O_DIRECT", "io_uring" or "pread" for the disk
                                * bytes; "" when there were none */
    unsigned threads;          /* copy threads that ran */
    int failed_shard;          /* the shard the error is about, or -1 */
};

struct gpu_load {
    struct gpu_backend *be;
    struct gpu_stage *stage;   /* gpu_load_stage_buffers() buffers of gpu_load_stage_bytes() */
    unsigned threads;          /* page-cache copy threads, 1..GPU_LOAD_MAX_THREADS */
    unsigned depth;            /* disk reads in flight, 1..GPU_LOAD_MAX_DEPTH */
    size_t chunk;              /* the plan's chunk size (a multiple of GPU_LOAD_ALIGN) */
    const atomic_int *cancel;  /* nonzero: stop at the next chunk (may be NULL) */
    const struct gpu_gate *gate; /* what upstream chunks wait on (NULL: they are read at once) */
    _Atomic uint64_t *progress;/* bytes copied so far (may be NULL) */
    int unsafe;                /* out: reads may still land in the staging buffers: the
                                * ring must never be reused or freed */
    int no_uring;              /* tests: read the disk with pread, as where io_uring is
                                * missing */
    /* io_uring_wait_cqe, replaceable by tests to inject failures. */
    int (*wait_cqe)(struct io_uring *ring, struct io_uring_cqe **cqe);
};

/* Staging buffers a load with this backend, threads and depth uses, and
 * the bytes of each for chunks of chunk bytes. */
unsigned gpu_load_stage_buffers(const struct gpu_backend *be, unsigned threads, unsigned depth);
size_t gpu_load_stage_bytes(size_t chunk);

/* Fills shards[i].a from shards[i]'s file as plan (built from the same
 * shards, in the same order, with l->chunk) says, then waits for every
 * copy; on every path it also waits for every read it started (an error
 * cancels the reads still in flight), unless the ring itself failed
 * (l->unsafe). A file written while it was read (its size, mtime or ctime
 * moved) fails the load: its bytes may mix two versions. Sets each shard's
 * checksum and *st. Returns 0, -ECANCELED when *l->cancel was set, or
 * -errno with err (the first failure). */
int gpu_load_run(struct gpu_load *l, struct gpu_load_shard *shards, size_t n,
                 const struct gpu_plan *plan, struct gpu_load_stats *st, struct st_error *err);

/* Compares a[0..size) (read back from the backend) with the size bytes at
 * file_off of fd, chunk bytes at a time. Returns 0, -ECANCELED, or -errno
 * with err naming the first differing offset (ST_ERR_DEVICE) or the failed
 * read. */
int gpu_load_verify(struct gpu_backend *be, struct gpu_alloc *a, int fd, uint64_t file_off,
                    uint64_t size, size_t chunk, const atomic_int *cancel, struct st_error *err);

#endif
