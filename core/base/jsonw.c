/* jsonw: see jsonw.h. */
#include "jsonw.h"

#include <inttypes.h>
#include <string.h>

void jsonw_init(struct jsonw *w)
{
    memset(w, 0, sizeof(*w));
}

char *jsonw_take(struct jsonw *w, size_t *len)
{
    char *s = strbuf_detach(&w->sb, len);
    jsonw_init(w);
    return s;
}

void jsonw_free(struct jsonw *w)
{
    strbuf_release(&w->sb);
    jsonw_init(w);
}

void jsonw_fail(struct jsonw *w) { w->sb.failed = 1; }

/* Before a value or a key: the comma that separates it from the previous one. */
static void sep(struct jsonw *w)
{
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    if (w->depth == 0 || w->depth > JSONW_MAX_DEPTH)
        return;
    if (!w->first[w->depth - 1])
        strbuf_putc(&w->sb, ',');
    w->first[w->depth - 1] = 0;
}

static void open_c(struct jsonw *w, char c)
{
    sep(w);
    strbuf_putc(&w->sb, c);
    if (w->depth < JSONW_MAX_DEPTH)
        w->first[w->depth] = 1;
    w->depth++;
}

static void close_c(struct jsonw *w, char c)
{
    if (w->depth)
        w->depth--;
    strbuf_putc(&w->sb, c);
}

void jsonw_obj(struct jsonw *w) { open_c(w, '{'); }
void jsonw_obj_end(struct jsonw *w) { close_c(w, '}'); }
void jsonw_arr(struct jsonw *w) { open_c(w, '['); }
void jsonw_arr_end(struct jsonw *w) { close_c(w, ']'); }

void jsonw_keyn(struct jsonw *w, const char *key, size_t n)
{
    sep(w);
    strbuf_json_string(&w->sb, key, n);
    strbuf_putc(&w->sb, ':');
    w->after_key = 1;
}

void jsonw_key(struct jsonw *w, const char *key)
{
    jsonw_keyn(w, key, strlen(key));
}

void jsonw_strn(struct jsonw *w, const char *s, size_t n)
{
    sep(w);
    strbuf_json_string(&w->sb, s, n);
}

void jsonw_str(struct jsonw *w, const char *s)
{
    jsonw_strn(w, s, strlen(s));
}

void jsonw_u64(struct jsonw *w, uint64_t v)
{
    sep(w);
    strbuf_printf(&w->sb, "%" PRIu64, v);
}

void jsonw_bool(struct jsonw *w, int v)
{
    sep(w);
    strbuf_puts(&w->sb, v ? "true" : "false");
}

void jsonw_null(struct jsonw *w)
{
    sep(w);
    strbuf_puts(&w->sb, "null");
}

void jsonw_i64(struct jsonw *w, int64_t v)
{
    sep(w);
    strbuf_json_int(&w->sb, v);
}

void jsonw_real(struct jsonw *w, double v)
{
    sep(w);
    strbuf_json_real(&w->sb, v);
}

void jsonw_raw(struct jsonw *w, const char *json, size_t n)
{
    sep(w);
    strbuf_append(&w->sb, json, n);
}

/* key: value shorthands. */
void jsonw_kobj(struct jsonw *w, const char *k) { jsonw_key(w, k); jsonw_obj(w); }
void jsonw_karr(struct jsonw *w, const char *k) { jsonw_key(w, k); jsonw_arr(w); }
void jsonw_kstr(struct jsonw *w, const char *k, const char *s) { jsonw_key(w, k); jsonw_str(w, s); }
void jsonw_ku64(struct jsonw *w, const char *k, uint64_t v) { jsonw_key(w, k); jsonw_u64(w, v); }
void jsonw_kbool(struct jsonw *w, const char *k, int v) { jsonw_key(w, k); jsonw_bool(w, v); }
void jsonw_ki64(struct jsonw *w, const char *k, int64_t v) { jsonw_key(w, k); jsonw_i64(w, v); }
void jsonw_kreal(struct jsonw *w, const char *k, double v) { jsonw_key(w, k); jsonw_real(w, v); }
