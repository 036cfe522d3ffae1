/* gpu_part: what of a shard an instance holds. A whole instance holds every
 * byte of each shard's data buffer; a tensor-parallel partition (rank R of
 * a `split` as POST .../fetch takes it, core/req/fetch_req.h) holds, of each
 * tensor, its part: the whole tensor where no rule matches, else the rows
 * of its cut dimension that numpy.array_split gives rank R. A shard's
 * selection lists those bytes as extents in file order, each a regular grid
 * of runs (a cut of one dimension of a row-major tensor repeats with a fixed
 * stride), and packs them into the allocation in the same order: the bytes
 * selected in any stretch of the file land in one contiguous stretch of the
 * allocation. So the loader reads a stretch of the file (only the stretches
 * that hold selected bytes: another rank's rows of a dim-0 cut are never
 * read), compacts it in its buffer, and copies it to one place
 * (gpu/gpu_load.h): strided rows are read once, and nothing is staged on
 * the device. */
#ifndef TENSORD_GPU_PART_H
#define TENSORD_GPU_PART_H

#include <stddef.h>
#include <stdint.h>

#include "fetch_req.h"
#include "registry.h"
#include "st_error.h"

/* `count` runs of `run` bytes, `stride` bytes apart in the shard's data
 * (stride = run for one contiguous run), packed at allocation offset dst. */
struct gpu_extent {
    uint64_t src, run, stride, count, dst;
};

/* A shard's selection: extents sorted by src, in disjoint stretches of the
 * data, packed back to back from allocation offset 0. */
struct gpu_select {
    struct gpu_extent *ext;
    size_t n, cap;
    uint64_t bytes;            /* selected bytes: the allocation's size */
};

/* One tensor of a partition. */
struct gpu_part_tensor {
    uint64_t offset, nbytes;   /* in the shard's allocation */
    uint32_t ndim;
    uint64_t shape[ST_MAX_NDIM]; /* the part's shape */
    struct fetch_part part;    /* how it was cut (part.split 0: held whole) */
};

/* Adds tensor rt of the shard sel selects (tensors added in file order) as
 * split takes it, and says where it lands. Matching spends from *budget.
 * Returns 0, or -errno with err (fetch_req_plan_tensor's: a dim out of range,
 * a cut a sub-byte dtype cannot make, the rules' budget spent; or out of
 * memory). */
int gpu_part_add(struct gpu_select *sel, const struct fetch_req *split, const struct reg_tensor *rt,
                 uint64_t *budget, struct gpu_part_tensor *out, struct st_error *err);
void gpu_select_free(struct gpu_select *sel);

/* Selected bytes of the data before offset off: where the selected bytes
 * from off on land in the allocation. */
uint64_t gpu_select_dst(const struct gpu_select *sel, uint64_t off);

/* buf holds the data's bytes [off, off + len): moves the selected ones among
 * them to its start, in order, and returns how many there are. */
size_t gpu_select_compact(const struct gpu_select *sel, uint64_t off, char *buf, size_t len);

/* Calls fn(arg, lo, hi) for each stretch [lo, hi) of the data that holds
 * selected bytes, in order, touching stretches merged. Returns 0, or the
 * first non-zero fn returned. */
int gpu_select_stretches(const struct gpu_select *sel,
                         int (*fn)(void *arg, uint64_t lo, uint64_t hi), void *arg);

#endif
