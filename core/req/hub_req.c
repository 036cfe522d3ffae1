/* hub_req: see hub_req.h. */
#include "hub_req.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "json_scan.h"
#include "util.h"

/* Takes ownership of path (len bytes, NUL-terminated). */
static int add(struct hub_paths *p, char *path, size_t len, struct st_error *err)
{
    if (memchr(path, '\0', len) || !utf8_valid(path, len)) {
        free(path);
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                             "paths[%zu] is not UTF-8 text without NUL bytes",
                             p->n);
    }
    if (len > HUB_PATH_MAX) {
        free(path);
        return st_error_fail(err, ST_ERR_LIMIT, "paths[%zu] is longer than %d bytes", p->n,
                             HUB_PATH_MAX);
    }
    if (p->n == HUB_PATHS_MAX) {
        free(path);
        return st_error_fail(err, ST_ERR_LIMIT, "more than %d paths", HUB_PATHS_MAX);
    }
    if ((p->n & (p->n - 1)) == 0) /* 0, 1, 2, 4, ...: grow to the next power of two */
        p->paths = xrealloc(p->paths, (p->n ? 2 * p->n : 1) * sizeof(*p->paths));
    p->paths[p->n++] = path;
    return 0;
}

/* ---- JSON ---- */

static int json_string(struct json_scan *s, struct hub_paths *p, struct st_error *err)
{
    if (s->str_nul)
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                             "paths[%zu] holds a NUL character", p->n);
    size_t n = s->str_len;
    char *v = xmalloc(n + 1);
    json_scan_decode(s, v, n);
    v[n] = '\0';
    return add(p, v, n, err);
}

/* The value of "paths": a string or an array of strings. Returns 0, a
 * negative errno with err set when the value has the wrong type, or 1 on a
 * JSON syntax error (in s). */
static int json_paths(struct json_scan *s, struct hub_paths *p, struct st_error *err)
{
    if (s->tok == JSON_TOK_STRING)
        return json_string(s, p, err);
    if (s->tok != '[') {
        if (s->tok == JSON_TOK_INVALID)
            return 1;
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                             "\"paths\" must be a string or an array of strings");
    }
    if (json_scan_next(s) == ']')
        return 0;
    for (;;) {
        if (s->tok != JSON_TOK_STRING) {
            if (s->tok == JSON_TOK_INVALID)
                return 1;
            return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "paths[%zu] must be a string",
                                 p->n);
        }
        int st = json_string(s, p, err);
        if (st != 0)
            return st;
        int more = json_scan_more(s, ']');
        if (more < 0)
            return 1;
        if (!more)
            return 0;
    }
}

static int parse_json(const char *text, size_t len, struct hub_paths *p,
                      struct st_error *err)
{
    struct json_scan s;
    int st;
    if (memchr(text, '\0', len) || !utf8_valid(text, len))
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                             "the body is not UTF-8 text without NUL bytes");
    json_scan_init(&s, text, len);
    if (json_scan_next(&s) != '{') {
        if (!s.failed)
            json_scan_fail(&s, JSON_ERR_DOCUMENT);
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                             "the body must be a JSON object: %s", s.text);
    }
    /* The top-level keys, to refuse one given twice (json_scan_value does
     * that for nested objects). */
    struct json_scan_keys keys = JSON_SCAN_KEYS_INIT;
    st = -EINVAL;
    if (json_scan_next(&s) != '}') {
        for (;;) {
            char key[6];
            if (json_scan_key(&s) != 0 || json_scan_keys_add(&s, &keys) != 0)
                goto json_error;
            size_t klen = s.str_len;
            int is_paths = klen == 5 && json_scan_decode(&s, key, 5) == 5 &&
                           memcmp(key, "paths", 5) == 0;
            int is_expand = klen == 6 && json_scan_decode(&s, key, 6) == 6 &&
                            memcmp(key, "expand", 6) == 0;
            if (json_scan_colon(&s) != 0)
                goto json_error;
            if (is_expand)
                p->expand = s.tok == JSON_TOK_TRUE;
            if (is_paths) {
                if ((st = json_paths(&s, p, err)) > 0)
                    goto json_error;
                if (st < 0)
                    goto out;
            } else if (json_scan_value(&s, 1, 32) != 0) {
                goto json_error;
            }
            int more = json_scan_more(&s, '}');
            if (more < 0)
                goto json_error;
            if (!more)
                break;
        }
    }
    if (json_scan_next(&s) != JSON_TOK_EOF) {
        json_scan_fail(&s, JSON_ERR_TRAILING);
        goto json_error;
    }
    st = 0;
    goto out;
json_error:
    if (!s.failed)
        json_scan_fail(&s, JSON_ERR_VALUE);
    st = st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                       "the body is not a JSON object of paths: %s at line %d, "
                       "column %d", s.text, s.line, s.column);
out:
    json_scan_keys_free(&keys);
    return st;
}

/* ---- forms ---- */

static int parse_form(const char *text, size_t len, struct hub_paths *p,
                      struct st_error *err)
{
    size_t i = 0;
    while (i < len) {
        const char *amp = memchr(text + i, '&', len - i);
        size_t end = amp ? (size_t)(amp - text) : len;
        const char *eq = memchr(text + i, '=', end - i);
        size_t kend = eq ? (size_t)(eq - text) : end;
        size_t klen;
        char *key = pct_decode(text + i, kend - i, PCT_FORM | PCT_NUL, &klen);
        if (!key)
            return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                                 "the form has a malformed %%-escape");
        int is_paths = strcmp(key, "paths") == 0 || strcmp(key, "paths[]") == 0;
        int is_expand = strcmp(key, "expand") == 0;
        free(key);
        if (is_expand && eq) {
            /* Python's str(True), JavaScript's true, or 1 */
            size_t vlen = end - kend - 1;
            p->expand = (vlen == 4 && strncasecmp(eq + 1, "true", 4) == 0) ||
                        (vlen == 1 && eq[1] == '1');
        }
        if (is_paths) {
            size_t vlen = 0;
            char *v = eq ? pct_decode(eq + 1, end - kend - 1, PCT_FORM | PCT_NUL, &vlen)
                         : xstrdup("");
            if (!v)
                return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                                     "the form has a malformed %%-escape");
            int st = add(p, v, vlen, err);
            if (st != 0)
                return st;
        }
        i = end + 1;
    }
    return 0;
}

int hub_paths_parse(const char *text, size_t len, int json,
                    struct hub_paths *out, struct st_error *err)
{
    memset(out, 0, sizeof(*out));
    if (err)
        err->message[0] = '\0';
    int st = json ? parse_json(text, len, out, err) : parse_form(text, len, out, err);
    if (st != 0)
        hub_paths_free(out);
    return st;
}

void hub_paths_free(struct hub_paths *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->paths[i]);
    free(p->paths);
    memset(p, 0, sizeof(*p));
}
