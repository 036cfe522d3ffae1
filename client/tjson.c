/* tjson: recursive-descent JSON reader. */
#include "tjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmem.h"

struct parser {
    const char *s, *end;
    const char *what;          /* the first error */
};

static int fail(struct parser *p, const char *what)
{
    if (!p->what)
        p->what = what;
    return -1;
}

/* A zeroed block, or NULL with the parse failed "out of memory": the client
 * library never aborts its worker. */
static void *tj_alloc(struct parser *p, size_t n)
{
    void *q = cmem_calloc(1, n);
    if (!q)
        fail(p, "out of memory");
    return q;
}

static void skip_ws(struct parser *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string at p->s (on the opening quote) into a new buffer. */
static char *parse_string(struct parser *p, size_t *len)
{
    const char *s = p->s + 1;
    /* Decoded text is never longer than the source. */
    size_t cap = 0;
    while (s + cap < p->end && s[cap] != '"') {
        if (s[cap] == '\\')
            cap++;
        cap++;
    }
    char *out = tj_alloc(p, cap + 1), *o = out;
    if (!out)
        return NULL;
    while (s < p->end && *s != '"') {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20) {
            fail(p, "control character in a string");
            goto bad;
        }
        if (c != '\\') {
            *o++ = (char)c;
            s++;
            continue;
        }
        if (++s >= p->end)
            break;
        switch (*s) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (p->end - s < 5 || hex4(s + 1, &cp) < 0) {
                fail(p, "bad \\u escape");
                goto bad;
            }
            s += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (p->end - s < 7 || s[1] != '\\' || s[2] != 'u' || hex4(s + 3, &lo) < 0 ||
                    lo < 0xDC00 || lo > 0xDFFF) {
                    fail(p, "unpaired surrogate");
                    goto bad;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                s += 6;
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                fail(p, "unpaired surrogate");
                goto bad;
            }
            /* \u escapes (6 or 12 source bytes) decode to at most 4 bytes. */
            o += put_utf8(o, cp);
            break;
        }
        default:
            fail(p, "bad escape");
            goto bad;
        }
        s++;
    }
    if (s >= p->end) {
        fail(p, "unterminated string");
        goto bad;
    }
    *o = '\0';
    *len = (size_t)(o - out);
    p->s = s + 1;
    return out;
bad:
    free(out);
    return NULL;
}

static int parse_value(struct parser *p, struct tjson *v, int depth);

static int parse_number(struct parser *p, struct tjson *v)
{
    const char *s = p->s;
    int neg = *s == '-', integral = 1;
    if (neg)
        s++;
    if (s >= p->end || *s < '0' || *s > '9')
        return fail(p, "bad number");
    if (*s == '0' && s + 1 < p->end && s[1] >= '0' && s[1] <= '9')
        return fail(p, "leading zero");
    uint64_t u = 0;
    int overflow = 0;
    while (s < p->end && *s >= '0' && *s <= '9') {
        unsigned d = (unsigned)(*s - '0');
        if (u > (UINT64_MAX - d) / 10)
            overflow = 1;
        u = u * 10 + d;
        s++;
    }
    if (s < p->end && *s == '.') {
        integral = 0;
        s++;
        if (s >= p->end || *s < '0' || *s > '9')
            return fail(p, "bad fraction");
        while (s < p->end && *s >= '0' && *s <= '9')
            s++;
    }
    if (s < p->end && (*s == 'e' || *s == 'E')) {
        integral = 0;
        s++;
        if (s < p->end && (*s == '+' || *s == '-'))
            s++;
        if (s >= p->end || *s < '0' || *s > '9')
            return fail(p, "bad exponent");
        while (s < p->end && *s >= '0' && *s <= '9')
            s++;
    }
    char buf[64];
    size_t n = (size_t)(s - p->s);
    if (n < sizeof(buf)) {
        memcpy(buf, p->s, n);
        buf[n] = '\0';
        v->num = strtod(buf, NULL);
    } else {
        v->num = neg ? -1e308 : 1e308; /* only magnitude matters for such numbers here */
    }
    v->type = TJ_NUMBER;
    v->is_uint = integral && !neg && !overflow;
    v->u = v->is_uint ? u : 0;
    p->s = s;
    return 0;
}

static int parse_members(struct parser *p, struct tjson *v, int depth, int object)
{
    char close = object ? '}' : ']';
    size_t cap = 0;
    p->s++;
    skip_ws(p);
    if (p->s < p->end && *p->s == close) {
        p->s++;
        return 0;
    }
    for (;;) {
        if (v->len == cap) {
            cap = cap ? cap * 2 : 4;
            struct tjson *n = cmem_realloc(v->items, cap * sizeof(*n));
            if (!n)
                return fail(p, "out of memory");
            v->items = n;
        }
        struct tjson *it = &v->items[v->len];
        memset(it, 0, sizeof(*it));
        v->len++;
        skip_ws(p);
        if (object) {
            size_t klen;
            if (p->s >= p->end || *p->s != '"')
                return fail(p, "expected a member name");
            it->key = parse_string(p, &klen);
            if (!it->key)
                return -1;
            skip_ws(p);
            if (p->s >= p->end || *p->s != ':')
                return fail(p, "expected ':'");
            p->s++;
        }
        if (parse_value(p, it, depth + 1) < 0)
            return -1;
        skip_ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        if (p->s < p->end && *p->s == close) {
            p->s++;
            return 0;
        }
        return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int literal(struct parser *p, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n) != 0)
        return fail(p, "unexpected character");
    p->s += n;
    return 0;
}

static int parse_value(struct parser *p, struct tjson *v, int depth)
{
    if (depth > TJSON_MAX_DEPTH)
        return fail(p, "nested too deeply");
    skip_ws(p);
    if (p->s >= p->end)
        return fail(p, "unexpected end");
    switch (*p->s) {
    case '{':
        v->type = TJ_OBJECT;
        return parse_members(p, v, depth, 1);
    case '[':
        v->type = TJ_ARRAY;
        return parse_members(p, v, depth, 0);
    case '"':
        v->type = TJ_STRING;
        v->str = parse_string(p, &v->len);
        return v->str ? 0 : -1;
    case 't':
        v->type = TJ_BOOL;
        v->boolean = 1;
        return literal(p, "true");
    case 'f':
        v->type = TJ_BOOL;
        return literal(p, "false");
    case 'n':
        v->type = TJ_NULL;
        return literal(p, "null");
    default:
        return parse_number(p, v);
    }
}

static void free_members(struct tjson *v)
{
    if (v->type == TJ_ARRAY || v->type == TJ_OBJECT)
        for (size_t i = 0; i < v->len; i++)
            free_members(&v->items[i]);
    free(v->items);
    free(v->key);
    free(v->str);
}

void tjson_free(struct tjson *v)
{
    if (!v)
        return;
    free_members(v);
    free(v);
}

struct tjson *tjson_parse(const char *s, size_t len, char *err, size_t errlen)
{
    struct parser p = {.s = s, .end = s + len};
    struct tjson *v = tj_alloc(&p, sizeof(*v));
    if (v && parse_value(&p, v, 0) == 0) {
        skip_ws(&p);
        if (p.s == p.end)
            return v;
        fail(&p, "bytes after the value");
    }
    if (p.what && strcmp(p.what, "out of memory") == 0)
        snprintf(err, errlen, "out of memory reading a JSON answer of %zu bytes", len);
    else
        snprintf(err, errlen, "bad JSON: %s near byte %td", p.what ? p.what : "syntax error",
                 p.s - s);
    tjson_free(v);
    return NULL;
}

const struct tjson *tjson_get(const struct tjson *v, const char *key)
{
    if (!v || v->type != TJ_OBJECT)
        return NULL;
    for (size_t i = 0; i < v->len; i++)
        if (strcmp(v->items[i].key, key) == 0)
            return &v->items[i];
    return NULL;
}

const char *tjson_str(const struct tjson *v)
{
    return v && v->type == TJ_STRING ? v->str : NULL;
}

int tjson_uint(const struct tjson *v, uint64_t *out)
{
    if (!v || v->type != TJ_NUMBER || !v->is_uint)
        return -1;
    *out = v->u;
    return 0;
}
