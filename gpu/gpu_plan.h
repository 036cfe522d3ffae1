/* gpu_plan: where each byte of a preload comes from.
 *
 * A preload copies the data buffers of a model's shards into backend
 * allocations. Bytes already in the page cache are cheapest to copy with
 * plain reads by several threads; bytes that are not are cheapest to read
 * with O_DIRECT and many reads in flight. The plan cuts every shard into
 * chunks of at most the staging buffer's size, each marked with the source
 * it should come from, decided per 2 MiB segment of the file with mincore()
 * on a mapping of the file that is never touched.
 *
 * mincore() tells the truth only to the file's owner and to whoever may
 * write it (Linux 5.2 and later claim every page resident to anyone else,
 * against page-cache side channels). For such files, and where mincore
 * fails, the plan says "page cache" throughout and lets the movers find
 * out: probing with reads instead would start readahead of the very pages
 * that O_DIRECT is about to read.
 *
 * A plan is a hint, not a promise: pages come and go while a preload runs.
 * The movers (gpu/gpu_load.c) read page-cache chunks with RWF_NOWAIT
 * and hand what is missing to the disk queue.
 *
 * Chunks keep file order within a shard. The disk chunks of every shard
 * form one queue, so the reads in flight never drain between shards; the
 * page-cache chunks take the shards in turn, so that copy threads work on
 * different allocations (a memfd takes one writer at a time).
 *
 * A third source: bytes a gate says are not in the file yet (a mirror still
 * fetching them from its upstream, mirror/mirror_model.h). They are planned
 * per segment too, as upstream chunks, taking the shards in turn as the
 * mirror's fetchers do; the movers wait on the gate before they read one
 * (gpu/gpu_load.h), and find its bytes in the page cache the fetcher
 * just wrote them to. */
#ifndef TENSORD_GPU_PLAN_H
#define TENSORD_GPU_PLAN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "st_error.h"

#define GPU_PLAN_SEGMENT (2u << 20) /* residency is decided per segment of this size */

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

/* One shard as the plan sees it: the data buffer of a file. */
struct gpu_plan_shard {
    int fd;                    /* open for reading, buffered */
    uint64_t data_start;       /* file offset of the data buffer */
    uint64_t size;             /* bytes of data */
    const void *gate_file;     /* the gate's name for its file; NULL: the file is whole */
};

struct gpu_chunk {
    uint32_t shard;            /* index into the shards the plan was built from */
    enum gpu_src src;
    uint64_t off;              /* offset in the shard's data (a multiple of 4096) */
    uint64_t len;              /* at most the plan's chunk size */
};

struct gpu_plan {
    struct gpu_chunk *chunks;  /* page-cache chunks first (the shards in turn), then disk
                                * chunks (shard by shard), then upstream chunks (the shards in
                                * turn); file order within a shard */
    size_t n_chunks;
    size_t n_src[GPU_SRC_COUNT];   /* chunks of each source */
    uint64_t bytes[GPU_SRC_COUNT]; /* bytes planned from each source */
    size_t n_guessed;          /* shards whose residency mincore could not tell */
};

/* Plans n shards in chunks of at most chunk bytes (a multiple of 4096).
 * force, when not -1, puts every chunk on that source (tests, benchmarks).
 * gate (may be NULL) says which bytes of the shards with a gate_file are
 * not there yet. Returns 0, or -ENOMEM with err; *p is then empty. Free
 * with gpu_plan_free. */
int gpu_plan_build(struct gpu_plan *p, const struct gpu_plan_shard *shards, size_t n,
                   uint64_t chunk, int force, const struct gpu_gate *gate, struct st_error *err);
void gpu_plan_free(struct gpu_plan *p);

/* Whether mincore() reports fd's real page-cache residency to this process
 * (the file's owner, root, or someone who may write it). */
int gpu_plan_mincore_trusted(int fd);

#endif
