/* slice: NumPy basic indexing planned as equal-length runs (see slice.h).
 *
 * Planning works in bits so that sub-byte dtypes (F4, F6_*) go through the
 * same code: a plan is only accepted when every run starts and ends on a
 * byte boundary, since the output is the source bytes copied unchanged. */
#include "slice.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "util.h"

/* One parsed item of the spec (one per dimension). */
struct slice_item {
    int is_index;
    int64_t index;                 /* when is_index */
    int has_start, has_stop, has_step;
    int64_t start, stop, step;
};

/* One dimension's selection after resolving against its length. */
struct slice_sel {
    uint64_t start, count;         /* first selected index (the highest for a negative step) */
    int64_t step;                  /* 1 whenever count <= 1 */
    int dropped;                   /* integer index: not in the result shape */
};

/* Names the dimension being parsed (0-based), as every slice error does. */
static int syntax_error(const char *spec, size_t len, size_t pos, uint32_t dim,
                        struct st_error *err)
{
    char what[32];
    unsigned char c = pos < len ? (unsigned char)spec[pos] : 0;
    if (pos >= len)
        snprintf(what, sizeof(what), "end of slice");
    else if (c > 0x20 && c < 0x7f)
        snprintf(what, sizeof(what), "'%c'", c);
    else
        snprintf(what, sizeof(what), "byte 0x%02x", c);
    return st_error_fail(err, ST_ERR_SLICE,
                         "dimension %" PRIu32 ": slice syntax error at position %zu: unexpected %s",
                         dim, pos + 1, what);
}

/* INT = [+-] 1*DIGIT, parsed at *pos. Returns 0, 1 when there is no INT here
 * (nothing consumed), or -EINVAL (err filled) for a sign without digits or a
 * value outside int64. */
static int parse_int(const char *spec, size_t len, size_t *pos, uint32_t dim, int64_t *out,
                     struct st_error *err)
{
    size_t p = *pos;
    int neg = 0;
    if (p < len && (spec[p] == '-' || spec[p] == '+')) {
        neg = spec[p] == '-';
        p++;
    }
    if (p >= len || spec[p] < '0' || spec[p] > '9') {
        if (p != *pos)
            return syntax_error(spec, len, p, dim, err);
        return 1;
    }
    uint64_t mag;
    size_t used;
    if (decimal_u64(spec + p, len - p, &mag, &used) != 0 || mag > (uint64_t)INT64_MAX + neg)
        return st_error_fail(err, ST_ERR_SLICE,
                             "dimension %" PRIu32 ": integer at position %zu does not fit in "
                             "64 bits", dim, p + 1);
    *out = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    *pos = p + used;
    return 0;
}

/* Parses the whole spec; items beyond max_items are checked but not stored.
 * Returns the number of items, or -EINVAL. */
static long parse_spec(const char *spec, size_t len, struct slice_item *items, size_t max_items,
                       struct st_error *err)
{
    size_t pos = 0;
    long n = 0;
    if (len == 0)
        return 0;
    for (;;) {
        struct slice_item it = {0};
        int64_t v[3] = {0, 0, 0};
        int has[3] = {0, 0, 0}, colons = 0;
        uint32_t dim = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
        for (;;) {
            int r = parse_int(spec, len, &pos, dim, &v[colons], err);
            if (r < 0)
                return -EINVAL;
            has[colons] = r == 0;
            if (pos < len && spec[pos] == ':' && colons < 2) {
                colons++;
                pos++;
                continue;
            }
            break;
        }
        if (colons == 0 && !has[0])
            return syntax_error(spec, len, pos, dim, err);
        if (pos < len && spec[pos] != ',')
            return syntax_error(spec, len, pos, dim, err);
        if (colons == 0) {
            it.is_index = 1;
            it.index = v[0];
        } else {
            it.has_start = has[0], it.start = v[0];
            it.has_stop = has[1], it.stop = v[1];
            it.has_step = has[2], it.step = v[2];
        }
        if ((size_t)n < max_items)
            items[n] = it;
        n++;
        if (pos >= len)
            return n;
        pos++; /* the ',' */
    }
}

/* A slice bound resolved as Python's slice.indices() does: negatives count
 * from the end, then the bound is clamped to [0, len] for a positive step, or
 * to [-1, len - 1] for a negative one. `shift` is 0 for a positive step and 1
 * for a negative one, whose result comes back shifted by one so that "before
 * the first element" (-1) is 0 and stays unsigned: both clamp to [0, len]. */
static uint64_t clamp_bound(int64_t v, uint64_t len, unsigned shift)
{
    if (v < 0) {
        uint64_t mag = (uint64_t)(-(v + 1)) + 1;
        return mag > len + shift ? 0 : len + shift - mag;
    }
    uint64_t r = (uint64_t)v + shift;
    return r > len ? len : r;
}

static int resolve(const struct slice_item *it, uint32_t d, uint64_t dim_len, struct slice_sel *s,
                   struct st_error *err)
{
    memset(s, 0, sizeof(*s));
    s->step = 1;
    if (it->is_index) {
        int64_t i = it->index;
        uint64_t mag = i < 0 ? (uint64_t)(-(i + 1)) + 1 : (uint64_t)i;
        if ((i < 0 && mag > dim_len) || (i >= 0 && mag >= dim_len))
            return st_error_fail(err, ST_ERR_SLICE, "dimension %" PRIu32 ": index %" PRId64
                                 " out of range for size %" PRIu64,
                                 d, i, dim_len);
        s->start = i < 0 ? dim_len - mag : mag;
        s->count = 1;
        s->dropped = 1;
        return 0;
    }
    if (it->has_step && it->step == 0)
        return st_error_fail(err, ST_ERR_SLICE, "dimension %" PRIu32 ": step must not be zero", d);
    int64_t step = it->has_step ? it->step : 1;
    if (step > 0) {
        uint64_t start = it->has_start ? clamp_bound(it->start, dim_len, 0) : 0;
        uint64_t stop = it->has_stop ? clamp_bound(it->stop, dim_len, 0) : dim_len;
        s->start = start;
        s->count = stop > start ? (stop - start - 1) / (uint64_t)step + 1 : 0;
    } else {
        /* Shifted bounds (see clamp_bound): the defaults are the last
         * element (len) and "before the first" (0). */
        uint64_t mag = (uint64_t)(-(step + 1)) + 1;
        uint64_t start = it->has_start ? clamp_bound(it->start, dim_len, 1) : dim_len;
        uint64_t stop = it->has_stop ? clamp_bound(it->stop, dim_len, 1) : 0;
        s->start = start ? start - 1 : 0;
        s->count = start > stop ? (start - stop - 1) / mag + 1 : 0;
    }
    s->step = s->count > 1 ? step : 1;
    if (s->count == 0)
        s->start = 0;
    return 0;
}

static int misaligned(struct st_error *err, uint32_t d, int has_dim, enum dtype dt)
{
    const char *name = dtype_info(dt)->name;
    if (!has_dim)
        return st_error_fail(err, ST_ERR_SLICE, "slice cuts %s elements off a byte boundary", name);
    return st_error_fail(err, ST_ERR_SLICE,
                         "dimension %" PRIu32 ": slice cuts %s elements off a byte boundary",
                         d, name);
}

/* Cuts result dimension n->dim of the selection to [n->lo, n->hi). */
static int narrow_sel(struct slice_sel *sel, uint32_t ndim, const struct slice_narrow *n,
                      struct st_error *err)
{
    uint32_t r = 0;
    for (uint32_t d = 0; d < ndim; d++) {
        if (sel[d].dropped)
            continue;
        if (r++ != n->dim)
            continue;
        if (n->lo > n->hi || n->hi > sel[d].count)
            return st_error_fail(err, ST_ERR_SLICE,
                                 "dimension %" PRIu32 ": cut [%" PRIu64 ", %" PRIu64
                                 ") is not inside its %" PRIu64 " elements",
                              n->dim, n->lo, n->hi, sel[d].count);
        uint64_t count = n->hi - n->lo;
        /* start + lo * step, in modular arithmetic: the result lies in the dimension */
        sel[d].start += n->lo * (uint64_t)sel[d].step;
        sel[d].count = count;
        if (count <= 1)
            sel[d].step = 1;
        if (count == 0)
            sel[d].start = 0;
        return 0;
    }
    return st_error_fail(err, ST_ERR_SLICE,
                         "dimension %" PRIu32 " to cut does not exist: the result has %" PRIu32,
                         n->dim, r);
}

int slice_plan_build(const char *spec, size_t len, enum dtype dt, uint32_t ndim,
                     const uint64_t *shape, struct slice_plan *plan, struct st_error *err)
{
    return slice_plan_build_narrowed(spec, len, dt, ndim, shape, NULL, plan, err);
}

/* Step 1: what each of the ndim dimensions selects (spec, then the cut). */
static int select_dims(const char *spec, size_t len, uint32_t ndim, const uint64_t *shape,
                       const struct slice_narrow *narrow, struct slice_sel *sel,
                       struct st_error *err)
{
    struct slice_item items[ST_MAX_NDIM];
    if (!spec)
        len = 0;
    long n_items = parse_spec(spec, len, items, ndim, err);
    if (n_items < 0)
        return -EINVAL;
    if ((unsigned long)n_items > ndim)
        return st_error_fail(err, ST_ERR_SLICE,
                             "too many indices: tensor has %" PRIu32 " dimensions, slice has %ld",
                             ndim, n_items);
    for (uint32_t d = 0; d < ndim; d++) {
        static const struct slice_item whole = {0};
        if (resolve(d < (uint32_t)n_items ? &items[d] : &whole, d, shape[d], &sel[d], err) < 0)
            return -EINVAL;
    }
    if (narrow && narrow_sel(sel, ndim, narrow, err) < 0)
        return -EINVAL;
    return 0;
}

/* Step 2: source bits between neighbours along each dimension, checked: the
 * validator bounds the byte size, but 8x that can exceed 64 bits for an
 * (absurd) tensor over 2 EiB. */
static int bit_strides(unsigned bits, uint32_t ndim, const uint64_t *shape, uint64_t *stride,
                       struct st_error *err)
{
    uint64_t acc = bits;
    for (uint32_t d = ndim; d-- > 0;) {
        stride[d] = acc;
        if (u64_mul(acc, shape[d], &acc) < 0)
            return st_error_fail(err, ST_ERR_SLICE, "slice: tensor size in bits overflows 64 bits");
    }
    return 0;
}

/* Step 3: the run: trailing dimensions taken whole, then the innermost
 * partial one when it is contiguous (step 1; a single index counts as one).
 * A reversed dimension is never part of a run: its elements go backwards.
 * Sets *run_bits and *last_outer, the innermost dimension that enumerates
 * runs (-1 when there is one run). */
static int plan_run(const struct slice_sel *sel, uint32_t ndim, const uint64_t *shape,
                    enum dtype dt, uint64_t *run_bits, int32_t *last_outer, struct st_error *err)
{
    uint64_t bits = dtype_info(dt)->bits;
    int32_t d = (int32_t)ndim - 1;
    while (d >= 0 && sel[d].start == 0 && sel[d].count == shape[d] && sel[d].step == 1) {
        bits *= shape[d];
        d--;
    }
    int32_t run_dim = d; /* the dimension that cuts the run, -1 if none */
    if (d >= 0 && sel[d].step == 1) {
        bits *= sel[d].count;
        d--;
    }
    if (bits % 8)
        return misaligned(err, (uint32_t)(run_dim < 0 ? 0 : run_dim), ndim > 0, dt);
    *run_bits = bits;
    *last_outer = d;
    return 0;
}

/* Step 4: the first run's offset, the element count, and the dimensions
 * 0..last_outer that enumerate runs (those of one element fold into the
 * base), each on a byte boundary. */
static int plan_outer(const struct slice_sel *sel, uint32_t ndim, const uint64_t *stride,
                      int32_t last_outer, enum dtype dt, struct slice_plan *plan,
                      struct st_error *err)
{
    uint64_t base_bits = 0, nelems = 1;
    int32_t bad_base_dim = -1;
    for (uint32_t i = 0; i < ndim; i++) {
        uint64_t contrib = sel[i].start * stride[i]; /* < total bits: no overflow */
        base_bits += contrib;
        if (contrib % 8)
            bad_base_dim = (int32_t)i;
        nelems *= sel[i].count;
    }
    if (base_bits % 8)
        return misaligned(err, (uint32_t)bad_base_dim, 1, dt);
    for (int32_t i = 0; i <= last_outer; i++) {
        if (sel[i].count == 1)
            continue; /* folded into base */
        /* |step| * stride < total bits, as count > 1 elements fit in the dimension */
        uint64_t mag = sel[i].step < 0 ? (uint64_t)(-(sel[i].step + 1)) + 1 : (uint64_t)sel[i].step;
        uint64_t st = mag * stride[i];
        if (st % 8)
            return misaligned(err, (uint32_t)i, 1, dt);
        plan->outer_count[plan->n_outer] = sel[i].count;
        plan->outer_stride[plan->n_outer] = sel[i].step < 0 ? -(int64_t)(st / 8) : (int64_t)(st / 8);
        plan->n_outer++;
    }
    plan->nelems = nelems;
    plan->base = base_bits / 8;
    return 0;
}

int slice_plan_build_narrowed(const char *spec, size_t len, enum dtype dt, uint32_t ndim,
                              const uint64_t *shape, const struct slice_narrow *narrow,
                              struct slice_plan *plan, struct st_error *err)
{
    struct slice_sel sel[ST_MAX_NDIM];
    uint64_t stride[ST_MAX_NDIM], run_bits = 0;
    int32_t last_outer = -1;

    memset(plan, 0, sizeof(*plan));
    const struct dtype_info *info = dtype_info(dt);
    if (!info)
        return st_error_fail(err, ST_ERR_SLICE, "slice: invalid dtype");
    if (ndim > ST_MAX_NDIM)
        return st_error_fail(err, ST_ERR_SLICE,
                             "slice: tensor has %" PRIu32 " dimensions, more than %d",
                             ndim, ST_MAX_NDIM);
    if (select_dims(spec, len, ndim, shape, narrow, sel, err) < 0)
        return -EINVAL;
    int empty = 0;
    for (uint32_t d = 0; d < ndim; d++) {
        if (sel[d].count == 0)
            empty = 1;
        if (!sel[d].dropped)
            plan->shape[plan->ndim++] = sel[d].count;
    }
    if (empty)
        return 0; /* nelems, nbytes, n_runs all 0 */
    if (bit_strides(info->bits, ndim, shape, stride, err) < 0 ||
        plan_run(sel, ndim, shape, dt, &run_bits, &last_outer, err) < 0 ||
        plan_outer(sel, ndim, stride, last_outer, dt, plan, err) < 0)
        return -EINVAL;
    plan->run_bytes = run_bits / 8;
    plan->n_runs = 1;
    for (uint32_t i = 0; i < plan->n_outer; i++)
        plan->n_runs *= plan->outer_count[i];
    plan->nbytes = plan->n_runs * plan->run_bytes;
    return 0;
}

/* ---- reading ---- */

/* Odometer over the outer dimensions: the source offset of the current run,
 * advanced by additions only (no division per run). Run k is base +
 * sum(idx[i] * stride[i]) for idx[i] < count[i], in row-major order, computed
 * modulo 2^64 (strides may be negative); every run offset itself lies inside
 * the tensor. */
struct run_cursor {
    uint64_t src;
    uint64_t idx[ST_MAX_NDIM];
};

static void cursor_seek(const struct slice_plan *p, struct run_cursor *c, uint64_t k)
{
    c->src = p->base;
    for (uint32_t i = p->n_outer; i-- > 0;) {
        c->idx[i] = k % p->outer_count[i];
        c->src += c->idx[i] * (uint64_t)p->outer_stride[i];
        k /= p->outer_count[i];
    }
}

static void cursor_next(const struct slice_plan *p, struct run_cursor *c)
{
    for (uint32_t i = p->n_outer; i-- > 0;) {
        c->src += (uint64_t)p->outer_stride[i];
        if (++c->idx[i] < p->outer_count[i])
            return;
        /* wrap: modular arithmetic gives the right offset even if the
         * intermediate product is large */
        c->src -= p->outer_count[i] * (uint64_t)p->outer_stride[i];
        c->idx[i] = 0;
    }
}

uint64_t slice_run_offset(const struct slice_plan *plan, uint64_t k)
{
    struct run_cursor c;
    cursor_seek(plan, &c, k);
    return c.src;
}

int slice_each_span(const struct slice_plan *plan, uint64_t off, uint64_t len,
                    int (*fn)(void *arg, uint64_t src, uint64_t n, uint64_t out), void *arg)
{
    if (len == 0 || plan->run_bytes == 0)
        return 0;
    struct run_cursor c;
    cursor_seek(plan, &c, off / plan->run_bytes);
    uint64_t in_run = off % plan->run_bytes, end = off + len;
    for (uint64_t at = off; at < end; in_run = 0) {
        uint64_t n = plan->run_bytes - in_run < end - at ? plan->run_bytes - in_run : end - at;
        int rc = fn(arg, c.src + in_run, n, at);
        if (rc)
            return rc;
        at += n;
        cursor_next(plan, &c);
    }
    return 0;
}

#define SLICE_SCRATCH_LEN (1u << 20)
#define SLICE_DIRECT_MIN (64u << 10) /* pieces this long are read straight into buf */
#define SLICE_GAP_OK 4096u           /* a gap this small is read through */

/* Short runs are gathered from one read of a window [lo, hi) of the file
 * that holds several of them; the window grows in either direction, so
 * reversed dimensions are batched too. */
int slice_read_scratch(const struct slice_plan *plan, int fd, uint64_t tensor_off, uint64_t off,
                       void *buf, size_t len, void *scratch, size_t scratch_len)
{
    if (len == 0)
        return 0;
    if (off > plan->nbytes || len > plan->nbytes - off)
        return -EINVAL;
    if (!scratch)
        scratch_len = 0;
    struct run_cursor cur, peek;
    cursor_seek(plan, &cur, off / plan->run_bytes);
    uint64_t in_run = off % plan->run_bytes; /* bytes of the current run already consumed */
    char *out = buf;
    size_t left = len;

    while (left) {
        uint64_t take0 = plan->run_bytes - in_run;
        if (take0 > left)
            take0 = left;
        uint64_t first = cur.src + in_run, lo = first, hi = first + take0, useful = take0;
        size_t m = 1; /* pieces in the window */
        if (take0 < SLICE_DIRECT_MIN && scratch_len >= take0) {
            peek = cur;
            while (useful < left) {
                cursor_next(plan, &peek);
                uint64_t take = plan->run_bytes;
                if (take > left - useful)
                    take = left - useful;
                uint64_t nlo = peek.src < lo ? peek.src : lo;
                uint64_t nhi = peek.src + take > hi ? peek.src + take : hi;
                if (nhi - nlo > scratch_len)
                    break;
                /* The window grew by more than the run: a gap. Worth reading
                 * through only when it is small or the window stays dense. */
                if ((nhi - nlo) - (hi - lo) >= take + SLICE_GAP_OK && nhi - nlo > 4 * (useful + take))
                    break;
                lo = nlo;
                hi = nhi;
                useful += take;
                m++;
            }
        }
        if (m == 1) {
            int r = fileio_pread_full(fd, out, (size_t)take0, tensor_off + first);
            if (r < 0)
                return r;
            out += take0;
            left -= (size_t)take0;
        } else {
            int r = fileio_pread_full(fd, scratch, (size_t)(hi - lo), tensor_off + lo);
            if (r < 0)
                return r;
            const char *s = scratch;
            memcpy(out, s + (first - lo), (size_t)take0);
            out += take0;
            left -= (size_t)take0;
            for (size_t j = 1; j < m; j++) {
                cursor_next(plan, &cur);
                size_t take = plan->run_bytes < left ? (size_t)plan->run_bytes : left;
                memcpy(out, s + (cur.src - lo), take);
                out += take;
                left -= take;
            }
        }
        cursor_next(plan, &cur);
        in_run = 0;
    }
    return 0;
}

/* Per-thread scratch for slice_read, freed when the thread exits. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void scratch_key_init(void)
{
    scratch_key_ok = pthread_key_create(&scratch_key, free) == 0;
}

/* The calling thread's scratch buffer (SLICE_SCRATCH_LEN bytes), or NULL. */
static void *thread_scratch(void)
{
    void *scratch = NULL;
    pthread_once(&scratch_once, scratch_key_init);
    if (scratch_key_ok) {
        scratch = pthread_getspecific(scratch_key);
        if (!scratch) {
            scratch = xmalloc(SLICE_SCRATCH_LEN);
            if (pthread_setspecific(scratch_key, scratch) != 0) {
                free(scratch);
                scratch = NULL;
            }
        }
    }
    return scratch;
}

int slice_read(const struct slice_plan *plan, int fd, uint64_t tensor_off, uint64_t off,
               void *buf, size_t len)
{
    void *scratch = thread_scratch();
    return slice_read_scratch(plan, fd, tensor_off, off, buf, len, scratch,
                              scratch ? SLICE_SCRATCH_LEN : 0);
}
