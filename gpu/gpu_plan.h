/* gpu_plan: the order in which a preload's chunks are taken, and which of
 * them wait for a source still filling the files.
 *
 * A preload copies the data buffers of a model's shards into backend
 * allocations. The plan cuts every shard into chunks of at most the staging
 * buffer's size and hands them to the movers (gpu/gpu_load.h). It decides
 * nothing about the page cache: building it touches no file, so the copy
 * threads start on the first chunk at once. Which pages are cached is
 * learned by the copy threads themselves, chunk by chunk, in parallel with
 * the copies (RWF_NOWAIT reads are the truth), and exactly the pages they
 * find missing go to the disk mover. An earlier plan surveyed every page
 * with mincore() first, on one thread, before any byte moved: 16-48 ms of
 * CPU per GiB, a quarter of a second or more for a large model, and a guess
 * anyway for files the daemon may not write (mincore claims every page
 * resident to those).
 *
 * A partition's shard (gpu/gpu_part.h) is planned over the stretches of its
 * data that hold selected bytes only, each cut on its own.
 *
 * Chunks keep file order within a shard. Page-cache chunks take the shards
 * in turn, so that copy threads work on different allocations (a memfd
 * takes one writer at a time).
 *
 * A second source: bytes a gate says are not in the file yet (a mirror still
 * fetching them from its upstream, mirror/mirror_model.h). They are planned
 * per segment, as upstream chunks after the page-cache ones, taking the
 * shards in turn as the mirror's fetchers do; the movers wait on the gate
 * before they read one (gpu/gpu_load.h), and find its bytes in the page
 * cache the fetcher just wrote them to. Asking the gate is a lookup in the
 * mirror's memory, never I/O.
 *
 * Tests and benchmarks may force every chunk onto one source (the disk
 * chunks then form one queue, shard by shard, so the reads in flight never
 * drain between shards). */
#ifndef TENSORD_GPU_PLAN_H
#define TENSORD_GPU_PLAN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "st_error.h"

#define GPU_PLAN_SEGMENT (2u << 20) /* a gate is asked per segment of this size */

enum gpu_src { GPU_SRC_PAGE_CACHE, GPU_SRC_DISK, GPU_SRC_UPSTREAM, GPU_SRC_COUNT };

/* What a source that is still filling the files says: whether bytes
 * [file_off, file_off + len) of a shard's file are there (present), and a
 * wait until they are (0), the source failed (-errno with err) or *cancel
 * is set (-ECANCELED). `file` is the shard's gate_file. */
struct gpu_gate {
    int (*present)(void *arg, const void *file, uint64_t file_off, uint64_t len);
    int (*wait)(void *arg, const void *file, uint64_t file_off, uint64_t len,
                const atomic_int *cancel, struct st_error *err);
    void *arg;
};

struct gpu_select;

/* One shard as the plan sees it: the data buffer of a file. */
struct gpu_plan_shard {
    uint64_t data_start;       /* file offset of the data buffer */
    uint64_t size;             /* bytes of data */
    const void *gate_file;     /* the gate's name for its file; NULL: the file is whole */
    const struct gpu_select *sel; /* a partition's (gpu/gpu_part.h): only the stretches that
                                * hold its bytes are planned; NULL: all of the data */
};

struct gpu_chunk {
    uint32_t shard;            /* index into the shards the plan was built from */
    enum gpu_src src;
    uint64_t off;              /* offset in the shard's data */
    uint64_t len;              /* at most the plan's chunk size */
};

struct gpu_plan {
    struct gpu_chunk *chunks;  /* page-cache chunks first (the shards in turn), then disk
                                * chunks (shard by shard), then upstream chunks (the shards in
                                * turn); file order within a shard */
    size_t n_chunks;
    size_t n_src[GPU_SRC_COUNT];   /* chunks of each source */
    uint64_t bytes[GPU_SRC_COUNT]; /* bytes planned from each source */
};

/* Plans n shards in chunks of at most chunk bytes (a multiple of 4096).
 * force, when not -1, puts every chunk on that source (tests, benchmarks).
 * gate (may be NULL) says which bytes of the shards with a gate_file are
 * not there yet. Returns 0, or -ENOMEM with err; *p is then empty. Free
 * with gpu_plan_free. */
int gpu_plan_build(struct gpu_plan *p, const struct gpu_plan_shard *shards, size_t n,
                   uint64_t chunk, int force, const struct gpu_gate *gate, struct st_error *err);
void gpu_plan_free(struct gpu_plan *p);

#endif
