/* gpu_run: the state of one load (gpu/gpu_load.h) that its movers share:
 * the copy threads and the load itself (gpu/gpu_load.c) and the disk mover
 * (gpu/gpu_load_disk.c) build on it, one way: the first failure, the bytes
 * moved, and the queue of runs the copy threads found missing and hand to
 * the disk mover. Included by nothing else. */
#ifndef TENSORD_GPU_RUN_H
#define TENSORD_GPU_RUN_H

#include <pthread.h>
#include <stdatomic.h>

#include "gpu_load_types.h"

/* One gpu_load_run. */
struct gpu_run {
    struct gpu_load *l;
    struct gpu_load_shard *shards;
    size_t n_shards;
    const struct gpu_chunk *pc;    /* the plan's page-cache chunks */
    size_t n_pc;
    _Atomic size_t next_pc;        /* the next one a copy thread takes */
    const struct gpu_chunk *dk;    /* the plan's disk chunks (forced plans only) */
    size_t n_dk, next_dk;          /* next_dk: the disk mover's alone */
    const struct gpu_chunk *up;    /* the plan's upstream chunks */
    size_t n_up;
    _Atomic size_t next_up;        /* the next one a copy thread waits for */
    uint64_t page;                 /* the page size: what the page cache holds or lacks */
    int *trusted;                  /* per shard: mincore tells this process the truth */
    _Atomic uint64_t bytes[GPU_SRC_COUNT];
    _Atomic uint64_t handed_bytes, missing_runs;
    _Atomic uint64_t copy_cpu_ns;  /* the copy threads' CPU time, added as each ends */
    atomic_int read_buffered;      /* copy threads read missing pages themselves (unsurveyed) */
    atomic_int stop;               /* a failure or a cancel: stop at the next chunk */
    atomic_int no_nowait;          /* the file system refused RWF_NOWAIT: plain reads */
    pthread_mutex_t lock;          /* guards what follows */
    pthread_cond_t cond;           /* a hand-over, a failure, or a copy thread ended */
    struct gpu_chunk *handed;      /* runs the copy threads handed to the disk queue */
    size_t n_handed, cap_handed, next_handed;
    unsigned active;               /* copy threads still running */
    int rc;                        /* the first failure, with err and failed_shard */
    int failed_shard;
    struct st_error err;
};

/* Records the first failure (about shard, or -1) and tells everyone to
 * stop. Returns rc. */
int gpu_run_fail(struct gpu_run *r, int shard, int rc, const struct st_error *e);
/* Whether the load must stop (a failure, or a cancel, which it records). */
int gpu_run_stopped(struct gpu_run *r);
/* Where bytes [off, off + n) of shard i's data, just read into buf, go:
 * moves the shard's selected ones to the start of buf (a partition,
 * gpu/gpu_part.h) and returns how many to copy, *dst their allocation
 * offset. */
size_t gpu_run_select(const struct gpu_run *r, uint32_t i, uint64_t off, char *buf, size_t n,
                      uint64_t *dst);
/* Counts n bytes copied from src. */
void gpu_run_copied(struct gpu_run *r, enum gpu_src src, uint64_t n);

/* Queues [from, to) of chunk c (offsets in its shard's data) for the disk
 * mover. Returns 0 or -errno (recorded). */
int gpu_run_hand_over(struct gpu_run *r, const struct gpu_chunk *c, uint64_t from, uint64_t to);
/* The next chunk for the disk mover: the plan's disk chunks, then the
 * handed ones. Returns 1 with *c; 0 when none is there now but copy
 * threads may still hand one over (never when block is set: it waits);
 * -1 when none will come (or the load stops). Disk mover only. */
int gpu_run_take_disk(struct gpu_run *r, struct gpu_chunk *c, int block);

#endif
