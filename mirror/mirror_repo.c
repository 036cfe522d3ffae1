/* mirror_repo: see mirror_repo.h. */
#include "mirror_repo.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "json_scan.h"
#include "mirror_health.h"
#include "mirror_int.h"
#include "mirror_names.h"
#include "upstream.h"
#include "util.h"

#define NAME_MAX_BYTES 1024
#define DOC_MAX_DEPTH 64           /* nesting in a repo document */

/* ---- the document ------------------------------------------------------------ */

/* The current string token, decoded into out (cap bytes, NUL-terminated).
 * Returns 0, or -1 when it is not a string or does not fit. */
static int take_string(struct json_scan *s, char *out, size_t cap)
{
    if (s->tok != JSON_TOK_STRING || s->str_nul)
        return -1;
    size_t n = json_scan_decode(s, out, cap - 1);
    if (n >= cap)
        return -1;
    out[n] = '\0';
    return 0;
}

static int take_size(struct json_scan *s, uint64_t *out)
{
    if (s->tok != JSON_TOK_INTEGER || s->integer < 0)
        return -1;
    *out = (uint64_t)s->integer;
    return 0;
}

/* What a sibling {"rfilename", "size", "blobId", "lfs": {"sha256", "size"}}
 * says. */
struct sibling {
    char name[NAME_MAX_BYTES], blob[48], sha[80];
    uint64_t size, lfs_size;
    int has_size, has_lfs, has_lfs_size;
};

static int lfs_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct sibling *sb = ctx;
    if (strcmp(key, "sha256") == 0 || strcmp(key, "oid") == 0)
        return take_string(s, sb->sha, sizeof(sb->sha));
    if (strcmp(key, "size") == 0) {
        sb->has_lfs_size = 1;
        return take_size(s, &sb->lfs_size);
    }
    return json_scan_value(s, depth, DOC_MAX_DEPTH);
}

static int sibling_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct sibling *sb = ctx;
    if (strcmp(key, "rfilename") == 0)
        return take_string(s, sb->name, sizeof(sb->name));
    if (strcmp(key, "blobId") == 0)
        return take_string(s, sb->blob, sizeof(sb->blob));
    if (strcmp(key, "size") == 0) {
        sb->has_size = 1;
        return take_size(s, &sb->size);
    }
    if (strcmp(key, "lfs") == 0 && s->tok == '{') {
        sb->has_lfs = 1;
        return json_scan_each(s, depth, DOC_MAX_DEPTH, lfs_member, sb);
    }
    return json_scan_value(s, depth, DOC_MAX_DEPTH);
}

/* Whether name is a path in a repo: components neither empty nor "." nor
 * "..", no control byte. */
static int repo_path(const char *name)
{
    if (!name[0])
        return 0;
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '\\')
            return 0;
    for (const char *c = name;;) {
        const char *slash = strchr(c, '/');
        size_t len = slash ? (size_t)(slash - c) : strlen(c);
        if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
            return 0;
        if (!slash)
            return 1;
        c = slash + 1;
    }
}

/* The repo document as it is read. */
struct doc {
    char sha[48];
    struct mirror_repo_file *v;
    size_t n, cap;
    const char *why;           /* a sibling refused: why */
};

static int doc_sibling(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct doc *d = ctx;
    struct sibling sb = {.name = ""};
    struct mirror_repo_file f = {0};
    (void)key;
    if (s->tok != '{' || json_scan_each(s, depth, DOC_MAX_DEPTH, sibling_member, &sb) < 0)
        return -1;
    if (!repo_path(sb.name)) {
        d->why = "a file name that is not a path in a repo";
        return -1;
    }
    if (d->n == MIRROR_REPO_FILES_MAX) {
        d->why = "too many files";
        return -1;
    }
    f.lfs = sb.has_lfs;
    f.has_size = sb.has_lfs_size || sb.has_size;
    f.size = sb.has_lfs_size ? sb.lfs_size : sb.size;
    if (strlen(sb.sha) == 64 && digest_unhex(sb.sha, 32, f.id.digest) == 0 && f.has_size) {
        f.id.kind = MIRROR_SHA256;
        f.has_id = 1;
    } else if (!sb.has_lfs && strlen(sb.blob) == 40 &&
               digest_unhex(sb.blob, 20, f.id.digest) == 0 && sb.has_size) {
        f.id.kind = MIRROR_GIT_SHA1;
        f.has_id = 1;
    }
    f.id.size = f.size;
    d->v = xgrow(d->v, &d->cap, d->n, sizeof(*d->v), 32);
    f.name = xstrdup(sb.name);
    d->v[d->n++] = f;
    return 0;
}

static int doc_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct doc *d = ctx;
    if (strcmp(key, "sha") == 0)
        return take_string(s, d->sha, sizeof(d->sha));
    if (strcmp(key, "siblings") == 0 && s->tok == '[')
        return json_scan_each(s, depth, DOC_MAX_DEPTH, doc_sibling, d);
    return json_scan_value(s, depth, DOC_MAX_DEPTH);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct mirror_repo_file *)a)->name,
                  ((const struct mirror_repo_file *)b)->name);
}

void mirror_repo_clear(struct mirror_repo *r)
{
    for (size_t i = 0; r->files && i < r->n; i++)
        free(r->files[i].name);
    free(r->files);
    memset(r, 0, sizeof(*r));
}

int mirror_repo_parse(const char *buf, size_t len, struct mirror_repo *out, struct st_error *err)
{
    struct json_scan s;
    struct doc d = {.sha = ""};
    struct mirror_repo r = {.commit = ""};
    memset(out, 0, sizeof(*out));
    if (!utf8_valid(buf, len) || memchr(buf, '\0', len))
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "the upstream's repo document is not "
                             "UTF-8 text");
    json_scan_init(&s, buf, len);
    int ok = json_scan_next(&s) == '{' && json_scan_each(&s, 0, DOC_MAX_DEPTH, doc_member, &d) == 0
             && json_scan_next(&s) == JSON_TOK_EOF;
    r.files = d.v;
    r.n = d.n;
    if (!ok) {
        mirror_repo_clear(&r);
        if (d.why && strcmp(d.why, "too many files") == 0) {
            st_error_fail(err, ST_ERR_LIMIT, "the upstream's repo has more than %d files",
                          MIRROR_REPO_FILES_MAX);
            return -E2BIG;
        }
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "the upstream's repo document is "
                             "not the JSON a Hub sends%s%s", d.why || s.failed ? ": " : "",
                             d.why ? d.why : s.failed ? s.text : "");
    }
    if (strlen(d.sha) != 40 || strspn(d.sha, "0123456789abcdef") != 40) {
        mirror_repo_clear(&r);
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "the upstream's repo document names "
                             "no commit (\"sha\")");
    }
    memcpy(r.commit, d.sha, 41);
    if (r.n)
        qsort(r.files, r.n, sizeof(*r.files), by_name);
    for (size_t i = 1; i < r.n; i++)
        if (strcmp(r.files[i - 1].name, r.files[i].name) == 0) {
            st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "the upstream's repo document names "
                          "\"%.200s\" twice", r.files[i].name);
            mirror_repo_clear(&r);
            return -EINVAL;
        }
    *out = r;
    return 0;
}

const struct mirror_repo_file *mirror_repo_find(const struct mirror_repo *r, const char *name)
{
    struct mirror_repo_file key = {.name = (char *)name};
    return r->n ? bsearch(&key, r->files, r->n, sizeof(key), by_name) : NULL;
}

int mirror_repo_is_weight(const char *name)
{
    return str_has_suffix(name, ".safetensors") || str_has_suffix(name, ".safetensors.index.json");
}

/* ---- asking -------------------------------------------------------------------- */

int mirror_repo_fetch(struct mirror *m, struct upstream_conn *c, const char *repo,
                      const char *rev, struct mirror_repo *out, int64_t *age,
                      struct st_error *err)
{
    char target[3 * NAME_MAX_BYTES + 96];
    size_t tlen = 0;
    if (upstream_encode(target, sizeof(target), &tlen, "/api/models/", 1) < 0 ||
        upstream_encode(target, sizeof(target), &tlen, repo, 1) < 0 ||
        upstream_encode(target, sizeof(target), &tlen, "/revision/", 1) < 0 ||
        upstream_encode(target, sizeof(target), &tlen, rev, 0) < 0 ||
        tlen + 12 >= sizeof(target))
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "repo name too long");
    strcat(target, "?blobs=true");
    /* The mirror's own question: its answers serve its own routes. */
    const struct mirror_asker own = {m->opt.own_auth, 1};
    char *key = xasprintf("doc\nGET\n%s\n", target), *body = NULL;
    size_t blen = 0;
    struct upstream_answer a;
    struct st_error why = {0};
    int rc = -EAGAIN; /* not asked: the upstream is paused */
    *age = -1;
    memset(&a, 0, sizeof(a));
    if (!mirror_health_paused(m)) {
        rc = upstream_request(c, "GET", target, NULL, 0, NULL, m->opt.own_auth, MIRROR_DOC_MAX,
                              &body, &blen, &a, &why);
        int answered = (rc == 0 && !mirror_health_status_down(a.status)) ||
                       mirror_health_answered_unusable(rc);
        if (rc == 0 && a.status >= 500) { /* its last word may stand in (stale-if-error) */
            st_error_fail(&why, ST_ERR_IO, "it answered %ld", a.status);
            rc = -EIO;
        }
        if (answered)
            mirror_health_ok(m);
        else if (rc != -ECANCELED)
            mirror_health_failed(m, why.message);
    } else {
        st_error_fail(&why, ST_ERR_IO, "it failed the last request(s)");
    }
    if (rc == 0 && (a.status == 404 || a.status == 401 || a.status == 403)) {
        rc = st_error_fail(err, ST_ERR_NOT_FOUND, "the upstream has no repo %s at %s (%ld%s%s%s%s)",
                           repo, rev, a.status, a.error_code[0] ? " " : "", a.error_code,
                           a.error_message[0] ? ": " : "", a.error_message);
    } else if (rc == 0 && a.status != 200) {
        rc = st_error_fail(err, ST_ERR_IO, "the upstream answered %ld for %s", a.status, target);
    } else if (rc == 0) {
        rc = mirror_repo_parse(body, blen, out, err);
        if (rc == 0)
            mirror_names_put(m, key, &own, body, blen);
    } else if (rc != -ECANCELED) {
        /* No answer: the last one, when it is kept and young enough. */
        free(body);
        body = NULL;
        if (mirror_names_get(m, key, &own, &body, &blen, age) &&
            mirror_repo_parse(body, blen, out, err) == 0) {
            mirror_health_served_stale(m);
            rc = 0;
        } else {
            st_error_fail(err, ST_ERR_IO, "the upstream %s cannot be reached (%s), and the "
                          "mirror keeps no answer about %s at %s%s", upstream_base(m->up),
                          why.message, repo, rev,
                          m->opt.serve_stale ? "" : " (mirror_offline is strict)");
            rc = -EHOSTUNREACH; /* mirror_ask_unreachable's */
        }
    } else {
        st_error_fail(err, ST_ERR_IO, "stopped: the mirror is stopping, or nobody waits for "
                      "the answer");
    }
    free(body);
    free(key);
    upstream_answer_free(&a);
    return rc;
}
