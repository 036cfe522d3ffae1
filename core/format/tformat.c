/* tformat: .npy and one-tensor safetensors prefixes.
 *
 * Both are small (bounded by ST_MAX_NDIM dimensions and the name), so they
 * are built into one exactly-sized allocation; the tensor bytes follow them
 * unchanged on the wire. */
#include "tformat.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define NPY_ALIGN 64
#define ST_ALIGN 8

int tformat_parse(const char *s, enum tformat *out)
{
    if (!s)
        return -EINVAL;
    if (strcmp(s, "raw") == 0)
        *out = TFORMAT_RAW;
    else if (strcmp(s, "npy") == 0)
        *out = TFORMAT_NPY;
    else if (strcmp(s, "safetensors") == 0)
        *out = TFORMAT_SAFETENSORS;
    else
        return -EINVAL;
    return 0;
}

/* Appends printf output to buf at *len; the caller sized buf for the worst case. */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap - *len)
        abort(); /* sizing bug: never with the bounds below */
    *len += (size_t)n;
}

/* Worst case of the shape part: each dimension is up to 20 digits + ", ". */
#define SHAPE_MAX_CHARS(ndim) ((size_t)(ndim) * 22 + 8)

/* The npy framing around a header dict `{'descr': descr, ..., 'shape': shape}`
 * followed, when comment is not NULL, by " # " and the comment (NumPy reads
 * the dict with ast.literal_eval, which skips a Python comment). */
static void npy_build(const char *descr, uint32_t ndim, const uint64_t *shape, const char *comment,
                      char **out, size_t *out_len)
{
    /* magic(6) + version(2) + length(4 max) + dict + comment + padding(< 64) + '\n' */
    size_t cap = 12 + 64 + SHAPE_MAX_CHARS(ndim) + 64 + (comment ? strlen(comment) + 3 : 0) +
                 NPY_ALIGN + 1;
    char *buf = xmalloc(cap);
    size_t dict = 12; /* dict is written after the longest (v2) preamble, moved later */
    size_t len = dict;
    put(buf, cap, &len, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    len += shape_format(buf + len, cap - len, shape, ndim, ", ");
    put(buf, cap, &len, ndim == 1 ? ",), }" : "), }");
    if (comment)
        put(buf, cap, &len, " # %s", comment);
    size_t dict_len = len - dict;

    /* Version 1.0 has a 2-byte header length, 2.0 a 4-byte one. */
    size_t pre = 10, total = pre + dict_len + 1;
    total = (total + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    if (total - pre > 65535) {
        pre = 12;
        total = (pre + dict_len + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    }
    size_t hlen = total - pre;
    memmove(buf + pre, buf + dict, dict_len);
    memset(buf + pre + dict_len, ' ', hlen - dict_len - 1);
    buf[total - 1] = '\n';
    buf[total] = '\0';
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = pre == 10 ? 1 : 2;
    buf[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        buf[8 + i] = (char)((hlen >> (8 * i)) & 0xff);
    *out = buf;
    *out_len = total;
}

int tformat_npy_prefix(enum dtype dt, uint32_t ndim, const uint64_t *shape, char **out,
                       size_t *out_len, struct st_error *err)
{
    const struct dtype_info *info = dtype_info(dt);
    *out = NULL;
    *out_len = 0;
    if (!info)
        return st_error_fail(err, ST_ERR_DTYPE, "invalid dtype");
    if (!info->npy_descr)
        return st_error_fail(err, ST_ERR_DTYPE, "dtype %s has no NumPy equivalent; use "
                             "npy_dtype=raw for its bits as unsigned integers, or format=raw or "
                             "format=safetensors", info->name);
    npy_build(info->npy_descr, ndim, shape, NULL, out, out_len);
    return 0;
}

int tformat_npy_raw_prefix(enum dtype dt, uint32_t ndim, const uint64_t *shape, uint64_t nbytes,
                           char **out, size_t *out_len)
{
    const struct dtype_info *info = dtype_info(dt);
    if (info && info->npy_descr)
        return tformat_npy_prefix(dt, ndim, shape, out, out_len, NULL);
    *out = NULL;
    *out_len = 0;
    if (!info || ndim > ST_MAX_NDIM)
        return -EINVAL;
    /* "dtype=BF16 shape=3,5": the shape is the tensor's, in X-Tensor-Shape's form */
    char comment[64 + SHAPE_MAX_CHARS(ST_MAX_NDIM)];
    size_t clen = 0;
    put(comment, sizeof(comment), &clen, "tensord: dtype=%s shape=", info->name);
    shape_format(comment + clen, sizeof(comment) - clen, shape, ndim, ",");
    if (info->bits == 8 || info->bits == 16) {
        npy_build(info->bits == 8 ? "|u1" : "<u2", ndim, shape, comment, out, out_len);
        return 0;
    }
    /* Sub-byte types stay packed: the last dimension counts bytes when its
     * elements fill whole bytes, else the array is the flat bytes. */
    uint64_t packed[ST_MAX_NDIM];
    uint64_t last_bits = ndim ? shape[ndim - 1] * info->bits : 0;
    if (ndim && last_bits / info->bits == shape[ndim - 1] && last_bits % 8 == 0) {
        memcpy(packed, shape, ndim * sizeof(*shape));
        packed[ndim - 1] = last_bits / 8;
        npy_build("|u1", ndim, packed, comment, out, out_len);
    } else {
        packed[0] = nbytes;
        npy_build("|u1", 1, packed, comment, out, out_len);
    }
    return 0;
}

static void st_key(struct tformat_st *w, const char *s, size_t n)
{
    strbuf_putc(&w->sb, w->n++ ? ',' : '{');
    strbuf_json_string_lower(&w->sb, s, n);
    strbuf_putc(&w->sb, ':');
}

static void st_begin(struct tformat_st *w)
{
    memset(w, 0, sizeof(*w));
    strbuf_append(&w->sb, "\0\0\0\0\0\0\0\0", ST_ALIGN); /* the length, by st_end */
}

void tformat_st_resume(struct tformat_st *w, size_t entries, uint64_t data_len)
{
    w->sb.len = 0;
    if (w->sb.cap && !w->sb.failed)
        w->sb.buf[0] = '\0';
    w->n = entries;
    w->data_len = data_len;
}

void tformat_st_metadata(struct tformat_st *w, const char *const *kv, size_t n)
{
    st_key(w, "__metadata__", 12);
    strbuf_putc(&w->sb, '{');
    for (size_t i = 0; i < n; i++) {
        if (i)
            strbuf_putc(&w->sb, ',');
        strbuf_json_string_lower(&w->sb, kv[2 * i], strlen(kv[2 * i]));
        strbuf_putc(&w->sb, ':');
        strbuf_json_string_lower(&w->sb, kv[2 * i + 1], strlen(kv[2 * i + 1]));
    }
    strbuf_putc(&w->sb, '}');
}

void tformat_st_tensor(struct tformat_st *w, const char *name, size_t name_len, enum dtype dt,
                       uint32_t ndim, const uint64_t *shape, uint64_t nbytes)
{
    const struct dtype_info *info = dtype_info(dt);
    st_key(w, name, name_len);
    strbuf_printf(&w->sb, "{\"dtype\":\"%s\",\"shape\":[", info ? info->name : "?");
    for (uint32_t i = 0; i < ndim; i++)
        strbuf_printf(&w->sb, i ? ",%" PRIu64 : "%" PRIu64, shape[i]);
    strbuf_printf(&w->sb, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", w->data_len,
                  w->data_len + nbytes);
    w->data_len += nbytes;
}

/* Pads the JSON with spaces to a multiple of 8, writes its length before it,
 * and hands the text over in *out (caller frees): 0, or -ENOMEM. */
static int st_end(struct tformat_st *w, char **out, size_t *out_len)
{
    if (!w->n)
        strbuf_putc(&w->sb, '{');
    strbuf_putc(&w->sb, '}');
    while (!w->sb.failed && w->sb.len % ST_ALIGN)
        strbuf_putc(&w->sb, ' ');
    uint64_t n = w->sb.len - ST_ALIGN;
    if (!w->sb.failed)
        for (int i = 0; i < 8; i++)
            w->sb.buf[i] = (char)((n >> (8 * i)) & 0xff);
    *out = strbuf_detach(&w->sb, out_len);
    return *out ? 0 : -ENOMEM;
}

int tformat_safetensors_prefix(const char *name, enum dtype dt, uint32_t ndim,
                               const uint64_t *shape, uint64_t nbytes, char **out,
                               size_t *out_len)
{
    struct tformat_st w;
    st_begin(&w);
    tformat_st_tensor(&w, name, strlen(name), dt, ndim, shape, nbytes);
    return st_end(&w, out, out_len);
}
