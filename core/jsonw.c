/* jsonw: see jsonw.h. */
#include "jsonw.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void jsonw_init(struct jsonw *w)
{
    memset(w, 0, sizeof(*w));
    w->cap = 256;
    w->buf = xmalloc(w->cap);
    w->buf[0] = '\0';
}

static void put(struct jsonw *w, const char *s, size_t n)
{
    if (w->len + n + 1 > w->cap) {
        while (w->len + n + 1 > w->cap)
            w->cap *= 2;
        w->buf = xrealloc(w->buf, w->cap);
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

char *jsonw_take(struct jsonw *w, size_t *len)
{
    char *s = w->buf;
    if (len)
        *len = w->len;
    memset(w, 0, sizeof(*w));
    return s;
}

void jsonw_free(struct jsonw *w)
{
    free(w->buf);
    memset(w, 0, sizeof(*w));
}

/* Before a value or a key: the comma that separates it from the previous one. */
static void sep(struct jsonw *w)
{
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    if (w->depth == 0)
        return;
    if (!w->first[w->depth - 1])
        put(w, ",", 1);
    w->first[w->depth - 1] = 0;
}

static void open_c(struct jsonw *w, char c)
{
    sep(w);
    put(w, &c, 1);
    if (w->depth < JSONW_MAX_DEPTH)
        w->first[w->depth] = 1;
    w->depth++;
}

static void close_c(struct jsonw *w, char c)
{
    if (w->depth)
        w->depth--;
    put(w, &c, 1);
}

void jsonw_obj(struct jsonw *w) { open_c(w, '{'); }
void jsonw_obj_end(struct jsonw *w) { close_c(w, '}'); }
void jsonw_arr(struct jsonw *w) { open_c(w, '['); }
void jsonw_arr_end(struct jsonw *w) { close_c(w, ']'); }

static void put_string(struct jsonw *w, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    int latin1 = !utf8_valid(s, n);
    put(w, "\"", 1);
    size_t run = 0; /* bytes copied as they are, flushed before an escape */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[12];
        size_t k = 0;
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            k = 2;
        } else if (c < 0x20) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            k = 6;
        } else if (c >= 0x80 && latin1) {
            esc[0] = (char)(0xc0 | (c >> 6));
            esc[1] = (char)(0x80 | (c & 0x3f));
            k = 2;
        } else {
            run++;
            continue;
        }
        put(w, s + i - run, run);
        run = 0;
        put(w, esc, k);
    }
    put(w, s + n - run, run);
    put(w, "\"", 1);
}

void jsonw_key(struct jsonw *w, const char *key)
{
    sep(w);
    put_string(w, key, strlen(key));
    put(w, ":", 1);
    w->after_key = 1;
}

void jsonw_strn(struct jsonw *w, const char *s, size_t n)
{
    sep(w);
    put_string(w, s, n);
}

void jsonw_str(struct jsonw *w, const char *s)
{
    jsonw_strn(w, s, strlen(s));
}

void jsonw_u64(struct jsonw *w, uint64_t v)
{
    char b[24];
    int n = snprintf(b, sizeof(b), "%" PRIu64, v);
    sep(w);
    put(w, b, (size_t)n);
}

void jsonw_bool(struct jsonw *w, int v)
{
    sep(w);
    put(w, v ? "true" : "false", v ? 4 : 5);
}

void jsonw_null(struct jsonw *w)
{
    sep(w);
    put(w, "null", 4);
}

void jsonw_kstr(struct jsonw *w, const char *key, const char *s)
{
    jsonw_key(w, key);
    jsonw_str(w, s);
}

void jsonw_ku64(struct jsonw *w, const char *key, uint64_t v)
{
    jsonw_key(w, key);
    jsonw_u64(w, v);
}

void jsonw_kbool(struct jsonw *w, const char *key, int v)
{
    jsonw_key(w, key);
    jsonw_bool(w, v);
}
