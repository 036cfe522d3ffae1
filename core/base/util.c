#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static void oom(size_t n)
{
    fprintf(stderr, "tensord: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom(n * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

void free_secret(char *s)
{
    if (s)
        explicit_bzero(s, strlen(s));
    free(s);
}

char *xstrndup(const char *s, size_t n)
{
    char *d = xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        oom(0);
    char *s = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

uint64_t hash_fnv1a(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = seed;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

int utf8_valid(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t len = (unsigned char)s[i] < 0x80 ? 1 : utf8_decode(s + i, n - i, NULL);
        if (len == 0)
            return 0;
        i += len;
    }
    return 1;
}

size_t utf8_decode(const char *str, size_t n, uint32_t *cp)
{
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    const unsigned char *s = (const unsigned char *)str;
    unsigned char c = s[0];
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
                 : (c & 0xf8) == 0xf0                 ? 4
                                                      : 0;
    if (len == 0 || len > n)
        return 0;
    uint32_t v = c & (len == 1 ? 0x7F : 0x7F >> len); /* the lead byte's bits of the code point */
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[k] & 0x3F);
    }
    if (v < min_cp[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    if (cp)
        *cp = v;
    return len;
}

const char *str_excerpt(const char *s, size_t n, size_t max, char *out)
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

uint64_t time_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

struct timespec time_real_after(unsigned ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(ms % 1000) * 1000000u;
    ts.tv_sec += (time_t)(ms / 1000 + ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    return ts;
}

size_t utf8_len(uint32_t cp)
{
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

size_t utf8_encode(uint32_t cp, unsigned char out[4])
{
    size_t n = utf8_len(cp);
    static const unsigned char lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    for (size_t k = n - 1; k > 0; k--, cp >>= 6)
        out[k] = (unsigned char)(0x80 | (cp & 0x3F));
    out[0] = (unsigned char)(lead[n] | cp);
    return n;
}

int str_has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && memcmp(s + n - k, suffix, k) == 0;
}

char *pct_decode(const char *s, size_t n, int flags, size_t *out_len)
{
    char *d = xmalloc(n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '+' && (flags & PCT_FORM)) {
            c = ' ';
        } else if (c == '%') {
            int hi = n - i >= 3 ? hex_digit_value((unsigned char)s[i + 1]) : -1;
            int lo = n - i >= 3 ? hex_digit_value((unsigned char)s[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                goto bad;
            c = (char)(hi << 4 | lo);
            i += 2;
        }
        if (c == '\0' && !(flags & PCT_NUL))
            goto bad;
        d[k++] = c;
    }
    d[k] = '\0';
    if (out_len)
        *out_len = k;
    return d;
bad:
    free(d);
    return NULL;
}

int hex_digit_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

const char hex_lower[] = "0123456789abcdef";
const char hex_upper[] = "0123456789ABCDEF";

size_t shape_format(char *out, size_t cap, const uint64_t *shape, uint32_t ndim, const char *sep)
{
    size_t n = 0;
    out[0] = '\0';
    for (uint32_t i = 0; i < ndim && n < cap - 1; i++) {
        int w = snprintf(out + n, cap - n, "%s%" PRIu64, i ? sep : "", shape[i]);
        n = w < 0 || (size_t)w >= cap - n ? cap - 1 : n + (size_t)w;
    }
    return n;
}

int decimal_u64(const char *s, size_t n, uint64_t *value, size_t *used)
{
    uint64_t v = 0;
    size_t i = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
        if (u64_mul(v, 10, &v) < 0 || u64_add(v, (uint64_t)(s[i] - '0'), &v) < 0)
            return -ERANGE;
    if (i == 0)
        return -EINVAL;
    *value = v;
    *used = i;
    return 0;
}

uint64_t hash_seed(const void *salt)
{
    uint64_t seed;
    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != sizeof(seed))
        seed = time_mono_ns() ^ (uint64_t)(uintptr_t)salt;
    return seed;
}
