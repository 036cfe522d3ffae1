/* fetch_plan: one pass over the requested tensors builds the header, the
 * pieces and the identity hash together (see fetch_plan.h). Slice plans are
 * built on the stack, ~1.6 KB each whatever the tensor; only the compact
 * runs of strided pieces are kept, so a request for 100,000 column slices
 * keeps a few megabytes, not 160. */
#include "fetch_plan.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slice.h"
#include "st_entries.h"
#include "strmap.h"
#include "tformat.h"
#include "util.h"

#define NO_RUNS SIZE_MAX
#define SHAPE_TEXT (ST_MAX_NDIM * 21 + 1)

struct builder {
    const struct reg_model *m;
    const struct fetch_req *req;
    const struct fetch_plan_limits *lim;
    struct tformat_st hdr;
    struct body_piece *pieces;
    size_t *runs_at;            /* per piece: offset of its runs in runs, or NO_RUNS */
    size_t n_pieces, cap_pieces;
    unsigned char *runs;        /* the compact runs, 8-byte aligned one after the other */
    size_t runs_len, runs_cap;
    struct strmap *names;       /* names already in the answer */
    uint64_t data_len;
    size_t n_tensors;
    uint64_t h1, h2;
    uint64_t glob_budget;       /* matching steps left for the split rules */
    char *err;
    size_t errlen;
};

static enum fetch_plan_status fail(struct builder *b, enum fetch_plan_status st,
                                   const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static enum fetch_plan_status fail(struct builder *b, enum fetch_plan_status st,
                                   const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, b->errlen, fmt, ap);
    va_end(ap);
    return st;
}

static void hash_both(struct builder *b, const void *data, size_t len)
{
    b->h1 = hash_fnv1a(data, len, b->h1);
    b->h2 = hash_fnv1a(data, len, b->h2);
}

static void hash_u64(struct builder *b, uint64_t v)
{
    hash_both(b, &v, sizeof(v));
}

void fetch_split_bounds(uint64_t n, uint64_t world, uint64_t rank, uint64_t *lo, uint64_t *hi)
{
    uint64_t q = n / world, r = n % world;
    *lo = rank * q + (rank < r ? rank : r);
    *hi = *lo + q + (rank < r);
}

static void shape_text(char *out, const uint64_t *shape, uint32_t ndim)
{
    shape_format(out, SHAPE_TEXT, shape, ndim, ",");
}

static struct body_piece *new_piece(struct builder *b, size_t runs_at)
{
    if (b->n_pieces == b->cap_pieces) {
        b->cap_pieces = b->cap_pieces ? 2 * b->cap_pieces : 16;
        b->pieces = xrealloc(b->pieces, b->cap_pieces * sizeof(*b->pieces));
        b->runs_at = xrealloc(b->runs_at, b->cap_pieces * sizeof(*b->runs_at));
    }
    b->runs_at[b->n_pieces] = runs_at;
    struct body_piece *p = &b->pieces[b->n_pieces++];
    memset(p, 0, sizeof(*p));
    return p;
}

/* Appends the data of one planned tensor as a piece. */
static void add_piece(struct builder *b, const struct reg_tensor *t, const struct slice_plan *plan)
{
    const struct reg_file *f = t->file;
    uint64_t tensor_off = f->data_start + t->t->begin;
    if (plan->nbytes == 0)
        return;
    if (plan->n_runs <= 1) {
        uint64_t off = tensor_off + plan->base;
        struct body_piece *prev = b->n_pieces ? &b->pieces[b->n_pieces - 1] : NULL;
        if (prev && b->runs_at[b->n_pieces - 1] == NO_RUNS && prev->fd == f->fd &&
            prev->file_off + prev->len == off) {
            prev->len += plan->nbytes; /* continues the previous span */
        } else {
            struct body_piece *p = new_piece(b, NO_RUNS);
            *p = (struct body_piece){.at = b->data_len, .len = plan->nbytes, .fd = f->fd,
                                     .st = &f->st, .file_off = off};
        }
        return;
    }
    size_t need = slice_runs_size(plan);
    size_t at = (b->runs_len + 7) & ~(size_t)7;
    if (at + need > b->runs_cap) {
        b->runs_cap = b->runs_cap ? 2 * b->runs_cap : 4096;
        while (b->runs_cap < at + need)
            b->runs_cap *= 2;
        b->runs = xrealloc(b->runs, b->runs_cap);
    }
    slice_runs_init((struct slice_runs *)(b->runs + at), plan);
    b->runs_len = at + need;
    struct body_piece *p = new_piece(b, at);
    *p = (struct body_piece){.at = b->data_len, .len = plan->nbytes, .fd = f->fd, .st = &f->st,
                             .file_off = tensor_off};
}

/* Plans one tensor of the answer: its slice, its part of the split. */
static enum fetch_plan_status add_tensor(struct builder *b, const char *name, size_t name_len,
                                         const char *spec, size_t spec_len)
{
    char nm[ST_NAME_SHOW + 4], e[320], shape[SHAPE_TEXT];
#define NM str_excerpt(name, name_len, ST_NAME_SHOW, nm)
    const struct reg_tensor *t = reg_model_find_tensor(b->m, name, name_len);
    if (!t)
        return fail(b, FETCH_PLAN_NO_TENSOR, "model \"%s\" has no tensor \"%s\"", b->m->name, NM);
    if (t->file->fd < 0)
        return fail(b, FETCH_PLAN_IO, "tensor \"%s\": file \"%s\" could not be opened", NM,
                    t->file->name);
    if (strmap_put(b->names, name, name_len, (void *)t) != 0)
        return fail(b, FETCH_PLAN_DUPLICATE,
                    "tensor \"%s\" is asked for twice; an answer holds each name once", NM);
    const struct st_tensor *st = t->t;
    const char *dt = dtype_info(st->dtype)->name;
    struct slice_plan plan;
    if (slice_plan_build(spec, spec_len, st->dtype, st->ndim, st->shape, &plan, e, sizeof(e)) < 0) {
        shape_text(shape, st->shape, st->ndim);
        return fail(b, FETCH_PLAN_BAD_SLICE, "tensor \"%s\" %s [%s]: %s", NM, dt, shape, e);
    }
    int exhausted = 0;
    const struct fetch_rule *rule =
        b->req->has_split
            ? fetch_req_rule_for(b->req, name, name_len, &b->glob_budget, &exhausted)
            : NULL;
    if (exhausted)
        return fail(b, FETCH_PLAN_BAD_SPLIT,
                    "matching the split rules against the tensors' names took more than %llu "
                    "steps (at tensor \"%s\"); use fewer rules, or globs with fewer stars",
                    (unsigned long long)FETCH_GLOB_BUDGET, NM);
    uint64_t lo = 0, hi = 0;
    int64_t dim = -1;
    if (rule && plan.ndim > 0) {
        dim = rule->dim < 0 ? rule->dim + (int64_t)plan.ndim : rule->dim;
        if (dim < 0 || dim >= (int64_t)plan.ndim) {
            shape_text(shape, plan.shape, plan.ndim);
            return fail(b, FETCH_PLAN_BAD_SPLIT,
                        "tensor \"%s\" [%s]: split dim %" PRId64 " (rule \"%.100s\") is out of "
                        "range for %" PRIu32 " dimensions",
                        NM, shape, rule->dim, rule->match, plan.ndim);
        }
        fetch_split_bounds(plan.shape[dim], b->req->world, b->req->rank, &lo, &hi);
        struct slice_narrow cut = {(uint32_t)dim, lo, hi};
        if (slice_plan_build_narrowed(spec, spec_len, st->dtype, st->ndim, st->shape, &cut, &plan,
                                      e, sizeof(e)) < 0)
            return fail(b, FETCH_PLAN_BAD_SPLIT, "tensor \"%s\" %s: part %" PRIu64 " of %" PRIu64
                        " of dim %" PRId64 ": %s", NM, dt, b->req->rank, b->req->world, dim, e);
    }
    uint64_t end;
    if (u64_add(b->data_len, plan.nbytes, &end) < 0 || (b->lim->max_bytes && end > b->lim->max_bytes))
        return fail(b, FETCH_PLAN_TOO_LARGE, "the answer would hold more than %" PRIu64
                    " bytes of tensor data (max_fetch_bytes); ask for fewer tensors or split them",
                    b->lim->max_bytes);
    tformat_st_tensor(&b->hdr, name, name_len, st->dtype, plan.ndim, plan.shape, plan.nbytes);
    add_piece(b, t, &plan); /* at the current end, b->data_len */
    b->data_len = end;
    b->n_tensors++;

    /* The bytes sent: which file, where, and how they are gathered. */
    hash_both(b, name, name_len + 1);
    char etag[REG_ETAG_MAX];
    reg_file_etag(t->file, etag);
    hash_both(b, etag, strlen(etag) + 1);
    hash_u64(b, st->begin);
    hash_u64(b, (uint64_t)st->dtype);
    hash_u64(b, plan.ndim);
    hash_both(b, plan.shape, plan.ndim * sizeof(plan.shape[0]));
    uint64_t grid[3] = {plan.base, plan.run_bytes, plan.nbytes};
    hash_both(b, grid, sizeof(grid));
    hash_both(b, plan.outer_count, plan.n_outer * sizeof(plan.outer_count[0]));
    hash_both(b, plan.outer_stride, plan.n_outer * sizeof(plan.outer_stride[0]));
    return FETCH_PLAN_OK;
#undef NM
}

/* __metadata__ merged over the files in name order, the first file to set a
 * key winning (as GET /v1/models/{model}/header does). */
static void add_metadata(struct builder *b)
{
    size_t n = 0, cap = 0;
    const char **kv = NULL;
    struct strmap *keys = strmap_new(16);
    for (size_t i = 0; i < b->m->n_files; i++) {
        const struct st_header *h = b->m->files[i].header;
        for (size_t k = 0; h && k < h->n_metadata; k++) {
            const char *key = h->metadata[k].key;
            if (strmap_put(keys, key, strlen(key), NULL) != 0)
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 8;
                kv = xrealloc(kv, 2 * cap * sizeof(*kv));
            }
            kv[2 * n] = key;
            kv[2 * n + 1] = h->metadata[k].value;
            n++;
            hash_both(b, key, strlen(key) + 1);
            hash_both(b, h->metadata[k].value, strlen(h->metadata[k].value) + 1);
        }
    }
    if (n)
        tformat_st_metadata(&b->hdr, kv, n);
    free(kv);
    strmap_free(keys);
}

/* Moves the pieces and their runs into one allocation. */
static void pack(struct builder *b, struct fetch_plan *out)
{
    size_t pieces_bytes = (b->n_pieces * sizeof(struct body_piece) + 7) & ~(size_t)7;
    unsigned char *buf = xmalloc(pieces_bytes + b->runs_len + 1);
    struct body_piece *p = (struct body_piece *)buf;
    if (b->n_pieces)
        memcpy(p, b->pieces, b->n_pieces * sizeof(*p));
    if (b->runs_len)
        memcpy(buf + pieces_bytes, b->runs, b->runs_len);
    for (size_t i = 0; i < b->n_pieces; i++)
        if (b->runs_at[i] != NO_RUNS)
            p[i].runs = (const struct slice_runs *)(buf + pieces_bytes + b->runs_at[i]);
    out->pieces_buf = buf;
    out->pieces = p;
    out->n_pieces = b->n_pieces;
}

enum fetch_plan_status fetch_plan_build(const struct reg_model *m, const struct fetch_req *req,
                                        const struct fetch_plan_limits *lim,
                                        struct fetch_plan *out, char *err, size_t errlen)
{
    struct builder b = {.m = m, .req = req, .lim = lim, .err = err, .errlen = errlen,
                        .h1 = HASH_FNV_SEED, .h2 = 0x84222325cbf29ce4ULL,
                        .glob_budget = FETCH_GLOB_BUDGET};
    enum fetch_plan_status st = FETCH_PLAN_OK;
    memset(out, 0, sizeof(*out));
    err[0] = '\0';
    b.names = strmap_new(req->all ? m->n_tensors : req->n_items);
    tformat_st_begin(&b.hdr);

    /* The model's files (their ETags cover the metadata too) and its name. */
    hash_both(&b, m->name, strlen(m->name) + 1);
    for (size_t i = 0; i < m->n_files; i++) {
        char etag[REG_ETAG_MAX];
        reg_file_etag(&m->files[i], etag);
        hash_both(&b, etag, strlen(etag) + 1);
        out->weak |= reg_file_etag_weak(&m->files[i]);
        if (m->files[i].st.mtime_ns > out->mtime_ns)
            out->mtime_ns = m->files[i].st.mtime_ns;
    }
    add_metadata(&b);
    if (req->all) {
        for (size_t i = 0; i < m->n_tensors && st == FETCH_PLAN_OK; i++)
            st = add_tensor(&b, m->tensors[i].t->name, m->tensors[i].t->name_len, NULL, 0);
    } else {
        for (size_t i = 0; i < req->n_items && st == FETCH_PLAN_OK; i++) {
            const struct fetch_item *it = &req->items[i];
            st = add_tensor(&b, it->name, it->name_len, it->slice, it->slice ? it->slice_len : 0);
        }
    }
    tformat_st_end(&b.hdr, &out->prefix, &out->prefix_len);
    if (st == FETCH_PLAN_OK && out->prefix_len - ST_PREFIX_LEN > ST_MAX_HEADER_LEN)
        st = fail(&b, FETCH_PLAN_TOO_LARGE, "the answer's header would be %zu bytes, more than "
                  "the %llu a safetensors file may have; ask for fewer tensors",
                  out->prefix_len - ST_PREFIX_LEN, ST_MAX_HEADER_LEN);
    if (st == FETCH_PLAN_OK && lim->max_bytes && b.data_len + out->prefix_len > lim->max_bytes)
        st = fail(&b, FETCH_PLAN_TOO_LARGE, "the answer would be %" PRIu64 " bytes, more than "
                  "%" PRIu64 " (max_fetch_bytes)", b.data_len + out->prefix_len, lim->max_bytes);
    if (st == FETCH_PLAN_OK) {
        pack(&b, out);
        out->data_len = b.data_len;
        out->n_tensors = b.n_tensors;
        out->hash[0] = b.h1;
        out->hash[1] = b.h2;
    } else {
        fetch_plan_free(out);
    }
    free(b.pieces);
    free(b.runs_at);
    free(b.runs);
    strmap_free(b.names);
    return st;
}

void fetch_plan_free(struct fetch_plan *p)
{
    free(p->prefix);
    free(p->pieces_buf);
    memset(p, 0, sizeof(*p));
}
