/* slice: NumPy basic indexing over a tensor, planned as equal-length runs.
 *
 * A slice of a row-major tensor is a regular grid: after coalescing the
 * trailing dimensions that are taken whole, every contiguous run of source
 * bytes has the same length, and run k's source offset follows from k by a
 * mixed-radix decomposition. So the plan is O(ndim) in size whatever the
 * slice, and any output byte maps to its source byte in O(ndim): a 4 GB slice
 * is streamed without materialising anything. A negative step makes its
 * dimension's stride negative; runs themselves always go forwards. */
#ifndef TENSORD_SLICE_H
#define TENSORD_SLICE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dtype.h"
#include "st_error.h"
#include "st_header.h" /* ST_MAX_NDIM */

struct slice_plan {
    uint32_t ndim;                      /* dimensions of the result (integer indices drop theirs) */
    uint64_t shape[ST_MAX_NDIM];        /* result shape */
    uint64_t nelems;                    /* elements in the result */
    uint64_t nbytes;                    /* packed result size */
    uint64_t run_bytes;                 /* bytes in each contiguous source run (> 0 unless nbytes == 0) */
    uint64_t n_runs;                    /* nbytes / run_bytes */
    uint64_t base;                      /* source offset of run 0, relative to the tensor's first byte */
    uint32_t n_outer;                   /* dimensions that enumerate runs, outermost first */
    uint64_t outer_count[ST_MAX_NDIM];  /* runs along each of them */
    int64_t outer_stride[ST_MAX_NDIM];  /* source bytes between consecutive runs along each
                                         * (negative for a reversed dimension) */
};

/* A cut of one dimension of a slice's result to [lo, hi), applied as if the
 * result were sliced again: what a tensor-parallel split takes of it. */
struct slice_narrow {
    uint32_t dim;                       /* dimension of the result */
    uint64_t lo, hi;                    /* hi <= that dimension's length */
};

/* Parses spec[0..len) (e.g. "0,2:10:2,-1,::-1") against a tensor of dtype dt
 * and shape[0..ndim) and fills *plan. Each dimension takes NumPy's basic
 * indexing: an index, or start:stop:step with any non-zero step and Python's
 * clamping. Returns 0, or -EINVAL with err (ST_ERR_SLICE) naming the
 * dimension and the reason (out of range, step 0, too many indices, syntax, a
 * cut that is not on a byte boundary for sub-byte dtypes). */
int slice_plan_build(const char *spec, size_t len, enum dtype dt, uint32_t ndim,
                     const uint64_t *shape, struct slice_plan *plan, struct st_error *err);

/* slice_plan_build, then the result's dimension narrow->dim cut to
 * [narrow->lo, narrow->hi) (narrow may be NULL). -EINVAL with err also when
 * that dimension does not exist or the cut is not inside it. */
int slice_plan_build_narrowed(const char *spec, size_t len, enum dtype dt, uint32_t ndim,
                              const uint64_t *shape, const struct slice_narrow *narrow,
                              struct slice_plan *plan, struct st_error *err);

/* Source offset (relative to the tensor's first byte) of run k < n_runs. */
uint64_t slice_run_offset(const struct slice_plan *plan, uint64_t k);

/* Calls fn(arg, src, n, out) for each piece of source bytes that output
 * bytes [off, off + len) come from, in output order: n bytes at source
 * offset src (relative to the tensor's first byte) are output bytes
 * [out, out + n). Stops at the first fn that returns non-zero, and returns
 * that; 0 otherwise. (What a reader of bytes still arriving asks for: the
 * source bytes exactly, not the windows slice_read reads through.) */
int slice_each_span(const struct slice_plan *plan, uint64_t off, uint64_t len,
                    int (*fn)(void *arg, uint64_t src, uint64_t n, uint64_t out), void *arg);

/* Copies output bytes [off, off + len) of the slice into buf, reading the
 * tensor whose first byte is at file offset tensor_off in fd. Reads are
 * batched (a window covering several short runs is read with one pread and
 * gathered) so narrow column slices do not cost one syscall per element.
 * Returns 0 or a negative errno (-ENODATA if the file was truncated). */
int slice_read(const struct slice_plan *plan, int fd, uint64_t tensor_off, uint64_t off,
               void *buf, size_t len);

/* slice_read with the caller's scratch buffer for the batched window reads
 * (slice_read uses a 1 MiB buffer per thread, allocated on first use and
 * freed at thread exit). With scratch NULL every run is read with its own
 * pread straight into buf. Same return values; -EINVAL when [off, off + len)
 * is not inside the slice. */
int slice_read_scratch(const struct slice_plan *plan, int fd, uint64_t tensor_off, uint64_t off,
                       void *buf, size_t len, void *scratch, size_t scratch_len);

#endif
