/* gpu_plan: the order of a preload's chunks (see gpu_plan.h). */
#include "gpu_plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_part.h"

/* A growable list of chunks; fallible (a plan's size follows the files'). */
struct chunk_list {
    struct gpu_chunk *v;
    size_t n, cap;
};

static int list_push(struct chunk_list *l, const struct gpu_chunk *c)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        struct gpu_chunk *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *c;
    return 0;
}

/* Appends [from, to) of shard i, on src, cut in pieces of at most chunk. */
static int emit(struct chunk_list *l, uint32_t i, enum gpu_src src, uint64_t from, uint64_t to,
                uint64_t chunk)
{
    for (uint64_t off = from; off < to; off += chunk) {
        struct gpu_chunk c = {.shard = i, .src = src, .off = off,
                              .len = to - off < chunk ? to - off : chunk};
        if (list_push(l, &c) < 0)
            return -ENOMEM;
    }
    return 0;
}

/* Whether segment k of shard s (its data offsets) is still to come from the
 * gate's source. */
static int seg_missing(const struct gpu_plan_shard *s, const struct gpu_gate *gate, uint64_t k)
{
    uint64_t off = k * GPU_PLAN_SEGMENT;
    uint64_t len = s->size - off < GPU_PLAN_SEGMENT ? s->size - off : GPU_PLAN_SEGMENT;
    return !gate->present(gate->arg, s->gate_file, s->data_start + off, len);
}

/* A partition's stretch [lo, hi), planned on one source. */
struct stretch_ctx {
    struct chunk_list *list;
    uint32_t shard;
    enum gpu_src src;
    uint64_t chunk;
};

static int emit_stretch(void *arg, uint64_t lo, uint64_t hi)
{
    struct stretch_ctx *c = arg;
    return emit(c->list, c->shard, c->src, lo, hi, c->chunk);
}

/* Plans shard i: every chunk on src_all (a partition: its stretches only),
 * or (gate) each run of segments on the page cache or upstream as the gate
 * says. */
static int plan_shard(struct chunk_list lists[GPU_SRC_COUNT], uint32_t i,
                      const struct gpu_plan_shard *s, enum gpu_src src_all,
                      const struct gpu_gate *gate, uint64_t chunk)
{
    if (s->sel) {
        struct stretch_ctx c = {&lists[src_all], i, src_all, chunk};
        return gpu_select_stretches(s->sel, emit_stretch, &c);
    }
    if (!gate)
        return emit(&lists[src_all], i, src_all, 0, s->size, chunk);
    uint64_t run = 0;
    enum gpu_src run_src = seg_missing(s, gate, 0) ? GPU_SRC_UPSTREAM : GPU_SRC_PAGE_CACHE;
    for (uint64_t k = 1; k * GPU_PLAN_SEGMENT < s->size; k++) {
        enum gpu_src src = seg_missing(s, gate, k) ? GPU_SRC_UPSTREAM : GPU_SRC_PAGE_CACHE;
        if (src == run_src)
            continue;
        if (emit(&lists[run_src], i, run_src, run, k * GPU_PLAN_SEGMENT, chunk) < 0)
            return -ENOMEM;
        run = k * GPU_PLAN_SEGMENT;
        run_src = src;
    }
    return emit(&lists[run_src], i, run_src, run, s->size, chunk);
}

/* Reorders l (shard by shard, file order) to take the shards in turn:
 * chunk 0 of every shard, then chunk 1, ... Returns 0 or -ENOMEM. */
static int interleave(struct chunk_list *l, size_t n_shards)
{
    size_t *next = calloc(n_shards + 1, sizeof(*next)), *end = calloc(n_shards + 1, sizeof(*end));
    struct gpu_chunk *v = malloc((l->n ? l->n : 1) * sizeof(*v));
    if (!next || !end || !v) {
        free(next);
        free(end);
        free(v);
        return -ENOMEM;
    }
    for (size_t k = 0; k < l->n; k++)
        end[l->v[k].shard]++;
    for (size_t i = 0, at = 0; i < n_shards; i++) { /* [next[i], end[i]): shard i's chunks */
        next[i] = at;
        at += end[i];
        end[i] = at;
    }
    for (size_t out = 0; out < l->n;)
        for (size_t i = 0; i < n_shards; i++)
            if (next[i] < end[i])
                v[out++] = l->v[next[i]++];
    free(l->v);
    l->v = v;
    l->cap = l->n ? l->n : 1;
    free(next);
    free(end);
    return 0;
}

int gpu_plan_build(struct gpu_plan *p, const struct gpu_plan_shard *shards, size_t n,
                   uint64_t chunk, int force, const struct gpu_gate *gate, struct st_error *err)
{
    struct chunk_list lists[GPU_SRC_COUNT] = {{0}};
    enum gpu_src all = force >= 0 ? (enum gpu_src)force : GPU_SRC_PAGE_CACHE;
    int rc = 0;
    memset(p, 0, sizeof(*p));
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct gpu_plan_shard *s = &shards[i];
        int gated = force < 0 && gate && s->gate_file && !s->sel;
        if (s->size > 0)
            rc = plan_shard(lists, (uint32_t)i, s, all, gated ? gate : NULL, chunk);
    }
    if (rc == 0)
        rc = interleave(&lists[GPU_SRC_PAGE_CACHE], n);
    if (rc == 0)
        rc = interleave(&lists[GPU_SRC_UPSTREAM], n);
    size_t total = 0;
    for (int s = 0; s < GPU_SRC_COUNT; s++)
        total += lists[s].n;
    if (rc == 0 && total) {
        p->chunks = malloc(total * sizeof(*p->chunks));
        if (!p->chunks)
            rc = -ENOMEM;
    }
    for (int s = 0; s < GPU_SRC_COUNT; s++) {
        if (rc == 0 && lists[s].n) {
            memcpy(p->chunks + p->n_chunks, lists[s].v, lists[s].n * sizeof(*p->chunks));
            p->n_chunks += lists[s].n;
            p->n_src[s] = lists[s].n;
            for (size_t k = 0; k < lists[s].n; k++)
                p->bytes[s] += lists[s].v[k].len;
        }
        free(lists[s].v);
    }
    if (rc < 0) {
        gpu_plan_free(p);
        return st_error_fail(err, ST_ERR_NO_MEMORY, "no memory for the preload's plan");
    }
    return 0;
}

void gpu_plan_free(struct gpu_plan *p)
{
    free(p->chunks);
    memset(p, 0, sizeof(*p));
}
