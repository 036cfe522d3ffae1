/* gpu_part: a shard's selection for a whole instance or a partition (see
 * gpu_part.h). */
#include "gpu_part.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "slice.h"

static uint64_t extent_end(const struct gpu_extent *e)
{
    return e->count ? e->src + (e->count - 1) * e->stride + e->run : e->src;
}

/* Appends an extent, merging it into the last one where it continues it
 * (two whole tensors side by side are one run). */
static int push(struct gpu_select *sel, const struct gpu_extent *e)
{
    struct gpu_extent *last = sel->n ? &sel->ext[sel->n - 1] : NULL;
    if (e->count == 0 || e->run == 0)
        return 0;
    if (last && last->count == 1 && e->count == 1 && last->src + last->run == e->src &&
        last->dst + last->run == e->dst) {
        last->run += e->run;
        last->stride = last->run;
        sel->bytes += e->run;
        return 0;
    }
    if (sel->n == sel->cap) {
        size_t cap = sel->cap ? 2 * sel->cap : 16;
        struct gpu_extent *v = realloc(sel->ext, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        sel->ext = v;
        sel->cap = cap;
    }
    sel->ext[sel->n++] = *e;
    sel->bytes += e->run * e->count;
    return 0;
}

int gpu_part_add(struct gpu_select *sel, const struct fetch_req *split, const struct reg_tensor *rt,
                 uint64_t *budget, struct gpu_part_tensor *out, struct st_error *err)
{
    const struct st_tensor *t = rt->t;
    struct slice_plan plan;
    int rc = fetch_req_plan_tensor(split, t->name, t->name_len, NULL, 0, t->dtype, t->ndim,
                                   t->shape, budget, &plan, &out->part, err);
    if (rc < 0)
        return rc;
    out->offset = sel->bytes;
    out->nbytes = plan.nbytes;
    out->ndim = plan.ndim;
    memcpy(out->shape, plan.shape, plan.ndim * sizeof(plan.shape[0]));
    /* The runs, grouped where they keep one stride (a cut of one dimension
     * of a whole tensor keeps it throughout). */
    for (uint64_t k = 0; k < plan.n_runs && plan.run_bytes;) {
        uint64_t src = t->begin + slice_run_offset(&plan, k), n = 1, stride = plan.run_bytes;
        if (k + 1 < plan.n_runs)
            stride = t->begin + slice_run_offset(&plan, k + 1) - src;
        while (k + n < plan.n_runs &&
               t->begin + slice_run_offset(&plan, k + n) == src + n * stride)
            n++;
        struct gpu_extent e = {.src = src, .run = plan.run_bytes, .stride = n > 1 ? stride
                                                                                 : plan.run_bytes,
                               .count = n, .dst = sel->bytes};
        if (push(sel, &e) < 0)
            return st_error_fail(err, ST_ERR_NO_MEMORY, "no memory for a partition's plan");
        k += n;
    }
    return 0;
}

void gpu_select_free(struct gpu_select *sel)
{
    free(sel->ext);
    memset(sel, 0, sizeof(*sel));
}

/* The last extent that starts at or before off, or -1. */
static ptrdiff_t extent_at(const struct gpu_select *sel, uint64_t off)
{
    size_t lo = 0, hi = sel->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sel->ext[mid].src <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (ptrdiff_t)lo - 1;
}

uint64_t gpu_select_dst(const struct gpu_select *sel, uint64_t off)
{
    ptrdiff_t i = extent_at(sel, off);
    if (i < 0)
        return 0;
    const struct gpu_extent *e = &sel->ext[i];
    uint64_t k = (off - e->src) / e->stride, within = (off - e->src) - k * e->stride;
    if (k >= e->count)
        return e->dst + e->count * e->run;
    return e->dst + k * e->run + (within < e->run ? within : e->run);
}

size_t gpu_select_compact(const struct gpu_select *sel, uint64_t off, char *buf, size_t len)
{
    uint64_t end = off + len;
    size_t out = 0;
    ptrdiff_t i = extent_at(sel, off);
    for (size_t x = i < 0 ? 0 : (size_t)i; x < sel->n && sel->ext[x].src < end; x++) {
        const struct gpu_extent *e = &sel->ext[x];
        if (extent_end(e) <= off)
            continue;
        uint64_t k = off > e->src ? (off - e->src) / e->stride : 0;
        for (; k < e->count; k++) {
            uint64_t lo = e->src + k * e->stride, hi = lo + e->run;
            if (lo >= end)
                break;
            lo = lo > off ? lo : off;
            hi = hi < end ? hi : end;
            if (lo < hi) {
                memmove(buf + out, buf + (lo - off), (size_t)(hi - lo));
                out += (size_t)(hi - lo);
            }
        }
    }
    return out;
}

int gpu_select_stretches(const struct gpu_select *sel,
                         int (*fn)(void *arg, uint64_t lo, uint64_t hi), void *arg)
{
    uint64_t lo = 0, hi = 0;
    int have = 0, rc;
    for (size_t i = 0; i < sel->n; i++) {
        uint64_t a = sel->ext[i].src, b = extent_end(&sel->ext[i]);
        if (have && a <= hi) {
            hi = b > hi ? b : hi;
            continue;
        }
        if (have && (rc = fn(arg, lo, hi)) != 0)
            return rc;
        lo = a;
        hi = b;
        have = 1;
    }
    return have ? fn(arg, lo, hi) : 0;
}
