/* encoding: see encoding.h. */
#include "encoding.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

/* A q-value (RFC 9110 §12.4.2: "0", "1", "0.5", at most three decimals)
 * at p..end; -1 when malformed. In thousandths. */
static int qvalue(const char *p, const char *end)
{
    if (p == end || (*p != '0' && *p != '1'))
        return -1;
    int q = (*p - '0') * 1000, scale = 100;
    p++;
    if (p < end && *p == '.') {
        for (p++; p < end && scale && *p >= '0' && *p <= '9'; p++, scale /= 10)
            q += (*p - '0') * scale;
    }
    return p == end && q <= 1000 ? q : -1;
}

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

enum encoding encoding_choose(const char *header)
{
    int gzip = -1, star = -1; /* their q-values, -1 when not named */
    for (const char *p = header; p && *p;) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        const char *next = *end ? end + 1 : end;
        while (p < end && is_ows(*p))
            p++;
        const char *name = p;
        while (p < end && !is_ows(*p) && *p != ';')
            p++;
        size_t nlen = (size_t)(p - name);
        int q = 1000;
        /* parameters: only q matters ("gzip;q=0.5", "gzip ; q=0") */
        while (p < end) {
            while (p < end && (is_ows(*p) || *p == ';'))
                p++;
            const char *pend = p;
            while (pend < end && *pend != ';')
                pend++;
            const char *vend = pend;
            while (vend > p && is_ows(vend[-1]))
                vend--;
            if (vend - p >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=')
                q = qvalue(p + 2, vend);
            p = pend;
        }
        if (q >= 0 && nlen) {
            if ((nlen == 4 && strncasecmp(name, "gzip", 4) == 0) ||
                (nlen == 6 && strncasecmp(name, "x-gzip", 6) == 0))
                gzip = q;
            else if (nlen == 1 && name[0] == '*')
                star = q;
        }
        p = next;
    }
    int q = gzip >= 0 ? gzip : star;
    return q > 0 ? ENCODING_GZIP : ENCODING_IDENTITY;
}

const char *encoding_name(enum encoding e)
{
    return e == ENCODING_GZIP ? "gzip" : NULL;
}

int encoding_gzip(const struct encoding_piece *pieces, size_t n, int level, char **out,
                  size_t *out_len)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += pieces[i].n;
    /* zlib counts in uInt: one call of deflate per piece, one output buffer */
    if (total > UINT_MAX / 2)
        return -EFBIG;
    z_stream z;
    memset(&z, 0, sizeof(z));
    /* 15 bits of window, +16: the gzip wrapper; memLevel 8 is zlib's default */
    if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -ENOMEM;
    /* deflateBound is the most a whole input can come to, wrapper included;
     * documents are at most a few hundred MB, within uLong. */
    size_t cap = deflateBound(&z, (uLong)total);
    char *buf = malloc(cap ? cap : 1);
    int rc = -ENOMEM;
    if (!buf)
        goto out;
    z.next_out = (Bytef *)buf;
    z.avail_out = (uInt)cap;
    for (size_t i = 0; i <= n; i++) {
        int last = i == n;
        z.next_in = last ? NULL : (Bytef *)(uintptr_t)pieces[i].p;
        z.avail_in = last ? 0 : (uInt)pieces[i].n;
        int zr = deflate(&z, last ? Z_FINISH : Z_NO_FLUSH);
        if (last ? zr != Z_STREAM_END : (zr != Z_OK || z.avail_in))
            goto out;
    }
    *out = buf;
    *out_len = cap - z.avail_out;
    buf = NULL;
    rc = 0;
out:
    free(buf);
    deflateEnd(&z);
    return rc;
}
