/* strbuf: doubling growth through realloc. Past glibc's mmap threshold a
 * buffer is its own mapping and realloc moves it with mremap, so growing a
 * 100 MB document copies nothing and only the pages written become
 * resident: the cost of building a document is the document. */
#include "strbuf.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define STRBUF_MIN_CAP 64
/* detach gives back the slack beyond this (realloc to the length). */
#define STRBUF_SLACK_KEEP 4096

int strbuf_reserve(struct strbuf *sb, size_t more)
{
    if (sb->failed)
        return -ENOMEM;
    if (sb->cap > sb->len && sb->cap - sb->len > more)
        return 0;
    size_t need;
    /* No allocator gives more than PTRDIFF_MAX: fail without asking (a
     * sanitizer's allocator would report the request instead of failing it). */
    if (__builtin_add_overflow(sb->len, more, &need) || __builtin_add_overflow(need, 1, &need) ||
        need > (size_t)PTRDIFF_MAX)
        goto fail;
    size_t cap = sb->cap < STRBUF_MIN_CAP ? STRBUF_MIN_CAP : sb->cap;
    while (cap < need)
        cap = cap > (size_t)PTRDIFF_MAX / 2 ? need : cap * 2;
    char *p = realloc(sb->buf, cap);
    if (!p)
        goto fail;
    sb->buf = p;
    sb->cap = cap;
    sb->buf[sb->len] = '\0';
    return 0;
fail:
    sb->failed = 1;
    return -ENOMEM;
}

void strbuf_append(struct strbuf *sb, const void *p, size_t n)
{
    if (strbuf_reserve(sb, n) != 0)
        return;
    memcpy(sb->buf + sb->len, p, n);
    sb->len += n;
    sb->buf[sb->len] = '\0';
}

void strbuf_puts(struct strbuf *sb, const char *s)
{
    strbuf_append(sb, s, strlen(s));
}

void strbuf_putc(struct strbuf *sb, char c)
{
    if (strbuf_reserve(sb, 1) != 0)
        return;
    sb->buf[sb->len++] = c;
    sb->buf[sb->len] = '\0';
}

void strbuf_pct_encode(struct strbuf *sb, const char *s, size_t n, int keep_slash)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~' || (c == '/' && keep_slash)) {
            strbuf_putc(sb, (char)c);
        } else {
            char esc[3] = {'%', hex_upper[c >> 4], hex_upper[c & 15]};
            strbuf_append(sb, esc, 3);
        }
    }
}

void strbuf_printf(struct strbuf *sb, const char *fmt, ...)
{
    char small[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        sb->failed = 1;
        return;
    }
    if ((size_t)n < sizeof(small)) {
        strbuf_append(sb, small, (size_t)n);
        return;
    }
    if (strbuf_reserve(sb, (size_t)n) != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

char *strbuf_detach(struct strbuf *sb, size_t *len)
{
    char *text = NULL;
    size_t n = sb->len;
    if (!sb->failed && !sb->buf)
        text = calloc(1, 1);
    else if (!sb->failed) {
        text = sb->buf;
        if (sb->cap - n - 1 > STRBUF_SLACK_KEEP) {
            char *p = realloc(text, n + 1);
            if (p) /* a shrink that fails leaves the bigger block, which is fine */
                text = p;
        }
        sb->buf = NULL;
    }
    strbuf_release(sb);
    if (len)
        *len = text ? n : 0;
    return text;
}

void strbuf_release(struct strbuf *sb)
{
    free(sb->buf);
    sb->buf = NULL;
    sb->len = sb->cap = 0;
    sb->failed = 0;
}

/* Bytes that go out as they are: printable ASCII but '"' and '\\'. */
static int json_plain(unsigned char c)
{
    return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/* The one escaper; hex: the digits of \u00XX (jansson's upper case, or
 * serde_json's lower case). */
static void json_string(struct strbuf *sb, const char *str, size_t n, const char *hex)
{
    const unsigned char *s = (const unsigned char *)str;
    /* Most names need no escape: reserve for the plain case once. */
    if (strbuf_reserve(sb, n + 2) != 0)
        return;
    strbuf_putc(sb, '"');
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (run < n && json_plain(s[run]))
            run++;
        if (run > i) {
            strbuf_append(sb, s + i, run - i);
            i = run;
            continue;
        }
        unsigned char c = s[i];
        if (c >= 0x80) {
            size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
            if (k > 1 && k <= n - i && utf8_valid(str + i, k)) {
                strbuf_append(sb, s + i, k);
                i += k;
            } else {
                strbuf_append(sb, "\xEF\xBF\xBD", 3); /* U+FFFD for a bad byte */
                i++;
            }
            continue;
        }
        char esc[7] = {'\\', 0};
        size_t elen = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            elen = 6;
            break;
        }
        strbuf_append(sb, esc, elen);
        i++;
    }
    strbuf_putc(sb, '"');
}

void strbuf_json_string(struct strbuf *sb, const char *s, size_t n)
{
    json_string(sb, s, n, hex_upper);
}

void strbuf_json_string_lower(struct strbuf *sb, const char *s, size_t n)
{
    json_string(sb, s, n, hex_lower);
}

void strbuf_json_cstr(struct strbuf *sb, const char *s)
{
    strbuf_json_string(sb, s, strlen(s));
}

void strbuf_json_int(struct strbuf *sb, int64_t v)
{
    char b[24];
    int n = snprintf(b, sizeof(b), "%" PRId64, v);
    strbuf_append(sb, b, (size_t)n);
}

void strbuf_json_real(struct strbuf *sb, double v)
{
    if (!isfinite(v)) { /* JSON has no NaN or infinity; jansson cannot hold one */
        strbuf_puts(sb, "null");
        return;
    }
    char b[40];
    size_t n = (size_t)snprintf(b, sizeof(b) - 3, "%.17g", v);
    if (!strchr(b, '.') && !strchr(b, 'e')) {
        memcpy(b + n, ".0", 3);
        n += 2;
    }
    char *e = strchr(b, 'e');
    if (e) {
        /* "1e+05" -> "1e5", "1e-05" -> "1e-5" */
        char *from = e + 1, *to = e + 1;
        if (*from == '-')
            from = ++to;
        else if (*from == '+')
            from++;
        while (*from == '0' && from[1])
            from++;
        memmove(to, from, strlen(from) + 1);
        n = strlen(b);
    }
    strbuf_append(sb, b, n);
}
