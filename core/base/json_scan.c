/* json_scan: the lexer reads one token per call with no allocation (numbers
 * are converted in place, strings only measured: a caller that keeps one
 * decodes it where it wants it). Its structure follows jansson's load.c
 * closely on purpose: which byte a token ends at, which error wins, and the
 * "near '...'" context are what users saw in messages, so they are kept.
 *
 * Two jansson details shape the string code: the whole string is checked for
 * bad escapes and control bytes before any \u escape is decoded, so an
 * unpaired surrogate is only reported once the closing quote is found; and
 * an error's context is the token's raw text when it is at most 20 bytes. */
#include "json_scan.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strmap.h"
#include "util.h"

#define CONTEXT_MAX 20 /* longest token text jansson quotes in a message */

void json_scan_init(struct json_scan *s, const char *buf, size_t len)
{
    memset(s, 0, sizeof(*s));
    s->buf = buf;
    s->len = len;
    s->tok = JSON_TOK_INVALID;
}

/* Records the first error at s->pos, quoting buf[start..pos) as jansson does. */
static void set_error(struct json_scan *s, int duplicate, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_error(struct json_scan *s, int duplicate, const char *fmt, ...)
{
    char msg[100]; /* the longest text is 45 bytes; jansson cuts the whole at 159 */
    va_list ap;
    if (s->failed)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* jansson keeps the token's text as a C string: a NUL first reads as no text. */
    size_t n = s->pos - s->start;
    if (n == 0 || s->buf[s->start] == '\0')
        snprintf(s->text, sizeof(s->text), "%s near end of file", msg);
    else if (n <= CONTEXT_MAX)
        snprintf(s->text, sizeof(s->text), "%s near '%.*s'", msg, (int)n, s->buf + s->start);
    else
        snprintf(s->text, sizeof(s->text), "%s", msg);
    /* jansson counts characters, not bytes: continuation bytes add nothing. */
    const unsigned char *b = (const unsigned char *)s->buf;
    size_t line_start = 0;
    s->line = 1;
    for (size_t i = 0; i < s->pos; i++) {
        if (b[i] == '\n') {
            s->line++;
            line_start = i + 1;
        }
    }
    s->column = 0;
    for (size_t i = line_start; i < s->pos; i++)
        s->column += (b[i] & 0xC0) != 0x80;
    s->position = s->pos;
    s->duplicate = duplicate;
    s->no_memory = 0;
    s->failed = 1;
}

/* A lexer error: the token is invalid and the error names why. */
#define LEX_FAIL(s, at, ...)                                                     \
    do {                                                                         \
        (s)->pos = (at);                                                         \
        set_error((s), 0, __VA_ARGS__);                                          \
        return (s)->tok = JSON_TOK_INVALID;                                      \
    } while (0)

/* The string whose opening quote is at s->start: measures its decoded length
 * and checks it, in jansson's two phases (see the top of the file). */
static int scan_string(struct json_scan *s)
{
    const unsigned char *b = (const unsigned char *)s->buf;
    size_t p = s->start + 1, n = s->len, out = 0;
    uint32_t high = 0;      /* a high surrogate waiting for its pair */
    char bad[48] = "";      /* the first surrogate error, reported at the closing quote */
    s->str_escaped = s->str_nul = 0;
    for (;;) {
        size_t q = p;
        while (q < n && b[q] >= 0x20 && b[q] != '"' && b[q] != '\\')
            q++;
        out += q - p;
        if (high && (q > p || q == n || b[q] != '\\')) {
            if (!bad[0])
                snprintf(bad, sizeof(bad), "invalid Unicode '\\u%04X'", (unsigned)high);
            high = 0;
        }
        p = q;
        if (p == n)
            LEX_FAIL(s, p, "premature end of input");
        if (b[p] == '"')
            break;
        if (b[p] < 0x20)
            LEX_FAIL(s, p, b[p] == '\n' ? "unexpected newline" : "control character 0x%x", b[p]);
        s->str_escaped = 1;
        if (++p == n)
            LEX_FAIL(s, p, "invalid escape");
        unsigned char e = b[p++];
        if (e != 'u') {
            if (!e || !strchr("\"\\/bfnrt", e)) /* a NUL after '\\' too */
                LEX_FAIL(s, p, "invalid escape");
            if (high && !bad[0])
                snprintf(bad, sizeof(bad), "invalid Unicode '\\u%04X'", (unsigned)high);
            high = 0;
            out++;
            continue;
        }
        uint32_t cp = 0;
        for (int i = 0; i < 4; i++) {
            int d = p < n ? hex_digit_value(b[p]) : -1;
            if (p < n)
                p++;
            if (d < 0)
                LEX_FAIL(s, p, "invalid escape");
            cp = cp << 4 | (uint32_t)d;
        }
        if (high) {
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                out += 4;
            else if (!bad[0])
                snprintf(bad, sizeof(bad), "invalid Unicode '\\u%04X\\u%04X'", (unsigned)high,
                         (unsigned)cp);
            high = 0;
        } else if (cp >= 0xD800 && cp <= 0xDBFF) {
            high = cp;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            if (!bad[0])
                snprintf(bad, sizeof(bad), "invalid Unicode '\\u%04X'", (unsigned)cp);
        } else {
            out += utf8_len(cp);
            s->str_nul |= cp == 0;
        }
    }
    if (high && !bad[0])
        snprintf(bad, sizeof(bad), "invalid Unicode '\\u%04X'", (unsigned)high);
    if (bad[0])
        LEX_FAIL(s, p + 1, "%s", bad);
    s->pos = p + 1;
    s->str_len = out;
    return s->tok = JSON_TOK_STRING;
}

static int is_digit(const unsigned char *b, size_t p, size_t n)
{
    return p < n && b[p] >= '0' && b[p] <= '9';
}

/* 1*DIGIT at b[p..n): *end gets where the digits stop; -1 when there is
 * none (*end = p). */
static int skip_digits(const unsigned char *b, size_t p, size_t n, size_t *end)
{
    size_t q = p;
    while (is_digit(b, q, n))
        q++;
    *end = q;
    return q > p ? 0 : -1;
}

/* A number starting at s->start: an int64_t integer (like strtoll) or a
 * double (like strtod). A malformed one is an invalid token without a lexer
 * error ("invalid token" comes from the parser), as in jansson. */
static int scan_number(struct json_scan *s)
{
    const unsigned char *b = (const unsigned char *)s->buf;
    size_t p = s->start, n = s->len;
    int neg = b[p] == '-';
    p += neg;
    if (!is_digit(b, p, n)) {
        s->pos = p;
        return s->tok = JSON_TOK_INVALID;
    }
    size_t digits = p;
    if (b[p] == '0') {
        p++;
        if (is_digit(b, p, n)) {
            s->pos = p;
            return s->tok = JSON_TOK_INVALID;
        }
    } else {
        while (is_digit(b, p, n))
            p++;
    }
    if (p == n || (b[p] != '.' && b[p] != 'e' && b[p] != 'E')) {
        s->pos = p;
        uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, v;
        size_t used;
        if (decimal_u64(s->buf + digits, p - digits, &v, &used) != 0 || v > limit)
            LEX_FAIL(s, p, neg ? "too big negative integer" : "too big integer");
        s->integer = neg ? (int64_t)(0 - v) : (int64_t)v;
        return s->tok = JSON_TOK_INTEGER;
    }
    /* fraction and exponent: 1*DIGIT after '.', and after 'e' [sign] */
    int bad = 0;
    if (b[p] == '.')
        bad = skip_digits(b, ++p, n, &p);
    if (!bad && p < n && (b[p] == 'e' || b[p] == 'E')) {
        p++;
        if (p < n && (b[p] == '+' || b[p] == '-'))
            p++;
        bad = skip_digits(b, p, n, &p);
    }
    if (bad) {
        s->pos = p;
        return s->tok = JSON_TOK_INVALID;
    }
    s->pos = p;
    char small[64], *text = small;
    size_t tlen = p - s->start;
    if (tlen >= sizeof(small) && !(text = malloc(tlen + 1))) {
        json_scan_fail(s, JSON_ERR_NO_MEMORY); /* a number of tlen digits */
        return s->tok = JSON_TOK_INVALID;
    }
    memcpy(text, s->buf + s->start, tlen);
    text[tlen] = '\0';
    errno = 0;
    s->real = strtod(text, NULL);
    int overflow = (s->real == HUGE_VAL || s->real == -HUGE_VAL) && errno == ERANGE;
    if (text != small)
        free(text);
    if (overflow)
        LEX_FAIL(s, p, "real number overflow");
    return s->tok = JSON_TOK_REAL;
}

int json_scan_next(struct json_scan *s)
{
    const unsigned char *b = (const unsigned char *)s->buf;
    size_t p = s->pos, n = s->len;
    if (s->failed)
        return s->tok = JSON_TOK_INVALID;
    while (p < n && (b[p] == ' ' || b[p] == '\n' || b[p] == '\r' || b[p] == '\t'))
        p++;
    s->start = s->pos = p;
    if (p == n)
        return s->tok = JSON_TOK_EOF;
    unsigned char c = b[p];
    switch (c) {
    case '{': case '}': case '[': case ']': case ':': case ',':
        s->pos = p + 1;
        return s->tok = c;
    case '"':
        return scan_string(s);
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        return scan_number(s);
    default:
        break;
    }
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') {
        while (p < n && (b[p] | 0x20) >= 'a' && (b[p] | 0x20) <= 'z')
            p++;
        s->pos = p;
        size_t w = p - s->start;
        const char *t = s->buf + s->start;
        if (w == 4 && memcmp(t, "true", 4) == 0)
            return s->tok = JSON_TOK_TRUE;
        if (w == 5 && memcmp(t, "false", 5) == 0)
            return s->tok = JSON_TOK_FALSE;
        if (w == 4 && memcmp(t, "null", 4) == 0)
            return s->tok = JSON_TOK_NULL;
        return s->tok = JSON_TOK_INVALID;
    }
    /* Any other character is an invalid token, quoted whole (all its bytes). */
    size_t w = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    s->pos = w < n - p ? p + w : n;
    return s->tok = JSON_TOK_INVALID;
}

int json_scan_fail(struct json_scan *s, enum json_scan_err e)
{
    static const char *const text[] = {
        [JSON_ERR_VALUE] = "unexpected token",
        [JSON_ERR_KEY] = "string or '}' expected",
        [JSON_ERR_COLON] = "':' expected",
        [JSON_ERR_OBJECT_END] = "'}' expected",
        [JSON_ERR_ARRAY_END] = "']' expected",
        [JSON_ERR_TRAILING] = "end of file expected",
        [JSON_ERR_DOCUMENT] = "'[' or '{' expected",
        [JSON_ERR_DUPLICATE_KEY] = "duplicate object key",
        [JSON_ERR_KEY_NUL] = "NUL byte in object key not supported",
        [JSON_ERR_VALUE_NUL] = "\\u0000 is not allowed without JSON_ALLOW_NUL",
        [JSON_ERR_DEPTH] = "maximum parsing depth reached",
        [JSON_ERR_NO_MEMORY] = "out of memory",
    };
    const char *t = text[e];
    if (e == JSON_ERR_VALUE && s->tok == JSON_TOK_INVALID)
        t = "invalid token";
    int was_failed = s->failed;
    set_error(s, e == JSON_ERR_DUPLICATE_KEY, "%s", t);
    if (!was_failed)
        s->no_memory = e == JSON_ERR_NO_MEMORY;
    return -1;
}

int json_scan_fail_at(struct json_scan *s, enum json_scan_err e, size_t start, size_t end)
{
    if (s->failed && s->position < end) /* one found at end came after the token */
        return -1;
    s->failed = 0;
    s->start = start;
    s->pos = end;
    return json_scan_fail(s, e);
}

size_t json_scan_decode(const struct json_scan *s, char *dst, size_t cap)
{
    const char *r = s->buf + s->start + 1;
    size_t rn = s->pos - s->start - 2, o = 0;
    if (!s->str_escaped) {
        memcpy(dst, r, rn < cap ? rn : cap);
        return rn;
    }
    for (size_t i = 0; i < rn;) {
        char c = r[i];
        if (c != '\\') {
            if (o < cap)
                dst[o] = c;
            o++;
            i++;
            continue;
        }
        char e = r[i + 1];
        i += 2;
        if (e != 'u') {
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
            if (o < cap)
                dst[o] = to[strchr(from, e) - from];
            o++;
            continue;
        }
        uint32_t cp = 0;
        for (int k = 0; k < 4; k++)
            cp = cp << 4 | (uint32_t)hex_digit_value((unsigned char)r[i + k]);
        i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo = 0;
            for (int k = 2; k < 6; k++)
                lo = lo << 4 | (uint32_t)hex_digit_value((unsigned char)r[i + k]);
            i += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        unsigned char u[4];
        size_t un = utf8_encode(cp, u);
        for (size_t k = 0; k < un; k++, o++)
            if (o < cap)
                dst[o] = (char)u[k];
    }
    return o;
}

int json_scan_value_start(struct json_scan *s)
{
    switch (s->tok) {
    case JSON_TOK_STRING:
        return s->str_nul && !s->allow_nul ? json_scan_fail(s, JSON_ERR_VALUE_NUL) : 0;
    case JSON_TOK_INTEGER: case JSON_TOK_REAL: case JSON_TOK_TRUE: case JSON_TOK_FALSE:
    case JSON_TOK_NULL: case '{': case '[':
        return 0;
    default:
        return json_scan_fail(s, JSON_ERR_VALUE);
    }
}

int json_scan_key(struct json_scan *s)
{
    if (s->tok != JSON_TOK_STRING)
        return json_scan_fail(s, JSON_ERR_KEY);
    return s->str_nul ? json_scan_fail(s, JSON_ERR_KEY_NUL) : 0;
}

int json_scan_colon(struct json_scan *s)
{
    if (json_scan_next(s) != ':')
        return json_scan_fail(s, JSON_ERR_COLON);
    json_scan_next(s);
    return 0;
}

int json_scan_more(struct json_scan *s, int close)
{
    if (json_scan_next(s) == ',') {
        json_scan_next(s);
        return 1;
    }
    if (s->tok == close)
        return 0;
    return json_scan_fail(s, close == '}' ? JSON_ERR_OBJECT_END : JSON_ERR_ARRAY_END);
}

int json_scan_keys_add(struct json_scan *s, struct json_scan_keys *k)
{
    const char *key = s->buf + s->start + 1;
    if (!k->map && !(k->map = strmap_try_new(8)))
        return json_scan_fail(s, JSON_ERR_NO_MEMORY);
    if (s->str_escaped) {
        if (k->n_copies == k->cap_copies) {
            size_t cap = k->cap_copies ? k->cap_copies * 2 : 8;
            char **c = cap < SIZE_MAX / sizeof(*c) ? realloc(k->copies, cap * sizeof(*c)) : NULL;
            if (!c)
                return json_scan_fail(s, JSON_ERR_NO_MEMORY);
            k->copies = c;
            k->cap_copies = cap;
        }
        char *copy = malloc(s->str_len + 1);
        if (!copy)
            return json_scan_fail(s, JSON_ERR_NO_MEMORY);
        json_scan_decode(s, copy, s->str_len);
        k->copies[k->n_copies++] = copy;
        key = copy;
    }
    int rc = strmap_try_put(k->map, key, s->str_len, NULL);
    if (rc == -EEXIST)
        return json_scan_fail(s, JSON_ERR_DUPLICATE_KEY);
    return rc == 0 ? 0 : json_scan_fail(s, JSON_ERR_NO_MEMORY);
}

void json_scan_keys_free(struct json_scan_keys *k)
{
    strmap_free(k->map);
    for (size_t i = 0; i < k->n_copies; i++)
        free(k->copies[i]);
    free(k->copies);
    *k = (struct json_scan_keys)JSON_SCAN_KEYS_INIT;
}

int json_scan_each(struct json_scan *s, unsigned depth, unsigned max_depth, json_scan_fn fn,
                   void *ctx)
{
    struct json_scan_keys keys = JSON_SCAN_KEYS_INIT;
    char key[JSON_SCAN_KEY_MAX];
    int close = s->tok == '{' ? '}' : ']', more = json_scan_next(s) == close ? 0 : 1;
    while (more == 1) {
        if (close == '}') {
            if (json_scan_key(s) != 0 || json_scan_keys_add(s, &keys) != 0)
                break;
            size_t n = json_scan_decode(s, key, sizeof(key) - 1);
            key[n < sizeof(key) ? n : 0] = '\0'; /* too long: "" matches nothing */
            if (json_scan_colon(s) != 0)
                break;
        } else if (s->tok == JSON_TOK_EOF) {
            /* jansson's loop ends at EOF before trying a value: "']' expected". */
            json_scan_fail(s, JSON_ERR_ARRAY_END);
            break;
        }
        if (depth + 1 > max_depth) {
            json_scan_fail(s, JSON_ERR_DEPTH);
            break;
        }
        if (json_scan_value_start(s) != 0 || fn(s, close == '}' ? key : NULL, depth + 1, ctx) != 0)
            break;
        more = json_scan_more(s, close);
    }
    json_scan_keys_free(&keys);
    return more == 0 ? 0 : -1;
}

/* A member or element that json_scan_value only checks (ctx: max_depth):
 * json_scan_each has checked its depth and its first token already. */
static int check_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    (void)key;
    if (s->tok != '[' && s->tok != '{')
        return 0;
    return json_scan_each(s, depth, (unsigned)(uintptr_t)ctx, check_member, ctx);
}

int json_scan_value(struct json_scan *s, unsigned depth, unsigned max_depth)
{
    if (depth > max_depth)
        return json_scan_fail(s, JSON_ERR_DEPTH);
    if (json_scan_value_start(s) != 0)
        return -1;
    if (s->tok == '[' || s->tok == '{')
        return json_scan_each(s, depth, max_depth, check_member, (void *)(uintptr_t)max_depth);
    return 0;
}

int json_scan_document(struct json_scan *s)
{
    if (json_scan_next(s) != '[' && s->tok != '{')
        return json_scan_fail(s, JSON_ERR_DOCUMENT);
    if (json_scan_value(s, 1, JSON_SCAN_MAX_DEPTH) != 0)
        return -1;
    if (json_scan_next(s) != JSON_TOK_EOF)
        return json_scan_fail(s, JSON_ERR_TRAILING);
    return 0;
}
