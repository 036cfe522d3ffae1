/* answer: the lease socket's answers, read with json_scan. answer_read
 * walks the whole text once (which also proves it is JSON within the
 * limits); answer_open (answer_open.c) then walks the same text again for
 * the open answer's tables, so its errors are only about what the fields
 * hold. */
#include "answer.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "answer_int.h"
#include "client_int.h"
#include "util.h"

void tdc_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int answer_skip(struct json_scan *s, unsigned depth)
{
    return json_scan_value(s, depth, ANSWER_MAX_DEPTH);
}

int answer_read_uint(struct json_scan *s, unsigned depth, uint64_t *v, int *rc)
{
    if (s->tok == JSON_TOK_INTEGER && s->integer >= 0) {
        *v = (uint64_t)s->integer;
        *rc = 0;
        return 1;
    }
    *rc = answer_skip(s, depth);
    return 0;
}


int answer_read_checksum(const struct json_scan *s, uint64_t *out)
{
    char hex[17];
    if (s->tok != JSON_TOK_STRING || s->str_len != 16)
        return -1;
    json_scan_decode(s, hex, 16);
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        int d = hex_digit_value((unsigned char)hex[i]);
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

/* ---- every answer --------------------------------------------------------- */

struct envelope {
    struct answer *a;
    char code[64], message[512]; /* the daemon's error, cut to fit */
};

static void copy_string(const struct json_scan *s, char *dst, size_t cap)
{
    size_t n = json_scan_decode(s, dst, cap - 1);
    dst[n < cap - 1 ? n : cap - 1] = '\0';
}

static int error_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct envelope *e = ctx;
    if (s->tok == JSON_TOK_STRING && strcmp(key, "code") == 0)
        copy_string(s, e->code, sizeof(e->code));
    else if (s->tok == JSON_TOK_STRING && strcmp(key, "message") == 0)
        copy_string(s, e->message, sizeof(e->message));
    else
        return answer_skip(s, depth);
    return 0;
}

static int envelope_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct envelope *e = ctx;
    int rc = 0;
    if (strcmp(key, "ok") == 0 && (s->tok == JSON_TOK_TRUE || s->tok == JSON_TOK_FALSE))
        e->a->ok = s->tok == JSON_TOK_TRUE;
    else if (strcmp(key, "lease") == 0)
        e->a->has_lease = answer_read_uint(s, depth, &e->a->lease, &rc);
    else if (strcmp(key, "error") == 0 && s->tok == '{')
        rc = json_scan_each(s, depth, ANSWER_MAX_DEPTH, error_member, e);
    else
        rc = answer_skip(s, depth);
    return rc;
}

/* err for a scan that failed (json_scan's own text, line and column). */
static int scan_error(const struct json_scan *s, char *err, size_t errlen)
{
    if (s->no_memory)
        tdc_seterr(err, errlen, "out of memory reading an answer of %zu bytes", s->len);
    else if (s->failed)
        tdc_seterr(err, errlen, "bad answer from tensord: %s (line %d, column %d)", s->text,
                   s->line, s->column);
    else
        tdc_seterr(err, errlen, "bad answer from tensord: invalid token at byte %zu", s->start);
    return -1;
}

int answer_scan(struct json_scan *s, const char *body, size_t len, json_scan_fn fn, void *ctx,
                char *err, size_t errlen)
{
    json_scan_init(s, body, len);
    if (!utf8_valid(body, len))
        return tdc_seterr(err, errlen, "bad answer from tensord: not valid UTF-8"), -1;
    if (memchr(body, '\0', len))
        return tdc_seterr(err, errlen, "bad answer from tensord: a NUL byte"), -1;
    if (json_scan_next(s) != '{')
        json_scan_fail(s, s->tok == JSON_TOK_INVALID ? JSON_ERR_VALUE : JSON_ERR_DOCUMENT);
    else if (json_scan_each(s, 1, ANSWER_MAX_DEPTH, fn, ctx) == 0 &&
             json_scan_next(s) != JSON_TOK_EOF)
        json_scan_fail(s, JSON_ERR_TRAILING);
    return s->failed ? scan_error(s, err, errlen) : 0;
}

int answer_read(const char *body, size_t len, struct answer *a, char *err, size_t errlen)
{
    struct json_scan s;
    struct envelope e = {.a = a, .code = "", .message = ""};
    memset(a, 0, sizeof(*a));
    if (answer_scan(&s, body, len, envelope_member, &e, err, errlen) != 0)
        return -1;
    if (!a->ok) {
        snprintf(a->code, sizeof(a->code), "%s", e.code);
        tdc_seterr(err, errlen, "%s: %s", e.code[0] ? e.code : "error",
                   e.message[0] ? e.message : "request failed");
        return -1;
    }
    return 0;
}

/* ---- the checksums answer --------------------------------------------------- */

struct sums_reader {
    struct tensord_model *m;
    char state[16];
    size_t n;                  /* checksums read */
    int bad;                   /* one was not 16 hex digits, or one too many */
};

static int sum_element(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct sums_reader *r = ctx;
    (void)key;
    (void)depth;
    if (r->n >= r->m->n_allocs || answer_read_checksum(s, &r->m->allocs[r->n].checksum) != 0)
        r->bad = 1;
    r->n++;
    return s->tok == JSON_TOK_STRING ? 0 : answer_skip(s, depth);
}

static int sums_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct sums_reader *r = ctx;
    if (strcmp(key, "state") == 0 && s->tok == JSON_TOK_STRING) {
        copy_string(s, r->state, sizeof(r->state));
        return 0;
    }
    if (strcmp(key, "checksums") == 0 && s->tok == '[')
        return json_scan_each(s, depth + 1, ANSWER_MAX_DEPTH, sum_element, r);
    return answer_skip(s, depth);
}

int answer_checksums(const char *body, size_t len, struct tensord_model *m, char *err,
                     size_t errlen)
{
    struct json_scan s;
    struct sums_reader r = {.m = m};
    if (answer_scan(&s, body, len, sums_member, &r, err, errlen) != 0)
        return -1;
    if (strcmp(r.state, "pending") == 0)
        return 1;
    if (strcmp(r.state, "ready") != 0)
        return tdc_seterr(err, errlen, "the daemon has no checksums for this model (%s)",
                          r.state[0] ? r.state : "no state"), -1;
    if (r.bad || r.n != m->n_allocs)
        return tdc_seterr(err, errlen, "malformed checksums answer (%zu checksums for %zu "
                          "allocations)", r.n, m->n_allocs), -1;
    for (size_t i = 0; i < m->n_allocs; i++)
        m->allocs[i].has_checksum = 1;
    return 0;
}
