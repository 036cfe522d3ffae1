/* st_entries: a recursive-descent reader of the header's grammar (one
 * object of tensor entries and __metadata__) over json_scan's tokens.
 *
 * The rules are the ones st_header checked on a jansson tree, in the same
 * order, so the first error reported is the same: jansson read the whole
 * text before any entry was looked at, so here an entry's error is set
 * aside (the first of __metadata__'s, the first of the tensors') while the
 * rest of the text is still read for JSON errors, and comes out only once
 * the text is known to be JSON. A tensor entry's fields may come in any
 * order, so what its checks need is kept in a struct entry until it ends.
 *
 * The arena is [tensors][dims][metadata][strings], sized from the pre-pass's
 * counts; a name, key or value is decoded straight to its place in it. */
#include "st_header_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_scan.h"
#include "nameset.h"
#include "strmap.h"
#include "util.h"

#define NONE ((size_t)-1)

/* A JSON value, as much of it as a message needs. */
#define DESC_KEEP 40 /* string bytes kept: str_excerpt reads ST_NAME_SHOW / 2 + 1 */
struct desc {
    int tok;            /* a json_scan token; '{' or '[' for a container */
    int64_t integer;
    double real;
    size_t len;         /* a string's whole length; str holds its first DESC_KEEP bytes */
    char str[DESC_KEEP];
};

/* A JSON value described for a message: `the string "x"`, `-1`, `1.5`, `an array`. */
static const char *describe(const struct desc *v, char *out, size_t outlen)
{
    char tmp[ST_NAME_SHOW + 4];
    switch (v->tok) {
    case '{': return "an object";
    case '[': return "an array";
    case JSON_TOK_TRUE: return "true";
    case JSON_TOK_FALSE: return "false";
    case JSON_TOK_NULL: return "null";
    case JSON_TOK_INTEGER:
        snprintf(out, outlen, "%" PRId64, v->integer);
        return out;
    case JSON_TOK_REAL:
        snprintf(out, outlen, "%.17g", v->real);
        return out;
    case JSON_TOK_STRING:
        snprintf(out, outlen, "the string \"%s\"",
                 str_excerpt(v->str, v->len, ST_NAME_SHOW / 2, tmp));
        return out;
    }
    return "a value";
}

/* shape or data_offsets as read. */
struct uints {
    struct desc whole;    /* the value itself; tok is '[' for an array */
    size_t n;             /* elements */
    size_t bad;           /* index of the first that is not an integer >= 0, or NONE */
    struct desc bad_desc;
};

enum { HAS_DTYPE = 1, HAS_SHAPE = 2, HAS_OFFSETS = 4 };

/* One tensor entry as read, for check_entry. */
struct entry {
    struct desc whole;    /* the entry; tok is '{' for an object */
    unsigned has;         /* HAS_* */
    const char *unknown;  /* the first field that is none of the three, or NULL */
    size_t unknown_len;
    struct desc dtype;
    struct uints shape, offsets;
    uint64_t off[2];
};

/* The rules for one tensor entry, in the order they were always checked.
 * Sizes and offsets against each other are st_header's offset walk. */
static int check_entry(const char *file, struct st_error *err, const char *name,
                       size_t nlen, const struct entry *e, enum dtype *dt)
{
    char nm[ST_NAME_SHOW + 4], d[ST_NAME_SHOW * 2], k[ST_NAME_SHOW + 4];
#define NM str_excerpt(name, nlen, ST_NAME_SHOW, nm) /* quoted only once there is an error */
    if (e->whole.tok != '{')
        return st_error_fail(err, ST_ERR_TENSOR_INFO,
                             "%s: tensor \"%s\": entry must be an object, got %s", file, NM,
                             describe(&e->whole, d, sizeof(d)));
    const char *missing = !(e->has & HAS_DTYPE)     ? "dtype"
                          : !(e->has & HAS_SHAPE)   ? "shape"
                          : !(e->has & HAS_OFFSETS) ? "data_offsets"
                                                    : NULL;
    if (missing)
        return st_error_fail(err, ST_ERR_TENSOR_INFO, "%s: tensor \"%s\": \"%s\" is missing",
                             file, NM, missing);
    if (e->unknown)
        return st_error_fail(err, ST_ERR_UNKNOWN_FIELD,
                             "%s: tensor \"%s\": unknown field \"%s\" (only dtype, shape "
                             "and data_offsets are allowed)",
                             file, NM, str_excerpt(e->unknown, e->unknown_len, ST_NAME_SHOW, k));
    if (e->dtype.tok != JSON_TOK_STRING)
        return st_error_fail(err, ST_ERR_TENSOR_INFO,
                             "%s: tensor \"%s\": dtype must be a string, got %s", file, NM,
                             describe(&e->dtype, d, sizeof(d)));
    *dt = e->dtype.len <= DESC_KEEP ? dtype_from_name(e->dtype.str, e->dtype.len) : DT_INVALID;
    if (*dt == DT_INVALID)
        return st_error_fail(err, ST_ERR_DTYPE, "%s: tensor \"%s\": unknown dtype %s", file, NM,
                             describe(&e->dtype, d, sizeof(d)));
    if (e->shape.whole.tok != '[')
        return st_error_fail(err, ST_ERR_SHAPE,
                             "%s: tensor \"%s\": shape must be an array of unsigned integers, got %s",
                             file, NM, describe(&e->shape.whole, d, sizeof(d)));
    if (e->shape.n > ST_MAX_NDIM)
        return st_error_fail(err, ST_ERR_SHAPE,
                             "%s: tensor \"%s\": shape has %zu dimensions, more than the %d allowed",
                             file, NM, e->shape.n, ST_MAX_NDIM);
    if (e->shape.bad != NONE)
        return st_error_fail(err, ST_ERR_SHAPE,
                             "%s: tensor \"%s\": shape[%zu] must be an unsigned integer, got %s",
                             file, NM, e->shape.bad, describe(&e->shape.bad_desc, d, sizeof(d)));
    if (e->offsets.whole.tok != '[' || e->offsets.n != 2) {
        char n[32] = "";
        if (e->offsets.whole.tok == '[')
            snprintf(n, sizeof(n), " of %zu entries", e->offsets.n);
        return st_error_fail(err, ST_ERR_OFFSETS,
                             "%s: tensor \"%s\": data_offsets must be an array of two unsigned "
                             "integers, got %s%s",
                             file, NM, describe(&e->offsets.whole, d, sizeof(d)), n);
    }
    if (e->offsets.bad != NONE)
        return st_error_fail(err, ST_ERR_OFFSETS,
                             "%s: tensor \"%s\": data_offsets[%zu] must be an unsigned integer, "
                             "got %s",
                             file, NM, e->offsets.bad, describe(&e->offsets.bad_desc, d, sizeof(d)));
    if (e->off[0] > e->off[1])
        return st_error_fail(err, ST_ERR_OFFSETS,
                             "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                             "] begin after they end",
                             file, NM, e->off[0], e->off[1]);
    return 0;
#undef NM
}

/* One read: the scanner, the free room left in each region of the arena,
 * and the first entry errors, which wait until all the JSON has been read. */
struct reader {
    struct json_scan js;
    const char *file;
    struct st_header *h;
    size_t max_tensors, max_metadata;
    uint64_t *dims, *dims_end;    /* next free dimension */
    char *str, *str_end;          /* next free string byte */
    struct nameset names;         /* top-level keys but __metadata__, for duplicates */
    int seen_metadata;
    struct st_error meta_err;     /* first __metadata__ error: reported before any tensor's */
    struct st_error tensor_err;   /* first tensor error in file order */
};

/* The pre-pass counted every token that leads to a write into the arena, so
 * a region running out means that counting is wrong: stop before writing. */
#define ARENA_ROOM(ok)                                                           \
    do {                                                                         \
        if (!(ok))                                                               \
            abort();                                                             \
    } while (0)

/* Decodes the current string, NUL-terminated, at the free end of the string
 * region without claiming it; keep_string() claims it. */
static char *peek_string(struct reader *r, size_t *len)
{
    size_t n = r->js.str_len;
    ARENA_ROOM(n < (size_t)(r->str_end - r->str));
    json_scan_decode(&r->js, r->str, n);
    r->str[n] = '\0';
    *len = n;
    return r->str;
}

static void keep_string(struct reader *r, size_t len)
{
    r->str += len + 1;
}

/* Reads the value at the current token (at `depth` as jansson counted) and
 * describes it in *d when d is not NULL. */
static int take_value(struct reader *r, unsigned depth, struct desc *d)
{
    struct json_scan *js = &r->js;
    if (json_scan_value_start(js) != 0)
        return -1;
    if (d) {
        d->tok = js->tok;
        d->integer = js->integer;
        d->real = js->real;
        if (js->tok == JSON_TOK_STRING)
            d->len = json_scan_decode(js, d->str, sizeof(d->str));
    }
    if (js->tok == '{' || js->tok == '[')
        return json_scan_value(js, depth, JSON_SCAN_MAX_DEPTH);
    return 0;
}

/* shape or data_offsets: stores the first `keep` elements in out[] (which
 * has room up to out_end) and notes the first that is no unsigned integer. */
static int take_uints(struct reader *r, struct uints *u, uint64_t *out, const uint64_t *out_end,
                      size_t keep)
{
    struct json_scan *js = &r->js;
    if (js->tok != '[')
        return take_value(r, 3, &u->whole);
    u->whole.tok = '[';
    if (json_scan_next(js) == ']')
        return 0;
    for (;;) {
        if (js->tok == JSON_TOK_EOF)
            return json_scan_fail(js, JSON_ERR_ARRAY_END);
        if (js->tok == JSON_TOK_INTEGER && js->integer >= 0) {
            if (u->n < keep) {
                ARENA_ROOM(out + u->n < out_end);
                out[u->n] = (uint64_t)js->integer;
            }
        } else {
            if (take_value(r, 4, u->bad == NONE ? &u->bad_desc : NULL) != 0)
                return -1;
            if (u->bad == NONE)
                u->bad = u->n;
        }
        u->n++;
        int more = json_scan_more(js, ']');
        if (more <= 0)
            return more;
    }
}

static unsigned field_of(const char *key, size_t len)
{
    if (len == 5 && memcmp(key, "dtype", 5) == 0)
        return HAS_DTYPE;
    if (len == 5 && memcmp(key, "shape", 5) == 0)
        return HAS_SHAPE;
    if (len == 12 && memcmp(key, "data_offsets", 12) == 0)
        return HAS_OFFSETS;
    return 0;
}

/* Checks an entry just read: a valid one takes the next tensor slot and
 * keeps its dimensions; of the invalid ones only the first one's error. */
static void add_tensor(struct reader *r, const char *name, size_t nlen, const struct entry *e)
{
    enum dtype dt;
    if (r->tensor_err.code != ST_OK ||
        check_entry(r->file, &r->tensor_err, name, nlen, e, &dt) != 0)
        return;
    ARENA_ROOM(r->h->n_tensors < r->max_tensors);
    struct st_tensor *t = &r->h->tensors[r->h->n_tensors++];
    t->name = name;
    t->name_len = nlen;
    t->dtype = dt;
    t->ndim = (uint32_t)e->shape.n;
    t->shape = r->dims;
    t->nelems = 0;
    t->begin = e->off[0];
    t->end = e->off[1];
    r->dims += e->shape.n;
}

/* A tensor entry, from its value's first token. The three fields are told
 * apart by a bit each; unknown ones (an error, but a duplicate among them
 * is a JSON error first) go into a map of their own. */
static int read_tensor(struct reader *r, const char *name, size_t nlen)
{
    struct json_scan *js = &r->js;
    struct strmap *unknown = NULL;
    struct entry e;
    memset(&e, 0, sizeof(e));
    e.shape.bad = e.offsets.bad = NONE;
    if (js->tok != '{') {
        if (take_value(r, 2, &e.whole) != 0)
            return -1;
        add_tensor(r, name, nlen, &e);
        return 0;
    }
    e.whole.tok = '{';
    int more = json_scan_next(js) != '}';
    while (more) {
        size_t klen;
        if (json_scan_key(js) != 0)
            goto fail;
        const char *key = peek_string(r, &klen);
        unsigned field = field_of(key, klen);
        if (field && (e.has & field)) {
            json_scan_fail(js, JSON_ERR_DUPLICATE_KEY);
            goto fail;
        }
        e.has |= field;
        if (!field) {
            keep_string(r, klen);
            int added = (unknown || (unknown = strmap_try_new(4)))
                            ? strmap_try_put(unknown, key, klen, NULL) : -ENOMEM;
            if (added != 0) {
                json_scan_fail(js, added == -EEXIST ? JSON_ERR_DUPLICATE_KEY : JSON_ERR_NO_MEMORY);
                goto fail;
            }
            if (!e.unknown) {
                e.unknown = key;
                e.unknown_len = klen;
            }
        }
        if (json_scan_colon(js) != 0)
            goto fail;
        int rc = field == HAS_DTYPE     ? take_value(r, 3, &e.dtype)
                 : field == HAS_SHAPE   ? take_uints(r, &e.shape, r->dims, r->dims_end, ST_MAX_NDIM)
                 : field == HAS_OFFSETS ? take_uints(r, &e.offsets, e.off, e.off + 2, 2)
                                        : take_value(r, 3, NULL);
        if (rc != 0 || (more = json_scan_more(js, '}')) < 0)
            goto fail;
    }
    strmap_free(unknown);
    add_tensor(r, name, nlen, &e);
    return 0;
fail:
    strmap_free(unknown);
    return -1;
}

/* __metadata__, from its value's first token: strings kept in file order. */
static int read_metadata(struct reader *r)
{
    struct json_scan *js = &r->js;
    char k[ST_NAME_SHOW + 4], d[ST_NAME_SHOW * 2];
    struct desc v;
    r->h->has_metadata = 1;
    if (js->tok != '{') {
        if (take_value(r, 2, &v) != 0)
            return -1;
        st_error_fail(&r->meta_err, ST_ERR_METADATA,
                      "%s: __metadata__ must be an object of strings, got %s", r->file,
                      describe(&v, d, sizeof(d)));
        return 0;
    }
    if (json_scan_next(js) == '}')
        return 0;
    struct strmap *keys = strmap_try_new(8); /* grows with the keys: fallible */
    if (!keys)
        return json_scan_fail(js, JSON_ERR_NO_MEMORY);
    int more = 1;
    while (more > 0) {
        size_t klen, vlen;
        more = -1;
        if (json_scan_key(js) != 0)
            break;
        char *key = peek_string(r, &klen);
        keep_string(r, klen);
        int added = strmap_try_put(keys, key, klen, NULL);
        if (added != 0) {
            json_scan_fail(js, added == -EEXIST ? JSON_ERR_DUPLICATE_KEY : JSON_ERR_NO_MEMORY);
            break;
        }
        if (json_scan_colon(js) != 0)
            break;
        if (js->tok == JSON_TOK_STRING) {
            if (json_scan_value_start(js) != 0)
                break;
            char *val = peek_string(r, &vlen);
            keep_string(r, vlen);
            ARENA_ROOM(r->h->n_metadata < r->max_metadata);
            r->h->metadata[r->h->n_metadata++] = (struct st_kv){key, val};
        } else {
            if (take_value(r, 3, &v) != 0)
                break;
            if (r->meta_err.code == ST_OK)
                st_error_fail(&r->meta_err, ST_ERR_METADATA,
                              "%s: __metadata__ value for key \"%s\" must be a string, got %s",
                              r->file, str_excerpt(key, klen, ST_NAME_SHOW, k),
                              describe(&v, d, sizeof(d)));
        }
        more = json_scan_more(js, '}');
    }
    strmap_free(keys);
    return more < 0 ? -1 : 0;
}

/* The whole text: one object whose keys are tensor names and __metadata__,
 * then only whitespace. */
static int read_root(struct reader *r)
{
    struct json_scan *js = &r->js;
    if (json_scan_next(js) != '{') /* the pre-pass saw '{' first */
        return json_scan_fail(js, JSON_ERR_DOCUMENT);
    int more = json_scan_next(js) != '}';
    while (more) {
        size_t nlen;
        if (json_scan_key(js) != 0)
            return -1;
        const char *name = peek_string(r, &nlen);
        if (nlen == 12 && memcmp(name, "__metadata__", 12) == 0) {
            if (r->seen_metadata)
                return json_scan_fail(js, JSON_ERR_DUPLICATE_KEY);
            r->seen_metadata = 1;
            if (json_scan_colon(js) != 0 || read_metadata(r) != 0)
                return -1;
        } else {
            /* The name's slot is a cache miss (the table is megabytes): fetch
             * it now, look at it once the entry is read. A duplicate is still
             * reported at its key, before any error inside the entry. */
            size_t key_start = js->start, key_end = js->pos;
            uint64_t h = nameset_hash(&r->names, name, nlen);
            nameset_prefetch(&r->names, h);
            keep_string(r, nlen);
            int bad = json_scan_colon(js) != 0 || read_tensor(r, name, nlen) != 0;
            int added = nameset_add(&r->names, h, name, nlen, NULL); /* sized: never grows */
            if (added == -EEXIST)
                return json_scan_fail_at(js, JSON_ERR_DUPLICATE_KEY, key_start, key_end);
            if (bad || added != 0)
                return added != 0 ? json_scan_fail(js, JSON_ERR_NO_MEMORY) : -1;
        }
        if ((more = json_scan_more(js, '}')) < 0)
            return -1;
    }
    if (json_scan_next(js) != JSON_TOK_EOF)
        return json_scan_fail(js, JSON_ERR_TRAILING);
    return 0;
}

/* Gives h one arena with room for what the pre-pass counted. Pages never
 * written to stay virtual: only what the header holds becomes resident.
 * Returns -1 when it cannot be had (its size is the file's to choose). */
static int alloc_arena(struct reader *r, const struct st_entries_room *room, size_t len)
{
    struct st_header *h = r->h;
    r->max_tensors = room->entries + 1;
    r->max_metadata = room->metadata + 1;
    size_t n_dims = room->dims + 1;
    size_t sz_t = r->max_tensors * sizeof(struct st_tensor);
    size_t sz_d = n_dims * sizeof(uint64_t);
    size_t sz_m = r->max_metadata * sizeof(struct st_kv);
    /* Each count is below len, so none of these sums can overflow. */
    char *arena = malloc(sz_t + sz_d + sz_m + len + 1);
    if (!arena)
        return -1;
    h->arena = arena;
    h->tensors = (struct st_tensor *)(void *)arena;
    r->dims = (uint64_t *)(void *)(arena + sz_t);
    r->dims_end = r->dims + n_dims;
    h->metadata = (struct st_kv *)(void *)(arena + sz_t + sz_d);
    r->str = arena + sz_t + sz_d + sz_m;
    r->str_end = r->str + len + 1;
    return 0;
}

int st_entries_read(const char *json, size_t len, const struct st_entries_room *room,
                    const char *file, struct st_header *h, struct st_error *err)
{
    struct reader *r = calloc(1, sizeof(*r));
    int rc = 0;
    if (!r)
        return st_error_fail(err, ST_ERR_NO_MEMORY,
                             "%s: not enough memory to read the %zu-byte header", file, len);
    json_scan_init(&r->js, json, len);
    r->file = file;
    r->h = h;
    int ready = alloc_arena(r, room, len) == 0 &&
                nameset_init(&r->names, room->entries + 1, r->str) == 0;
    int bad = !ready || read_root(r) != 0 || r->js.failed;
    if (!ready) {
        rc = st_error_fail(err, ST_ERR_NO_MEMORY,
                           "%s: not enough memory to read the %zu-byte header (%zu entries)", file,
                           len, room->entries);
    } else if (bad && r->js.no_memory) {
        rc = st_error_fail(err, ST_ERR_NO_MEMORY,
                           "%s: not enough memory to read the %zu-byte header (at line %d column %d)",
                           file, len, r->js.line, r->js.column);
    } else if (bad) {
        char txt[ST_NAME_SHOW * 2 + 4];
        rc = st_error_fail(err, r->js.duplicate ? ST_ERR_DUPLICATE_KEY : ST_ERR_JSON,
                           "%s: header JSON line %d column %d: %s", file, r->js.line, r->js.column,
                           str_excerpt(r->js.text, strlen(r->js.text), ST_NAME_SHOW * 2, txt));
    } else if (r->meta_err.code != ST_OK || r->tensor_err.code != ST_OK) {
        const struct st_error *e = r->meta_err.code != ST_OK ? &r->meta_err : &r->tensor_err;
        rc = st_error_fail(err, e->code, "%s", e->message);
    }
    nameset_free(&r->names);
    free(r);
    return rc;
}
