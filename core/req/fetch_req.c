/* fetch_req: a recursive-descent reader of the fetch grammar over
 * json_scan's tokens. It stops at the first problem, JSON or schema, and
 * says where it is: "tensors[3].slice must be a string". Strings are decoded
 * into one arena sized by the text (a decoded string and its NUL never take
 * more bytes than its quoted form), so a request is three allocations
 * whatever it holds. */
#include "fetch_req.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "globpat.h"
#include "json_scan.h"
#include "st_header.h"
#include "util.h"

#define KEY_SHOW 40 /* bytes of an unknown key quoted in a message */

struct parser {
    struct json_scan s;
    struct fetch_req *r;
    const struct fetch_limits *lim;
    size_t arena_used;
    int rc;                        /* the errno of the first error */
    struct st_error *err;
};

/* Records the first error (code and message); returns -1 to unwind. */
static int request_error(struct parser *p, enum st_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int request_error(struct parser *p, enum st_status code, const char *fmt, ...)
{
    char msg[sizeof(p->err->message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    p->rc = st_error_fail(p->err, code, "%s", msg);
    return -1;
}

/* After json_scan reported an error. */
static int json_fail(struct parser *p)
{
    return request_error(p, ST_ERR_JSON, "request is not valid JSON: %s at line %d, column %d",
                         p->s.text, p->s.line, p->s.column);
}

/* What a value is, for a message. */
static const char *kind_of(int tok)
{
    switch (tok) {
    case '{': return "an object";
    case '[': return "an array";
    case JSON_TOK_STRING: return "a string";
    case JSON_TOK_INTEGER: return "an integer";
    case JSON_TOK_REAL: return "a number";
    case JSON_TOK_TRUE: case JSON_TOK_FALSE: return "a boolean";
    case JSON_TOK_NULL: return "null";
    default: return "not a value";
    }
}

/* Decodes the current string token into the arena. */
static const char *take_string(struct parser *p, size_t *len)
{
    char *dst = p->r->arena + p->arena_used;
    size_t n = json_scan_decode(&p->s, dst, p->s.str_len);
    dst[n] = '\0';
    p->arena_used += n + 1;
    *len = n;
    return dst;
}

/* Reads the current token as a value of the expected kind (its tokens, for
 * containers, stay to be read). Returns 0, or -1 with the error set. */
static int expect(struct parser *p, int tok, const char *where)
{
    if (json_scan_value_start(&p->s) != 0)
        return json_fail(p);
    if (p->s.tok == tok)
        return 0;
    return request_error(p, ST_ERR_INVALID_ARGUMENT, "%s must be %s, not %s", where, kind_of(tok),
                         kind_of(p->s.tok));
}

/* Object members: calls member(p, key, keylen, ctx) with the scanner on the
 * value's first token; member leaves it on the value's last token. The
 * object's opening '{' is the current token. Keys are compared decoded; the
 * names the grammar knows are short, so a longer key is unknown anyway. */
typedef int (*member_fn)(struct parser *p, const char *key, void *ctx);

static int object(struct parser *p, const char *where, const char *const *known, member_fn member,
                  void *ctx)
{
    unsigned seen = 0;
    if (json_scan_next(&p->s) == '}')
        return 0;
    for (;;) {
        if (json_scan_key(&p->s) != 0)
            return json_fail(p);
        char key[16];
        size_t klen = p->s.str_len;
        json_scan_decode(&p->s, key, sizeof(key) - 1);
        key[klen < sizeof(key) ? klen : sizeof(key) - 1] = '\0';
        size_t k = 0;
        while (known[k] && (klen >= sizeof(key) || strcmp(known[k], key) != 0))
            k++;
        if (!known[k]) {
            char raw[KEY_SHOW + 1], shown[KEY_SHOW + 4];
            size_t n = json_scan_decode(&p->s, raw, sizeof(raw));
            return request_error(
                p, ST_ERR_INVALID_ARGUMENT, "%s: unknown key \"%s\"", where,
                str_excerpt(raw, n < sizeof(raw) ? n : sizeof(raw), KEY_SHOW, shown));
        }
        if (seen & (1u << k))
            return request_error(p, ST_ERR_INVALID_ARGUMENT, "%s: duplicate key \"%s\"", where,
                                 known[k]);
        seen |= 1u << k;
        if (json_scan_colon(&p->s) != 0)
            return json_fail(p);
        if (member(p, known[k], ctx) != 0)
            return -1;
        int more = json_scan_more(&p->s, '}');
        if (more < 0)
            return json_fail(p);
        if (!more)
            return 0;
    }
}

/* Requires the keys in `required` (a bit per entry of known) to have been
 * seen; object() does not keep that, so members record it in *have. */
static int require(struct parser *p, const char *where, unsigned have, unsigned need,
                   const char *const *known)
{
    for (unsigned k = 0; known[k]; k++)
        if ((need & (1u << k)) && !(have & (1u << k)))
            return request_error(p, ST_ERR_INVALID_ARGUMENT, "%s: \"%s\" is missing", where,
                                 known[k]);
    return 0;
}

/* ---- tensors ---- */

struct item_ctx {
    struct fetch_item *it;
    char where[48];
    unsigned have;
};

static const char *const item_keys[] = {"name", "slice", NULL};

static int item_member(struct parser *p, const char *key, void *ctx)
{
    struct item_ctx *c = ctx;
    char where[64];
    snprintf(where, sizeof(where), "%s.%s", c->where, key);
    if (expect(p, JSON_TOK_STRING, where) != 0)
        return -1;
    if (strcmp(key, "name") == 0) {
        c->it->name = take_string(p, &c->it->name_len);
        c->have |= 1;
    } else {
        c->it->slice = take_string(p, &c->it->slice_len);
        c->have |= 2;
    }
    return 0;
}

static int tensors_member(struct parser *p)
{
    struct fetch_req *r = p->r;
    if (expect(p, '[', "tensors") != 0)
        return -1;
    size_t cap = 0;
    r->all = 0;
    if (json_scan_next(&p->s) == ']')
        return 0;
    for (;;) {
        if (p->s.tok == JSON_TOK_EOF) {
            json_scan_fail(&p->s, JSON_ERR_ARRAY_END);
            return json_fail(p);
        }
        if (r->n_items == p->lim->max_tensors)
            return request_error(p, ST_ERR_LIMIT,
                                 "more than %zu tensors in one request "
                                 "(max_fetch_tensors)",
                                 p->lim->max_tensors);
        r->items = xgrow(r->items, &cap, r->n_items, sizeof(*r->items), 16);
        struct fetch_item *it = &r->items[r->n_items];
        memset(it, 0, sizeof(*it));
        struct item_ctx c = {.it = it};
        snprintf(c.where, sizeof(c.where), "tensors[%zu]", r->n_items);
        if (json_scan_value_start(&p->s) != 0)
            return json_fail(p);
        if (p->s.tok == JSON_TOK_STRING) {
            it->name = take_string(p, &it->name_len);
        } else if (p->s.tok == '{') {
            if (object(p, c.where, item_keys, item_member, &c) != 0 ||
                require(p, c.where, c.have, 1, item_keys) != 0)
                return -1;
        } else {
            return request_error(p, ST_ERR_INVALID_ARGUMENT,
                                 "%s must be a tensor name or an object "
                                 "{\"name\": ..., \"slice\": ...}, not %s",
                                 c.where, kind_of(p->s.tok));
        }
        r->n_items++;
        int more = json_scan_more(&p->s, ']');
        if (more < 0)
            return json_fail(p);
        if (!more)
            return 0;
    }
}

/* ---- split ---- */

struct rule_ctx {
    struct fetch_rule *rule;
    char where[48];
    unsigned have;
};

static const char *const rule_keys[] = {"match", "dim", NULL};
static const char *const split_keys[] = {"world", "rank", "rules", NULL};

static int rule_member(struct parser *p, const char *key, void *ctx)
{
    struct rule_ctx *c = ctx;
    char where[64];
    snprintf(where, sizeof(where), "%s.%s", c->where, key);
    if (strcmp(key, "match") == 0) {
        if (expect(p, JSON_TOK_STRING, where) != 0)
            return -1;
        if (p->s.str_len > FETCH_MAX_GLOB)
            return request_error(p, ST_ERR_INVALID_ARGUMENT, "%s is longer than %d bytes", where,
                                 FETCH_MAX_GLOB);
        c->rule->match = take_string(p, &c->rule->match_len);
        c->rule->glob = globpat_compile(c->rule->match, c->rule->match_len);
        if (!c->rule->glob)
            return request_error(p, ST_ERR_INVALID_ARGUMENT, "%s has a reversed character range",
                                 where);
        c->have |= 1;
    } else {
        if (expect(p, JSON_TOK_INTEGER, where) != 0)
            return -1;
        c->rule->dim = p->s.integer;
        c->have |= 2;
    }
    return 0;
}

static int rules_value(struct parser *p)
{
    struct fetch_req *r = p->r;
    if (expect(p, '[', "split.rules") != 0)
        return -1;
    if (json_scan_next(&p->s) == ']')
        return 0;
    r->rules = xcalloc(FETCH_MAX_RULES, sizeof(*r->rules));
    for (;;) {
        if (p->s.tok == JSON_TOK_EOF) {
            json_scan_fail(&p->s, JSON_ERR_ARRAY_END);
            return json_fail(p);
        }
        if (r->n_rules == FETCH_MAX_RULES)
            return request_error(p, ST_ERR_INVALID_ARGUMENT, "split.rules has more than %d rules",
                                 FETCH_MAX_RULES);
        struct rule_ctx c = {.rule = &r->rules[r->n_rules]};
        snprintf(c.where, sizeof(c.where), "split.rules[%zu]", r->n_rules);
        r->n_rules++; /* counted now, so that fetch_req_free frees a half-read glob */
        if (expect(p, '{', c.where) != 0 || object(p, c.where, rule_keys, rule_member, &c) != 0 ||
            require(p, c.where, c.have, 3, rule_keys) != 0)
            return -1;
        int more = json_scan_more(&p->s, ']');
        if (more < 0)
            return json_fail(p);
        if (!more)
            return 0;
    }
}

struct split_ctx {
    unsigned have;
    int64_t world, rank;
};

static int split_member(struct parser *p, const char *key, void *ctx)
{
    struct split_ctx *c = ctx;
    if (strcmp(key, "rules") == 0) {
        c->have |= 4;
        return rules_value(p);
    }
    char where[32];
    snprintf(where, sizeof(where), "split.%s", key);
    if (expect(p, JSON_TOK_INTEGER, where) != 0)
        return -1;
    if (strcmp(key, "world") == 0) {
        c->world = p->s.integer;
        c->have |= 1;
    } else {
        c->rank = p->s.integer;
        c->have |= 2;
    }
    return 0;
}

/* The split object at the current token; with_rank: "rank" required (1)
 * or refused (0). */
static int split_object(struct parser *p, int with_rank)
{
    struct split_ctx c = {0};
    static const char *const keys_no_rank[] = {"world", "rules", NULL};
    if (expect(p, '{', "split") != 0 ||
        object(p, "split", with_rank ? split_keys : keys_no_rank, split_member, &c) != 0 ||
        require(p, "split", c.have & 5, 5, keys_no_rank) != 0 ||
        (with_rank && require(p, "split", c.have, 7, split_keys) != 0))
        return -1;
    if (c.world < 1)
        return request_error(p, ST_ERR_INVALID_ARGUMENT,
                             "split.world must be at least 1, not %" PRId64, c.world);
    if (with_rank && (c.rank < 0 || c.rank >= c.world))
        return request_error(p, ST_ERR_INVALID_ARGUMENT,
                             "split.rank must be in [0, %" PRId64 "), not %" PRId64, c.world,
                             c.rank);
    p->r->has_split = 1;
    p->r->world = (uint64_t)c.world;
    p->r->rank = (uint64_t)c.rank;
    return 0;
}

/* ---- the document ---- */

static const char *const top_keys[] = {"tensors", "split", NULL};

static int top_member(struct parser *p, const char *key, void *ctx)
{
    (void)ctx;
    return strcmp(key, "tensors") == 0 ? tensors_member(p) : split_object(p, 1);
}

/* What both documents start with: p->r empty (every tensor, no split) and
 * the text, checked to be UTF-8 without NUL bytes, given to the scanner. */
static int parse_begin(struct parser *p, const char *text, size_t len)
{
    memset(p->r, 0, sizeof(*p->r));
    p->r->all = 1;
    if (p->err)
        p->err->message[0] = '\0';
    if (memchr(text, '\0', len) || !utf8_valid(text, len))
        return request_error(p, ST_ERR_UTF8, "request is not UTF-8 text without NUL bytes");
    p->r->arena = xmalloc(len + 1);
    json_scan_init(&p->s, text, len);
    return 0;
}

/* After the document's one value: only whitespace may follow. */
static int parse_end(struct parser *p)
{
    if (json_scan_next(&p->s) == JSON_TOK_EOF)
        return 0;
    json_scan_fail(&p->s, JSON_ERR_TRAILING);
    return json_fail(p);
}

int fetch_req_parse(const char *text, size_t len, const struct fetch_limits *lim,
                    struct fetch_req *out, struct st_error *err)
{
    struct parser p = {.r = out, .lim = lim, .err = err};
    if (parse_begin(&p, text, len) != 0)
        goto bad;
    if (json_scan_next(&p.s) == JSON_TOK_EOF) /* no text at all: {} */
        return 0;
    if (p.s.tok == JSON_TOK_INVALID) {
        json_fail(&p);
        goto bad;
    }
    if (p.s.tok != '{') {
        request_error(&p, ST_ERR_INVALID_ARGUMENT, "request must be a JSON object, not %s",
                      kind_of(p.s.tok));
        goto bad;
    }
    if (object(&p, "request", top_keys, top_member, NULL) != 0 || parse_end(&p) != 0)
        goto bad;
    return 0;
bad:
    fetch_req_free(out);
    return p.rc;
}

int fetch_req_parse_split(const char *text, size_t len, int with_rank, struct fetch_req *out,
                          struct st_error *err)
{
    struct parser p = {.r = out, .err = err};
    if (parse_begin(&p, text, len) != 0)
        goto bad;
    if (json_scan_next(&p.s) == JSON_TOK_INVALID) {
        json_fail(&p);
        goto bad;
    }
    if (split_object(&p, with_rank) != 0 || parse_end(&p) != 0)
        goto bad;
    return 0;
bad:
    fetch_req_free(out);
    return p.rc;
}

#define SHAPE_TEXT (ST_MAX_NDIM * 21 + 1)

int fetch_req_plan_tensor(const struct fetch_req *r, const char *name, size_t name_len,
                          const char *spec, size_t spec_len, enum dtype dt, uint32_t ndim,
                          const uint64_t *shape, uint64_t *budget, struct slice_plan *plan,
                          struct fetch_part *part, struct st_error *err)
{
    char nm[ST_NAME_SHOW + 4], text[SHAPE_TEXT];
    const char *dts = dtype_info(dt)->name;
    struct st_error e;
    memset(part, 0, sizeof(*part));
#define NM str_excerpt(name, name_len, ST_NAME_SHOW, nm)
    if (slice_plan_build(spec, spec_len, dt, ndim, shape, plan, &e) < 0) {
        shape_format(text, SHAPE_TEXT, shape, ndim, ",");
        return st_error_fail(err, ST_ERR_SLICE, "tensor \"%s\" %s [%s]: %s", NM, dts, text,
                             e.message);
    }
    int exhausted = 0;
    const struct fetch_rule *rule =
        r->has_split ? fetch_req_rule_for(r, name, name_len, budget, &exhausted) : NULL;
    if (exhausted)
        return st_error_fail(err, ST_ERR_SPLIT,
                             "matching the split rules against the tensors' names took more "
                             "than %llu steps (at tensor \"%s\"); use fewer rules, or globs "
                             "with fewer stars", (unsigned long long)FETCH_GLOB_BUDGET, NM);
    if (!rule || plan->ndim == 0)
        return 0;
    int64_t dim = rule->dim < 0 ? rule->dim + (int64_t)plan->ndim : rule->dim;
    if (dim < 0 || dim >= (int64_t)plan->ndim) {
        shape_format(text, SHAPE_TEXT, plan->shape, plan->ndim, ",");
        return st_error_fail(err, ST_ERR_SPLIT,
                             "tensor \"%s\" [%s]: split dim %" PRId64 " (rule \"%.100s\") is "
                             "out of range for %" PRIu32 " dimensions",
                             NM, text, rule->dim, rule->match, plan->ndim);
    }
    *part = (struct fetch_part){.split = 1, .dim = (uint32_t)dim, .full = plan->shape[dim]};
    fetch_split_bounds(plan->shape[dim], r->world, r->rank, &part->lo, &part->hi);
    struct slice_narrow cut = {(uint32_t)dim, part->lo, part->hi};
    if (slice_plan_build_narrowed(spec, spec_len, dt, ndim, shape, &cut, plan, &e) < 0)
        return st_error_fail(err, ST_ERR_SPLIT, "tensor \"%s\" %s: part %" PRIu64 " of %" PRIu64
                             " of dim %" PRId64 ": %s", NM, dts, r->rank, r->world, dim,
                             e.message);
    return 0;
#undef NM
}

const struct fetch_rule *fetch_req_rule_for(const struct fetch_req *r, const char *name,
                                            size_t len, uint64_t *budget, int *exhausted)
{
    *exhausted = 0;
    for (size_t i = 0; i < r->n_rules; i++) {
        int m = globpat_match(r->rules[i].glob, name, len, budget);
        if (m < 0) {
            *exhausted = 1;
            return NULL;
        }
        if (m)
            return &r->rules[i];
    }
    return NULL;
}

void fetch_req_free(struct fetch_req *r)
{
    for (size_t i = 0; i < r->n_rules; i++)
        globpat_free(r->rules[i].glob);
    free(r->rules);
    free(r->items);
    free(r->arena);
    memset(r, 0, sizeof(*r));
}
