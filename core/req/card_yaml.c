/* card_yaml: see card_yaml.h. libyaml's event parser (no tree) drives a
 * jsonw: each event writes its JSON at once, so memory is the output, the
 * nesting stack and the anchors' texts, all bounded. */
#include "card_yaml.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "jsonw.h"
#include "strmap.h"

/* ---- finding the front matter -------------------------------------------- */

/* Python's \s for the ASCII range (str.isspace): what may precede "---". */
static int is_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* The length of the line break at p (\r\n, \r or \n), or 0. */
static size_t line_break(const char *p, const char *end)
{
    if (p < end && *p == '\r')
        return p + 1 < end && p[1] == '\n' ? 2 : 1;
    return p < end && *p == '\n';
}

/* Whether p starts a closing fence: "---", blanks, then \r\n, \n or the end. */
static int closing_fence(const char *p, const char *end)
{
    if (end - p < 3 || memcmp(p, "---", 3) != 0)
        return 0;
    for (p += 3; p < end && (*p == ' ' || *p == '\t'); p++)
        ;
    return p == end || *p == '\n' || (end - p >= 2 && p[0] == '\r' && p[1] == '\n');
}

int card_yaml_front_matter(const char *text, size_t len, const char **yaml, size_t *yaml_len)
{
    const char *p = text, *end = text + len;
    while (p < end && is_space((unsigned char)*p))
        p++;
    if (end - p < 3 || memcmp(p, "---", 3) != 0)
        return 0;
    p += 3;
    size_t lb = line_break(p, end);
    if (!lb)
        return 0;
    const char *start = p + lb;
    /* The first line break followed by a closing fence ends the YAML (the
     * regular expression's lazy group). */
    for (const char *q = start; q < end; q++) {
        size_t b = line_break(q, end);
        if (b && closing_fence(q + b, end)) {
            *yaml = start;
            *yaml_len = (size_t)(q - start);
            return 1;
        }
    }
    return 0;
}

/* ---- YAML to JSON ---------------------------------------------------------- */

#define TAG_PREFIX "tag:yaml.org,2002:"

/* An anchored node's JSON text, for the aliases that name it. */
struct anchor {
    char *name;
    char *json;
    size_t len;
};

/* An open mapping or sequence. */
struct frame {
    int is_map;
    int want_key;              /* a mapping whose next scalar is a key */
    struct strmap *keys;       /* a mapping's keys so far, copies in key_copies */
    char **key_copies;
    size_t n_keys;
    char *anchor;              /* its anchor name, or NULL */
    size_t start;              /* where its text begins in the output */
};

struct conv {
    struct jsonw w;
    struct frame stack[CARD_YAML_MAX_DEPTH];
    unsigned depth;
    struct strmap *anchors;    /* name -> struct anchor */
    struct anchor **all;       /* every anchor, to free them */
    size_t n_all;
    size_t anchor_bytes;       /* the anchors' texts together */
    int documents;
    struct st_error *err;
};

/* What an event handler returns (or a negative errno). */
enum { NONE = 0, GO_ON = 1, DONE = 2 };

static int fail_memory(struct conv *c)
{
    return st_error_fail(c->err, ST_ERR_NO_MEMORY, "out of memory reading the front matter");
}

static void frame_free(struct frame *f)
{
    for (size_t i = 0; i < f->n_keys; i++)
        free(f->key_copies[i]);
    free(f->key_copies);
    strmap_free(f->keys);
    free(f->anchor);
    memset(f, 0, sizeof(*f));
}

/* Where the value just started at offset s0 begins (after its comma). */
static size_t value_start(const struct conv *c, size_t s0)
{
    return c->w.sb.buf && s0 < c->w.sb.len && c->w.sb.buf[s0] == ',' ? s0 + 1 : s0;
}

/* Keeps the output text [start, end) under anchor name (a redefinition
 * replaces the earlier text, as YAML says). */
static int anchor_store(struct conv *c, const char *name, size_t start, size_t end)
{
    if (c->w.sb.failed)
        return fail_memory(c);
    size_t n = end - start;
    if (c->anchor_bytes + n > 4 * (size_t)CARD_YAML_MAX_OUTPUT)
        return st_error_fail(c->err, ST_ERR_LIMIT, "the front matter's anchors hold more than "
                             "%u bytes", 4 * CARD_YAML_MAX_OUTPUT);
    char *json = malloc(n ? n : 1);
    if (!json)
        return fail_memory(c);
    memcpy(json, c->w.sb.buf + start, n);
    struct anchor *a = strmap_get(c->anchors, name, strlen(name));
    if (a) {
        c->anchor_bytes -= a->len;
        free(a->json);
    } else {
        a = calloc(1, sizeof(*a));
        struct anchor **all = realloc(c->all, (c->n_all + 1) * sizeof(*all));
        if (all)
            c->all = all;
        if (!a || !all || !(a->name = strdup(name)) ||
            strmap_try_put(c->anchors, a->name, strlen(a->name), a) != 0) {
            if (a)
                free(a->name);
            free(a);
            free(json);
            return fail_memory(c);
        }
        c->all[c->n_all++] = a;
    }
    a->json = json;
    a->len = n;
    c->anchor_bytes += n;
    return GO_ON;
}

/* ---- scalars ---- */

enum scalar_kind { SK_STRING, SK_NULL, SK_TRUE, SK_FALSE, SK_INT, SK_FLOAT, SK_INF_NAN };

static int is_one_of(const char *s, size_t n, const char *const *words)
{
    for (; *words; words++)
        if (strlen(*words) == n && memcmp(s, *words, n) == 0)
            return 1;
    return 0;
}

static size_t span_digits(const char *s, size_t n, int base)
{
    size_t i = 0;
    for (; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        int ok = base == 16 ? (ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f')
                            : ch >= '0' && ch < '0' + base;
        if (!ok)
            break;
    }
    return i;
}

/* A float of the core schema: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static int is_float(const char *s, size_t n)
{
    size_t i = (n && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    size_t whole = span_digits(s + i, n - i, 10);
    i += whole;
    if (i < n && s[i] == '.') {
        size_t frac = span_digits(s + i + 1, n - i - 1, 10);
        if (!whole && !frac)
            return 0;
        i += 1 + frac;
    } else if (!whole) {
        return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '-' || s[i] == '+'))
            i++;
        size_t e = span_digits(s + i, n - i, 10);
        if (!e)
            return 0;
        i += e;
    }
    return i == n;
}

/* How the YAML 1.2 core schema reads plain scalar s[0..n). */
static enum scalar_kind resolve(const char *s, size_t n)
{
    static const char *const nulls[] = {"~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", NULL};
    static const char *const specials[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF",
                                           "-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN",
                                           NULL};
    if (n == 0 || is_one_of(s, n, nulls))
        return SK_NULL;
    if (is_one_of(s, n, trues))
        return SK_TRUE;
    if (is_one_of(s, n, falses))
        return SK_FALSE;
    size_t sign = s[0] == '-' || s[0] == '+';
    if (n > sign && span_digits(s + sign, n - sign, 10) == n - sign)
        return SK_INT;
    if (n > 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'x') &&
        span_digits(s + 2, n - 2, s[1] == 'o' ? 8 : 16) == n - 2)
        return SK_INT;
    if (is_one_of(s, n, specials))
        return SK_INF_NAN;
    return is_float(s, n) ? SK_FLOAT : SK_STRING;
}

/* Writes integer s (resolve said SK_INT; NUL-terminated after n bytes):
 * exactly when it fits 64 signed bits, else as the nearest double (null
 * past a double's range). */
static void write_int(struct jsonw *w, const char *s, size_t n)
{
    int neg = s[0] == '-', octal = n > 2 && s[0] == '0' && s[1] == 'o';
    size_t i = octal ? 2 : neg || s[0] == '+';
    uint64_t v = 0;
    long double d = 0;
    int overflow = 0;
    for (; octal && i < n; i++) {
        unsigned digit = (unsigned)(s[i] - '0');
        overflow |= v > (UINT64_MAX - digit) / 8;
        v = v * 8 + digit;
        d = d * 8 + digit;
    }
    if (!octal) {
        errno = 0;
        int hex = n > 2 && s[0] == '0' && s[1] == 'x'; /* "012" is decimal, unlike in C */
        v = strtoull(s + i, NULL, hex ? 16 : 10);
        overflow = errno == ERANGE;
    }
    if (!overflow && !neg && v <= INT64_MAX)
        jsonw_i64(w, (int64_t)v);
    else if (!overflow && neg && v <= (uint64_t)INT64_MAX + 1)
        jsonw_i64(w, v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v);
    else
        jsonw_real(w, octal ? (double)d : strtod(s, NULL));
}

/* The kind a scalar event stands for: a plain untagged scalar's by the core
 * schema; with !!null, !!bool, !!int or !!float, that type (-1 when the
 * text is not of it); anything else (quoted, !!str, other tags) a string. */
static int scalar_kind(const yaml_event_t *ev)
{
    static const char *const typed[] = {"null", "bool", "int", "float", NULL};
    const char *v = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    const char *tag = (const char *)ev->data.scalar.tag;
    if (!tag)
        return ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? (int)resolve(v, n) : SK_STRING;
    size_t plen = strlen(TAG_PREFIX);
    if (strncmp(tag, TAG_PREFIX, plen) != 0 || !is_one_of(tag + plen, strlen(tag + plen), typed))
        return SK_STRING;
    const char *t = tag + plen;
    enum scalar_kind k = memchr(v, '\0', n) ? SK_STRING : resolve(v, n);
    int fits = t[0] == 'n'   ? k == SK_NULL
               : t[0] == 'b' ? k == SK_TRUE || k == SK_FALSE
               : t[0] == 'i' ? k == SK_INT
                             : k == SK_INT || k == SK_FLOAT || k == SK_INF_NAN;
    return fits ? (int)k : -1;
}

static int write_scalar(struct conv *c, const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    int k = scalar_kind(ev);
    switch (k) {
    case SK_NULL:
    case SK_INF_NAN:
        jsonw_null(&c->w); /* what JSON.stringify writes for null, Infinity and NaN */
        break;
    case SK_TRUE:
    case SK_FALSE:
        jsonw_bool(&c->w, k == SK_TRUE);
        break;
    case SK_INT:
        write_int(&c->w, v, n);
        break;
    case SK_FLOAT:
        jsonw_real(&c->w, strtod(v, NULL)); /* the value is NUL-terminated, a float has no NUL */
        break;
    case SK_STRING:
        jsonw_strn(&c->w, v, n);
        break;
    default:
        return st_error_fail(c->err, ST_ERR_INVALID_ARGUMENT,
                             "line %zu: \"%.40s\" is not a %s", ev->start_mark.line + 1, v,
                             (const char *)ev->data.scalar.tag + strlen(TAG_PREFIX));
    }
    return GO_ON;
}

/* ---- events ---- */

static struct frame *top(struct conv *c)
{
    return c->depth ? &c->stack[c->depth - 1] : NULL;
}

/* After a value: its mapping wants a key next. */
static void value_done(struct conv *c)
{
    struct frame *f = top(c);
    if (f && f->is_map)
        f->want_key = 1;
}

static int key_scalar(struct conv *c, struct frame *f, const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    if (memchr(v, '\0', n))
        return st_error_fail(c->err, ST_ERR_INVALID_ARGUMENT,
                             "line %zu: a key with a NUL character", ev->start_mark.line + 1);
    if (!f->keys && !(f->keys = strmap_try_new(8)))
        return fail_memory(c);
    char *copy = malloc(n + 1);
    char **copies = realloc(f->key_copies, (f->n_keys + 1) * sizeof(*copies));
    if (copies)
        f->key_copies = copies;
    if (!copy || !copies) {
        free(copy);
        return fail_memory(c);
    }
    memcpy(copy, v, n + 1);
    f->key_copies[f->n_keys++] = copy;
    int rc = strmap_try_put(f->keys, copy, n, copy);
    if (rc == -EEXIST)
        return st_error_fail(c->err, ST_ERR_DUPLICATE_KEY, "line %zu: duplicate key \"%.60s\"",
                             ev->start_mark.line + 1, v);
    if (rc < 0)
        return fail_memory(c);
    jsonw_keyn(&c->w, v, n);
    f->want_key = 0;
    return GO_ON;
}

static int on_scalar(struct conv *c, const yaml_event_t *ev)
{
    struct frame *f = top(c);
    if (!f)
        return NONE; /* the document is a scalar, not a mapping */
    size_t s0 = c->w.sb.len;
    int was_key = f->want_key;
    int rc = was_key ? key_scalar(c, f, ev) : write_scalar(c, ev);
    if (rc == GO_ON && ev->data.scalar.anchor) {
        /* An anchored key names the key, as a string: its text less the ':'. */
        size_t start = value_start(c, s0);
        size_t end = c->w.sb.len - (was_key && c->w.sb.len > start ? 1 : 0);
        rc = anchor_store(c, (const char *)ev->data.scalar.anchor, start, end);
    }
    if (rc == GO_ON && !was_key)
        value_done(c);
    return rc;
}

static int on_alias(struct conv *c, const yaml_event_t *ev)
{
    const char *name = (const char *)ev->data.alias.anchor;
    struct frame *f = top(c);
    if (!f)
        return NONE;
    if (f->want_key)
        return st_error_fail(c->err, ST_ERR_INVALID_ARGUMENT, "line %zu: an alias as a key",
                             ev->start_mark.line + 1);
    const struct anchor *a = strmap_get(c->anchors, name, strlen(name));
    if (!a)
        return st_error_fail(c->err, ST_ERR_INVALID_ARGUMENT, "line %zu: unknown anchor \"%.60s\"",
                             ev->start_mark.line + 1, name);
    if (c->w.sb.len + a->len > CARD_YAML_MAX_OUTPUT)
        return st_error_fail(c->err, ST_ERR_LIMIT, "the front matter is more than %u bytes as "
                             "JSON", CARD_YAML_MAX_OUTPUT);
    jsonw_raw(&c->w, a->json, a->len);
    value_done(c);
    return GO_ON;
}

static int on_start(struct conv *c, const yaml_event_t *ev, int is_map)
{
    struct frame *f = top(c);
    if (!f && !is_map)
        return NONE; /* the document is a sequence */
    if (f && f->want_key)
        return st_error_fail(c->err, ST_ERR_INVALID_ARGUMENT,
                             "line %zu: a key that is not a scalar", ev->start_mark.line + 1);
    if (c->depth == CARD_YAML_MAX_DEPTH)
        return st_error_fail(c->err, ST_ERR_DEPTH, "line %zu: nested more than %d deep",
                             ev->start_mark.line + 1, CARD_YAML_MAX_DEPTH);
    const yaml_char_t *anchor = is_map ? ev->data.mapping_start.anchor
                                       : ev->data.sequence_start.anchor;
    size_t s0 = c->w.sb.len;
    (is_map ? jsonw_obj : jsonw_arr)(&c->w);
    struct frame *n = &c->stack[c->depth++];
    memset(n, 0, sizeof(*n));
    n->is_map = is_map;
    n->want_key = is_map;
    n->start = value_start(c, s0);
    if (anchor && !(n->anchor = strdup((const char *)anchor)))
        return fail_memory(c);
    return GO_ON;
}

static int on_end(struct conv *c)
{
    struct frame *f = top(c);
    if (!f)
        return st_error_fail(c->err, ST_ERR_INVALID_ARGUMENT, "unbalanced YAML events");
    (f->is_map ? jsonw_obj_end : jsonw_arr_end)(&c->w);
    int rc = f->anchor ? anchor_store(c, f->anchor, f->start, c->w.sb.len) : GO_ON;
    frame_free(f);
    c->depth--;
    value_done(c);
    return rc;
}

static int on_event(struct conv *c, const yaml_event_t *ev)
{
    int rc = GO_ON;
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (++c->documents > 1)
            return st_error_fail(c->err, ST_ERR_INVALID_ARGUMENT,
                                 "line %zu: a second YAML document", ev->start_mark.line + 1);
        break;
    case YAML_SCALAR_EVENT:
        rc = on_scalar(c, ev);
        break;
    case YAML_ALIAS_EVENT:
        rc = on_alias(c, ev);
        break;
    case YAML_MAPPING_START_EVENT:
    case YAML_SEQUENCE_START_EVENT:
        rc = on_start(c, ev, ev->type == YAML_MAPPING_START_EVENT);
        break;
    case YAML_MAPPING_END_EVENT:
    case YAML_SEQUENCE_END_EVENT:
        rc = on_end(c);
        break;
    default: /* stream start and end, document end, no event */
        break;
    }
    if (rc == GO_ON && c->w.sb.failed)
        return fail_memory(c);
    if (rc == GO_ON && c->w.sb.len > CARD_YAML_MAX_OUTPUT)
        return st_error_fail(c->err, ST_ERR_LIMIT, "the front matter is more than %u bytes as "
                             "JSON", CARD_YAML_MAX_OUTPUT);
    return rc;
}

static int parse_error(struct conv *c, const yaml_parser_t *p)
{
    if (p->error == YAML_MEMORY_ERROR)
        return fail_memory(c);
    return st_error_fail(c->err, ST_ERR_INVALID_ARGUMENT, "line %zu, column %zu: %s%s%s",
                         p->problem_mark.line + 1, p->problem_mark.column + 1,
                         p->problem ? p->problem : "not YAML", p->context ? " " : "",
                         p->context ? p->context : "");
}

int card_yaml_to_json(const char *yaml, size_t len, char **json, size_t *json_len,
                      struct st_error *err)
{
    struct conv c = {.err = err};
    yaml_parser_t p;
    int rc = NONE, started = 0;
    *json = NULL;
    jsonw_init(&c.w);
    if (!yaml_parser_initialize(&p))
        return st_error_fail(err, ST_ERR_NO_MEMORY, "out of memory reading the front matter");
    if (!(c.anchors = strmap_try_new(4))) {
        rc = fail_memory(&c);
        goto out;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)yaml, len);
    yaml_parser_set_encoding(&p, YAML_UTF8_ENCODING);
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            rc = parse_error(&c, &p);
            break;
        }
        started |= ev.type == YAML_MAPPING_START_EVENT;
        rc = ev.type == YAML_STREAM_END_EVENT ? (started ? DONE : NONE) : on_event(&c, &ev);
        yaml_event_delete(&ev);
        if (rc != GO_ON)
            break;
    }
    if (rc == DONE) {
        *json = jsonw_take(&c.w, json_len);
        rc = *json ? 1 : fail_memory(&c);
    }
out:
    while (c.depth)
        frame_free(&c.stack[--c.depth]);
    for (size_t i = 0; i < c.n_all; i++) {
        free(c.all[i]->name);
        free(c.all[i]->json);
        free(c.all[i]);
    }
    free(c.all);
    strmap_free(c.anchors);
    jsonw_free(&c.w);
    yaml_parser_delete(&p);
    return rc;
}
