/* upstream_answer: see upstream_answer.h. */
#include "upstream_answer.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"

/* Copies the value v[0..n) into out (cap bytes) when it fits and holds no
 * control byte; else leaves "". */
static void put_value(char *out, size_t cap, const char *v, size_t n)
{
    out[0] = '\0';
    if (n >= cap)
        return;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
            return;
    memcpy(out, v, n);
    out[n] = '\0';
}

/* The message v[0..n) into out (cap bytes), cut at the start of a UTF-8
 * character when it does not fit; "" when it holds a control byte. */
static void put_message(char *out, size_t cap, const char *v, size_t n)
{
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)v[n] & 0xC0) == 0x80)
            n--;
    }
    put_value(out, cap, v, n);
}

/* A value of any length, malloc'd, or NULL when it holds a control byte. */
static char *put_long_value(const char *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
            return NULL;
    return xstrndup(v, n);
}

/* An entity tag without W/ and quotes. */
static void put_etag(char *out, size_t cap, const char *v, size_t n)
{
    if (n >= 2 && v[0] == 'W' && v[1] == '/') {
        v += 2;
        n -= 2;
    }
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        v++;
        n -= 2;
    }
    put_value(out, cap, v, n);
}

static int put_u64(const char *v, size_t n, uint64_t *out)
{
    size_t used;
    return n > 0 && decimal_u64(v, n, out, &used) == 0 && used == n ? 0 : -1;
}

/* "bytes A-B/T" */
static void put_range(struct upstream_answer *a, const char *v, size_t n)
{
    size_t used;
    a->has_range = 0;
    if (n < 6 || strncasecmp(v, "bytes ", 6) != 0)
        return;
    v += 6;
    n -= 6;
    if (decimal_u64(v, n, &a->range_start, &used) < 0 || used >= n || v[used] != '-')
        return;
    v += used + 1;
    n -= used + 1;
    if (decimal_u64(v, n, &a->range_end, &used) < 0 || used >= n || v[used] != '/')
        return;
    v += used + 1;
    n -= used + 1;
    if (put_u64(v, n, &a->range_total) < 0 || a->range_end < a->range_start ||
        a->range_end >= a->range_total)
        return;
    a->has_range = 1;
}

void upstream_answer_header(struct upstream_answer *a, const char *line, size_t len)
{
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        /* A new answer (after a redirect, or an interim 1xx). */
        int away = a->redirected_away;
        upstream_answer_free(a);
        a->redirected_away = away;
        const char *sp = memchr(line, ' ', len);
        uint64_t code;
        size_t used;
        if (sp && decimal_u64(sp + 1, len - (size_t)(sp + 1 - line), &code, &used) == 0 &&
            used == 3)
            a->status = (long)code;
        return;
    }
    const char *colon = memchr(line, ':', len);
    if (!colon)
        return;
    size_t nlen = (size_t)(colon - line);
    const char *v = colon + 1;
    size_t vlen = len - nlen - 1;
    while (vlen > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        vlen--;
    }
    while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
        vlen--;
#define IS(name) (nlen == sizeof(name) - 1 && strncasecmp(line, name, nlen) == 0)
    if (IS("X-Repo-Commit"))
        put_value(a->commit, sizeof(a->commit), v, vlen);
    else if (IS("ETag"))
        put_etag(a->etag, sizeof(a->etag), v, vlen);
    else if (IS("X-Linked-Etag"))
        put_etag(a->linked_etag, sizeof(a->linked_etag), v, vlen);
    else if (IS("X-Linked-Size"))
        a->has_linked_size = put_u64(v, vlen, &a->linked_size) == 0;
    else if (IS("Content-Length"))
        a->has_length = put_u64(v, vlen, &a->length) == 0;
    else if (IS("Content-Range"))
        put_range(a, v, vlen);
    else if (IS("X-Error-Code"))
        put_value(a->error_code, sizeof(a->error_code), v, vlen);
    else if (IS("X-Error-Message"))
        put_message(a->error_message, sizeof(a->error_message), v, vlen);
    else if (IS("Cache-Control"))
        put_value(a->cache_control, sizeof(a->cache_control), v, vlen);
    else if (IS("Link")) {
        free(a->link);
        a->link = put_long_value(v, vlen);
    }
    else if (IS("Retry-After")) {
        uint64_t s;
        a->retry_after = put_u64(v, vlen, &s) == 0 ? (unsigned)(s > 3600 ? 3600 : s) : 0;
    }
#undef IS
}

void upstream_answer_free(struct upstream_answer *a)
{
    free(a->link);
    memset(a, 0, sizeof(*a));
}

