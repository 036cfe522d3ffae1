/* fetch_plan: see fetch_plan.h. The request is walked once to check and
 * size the answer (fetch_plan_item with a checker), and then as often as a
 * reader needs, from the nearest mark (without one: fetch_plan_read.c):
 * both walks plan each tensor the same way, so the bytes are the ones the
 * sizes promised. Slice plans are ~1.6 KB whatever the tensor; the reader
 * keeps two (the header entry it is writing, the tensor it is reading). */
#include "fetch_plan.h"
#include "fetch_plan_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slice.h"
#include "st_header.h"
#include "strmap.h"
#include "tformat.h"
#include "util.h"

/* The first walk's checks. */
struct fetch_checker {
    struct strmap *names;       /* names already in the answer */
    uint64_t glob_budget;       /* matching steps left for the split rules */
    struct st_error *err;
};

static int fail(struct fetch_checker *ck, enum st_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct fetch_checker *ck, enum st_status code, const char *fmt, ...)
{
    if (ck) { /* else a later walk: the first one checked the same */
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ck->err->message, sizeof(ck->err->message), fmt, ap);
        va_end(ap);
        ck->err->code = code;
    }
    return st_status_errno(code);
}

static size_t n_items(const struct fetch_plan *p)
{
    return p->req.all ? p->m->n_tensors : p->req.n_items;
}

uint64_t fetch_plan_tensor_off(const struct fetch_tensor *it)
{
    return it->t->file->data_start + it->t->t->begin;
}

/* The descriptor file f is read through. */
int fetch_plan_fd(const struct fetch_plan *p, const struct reg_file *f)
{
    return p->elsewhere ? p->fds[f - p->m->files] : f->fd;
}

/* Whether f is still the version validated (a file read elsewhere has a
 * content fixed by its hash). */
int fetch_plan_unchanged(const struct fetch_plan *p, const struct reg_file *f)
{
    return p->elsewhere || fileio_unchanged(f->fd, &f->st);
}

/* Plans tensor k of the answer: its slice, its part of the split. With a
 * checker, every check and its error; without, what reading needs. */
int fetch_plan_item(const struct fetch_plan *p, size_t k, struct fetch_tensor *it,
                    struct fetch_checker *ck)
{
    char nm[ST_NAME_SHOW + 4];
    struct st_error e;
    const char *spec = NULL;
    size_t spec_len = 0;
    if (p->req.all) {
        it->t = &p->m->tensors[k];
        it->name = it->t->t->name;
        it->name_len = it->t->t->name_len;
    } else {
        const struct fetch_item *fi = &p->req.items[k];
        it->name = fi->name;
        it->name_len = fi->name_len;
        spec = fi->slice;
        spec_len = fi->slice ? fi->slice_len : 0;
        it->t = reg_model_find_tensor(p->m, it->name, it->name_len);
    }
#define NM str_excerpt(it->name, it->name_len, ST_NAME_SHOW, nm)
    if (!it->t)
        return fail(ck, ST_ERR_NOT_FOUND, "model \"%s\" has no tensor \"%s\"", p->m->name, NM);
    if (!p->elsewhere && it->t->file->fd < 0)
        return fail(ck, ST_ERR_IO, "tensor \"%s\": file \"%s\" could not be opened", NM,
                    it->t->file->name);
    if (ck && ck->names && strmap_put(ck->names, it->name, it->name_len, (void *)it->t) != 0)
        return fail(ck, ST_ERR_DUPLICATE_TENSOR,
                    "tensor \"%s\" is asked for twice; an answer holds each name once", NM);
    const struct st_tensor *st = it->t->t;
    struct fetch_part part;
    int rc = fetch_req_plan_tensor(&p->req, it->name, it->name_len, spec, spec_len, st->dtype,
                                   st->ndim, st->shape, ck ? &ck->glob_budget : NULL, &it->plan,
                                   &part, &e);
    return rc < 0 ? fail(ck, e.code, "%s", e.message) : 0;
#undef NM
}

void fetch_plan_entry(struct tformat_st *w, size_t entries, uint64_t doff,
                      const struct fetch_tensor *it)
{
    tformat_st_resume(w, entries, doff);
    tformat_st_tensor(w, it->name, it->name_len, it->t->t->dtype, it->plan.ndim, it->plan.shape,
                      it->plan.nbytes);
}

static void hash_both(uint64_t *h, const void *data, size_t len)
{
    h[0] = hash_fnv1a(data, len, h[0]);
    h[1] = hash_fnv1a(data, len, h[1]);
}

/* __metadata__ merged over the files in name order, the first file to set a
 * key winning (as GET /v1/models/{model}/header does), written into w as
 * the header's first entry; hashed into h when h is not NULL. Returns the
 * number of keys (nothing is written for none). */
size_t fetch_plan_metadata(const struct reg_model *m, struct tformat_st *w, uint64_t *h)
{
    size_t n = 0, cap = 0;
    const char **kv = NULL;
    struct strmap *keys = strmap_new(16);
    for (size_t i = 0; i < m->n_files; i++) {
        const struct st_header *hd = m->files[i].header;
        for (size_t k = 0; hd && k < hd->n_metadata; k++) {
            const char *key = hd->metadata[k].key, *value = hd->metadata[k].value;
            if (strmap_put(keys, key, strlen(key), NULL) != 0)
                continue;
            kv = xgrow(kv, &cap, n, 2 * sizeof(*kv), 8); /* a key and its value */
            kv[2 * n] = key;
            kv[2 * n + 1] = value;
            n++;
            if (h) {
                hash_both(h, key, strlen(key) + 1);
                hash_both(h, value, strlen(value) + 1);
            }
        }
    }
    tformat_st_resume(w, 0, 0);
    if (n)
        tformat_st_metadata(w, kv, n);
    free(kv);
    strmap_free(keys);
    return n;
}

/* ---- planning --------------------------------------------------------------- */

/* The bytes sent for a tensor: which file, where, and how they are gathered. */
static void hash_item(uint64_t *h, const struct fetch_tensor *it)
{
    const struct slice_plan *plan = &it->plan;
    char etag[REG_ETAG_MAX];
    hash_both(h, it->name, it->name_len + 1);
    reg_file_etag(it->t->file, etag);
    hash_both(h, etag, strlen(etag) + 1);
    uint64_t v[3] = {it->t->t->begin, (uint64_t)it->t->t->dtype, plan->ndim};
    for (int i = 0; i < 3; i++)
        hash_both(h, &v[i], sizeof(v[i]));
    hash_both(h, plan->shape, plan->ndim * sizeof(plan->shape[0]));
    uint64_t grid[3] = {plan->base, plan->run_bytes, plan->nbytes};
    hash_both(h, grid, sizeof(grid));
    hash_both(h, plan->outer_count, plan->n_outer * sizeof(plan->outer_count[0]));
    hash_both(h, plan->outer_stride, plan->n_outer * sizeof(plan->outer_stride[0]));
}

/* The closing of the header: '}' (after a '{' when it has no entry) and the
 * spaces that make the prefix a multiple of 8 bytes. */
size_t fetch_plan_header_end(const struct fetch_plan *p, char out[16])
{
    size_t n = 0;
    if (!p->has_meta && !p->n_tensors)
        out[n++] = '{';
    out[n++] = '}';
    while ((ST_PREFIX_LEN + p->json_len + n) % 8)
        out[n++] = ' ';
    return n;
}

/* Walks every tensor once: checks, sizes, marks, hash. */
static int plan_all(struct fetch_plan *p, const struct fetch_plan_limits *lim,
                    struct fetch_checker *ck, uint64_t *h)
{
    struct fetch_cursor *c = p->cur;
    size_t n = n_items(p);
    uint64_t at = ST_PREFIX_LEN + p->meta_len, doff = 0;
    for (size_t k = 0; k < n; k++) {
        if (k % FETCH_MARK_EVERY == 0)
            p->marks[p->n_marks++] = (struct fetch_mark){.item = k, .at = at, .doff = doff};
        int rc = fetch_plan_item(p, k, &c->it, ck);
        if (rc < 0)
            return rc;
        uint64_t end;
        if (u64_add(doff, c->it.plan.nbytes, &end) < 0 || (lim->max_bytes && end > lim->max_bytes))
            return fail(ck, ST_ERR_LIMIT, "the answer would hold more than %" PRIu64
                        " bytes of tensor data (max_fetch_bytes); ask for fewer tensors or split "
                        "them", lim->max_bytes);
        fetch_plan_entry(&c->text, (size_t)p->has_meta + k, doff, &c->it);
        if (c->text.sb.failed)
            return fail(ck, ST_ERR_NO_MEMORY, "not enough memory to plan the answer's header");
        at += c->text.sb.len;
        doff = end;
        if (c->it.plan.nbytes) {
            size_t f = (size_t)(c->it.t->file - p->m->files);
            p->used[f / 8] |= (unsigned char)(1u << (f % 8));
        }
        hash_item(h, &c->it);
    }
    p->n_tensors = n;
    p->json_len = at - ST_PREFIX_LEN;
    p->data_len = doff;
    char end[16];
    p->prefix_len = (size_t)(at + fetch_plan_header_end(p, end));
    if (p->prefix_len - ST_PREFIX_LEN > ST_MAX_HEADER_LEN)
        return fail(ck, ST_ERR_LIMIT, "the answer's header would be %zu bytes, more than "
                    "the %llu a safetensors file may have; ask for fewer tensors",
                    p->prefix_len - ST_PREFIX_LEN, ST_MAX_HEADER_LEN);
    if (lim->max_bytes && p->data_len + p->prefix_len > lim->max_bytes)
        return fail(ck, ST_ERR_LIMIT, "the answer would be %" PRIu64 " bytes, more than "
                    "%" PRIu64 " (max_fetch_bytes)", p->data_len + p->prefix_len, lim->max_bytes);
    return 0;
}

int fetch_plan_build(const struct reg_model *m, struct fetch_req *req,
                     const struct fetch_plan_limits *lim, struct fetch_plan **out,
                     struct st_error *err)
{
    struct fetch_plan *p = xcalloc(1, sizeof(*p));
    p->m = m;
    p->elsewhere = lim->elsewhere;
    p->req = *req;
    memset(req, 0, sizeof(*req));
    /* What the plan keeps is allocated before what planning uses for a
     * while (the name set), so freeing that leaves one hole the next plan
     * reuses, rather than holes around a kept piece that the heap cannot. */
    p->cur = xcalloc(1, sizeof(*p->cur));
    p->used = xcalloc(m->n_files / 8 + 1, 1);
    p->marks = xmalloc((n_items(p) / FETCH_MARK_EVERY + 1) * sizeof(*p->marks));
    strbuf_reserve(&p->cur->text.sb, 4096);
    /* A model's tensor names are unique (the registry checked): only a list
     * can name one twice. */
    struct fetch_checker ck = {.names = p->req.all ? NULL : strmap_new(p->req.n_items),
                         .glob_budget = FETCH_GLOB_BUDGET, .err = err};
    uint64_t h[2] = {HASH_FNV_SEED, 0x84222325cbf29ce4ULL};

    /* The model's files (their ETags cover the metadata too) and its name. */
    hash_both(h, m->name, strlen(m->name) + 1);
    for (size_t i = 0; i < m->n_files; i++) {
        char etag[REG_ETAG_MAX];
        reg_file_etag(&m->files[i], etag);
        hash_both(h, etag, strlen(etag) + 1);
        p->weak |= !reg_file_hashed(&m->files[i]); /* reg_file_etag is weak */
        if (m->files[i].st.mtime_ns > p->mtime_ns)
            p->mtime_ns = m->files[i].st.mtime_ns;
    }
    p->has_meta = fetch_plan_metadata(m, &p->cur->text, h) > 0;
    p->meta_len = p->cur->text.sb.len;
    int rc = p->cur->text.sb.failed
                 ? fail(&ck, ST_ERR_NO_MEMORY, "not enough memory to plan the answer's header")
                 : plan_all(p, lim, &ck, h);
    strmap_free(ck.names);
    if (rc < 0) {
        fetch_plan_free(p);
        *out = NULL;
        return rc;
    }
    p->hash[0] = h[0];
    p->hash[1] = h[1];
    *out = p;
    return 0;
}

uint64_t fetch_plan_size(const struct fetch_plan *p)
{
    return p->prefix_len + p->data_len;
}

int fetch_plan_uses(const struct fetch_plan *p, size_t file)
{
    return file < p->m->n_files && (p->used[file / 8] >> (file % 8) & 1);
}

void fetch_plan_read_through(struct fetch_plan *p, const int *fds)
{
    p->fds = fds;
}

int fetch_plan_files_unchanged(const struct fetch_plan *p)
{
    for (size_t f = 0; f < p->m->n_files; f++)
        if (fetch_plan_uses(p, f) && !fetch_plan_unchanged(p, &p->m->files[f]))
            return 0;
    return 1;
}

void fetch_plan_free(struct fetch_plan *p)
{
    if (!p)
        return;
    fetch_req_free(&p->req);
    free(p->marks);
    free(p->used);
    if (p->cur)
        strbuf_release(&p->cur->text.sb);
    free(p->cur);
    free(p);
}
