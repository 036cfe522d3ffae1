/* gpu_load: moves a plan's chunks (gpu/gpu_plan.h) from the files into
 * backend allocations.
 *
 * Two movers run side by side:
 *
 *   - page cache: `threads` copy threads take the plan's chunks in turn and
 *     read them from the page cache with preadv2(RWF_NOWAIT), which never
 *     waits for the disk. With a backend that takes plain writes (host) a
 *     thread reads into a small buffer of its own and writes that into the
 *     allocation; otherwise (cuda) it owns two staging buffers and fills one
 *     while the other's copy to the device runs. Residency is learned per
 *     chunk, by all the threads at once while the copies run: where mincore
 *     tells this process the truth (it owns the file or may write it), a
 *     thread surveys its chunk's pages first and hands each run of missing
 *     pages, exactly, to the disk queue (reading them, even with RWF_NOWAIT,
 *     would start the kernel's readahead of them: a second read of what
 *     O_DIRECT reads). Where it does not, the thread copies what the cache
 *     holds and reads the missing pages itself, buffered, through the
 *     readahead its short read started: each missing page is read once
 *     either way;
 *   - disk: the calling thread reads the handed runs (and, in benchmarks
 *     and tests, chunks a plan forced onto the disk) with io_uring (O_DIRECT
 *     where the file system serves it and the caller gives a descriptor,
 *     buffered otherwise, pread where io_uring is missing), `depth` reads in
 *     flight across every shard, each into a staging buffer whose copy to the
 *     allocation starts as soon as its read completes.
 *
 * Nothing on the copy path but the copies: no checksum is summed here (the
 * GPU manager sums one after the preload, off the critical path).
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
 * them as a page-cache chunk (the fetcher has just written them there).
 *
 * The implementation, one way up: gpu/gpu_run.c (the state a load's movers
 * share), gpu/gpu_load_disk.c (the disk mover), gpu/gpu_load.c (a load, the
 * copy threads, verify). */
#ifndef TENSORD_GPU_LOAD_H
#define TENSORD_GPU_LOAD_H

#include <liburing.h>
#include <stdatomic.h>
#include <stddef.h>

#include "gpu.h"
#include "gpu_load_types.h"
#include "gpu_plan.h"

/* Staging buffers a load with this backend, threads and depth uses, and
 * the bytes of each for chunks of chunk bytes. */
unsigned gpu_load_stage_buffers(const struct gpu_backend *be, unsigned threads, unsigned depth);
size_t gpu_load_stage_bytes(size_t chunk);

/* Fills shards[i].a from shards[i]'s file as plan (built from the same
 * shards, in the same order, with l->chunk) says, then waits for every
 * copy; on every path it also waits for every read it started (an error
 * cancels the reads still in flight), unless the ring itself failed
 * (l->unsafe). A file written while it was read (its size, mtime or ctime
 * moved) fails the load: its bytes may mix two versions. Sets *st.
 * Returns 0, -ECANCELED when *l->cancel was set, or -errno with err (the
 * first failure). */
int gpu_load_run(struct gpu_load *l, struct gpu_load_shard *shards, size_t n,
                 const struct gpu_plan *plan, struct gpu_load_stats *st, struct st_error *err);

/* Compares the allocation a (read back from the backend) with what it
 * should hold of shard s's file (its data, or a partition's selected bytes),
 * chunk bytes at a time. Returns 0, -ECANCELED, or -errno with err naming
 * the first differing allocation offset (ST_ERR_DEVICE) or the failed read. */
int gpu_load_verify(struct gpu_backend *be, struct gpu_alloc *a, const struct gpu_load_shard *s,
                    size_t chunk, const atomic_int *cancel, struct st_error *err);

#endif
