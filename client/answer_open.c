/* answer_open: see answer_open.h. The text is walked once more (answer_read
 * has proven it JSON within the limits), its tables read into the model's,
 * then every number checked against the others. */
#include "answer_open.h"

#include <stdlib.h>
#include <string.h>

#include "answer_int.h"
#include "client_int.h"
#include "cmem.h"
#include "dtype.h"
#include "split_bounds.h"
#include "util.h"

#define MAX_DIMS 64       /* a tensor's dimensions, at most */

/* The current string, decoded into a new NUL-terminated block (NULL when
 * out of memory). */
static char *decode_string(const struct json_scan *s)
{
    char *p = s->str_len < SIZE_MAX ? cmem_malloc(s->str_len + 1) : NULL;
    if (p) {
        json_scan_decode(s, p, s->str_len);
        p[s->str_len] = '\0';
    }
    return p;
}

/* Fields of an allocation or a tensor found well-formed, checked once the
 * whole answer is read (the old reader's order, so the first error named
 * is the same). */
enum {
    HAVE_FD_INDEX = 1 << 0, HAVE_BYTE_SIZE = 1 << 1, HAVE_ALLOC_SIZE = 1 << 2,
    HAVE_CHECKSUM = 1 << 3,
    HAVE_ALLOC = 1 << 4, HAVE_OFFSET = 1 << 5, HAVE_NBYTES = 1 << 6, HAVE_SHAPE = 1 << 7,
    BAD_RANK = 1 << 8,         /* more than MAX_DIMS dimensions */
    BAD_SHAPE = 1 << 9,        /* a dimension that is no non-negative integer */
    BAD_CHECKSUM = 1 << 10,    /* a checksum that is not 16 hex digits */
    HAVE_PART = 1 << 11,       /* a "part" object: the tensor was cut */
    BAD_PART = 1 << 12,        /* one without its four non-negative integers */
};

struct open_reader;

/* A table being read, the allocations or the tensors: the model's rows,
 * and per row what was found well-formed and the index it names (fd_index,
 * alloc), kept for the checks at the end. */
struct table {
    void **rows;                /* &m->allocs or &m->tensors */
    size_t *n;                  /* &m->n_allocs or &m->n_tensors */
    size_t row_size, cap;
    unsigned *flags;            /* HAVE_* per row */
    uint64_t *index;
    json_scan_fn member;           /* reads one member of a row */
    struct open_reader *r;
};

struct open_reader {
    struct tensord_model *m;
    int have_generation, have_allocs, have_tensors;
    int bad_split;              /* world or rank not a non-negative integer, split no object */
    unsigned part_fields;       /* of the part being read: which of its four were found */
    uint64_t part[4];           /* ... dim, start, stop, length */
    struct table allocs, tensors;
    size_t n_dims;              /* of the tensor being read ... */
    int64_t dims[MAX_DIMS];     /* ... and its dimensions */
};

/* Makes room for one more row, zeroed. */
static int grow(struct table *t)
{
    size_t cap = t->cap ? t->cap * 2 : 16;
    if (*t->n < t->cap)
        return 0;
    void *rows = cap < SIZE_MAX / t->row_size ? cmem_realloc(*t->rows, cap * t->row_size) : NULL;
    if (rows)
        *t->rows = rows;
    unsigned *flags = rows ? cmem_realloc(t->flags, cap * sizeof(*flags)) : NULL;
    if (flags)
        t->flags = flags;
    uint64_t *index = flags ? cmem_realloc(t->index, cap * sizeof(*index)) : NULL;
    if (!index)
        return -1;
    t->index = index;
    memset((char *)rows + t->cap * t->row_size, 0, (cap - t->cap) * t->row_size);
    memset(flags + t->cap, 0, (cap - t->cap) * sizeof(*flags));
    memset(index + t->cap, 0, (cap - t->cap) * sizeof(*index));
    t->cap = cap;
    return 0;
}

/* One row of a table: an object read with the table's member function. */
static int table_row(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct table *t = ctx;
    (void)key;
    if (grow(t) < 0)
        return json_scan_fail(s, JSON_ERR_NO_MEMORY);
    (*t->n)++;
    if (s->tok != '{')
        return answer_skip(s, depth);
    return json_scan_each(s, depth, ANSWER_MAX_DEPTH, t->member, t->r);
}

/* A string member: a copy (of "" when the value is no string). */
static int read_name(struct json_scan *s, unsigned depth, char **dst)
{
    int rc = 0;
    free(*dst); /* a repeated key is refused, but never leak */
    *dst = s->tok == JSON_TOK_STRING ? decode_string(s) : cmem_strdup("");
    if (s->tok != JSON_TOK_STRING)
        rc = answer_skip(s, depth);
    return *dst ? rc : json_scan_fail(s, JSON_ERR_NO_MEMORY);
}

static int alloc_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct open_reader *r = ctx;
    size_t i = r->m->n_allocs - 1;
    struct tensord_alloc *a = &r->m->allocs[i];
    unsigned *f = &r->allocs.flags[i];
    int rc = 0;
    if (strcmp(key, "file") == 0)
        return read_name(s, depth, (char **)&a->file);
    if (strcmp(key, "fd_index") == 0)
        *f |= answer_read_uint(s, depth, &r->allocs.index[i], &rc) ? HAVE_FD_INDEX : 0;
    else if (strcmp(key, "byte_size") == 0)
        *f |= answer_read_uint(s, depth, &a->byte_size, &rc) ? HAVE_BYTE_SIZE : 0;
    else if (strcmp(key, "alloc_size") == 0)
        *f |= answer_read_uint(s, depth, &a->alloc_size, &rc) ? HAVE_ALLOC_SIZE : 0;
    else if (strcmp(key, "checksum") == 0)
        *f |= answer_read_checksum(s, &a->checksum) == 0 ? HAVE_CHECKSUM : BAD_CHECKSUM;
    else
        rc = answer_skip(s, depth);
    return rc;
}

static int dim_element(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct open_reader *r = ctx;
    unsigned *f = &r->tensors.flags[r->m->n_tensors - 1];
    uint64_t v;
    int rc;
    (void)key;
    if (!answer_read_uint(s, depth, &v, &rc))
        *f |= BAD_SHAPE;
    else if (r->n_dims == MAX_DIMS)
        *f |= BAD_RANK;
    else
        r->dims[r->n_dims++] = (int64_t)v; /* an int64 token: at most INT64_MAX */
    return rc;
}

static int read_shape(struct json_scan *s, unsigned depth, struct open_reader *r)
{
    struct tensord_tensor *t = &r->m->tensors[r->m->n_tensors - 1];
    if (s->tok != '[')
        return answer_skip(s, depth);
    r->n_dims = 0;
    if (json_scan_each(s, depth, ANSWER_MAX_DEPTH, dim_element, r) != 0)
        return -1;
    int64_t *dims = cmem_calloc(r->n_dims, sizeof(*dims));
    if (!dims)
        return json_scan_fail(s, JSON_ERR_NO_MEMORY);
    memcpy(dims, r->dims, r->n_dims * sizeof(*dims));
    t->shape = dims;
    t->ndim = (int)r->n_dims;
    r->tensors.flags[r->m->n_tensors - 1] |= HAVE_SHAPE;
    return 0;
}

/* One member of a tensor's "part": dim, start, stop, length. */
static int part_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    static const char *const keys[] = {"dim", "start", "stop", "length"};
    struct open_reader *r = ctx;
    int rc;
    for (unsigned k = 0; k < ARRAY_LEN(keys); k++)
        if (strcmp(key, keys[k]) == 0)
            return answer_read_uint(s, depth, &r->part[k], &rc) ? (r->part_fields |= 1u << k, rc) : rc;
    return answer_skip(s, depth);
}

static int read_part(struct json_scan *s, unsigned depth, struct open_reader *r)
{
    size_t i = r->m->n_tensors - 1;
    struct tensord_tensor *t = &r->m->tensors[i];
    r->part_fields = 0;
    if (s->tok != '{' || json_scan_each(s, depth, ANSWER_MAX_DEPTH, part_member, r) != 0) {
        r->tensors.flags[i] |= BAD_PART;
        return s->tok == '{' ? -1 : answer_skip(s, depth);
    }
    if (r->part_fields != 15 || r->part[0] >= MAX_DIMS) {
        r->tensors.flags[i] |= BAD_PART;
        return 0;
    }
    t->part_dim = (int)r->part[0];
    t->part_start = (int64_t)r->part[1]; /* int64 tokens: at most INT64_MAX */
    t->part_stop = (int64_t)r->part[2];
    t->part_length = (int64_t)r->part[3];
    r->tensors.flags[i] |= HAVE_PART;
    return 0;
}

static int tensor_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct open_reader *r = ctx;
    size_t i = r->m->n_tensors - 1;
    struct tensord_tensor *t = &r->m->tensors[i];
    unsigned *f = &r->tensors.flags[i];
    int rc = 0;
    if (strcmp(key, "name") == 0)
        return read_name(s, depth, (char **)&t->name);
    if (strcmp(key, "dtype") == 0)
        return read_name(s, depth, (char **)&t->dtype);
    if (strcmp(key, "shape") == 0)
        return read_shape(s, depth, r);
    if (strcmp(key, "part") == 0)
        return read_part(s, depth, r);
    if (strcmp(key, "alloc") == 0)
        *f |= answer_read_uint(s, depth, &r->tensors.index[i], &rc) ? HAVE_ALLOC : 0;
    else if (strcmp(key, "offset") == 0)
        *f |= answer_read_uint(s, depth, &t->offset, &rc) ? HAVE_OFFSET : 0;
    else if (strcmp(key, "nbytes") == 0)
        *f |= answer_read_uint(s, depth, &t->nbytes, &rc) ? HAVE_NBYTES : 0;
    else
        rc = answer_skip(s, depth);
    return rc;
}

static int open_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct open_reader *r = ctx;
    struct tensord_model *m = r->m;
    uint64_t v;
    int rc = 0;
    if (strcmp(key, "model") == 0)
        return read_name(s, depth, &m->name);
    if (strcmp(key, "backend") == 0)
        return read_name(s, depth, &m->backend);
    if (strcmp(key, "device") == 0)
        return read_name(s, depth, &m->device);
    if (strcmp(key, "device_uuid") == 0)
        return read_name(s, depth, &m->uuid);
    if (strcmp(key, "device_index") == 0) {
        if (answer_read_uint(s, depth, &v, &rc) && v <= INT32_MAX)
            m->dev_index = (int)v;
    } else if (strcmp(key, "generation") == 0) {
        r->have_generation = answer_read_uint(s, depth, &m->generation, &rc);
    } else if (strcmp(key, "world") == 0 || strcmp(key, "rank") == 0) {
        r->bad_split |= !answer_read_uint(s, depth, key[0] == 'w' ? &m->world : &m->rank, &rc);
    } else if (strcmp(key, "split") == 0) {
        size_t start = s->start;
        r->bad_split |= s->tok != '{';
        if ((rc = answer_skip(s, depth)) == 0 && s->tok == '}') {
            free(m->split);
            if (!(m->split = cmem_malloc(s->pos - start + 1)))
                return json_scan_fail(s, JSON_ERR_NO_MEMORY);
            memcpy(m->split, s->buf + start, s->pos - start);
            m->split[s->pos - start] = '\0';
        }
    } else if (strcmp(key, "allocations") == 0 && s->tok == '[') {
        r->have_allocs = 1;
        rc = json_scan_each(s, depth, ANSWER_MAX_DEPTH, table_row, &r->allocs);
    } else if (strcmp(key, "tensors") == 0 && s->tok == '[') {
        r->have_tensors = 1;
        rc = json_scan_each(s, depth, ANSWER_MAX_DEPTH, table_row, &r->tensors);
    } else {
        rc = answer_skip(s, depth);
    }
    return rc;
}

/* Whether t's dtype and shape make exactly its nbytes (F4 and F6: in whole
 * bytes), counted in bits with every product checked for overflow: a DLPack
 * tensor is built from the shape, so a shape bigger than the bytes the
 * daemon vouched for would reach past them. 0 when they agree; else -1
 * with err. */
static int check_tensor_size(const struct tensord_tensor *t, char *err, size_t errlen)
{
    enum dtype dt = dtype_from_name(t->dtype, strlen(t->dtype));
    uint64_t bits;
    if (dt == DT_INVALID)
        return tdc_seterr(err, errlen, "tensor \"%s\" in the open answer has an unknown dtype "
                          "\"%s\"", t->name, t->dtype), -1;
    bits = dtype_info(dt)->bits;
    for (int d = 0; d < t->ndim; d++) {
        if (u64_mul(bits, (uint64_t)t->shape[d], &bits) < 0)
            return tdc_seterr(err, errlen, "tensor \"%s\" in the open answer: its shape "
                              "overflows", t->name), -1;
    }
    if (bits % 8 != 0 || bits / 8 != t->nbytes)
        return tdc_seterr(err, errlen, "tensor \"%s\" in the open answer: a %s tensor of its "
                          "shape is %llu bits, not its nbytes %llu", t->name, t->dtype,
                          (unsigned long long)bits, (unsigned long long)t->nbytes), -1;
    return 0;
}

/* A partition's tensor: its part must be what the split gives its rank
 * (core/format/split_bounds.h, the daemon's own rule), and its shape the part's. A
 * whole model's tensors have no part. 0, or -1 with err. */
static int check_part(const struct tensord_model *m, const struct tensord_tensor *t,
                      unsigned flags, char *err, size_t errlen)
{
    uint64_t lo, hi;
    if (flags & BAD_PART)
        return tdc_seterr(err, errlen, "malformed part of tensor %s in the open answer",
                          t->name), -1;
    if (!(flags & HAVE_PART))
        return 0;
    if (m->world < 2 || t->part_dim >= t->ndim || t->part_start > t->part_stop ||
        t->part_stop > t->part_length || t->shape[t->part_dim] != t->part_stop - t->part_start)
        return tdc_seterr(err, errlen, "tensor %s in the open answer: its part (dim %d, "
                          "[%lld, %lld) of %lld) does not fit its shape or the model's world",
                          t->name, t->part_dim, (long long)t->part_start,
                          (long long)t->part_stop, (long long)t->part_length), -1;
    fetch_split_bounds((uint64_t)t->part_length, m->world, m->rank, &lo, &hi);
    if ((uint64_t)t->part_start != lo || (uint64_t)t->part_stop != hi)
        return tdc_seterr(err, errlen, "tensor %s in the open answer: part [%lld, %lld) of "
                          "dim %d is not rank %llu of %llu's [%llu, %llu) of its %lld",
                          t->name, (long long)t->part_start, (long long)t->part_stop,
                          t->part_dim, (unsigned long long)m->rank,
                          (unsigned long long)m->world, (unsigned long long)lo,
                          (unsigned long long)hi, (long long)t->part_length), -1;
    return 0;
}

/* The checks that need the whole answer, in the order the fields are
 * described in docs/GPU.md: the model, its allocations, its tensors. */
static int check_open(struct open_reader *r, size_t n_fds, char *err, size_t errlen)
{
    struct tensord_model *m = r->m;
    const unsigned alloc_fields = HAVE_FD_INDEX | HAVE_BYTE_SIZE | HAVE_ALLOC_SIZE;
    const unsigned tensor_fields = HAVE_ALLOC | HAVE_OFFSET | HAVE_NBYTES | HAVE_SHAPE;
    if (!r->have_generation || !r->have_allocs || !r->have_tensors)
        return tdc_seterr(err, errlen, "malformed open answer (generation, allocations, tensors)"),
               -1;
    if (r->bad_split || m->world == 0 || m->world > INT32_MAX || m->rank >= m->world ||
        (m->world > 1) != (m->split != NULL))
        return tdc_seterr(err, errlen, "malformed open answer (world %llu, rank %llu, %s)",
                          (unsigned long long)m->world, (unsigned long long)m->rank,
                          m->split ? "a split" : "no split"), -1;
    m->is_cuda = strcmp(m->backend, "cuda") == 0;
    if (!m->is_cuda && strcmp(m->backend, "host") != 0)
        return tdc_seterr(err, errlen, "unknown backend \"%s\"", m->backend), -1;
    if (m->n_allocs != n_fds)
        return tdc_seterr(err, errlen, "the answer lists %zu allocations but carried %zu "
                          "descriptors", m->n_allocs, n_fds), -1;
    for (size_t i = 0; i < m->n_allocs; i++) {
        const struct tensord_alloc *a = &m->allocs[i];
        if ((r->allocs.flags[i] & alloc_fields) != alloc_fields || r->allocs.index[i] != i ||
            (r->allocs.flags[i] & BAD_CHECKSUM) || a->byte_size > a->alloc_size ||
            a->alloc_size == 0)
            return tdc_seterr(err, errlen, "malformed allocation %zu in the open answer", i), -1;
        m->allocs[i].has_checksum = (r->allocs.flags[i] & HAVE_CHECKSUM) != 0;
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        struct tensord_tensor *t = &m->tensors[i];
        uint64_t end;
        uint64_t alloc = r->tensors.index[i];
        if ((r->tensors.flags[i] & tensor_fields) != tensor_fields ||
            (r->tensors.flags[i] & BAD_RANK) || alloc >= m->n_allocs ||
            u64_add(t->offset, t->nbytes, &end) < 0 || end > m->allocs[alloc].byte_size)
            return tdc_seterr(err, errlen, "malformed tensor %zu in the open answer", i), -1;
        if (r->tensors.flags[i] & BAD_SHAPE)
            return tdc_seterr(err, errlen, "malformed shape of tensor %s", t->name), -1;
        if (!(r->tensors.flags[i] & (HAVE_PART | BAD_PART)))
            t->part_dim = -1; /* held whole */
        if (check_tensor_size(t, err, errlen) != 0 ||
            check_part(m, t, r->tensors.flags[i], err, errlen) != 0)
            return -1;
        t->alloc = (uint32_t)alloc;
    }
    return 0;
}

/* Strings the answer may leave out read as "", as they always did. */
static int default_names(struct tensord_model *m)
{
    char **names[] = {&m->name, &m->backend, &m->device, &m->uuid};
    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        if (!*names[i] && !(*names[i] = cmem_strdup("")))
            return -1;
    for (size_t i = 0; i < m->n_allocs; i++)
        if (!m->allocs[i].file && !(m->allocs[i].file = cmem_strdup("")))
            return -1;
    for (size_t i = 0; i < m->n_tensors; i++) {
        struct tensord_tensor *t = &m->tensors[i];
        if ((!t->name && !(t->name = cmem_strdup(""))) ||
            (!t->dtype && !(t->dtype = cmem_strdup(""))))
            return -1;
    }
    return 0;
}

int answer_open(const char *body, size_t len, size_t n_fds, struct tensord_model *m, char *err,
                size_t errlen)
{
    struct json_scan s;
    struct open_reader r = {.m = m};
    m->world = 1;
    r.allocs = (struct table){.rows = (void **)&m->allocs, .n = &m->n_allocs,
                              .row_size = sizeof(*m->allocs), .member = alloc_member, .r = &r};
    r.tensors = (struct table){.rows = (void **)&m->tensors, .n = &m->n_tensors,
                               .row_size = sizeof(*m->tensors), .member = tensor_member, .r = &r};
    int rc = -1;
    if (answer_scan(&s, body, len, open_member, &r, err, errlen) != 0)
        goto out;
    if (default_names(m) < 0 || !(m->cow = cmem_calloc(m->n_allocs, sizeof(*m->cow)))) {
        tdc_seterr(err, errlen, "out of memory reading the open answer");
        goto out;
    }
    rc = check_open(&r, n_fds, err, errlen);
out:
    free(r.allocs.flags);
    free(r.allocs.index);
    free(r.tensors.flags);
    free(r.tensors.index);
    return rc;
}

void answer_open_free(struct tensord_model *m)
{
    for (size_t i = 0; m->allocs && i < m->n_allocs; i++)
        free((char *)m->allocs[i].file);
    for (size_t i = 0; m->tensors && i < m->n_tensors; i++) {
        free((char *)m->tensors[i].name);
        free((char *)m->tensors[i].dtype);
        free((int64_t *)m->tensors[i].shape);
    }
    free(m->cow);
    free(m->allocs);
    free(m->tensors);
    free(m->name);
    free(m->backend);
    free(m->device);
    free(m->uuid);
    free(m->split);
}
