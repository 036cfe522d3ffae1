/* Fuzzes slice planning. Input: byte 0 picks the dtype, byte 1 the number of
 * dimensions (<= 4), then 4 x 8 bytes of shape (reduced: mostly small, some
 * large so overflow paths run), then the spec. For a plan that builds, checks
 * its invariants: nbytes == n_runs * run_bytes == nelems * bits / 8, the
 * result shape multiplies to nelems, and the first and last runs lie inside
 * the tensor. A small tensor is also read back from a memfd and compared
 * with a per-element gather computed from the plan's own run offsets (runs
 * inside the tensor and never overlapping; with negative steps they need not
 * increase). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "slice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int memfd = -1;
static uint64_t memfd_len;

/* A file of n pattern bytes, reused across inputs. */
static int pattern_fd(uint64_t n)
{
    if (memfd < 0)
        memfd = memfd_create("fuzz_slice", 0);
    if (memfd < 0)
        abort();
    if (n > memfd_len) {
        uint8_t *b = malloc(n);
        for (uint64_t i = 0; i < n; i++)
            b[i] = (uint8_t)(i * 131 + (i >> 8));
        if (pwrite(memfd, b, n, 0) != (ssize_t)n)
            abort();
        free(b);
        memfd_len = n;
    }
    return memfd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 + 32)
        return 0;
    enum dtype dt = (enum dtype)(data[0] % DT_COUNT);
    uint32_t ndim = data[1] % 5;
    uint64_t shape[4];
    for (int d = 0; d < 4; d++) {
        uint64_t v = 0;
        for (int i = 7; i >= 0; i--)
            v = v << 8 | data[2 + 8 * d + i];
        shape[d] = (v >> 63) ? v >> (v & 63) : v % 17; /* small, or any size */
    }
    const char *spec = (const char *)data + 34;
    size_t len = size - 34;
    unsigned bits = dtype_info(dt)->bits;

    /* the tensor's size as the header validator would compute it */
    uint64_t elems = 1, tbits;
    int valid = 1, zero = 0;
    for (uint32_t d = 0; d < ndim; d++) {
        if (shape[d] == 0)
            zero = 1;
        else if (__builtin_mul_overflow(elems, shape[d], &elems))
            valid = 0;
    }
    if (zero)
        elems = 0, valid = 1;
    if (!valid || __builtin_mul_overflow(elems, (uint64_t)bits, &tbits) || tbits % 8)
        return 0; /* the validator rejects such tensors before anyone slices them */
    uint64_t tbytes = tbits / 8;

    struct slice_plan p;
    struct st_error err = {0};
    if (slice_plan_build(spec, len, dt, ndim, shape, &p, &err) != 0) {
        if (err.code != ST_ERR_SLICE || !err.message[0])
            abort();
        return 0;
    }
    uint64_t prod = 1;
    for (uint32_t i = 0; i < p.ndim; i++)
        prod *= p.shape[i]; /* may wrap only when a factor is 0 */
    if (p.ndim > ndim || (p.nelems && prod != p.nelems))
        abort();
    if (p.nbytes != p.n_runs * p.run_bytes || p.nbytes * 8 != p.nelems * bits || p.nbytes > tbytes)
        abort();
    if (p.nbytes == 0)
        return 0;
    if (p.run_bytes == 0)
        abort();
    uint64_t first = slice_run_offset(&p, 0), last = slice_run_offset(&p, p.n_runs - 1);
    if (first != p.base || first + p.run_bytes > tbytes || last + p.run_bytes > tbytes)
        abort();
    if (p.n_runs > 1 && last < first + p.run_bytes && first < last + p.run_bytes)
        abort(); /* the first and last runs overlap */

    if (tbytes <= (1u << 16)) {
        int fd = pattern_fd(tbytes);
        uint8_t *got = malloc(p.nbytes), *want = malloc(p.nbytes), *used = calloc(tbytes, 1);
        for (uint64_t k = 0, w = 0; k < p.n_runs; k++) {
            uint64_t o = slice_run_offset(&p, k);
            if (o + p.run_bytes > tbytes)
                abort(); /* runs inside the tensor */
            for (uint64_t b = 0; b < p.run_bytes; b++, w++) {
                if (used[o + b]++)
                    abort(); /* never overlapping */
                want[w] = (uint8_t)((o + b) * 131 + ((o + b) >> 8));
            }
        }
        free(used);
        if (slice_read(&p, fd, 0, 0, got, p.nbytes) != 0 || memcmp(got, want, p.nbytes) != 0)
            abort();
        uint64_t off = p.nbytes / 3, l = p.nbytes - off - p.nbytes / 5;
        if (l && (slice_read(&p, fd, 0, off, got, l) != 0 || memcmp(got, want + off, l) != 0))
            abort();
        free(got);
        free(want);
    }
    return 0;
}
