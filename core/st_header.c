/* st_header: safetensors header parsing and validation.
 *
 * One pre-pass over the raw bytes checks UTF-8, finds the first byte, NUL
 * bytes and '-' signs, and measures the nesting depth, so that jansson never
 * sees a document deep enough to exhaust its stack. jansson then parses once
 * (rejecting duplicate keys and trailing bytes); each entry is checked in
 * file order and copied into one arena, the JSON tree is freed, and the
 * reference crate's offset walk runs over the tensors sorted by offsets. */
#include "st_header.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "util.h"

#define NONE ((size_t)-1)

/* Messages stay under 500 bytes: a file name is cut at FILE_SHOW bytes, a
 * tensor name or other string at NAME_SHOW, a shape after SHAPE_SHOW dims. */
#define FILE_SHOW 160
#define NAME_SHOW 64
#define SHAPE_SHOW 4

/* Copies at most max bytes of s[0..n) into out (max + 4 bytes) for a
 * message: control bytes become '?', and the cut never splits a UTF-8
 * sequence (s is valid UTF-8 by the time a message quotes it). */
static const char *show(const char *s, size_t n, size_t max, char *out)
{
    size_t lim = n;
    if (lim > max) {
        lim = max;
        while (lim > 0 && ((unsigned char)s[lim] & 0xC0) == 0x80)
            lim--;
    }
    size_t j = 0;
    for (size_t i = 0; i < lim; i++) {
        unsigned char c = (unsigned char)s[i];
        out[j++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (lim < n) {
        memcpy(out + j, "...", 3);
        j += 3;
    }
    out[j] = '\0';
    return out;
}

/* Context shared by the checks of one parse: the file label for messages. */
struct ctx {
    char file[FILE_SHOW + 4];
    struct st_error *err;
};

static void ctx_init(struct ctx *c, const char *file, struct st_error *err)
{
    if (!file)
        file = "(header)";
    show(file, strlen(file), FILE_SHOW, c->file);
    c->err = err;
}

/* A JSON value described for a message: `a string "x"`, `-1`, `1.5`, `an array`. */
static const char *describe(const json_t *v, char *out, size_t outlen)
{
    char tmp[NAME_SHOW + 4];
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    case JSON_NULL: return "null";
    case JSON_INTEGER:
        snprintf(out, outlen, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return out;
    case JSON_REAL:
        snprintf(out, outlen, "%.17g", json_real_value(v));
        return out;
    case JSON_STRING:
        snprintf(out, outlen, "the string \"%s\"",
                 show(json_string_value(v), json_string_length(v), NAME_SHOW / 2, tmp));
        return out;
    }
    return "a value";
}

/* "[2, 3]" with at most SHAPE_SHOW dimensions before "...". */
static const char *fmt_shape(const uint64_t *shape, uint32_t ndim, char *out, size_t outlen)
{
    size_t j = 0;
    out[j++] = '[';
    for (uint32_t i = 0; i < ndim && j < outlen; i++) {
        if (i == SHAPE_SHOW) {
            j += (size_t)snprintf(out + j, outlen - j, ", ... (%" PRIu32 " dims)", ndim);
            break;
        }
        j += (size_t)snprintf(out + j, outlen - j, "%s%" PRIu64, i ? ", " : "", shape[i]);
    }
    if (j < outlen - 1) {
        out[j++] = ']';
        out[j] = '\0';
    } else {
        out[outlen - 1] = '\0';
    }
    return out;
}

enum st_status st_header_check_prefix(const unsigned char prefix[ST_PREFIX_LEN],
                                      uint64_t file_size, const char *file,
                                      uint64_t *header_len, struct st_error *err)
{
    struct ctx c;
    ctx_init(&c, file, err);
    *header_len = 0;
    if (file_size < ST_PREFIX_LEN)
        return st_error_set(err, ST_ERR_HEADER_TOO_SMALL,
                            "%s: file is %" PRIu64 " bytes, shorter than the %d-byte header length prefix",
                            c.file, file_size, ST_PREFIX_LEN);
    uint64_t n = 0;
    for (int i = ST_PREFIX_LEN - 1; i >= 0; i--)
        n = n << 8 | prefix[i];
    if (n == 0)
        return st_error_set(err, ST_ERR_HEADER_EMPTY, "%s: header length is 0", c.file);
    if (n > ST_MAX_HEADER_LEN)
        return st_error_set(err, ST_ERR_HEADER_TOO_LARGE,
                            "%s: header length %" PRIu64 " exceeds the limit of %llu bytes", c.file,
                            n, ST_MAX_HEADER_LEN);
    uint64_t end;
    if (u64_add(n, ST_PREFIX_LEN, &end) != 0 || end > file_size)
        return st_error_set(err, ST_ERR_HEADER_LENGTH,
                            "%s: header length %" PRIu64 " runs past the end of the %" PRIu64
                            "-byte file",
                            c.file, n, file_size);
    *header_len = n;
    return ST_OK;
}

/* What the pre-pass learns about the raw bytes. */
struct scan {
    size_t bad_utf8;  /* offset of the first invalid UTF-8 sequence, or NONE */
    size_t nul;       /* offset of the first NUL byte, or NONE */
    size_t minus;     /* offset of the first '-' outside strings, or NONE */
    unsigned depth;   /* deepest nesting of objects/arrays outside strings */
};

/* One pass: UTF-8 validity (utf8_valid on each multi-byte sequence, ASCII
 * inline), nesting depth, NUL bytes and '-' outside strings. Escapes inside
 * strings are skipped so that "\"" and "{" in names do not count. */
static void scan_bytes(const char *json, size_t len, struct scan *sc)
{
    const unsigned char *s = (const unsigned char *)json;
    unsigned depth = 0, max = 0;
    int in_str = 0, esc = 0;
    sc->bad_utf8 = sc->nul = sc->minus = NONE;
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        if (c >= 0x80) {
            size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
            if (n > len - i || !utf8_valid(json + i, n)) {
                sc->bad_utf8 = i;
                break;
            }
            esc = 0;
            i += n;
            continue;
        }
        if (in_str) {
            if (esc)
                esc = 0;
            else if (c == '\\')
                esc = 1;
            else if (c == '"')
                in_str = 0;
            else if (c == 0 && sc->nul == NONE)
                sc->nul = i;
        } else {
            switch (c) {
            case '"': in_str = 1; break;
            case '{':
            case '[':
                if (++depth > max)
                    max = depth;
                break;
            case '}':
            case ']':
                if (depth > 0)
                    depth--;
                break;
            case '-':
                if (sc->minus == NONE)
                    sc->minus = i;
                break;
            case 0:
                if (sc->nul == NONE)
                    sc->nul = i;
                break;
            default: break;
            }
        }
        i++;
    }
    sc->depth = max;
}

static int is_json_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Reads a JSON integer >= 0 into *v; returns 0, or -1 for anything else. */
static int get_u64(const json_t *j, uint64_t *v)
{
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return -1;
    *v = (uint64_t)json_integer_value(j);
    return 0;
}

/* Totals from the checking pass, to size the arena. */
struct totals {
    size_t n_tensors, n_dims, n_meta, str_bytes;
};

static enum st_status check_metadata(struct ctx *c, const json_t *meta, struct totals *t)
{
    char d[NAME_SHOW * 2], k[NAME_SHOW + 4];
    if (!json_is_object(meta))
        return st_error_set(c->err, ST_ERR_METADATA,
                            "%s: __metadata__ must be an object of strings, got %s", c->file,
                            describe(meta, d, sizeof(d)));
    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach((json_t *)meta, key, klen, v)
    {
        if (!json_is_string(v))
            return st_error_set(c->err, ST_ERR_METADATA,
                                "%s: __metadata__ value for key \"%s\" must be a string, got %s",
                                c->file, show(key, klen, NAME_SHOW, k), describe(v, d, sizeof(d)));
        t->str_bytes += klen + 1 + json_string_length(v) + 1;
        t->n_meta++;
    }
    return ST_OK;
}

/* Checks one tensor entry's structure (not its sizes or offsets, which the
 * offset walk checks in sorted order as the crate does). */
static enum st_status check_tensor(struct ctx *c, const char *name, size_t nlen, const json_t *t,
                                   struct totals *tot)
{
    char nm[NAME_SHOW + 4], d[NAME_SHOW * 2];
    show(name, nlen, NAME_SHOW, nm);
    if (!json_is_object(t))
        return st_error_set(c->err, ST_ERR_TENSOR_INFO,
                            "%s: tensor \"%s\": entry must be an object, got %s", c->file, nm,
                            describe(t, d, sizeof(d)));
    const json_t *dt = json_object_get(t, "dtype");
    const json_t *shape = json_object_get(t, "shape");
    const json_t *offs = json_object_get(t, "data_offsets");
    const char *missing = !dt ? "dtype" : !shape ? "shape" : !offs ? "data_offsets" : NULL;
    if (missing)
        return st_error_set(c->err, ST_ERR_TENSOR_INFO, "%s: tensor \"%s\": \"%s\" is missing",
                            c->file, nm, missing);
    if (json_object_size(t) != 3) {
        const char *key;
        size_t klen;
        json_t *v;
        char k[NAME_SHOW + 4];
        json_object_keylen_foreach((json_t *)t, key, klen, v)
        {
            if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 &&
                strcmp(key, "data_offsets") != 0)
                return st_error_set(c->err, ST_ERR_UNKNOWN_FIELD,
                                    "%s: tensor \"%s\": unknown field \"%s\" (only dtype, shape "
                                    "and data_offsets are allowed)",
                                    c->file, nm, show(key, klen, NAME_SHOW, k));
        }
    }
    if (!json_is_string(dt))
        return st_error_set(c->err, ST_ERR_TENSOR_INFO,
                            "%s: tensor \"%s\": dtype must be a string, got %s", c->file, nm,
                            describe(dt, d, sizeof(d)));
    if (dtype_from_name(json_string_value(dt), json_string_length(dt)) == DT_INVALID)
        return st_error_set(c->err, ST_ERR_DTYPE, "%s: tensor \"%s\": unknown dtype %s", c->file,
                            nm, describe(dt, d, sizeof(d)));
    if (!json_is_array(shape))
        return st_error_set(c->err, ST_ERR_SHAPE,
                            "%s: tensor \"%s\": shape must be an array of unsigned integers, got %s",
                            c->file, nm, describe(shape, d, sizeof(d)));
    size_t ndim = json_array_size(shape);
    if (ndim > ST_MAX_NDIM)
        return st_error_set(c->err, ST_ERR_SHAPE,
                            "%s: tensor \"%s\": shape has %zu dimensions, more than the %d allowed",
                            c->file, nm, ndim, ST_MAX_NDIM);
    for (size_t i = 0; i < ndim; i++) {
        uint64_t v;
        if (get_u64(json_array_get(shape, i), &v) != 0)
            return st_error_set(c->err, ST_ERR_SHAPE,
                                "%s: tensor \"%s\": shape[%zu] must be an unsigned integer, got %s",
                                c->file, nm, i, describe(json_array_get(shape, i), d, sizeof(d)));
    }
    if (!json_is_array(offs) || json_array_size(offs) != 2) {
        char n[32] = "";
        if (json_is_array(offs))
            snprintf(n, sizeof(n), " of %zu entries", json_array_size(offs));
        return st_error_set(c->err, ST_ERR_OFFSETS,
                            "%s: tensor \"%s\": data_offsets must be an array of two unsigned "
                            "integers, got %s%s",
                            c->file, nm, describe(offs, d, sizeof(d)), n);
    }
    uint64_t b, e;
    for (size_t i = 0; i < 2; i++) {
        if (get_u64(json_array_get(offs, i), i ? &e : &b) != 0)
            return st_error_set(c->err, ST_ERR_OFFSETS,
                                "%s: tensor \"%s\": data_offsets[%zu] must be an unsigned integer, "
                                "got %s",
                                c->file, nm, i, describe(json_array_get(offs, i), d, sizeof(d)));
    }
    if (b > e)
        return st_error_set(c->err, ST_ERR_OFFSETS,
                            "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                            "] begin after they end",
                            c->file, nm, b, e);
    tot->n_tensors++;
    tot->n_dims += ndim;
    tot->str_bytes += nlen + 1;
    return ST_OK;
}

/* Copies the checked tree into one arena: [tensors][dims][metadata][strings]. */
static struct st_header *build(const json_t *root, const json_t *meta, const struct totals *t,
                               size_t len, uint64_t data_len)
{
    size_t sz_t = t->n_tensors * sizeof(struct st_tensor);
    size_t sz_d = t->n_dims * sizeof(uint64_t);
    size_t sz_m = t->n_meta * sizeof(struct st_kv);
    char *arena = xmalloc(sz_t + sz_d + sz_m + t->str_bytes);
    struct st_header *h = xcalloc(1, sizeof(*h));
    h->arena = arena;
    h->header_len = len;
    h->data_len = data_len;
    h->tensors = (struct st_tensor *)(void *)arena;
    uint64_t *dims = (uint64_t *)(void *)(arena + sz_t);
    h->metadata = (struct st_kv *)(void *)(arena + sz_t + sz_d);
    char *sp = arena + sz_t + sz_d + sz_m;
    h->has_metadata = meta != NULL;

    const char *key;
    size_t klen;
    json_t *v;
    if (meta) {
        json_object_keylen_foreach((json_t *)meta, key, klen, v)
        {
            struct st_kv *kv = &h->metadata[h->n_metadata++];
            size_t vlen = json_string_length(v);
            memcpy(sp, key, klen + 1);
            kv->key = sp;
            sp += klen + 1;
            memcpy(sp, json_string_value(v), vlen + 1);
            kv->value = sp;
            sp += vlen + 1;
        }
    }
    json_object_keylen_foreach((json_t *)root, key, klen, v)
    {
        if (v == meta)
            continue;
        struct st_tensor *ts = &h->tensors[h->n_tensors++];
        memcpy(sp, key, klen + 1);
        ts->name = sp;
        ts->name_len = klen;
        sp += klen + 1;
        const json_t *dt = json_object_get(v, "dtype");
        ts->dtype = dtype_from_name(json_string_value(dt), json_string_length(dt));
        const json_t *shape = json_object_get(v, "shape");
        ts->ndim = (uint32_t)json_array_size(shape);
        ts->shape = dims;
        for (uint32_t i = 0; i < ts->ndim; i++)
            *dims++ = (uint64_t)json_integer_value(json_array_get(shape, i));
        const json_t *offs = json_object_get(v, "data_offsets");
        ts->begin = (uint64_t)json_integer_value(json_array_get(offs, 0));
        ts->end = (uint64_t)json_integer_value(json_array_get(offs, 1));
    }
    return h;
}

static int cmp_tensor(const void *pa, const void *pb)
{
    const struct st_tensor *a = pa, *b = pb;
    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end)
        return a->end < b->end ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* The crate's validate(): sorted offsets start at 0 and are contiguous, and
 * each tensor's span is exactly what its shape and dtype need. Fills nelems. */
static enum st_status check_layout(struct ctx *c, struct st_header *h)
{
    char nm[NAME_SHOW + 4], pv[NAME_SHOW + 4], sh[128];
    uint64_t start = 0;
    const struct st_tensor *prev = NULL;
    for (size_t i = 0; i < h->n_tensors; i++) {
        struct st_tensor *t = &h->tensors[i];
        const struct dtype_info *di = dtype_info(t->dtype);
        if (t->begin != start) {
            show(t->name, t->name_len, NAME_SHOW, nm);
            if (!prev)
                return st_error_set(c->err, ST_ERR_INVALID_OFFSET,
                                    "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                                    "] but the first tensor must begin at 0",
                                    c->file, nm, t->begin, t->end);
            return st_error_set(c->err, ST_ERR_INVALID_OFFSET,
                                "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                                "] %s tensor \"%s\", which ends at %" PRIu64,
                                c->file, nm, t->begin, t->end,
                                t->begin < start ? "overlap" : "leave a hole after",
                                show(prev->name, prev->name_len, NAME_SHOW, pv), start);
        }
        uint64_t n = 1, bits;
        for (uint32_t k = 0; k < t->ndim; k++) {
            if (u64_mul(n, t->shape[k], &n) != 0)
                return st_error_set(c->err, ST_ERR_OVERFLOW,
                                    "%s: tensor \"%s\": element count of shape %s overflows 64 bits",
                                    c->file, show(t->name, t->name_len, NAME_SHOW, nm),
                                    fmt_shape(t->shape, t->ndim, sh, sizeof(sh)));
        }
        t->nelems = n;
        if (u64_mul(n, di->bits, &bits) != 0)
            return st_error_set(c->err, ST_ERR_OVERFLOW,
                                "%s: tensor \"%s\": size of %s %s (%" PRIu64
                                " elements) overflows 64 bits",
                                c->file, show(t->name, t->name_len, NAME_SHOW, nm), di->name,
                                fmt_shape(t->shape, t->ndim, sh, sizeof(sh)), n);
        if (bits % 8 != 0)
            return st_error_set(c->err, ST_ERR_MISALIGNED,
                                "%s: tensor \"%s\": %s %s is %" PRIu64
                                " bits, not a whole number of bytes",
                                c->file, show(t->name, t->name_len, NAME_SHOW, nm), di->name,
                                fmt_shape(t->shape, t->ndim, sh, sizeof(sh)), bits);
        if (t->end - t->begin != bits / 8)
            return st_error_set(c->err, ST_ERR_SIZE_MISMATCH,
                                "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                                "] span %" PRIu64 " bytes but %s %s needs %" PRIu64,
                                c->file, show(t->name, t->name_len, NAME_SHOW, nm), t->begin,
                                t->end, t->end - t->begin, di->name,
                                fmt_shape(t->shape, t->ndim, sh, sizeof(sh)), bits / 8);
        start = t->end;
        prev = t;
    }
    if (start != h->data_len) {
        if (!prev)
            return st_error_set(c->err, ST_ERR_DATA_LENGTH,
                                "%s: the header has no tensors but %" PRIu64
                                " data bytes follow it",
                                c->file, h->data_len);
        return st_error_set(c->err, ST_ERR_DATA_LENGTH,
                            "%s: tensor \"%s\" ends at data offset %" PRIu64
                            " but the data buffer holds %" PRIu64 " bytes (%s)",
                            c->file, show(prev->name, prev->name_len, NAME_SHOW, nm), start,
                            h->data_len, start > h->data_len ? "file truncated" : "trailing bytes");
    }
    return ST_OK;
}

enum st_status st_header_parse(const char *json, size_t len, uint64_t data_len,
                               const char *file, struct st_header **out,
                               struct st_error *err)
{
    struct ctx c;
    enum st_status rc = ST_OK;
    json_t *root = NULL;
    struct st_header *h = NULL;
    struct scan sc;

    *out = NULL;
    ctx_init(&c, file, err);
    scan_bytes(json, len, &sc);
    if (sc.bad_utf8 != NONE)
        return st_error_set(err, ST_ERR_UTF8, "%s: header is not valid UTF-8 (byte %zu)", c.file,
                            sc.bad_utf8);
    size_t first = 0;
    while (first < len && is_json_ws(json[first]))
        first++;
    if (first == len)
        return st_error_set(err, ST_ERR_HEADER_START, "%s: header holds no JSON, only %zu bytes of whitespace",
                            c.file, len);
    if (json[first] != '{')
        return st_error_set(err, ST_ERR_HEADER_START,
                            "%s: header must start with '{', found byte 0x%02x at offset %zu", c.file,
                            (unsigned char)json[first], first);
    if (sc.depth > ST_MAX_DEPTH)
        return st_error_set(err, ST_ERR_DEPTH, "%s: header nesting depth exceeds %d", c.file,
                            ST_MAX_DEPTH);
    if (sc.nul != NONE)
        return st_error_set(err, ST_ERR_JSON, "%s: header has a NUL byte at offset %zu", c.file,
                            sc.nul);

    json_error_t jerr;
    root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        enum st_status code =
            json_error_code(&jerr) == json_error_duplicate_key ? ST_ERR_DUPLICATE_KEY : ST_ERR_JSON;
        char txt[NAME_SHOW * 2 + 4];
        return st_error_set(err, code, "%s: header JSON line %d column %d: %s", c.file, jerr.line,
                            jerr.column, show(jerr.text, strlen(jerr.text), NAME_SHOW * 2, txt));
    }
    if (!json_is_object(root)) {
        rc = st_error_set(err, ST_ERR_NOT_OBJECT, "%s: header is not a JSON object", c.file);
        goto done;
    }

    struct totals tot = {0, 0, 0, 0};
    json_t *meta = json_object_get(root, "__metadata__");
    if (meta && (rc = check_metadata(&c, meta, &tot)) != ST_OK)
        goto done;
    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach(root, key, klen, v)
    {
        if (v != meta && (rc = check_tensor(&c, key, klen, v, &tot)) != ST_OK)
            goto done;
    }
    /* Every number left is an unsigned integer, so a '-' outside strings can
     * only be "-0", which jansson reads as 0 and the crate refuses. */
    if (sc.minus != NONE) {
        rc = st_error_set(err, ST_ERR_JSON,
                          "%s: header has a negative number at offset %zu (shape and "
                          "data_offsets hold unsigned integers)",
                          c.file, sc.minus);
        goto done;
    }
    h = build(root, meta, &tot, len, data_len);
    json_decref(root);
    root = NULL;
    /* Writers usually emit tensors in offset order; skipping qsort then also
     * skips its scratch allocation. */
    size_t i = 1;
    while (i < h->n_tensors && cmp_tensor(&h->tensors[i - 1], &h->tensors[i]) < 0)
        i++;
    if (i < h->n_tensors)
        qsort(h->tensors, h->n_tensors, sizeof(*h->tensors), cmp_tensor);
    if ((rc = check_layout(&c, h)) != ST_OK)
        goto done;
    *out = h;
    h = NULL;
done:
    json_decref(root);
    st_header_free(h);
    if (rc == ST_OK && err)
        st_error_set(err, ST_OK, "%s", "");
    return rc;
}

enum st_status st_header_read_fd(int fd, const char *file, struct st_header **out,
                                 struct st_error *err)
{
    struct ctx c;
    struct stat st;
    unsigned char prefix[ST_PREFIX_LEN] = {0};
    uint64_t n;
    enum st_status rc;

    *out = NULL;
    ctx_init(&c, file, err);
    if (fstat(fd, &st) != 0)
        return st_error_set(err, ST_ERR_IO, "%s: stat: %s", c.file, strerror(errno));
    uint64_t size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    if (size >= ST_PREFIX_LEN) {
        int r = fileio_pread_full(fd, prefix, ST_PREFIX_LEN, 0);
        if (r != 0)
            return st_error_set(err, ST_ERR_IO, "%s: reading the header length: %s", c.file,
                                r == -ENODATA ? "file shrank while reading" : strerror(-r));
    }
    if ((rc = st_header_check_prefix(prefix, size, file, &n, err)) != ST_OK)
        return rc;
    char *buf = xmalloc((size_t)n);
    int r = fileio_pread_full(fd, buf, (size_t)n, ST_PREFIX_LEN);
    if (r != 0)
        rc = st_error_set(err, ST_ERR_IO, "%s: reading the %" PRIu64 "-byte header: %s", c.file, n,
                          r == -ENODATA ? "file shrank while reading" : strerror(-r));
    else
        rc = st_header_parse(buf, (size_t)n, size - ST_PREFIX_LEN - n, file, out, err);
    free(buf);
    return rc;
}

void st_header_free(struct st_header *h)
{
    if (!h)
        return;
    free(h->arena);
    free(h);
}
