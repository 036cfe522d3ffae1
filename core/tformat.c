/* tformat: .npy and one-tensor safetensors prefixes.
 *
 * Both are small (bounded by ST_MAX_NDIM dimensions and the name), so they
 * are built into one exactly-sized allocation; the tensor bytes follow them
 * unchanged on the wire. */
#include "tformat.h"

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
        return -1;
    if (strcmp(s, "raw") == 0)
        *out = TFORMAT_RAW;
    else if (strcmp(s, "npy") == 0)
        *out = TFORMAT_NPY;
    else if (strcmp(s, "safetensors") == 0)
        *out = TFORMAT_SAFETENSORS;
    else
        return -1;
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

int tformat_npy_prefix(enum dtype dt, uint32_t ndim, const uint64_t *shape, char **out,
                       size_t *out_len, char *errbuf, size_t errlen)
{
    const struct dtype_info *info = dtype_info(dt);
    *out = NULL;
    *out_len = 0;
    if (!info) {
        snprintf(errbuf, errlen, "invalid dtype");
        return -1;
    }
    if (!info->npy_descr) {
        snprintf(errbuf, errlen,
                 "dtype %s has no NumPy equivalent; use format=raw or format=safetensors",
                 info->name);
        return -1;
    }
    /* magic(6) + version(2) + length(4 max) + dict + padding(< 64) + '\n' */
    size_t cap = 12 + 64 + SHAPE_MAX_CHARS(ndim) + 64 + NPY_ALIGN + 1;
    char *buf = xmalloc(cap);
    size_t dict = 12; /* dict is written after the longest (v2) preamble, moved later */
    size_t len = dict;
    put(buf, cap, &len, "{'descr': '%s', 'fortran_order': False, 'shape': (", info->npy_descr);
    for (uint32_t i = 0; i < ndim; i++)
        put(buf, cap, &len, i ? ", %" PRIu64 : "%" PRIu64, shape[i]);
    put(buf, cap, &len, ndim == 1 ? ",), }" : "), }");
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
    return 0;
}

/* JSON string body for s (without the quotes): ", \ and control
 * characters escaped, everything else (UTF-8 included) passed through.
 * dst must hold 6 * strlen(s) bytes. Returns the length written. */
static size_t json_escape(char *dst, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        switch (c) {
        case '"': dst[n++] = '\\'; dst[n++] = '"'; break;
        case '\\': dst[n++] = '\\'; dst[n++] = '\\'; break;
        case '\b': dst[n++] = '\\'; dst[n++] = 'b'; break;
        case '\f': dst[n++] = '\\'; dst[n++] = 'f'; break;
        case '\n': dst[n++] = '\\'; dst[n++] = 'n'; break;
        case '\r': dst[n++] = '\\'; dst[n++] = 'r'; break;
        case '\t': dst[n++] = '\\'; dst[n++] = 't'; break;
        default:
            if (c < 0x20) {
                memcpy(dst + n, "\\u00", 4);
                dst[n + 4] = hex[c >> 4];
                dst[n + 5] = hex[c & 15];
                n += 6;
            } else {
                dst[n++] = (char)c;
            }
        }
    }
    return n;
}

void tformat_safetensors_prefix(const char *name, enum dtype dt, uint32_t ndim,
                                const uint64_t *shape, uint64_t nbytes, char **out,
                                size_t *out_len)
{
    const struct dtype_info *info = dtype_info(dt);
    size_t name_len = strlen(name);
    size_t cap = 8 + 2 + 6 * name_len + 96 + SHAPE_MAX_CHARS(ndim) + 2 * 21 + ST_ALIGN + 1;
    char *buf = xmalloc(cap);
    size_t len = 8;
    put(buf, cap, &len, "{\"");
    len += json_escape(buf + len, name);
    put(buf, cap, &len, "\":{\"dtype\":\"%s\",\"shape\":[", info ? info->name : "?");
    for (uint32_t i = 0; i < ndim; i++)
        put(buf, cap, &len, i ? ",%" PRIu64 : "%" PRIu64, shape[i]);
    put(buf, cap, &len, "],\"data_offsets\":[0,%" PRIu64 "]}}", nbytes);
    while (len % ST_ALIGN)
        buf[len++] = ' ';
    uint64_t n = len - 8;
    for (int i = 0; i < 8; i++)
        buf[i] = (char)((n >> (8 * i)) & 0xff);
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
}
