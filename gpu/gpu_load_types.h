/* gpu_load_types: what a load (gpu/gpu_load.h) takes and gives: the
 * shards to fill, the load's settings and its statistics. Apart from
 * gpu_load.h so that the load's own parts (gpu/gpu_run.h and the movers
 * built on it) can use them below the file that runs a load. */
#ifndef TENSORD_GPU_LOAD_TYPES_H
#define TENSORD_GPU_LOAD_TYPES_H

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
    int direct_fd;             /* the same file opened with O_DIRECT (the caller's), or
                                * negative: gpu_load.open_direct is asked when needed */
    uint64_t data_start, size; /* the data buffer in the file */
    struct gpu_alloc *a;       /* where it goes */
    const struct gpu_select *sel; /* a partition's bytes of the data (gpu/gpu_part.h), packed
                                * into the allocation; NULL: all of them, at their offsets */
};

/* What a load did. */
struct gpu_load_stats {
    uint64_t bytes[GPU_SRC_COUNT]; /* bytes that came from the page cache, the disk, and the
                                    * upstream chunks (waited for, then read) */
    uint64_t handed_over;      /* of the disk bytes, those the copy threads found missing */
    uint64_t missing_runs;     /* runs of missing pages the copy threads met */
    uint64_t copy_cpu_ns;      /* CPU time the copy threads used, together */
    char disk_io[32];          /* "io_uring+O_DIRECT", "io_uring" or "pread" for the disk
                                * mover's bytes, "buffered" when the copy threads read them
                                * (files mincore may not survey); "" when there were none */
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
    /* Opens shard i's file with O_DIRECT for the disk mover, the first time
     * it has bytes of that shard to read (a warm load opens none): a
     * descriptor the load closes, or negative to read it buffered. NULL:
     * only the shards' own direct_fd are used. */
    int (*open_direct)(void *arg, size_t shard);
    void *open_arg;
    /* io_uring_wait_cqe, replaceable by tests to inject failures. */
    int (*wait_cqe)(struct io_uring *ring, struct io_uring_cqe **cqe);
};

#endif
