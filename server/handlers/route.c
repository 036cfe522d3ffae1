#include "route.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* A path segment: raw bytes [start, start+len) of the request path. */
struct seg {
    const char *p;
    size_t len;
};

#define MAX_SEGS 256

static int seg_is(const struct seg *s, const char *lit)
{
    return s->len == strlen(lit) && memcmp(s->p, lit, s->len) == 0;
}

/* Whether s is one of the NULL-ended words. */
static int seg_in(const struct seg *s, const char *const *words)
{
    for (; *words; words++)
        if (seg_is(s, *words))
            return 1;
    return 0;
}

/* Decodes segments [from, to) and joins them with '/'. With `strict`, every
 * component of the result (after decoding, so "%2F" splits too) must be
 * non-empty and neither "." nor "..". Returns NULL and fills err otherwise. */
static char *join_segments(const struct seg *segs, size_t from, size_t to, int strict,
                           size_t *out_len, const char *what, char *err, size_t errlen)
{
    size_t cap = 0;
    for (size_t i = from; i < to; i++)
        cap += segs[i].len + 1;
    char *out = xmalloc(cap + 1);
    size_t n = 0;
    for (size_t i = from; i < to; i++) {
        size_t dlen;
        char *d = pct_decode(segs[i].p, segs[i].len, 0, &dlen);
        if (!d) {
            snprintf(err, errlen, "%s name has a malformed percent-escape or a NUL byte", what);
            goto bad;
        }
        if (i > from)
            out[n++] = '/';
        memcpy(out + n, d, dlen);
        n += dlen;
        free(d);
    }
    out[n] = '\0';
    const char *c = out, *end = out + n;
    while (strict && c <= end) {
        const char *slash = memchr(c, '/', (size_t)(end - c));
        size_t clen = (size_t)((slash ? slash : end) - c);
        if (clen == 0 || (clen == 1 && c[0] == '.') || (clen == 2 && c[0] == '.' && c[1] == '.')) {
            snprintf(err, errlen, "%s name has an empty, \".\" or \"..\" component", what);
            goto bad;
        }
        if (!slash)
            break;
        c = slash + 1;
    }
    *out_len = n;
    return out;
bad:
    free(out);
    return NULL;
}

/* One reading of a Hub path: the repo id is segs[from, from + k). */
struct hub_reading {
    enum route_kind kind;
    size_t from, k;        /* repo id segments */
    size_t rev;            /* segment of the revision, or 0 when none */
    size_t path_from;      /* first segment of the path in the repo (n when none) */
    int raw;
};

/* /api/models/<repo...>/...: which endpoint the segments after a k-segment
 * repo id name, or ROUTE_NOT_FOUND. */
static int read_api(const struct seg *segs, size_t n, size_t k, struct hub_reading *h)
{
    size_t a = 2 + k; /* first segment after the repo id */
    if (a > n)
        return 0;
    *h = (struct hub_reading){.from = 2, .k = k, .path_from = n};
    if (a == n)
        h->kind = ROUTE_HUB_INFO;
    else if (seg_is(&segs[a], "revision") && n == a + 2)
        h->kind = ROUTE_HUB_INFO, h->rev = a + 1;
    else if (seg_is(&segs[a], "tree") && n >= a + 2)
        h->kind = ROUTE_HUB_TREE, h->rev = a + 1, h->path_from = a + 2;
    else if (seg_is(&segs[a], "paths-info") && n == a + 2)
        h->kind = ROUTE_HUB_PATHS_INFO, h->rev = a + 1;
    else if (seg_is(&segs[a], "refs") && n == a + 1)
        h->kind = ROUTE_HUB_REFS;
    else if (seg_is(&segs[a], "commits") && n == a + 2)
        h->kind = ROUTE_HUB_COMMITS, h->rev = a + 1;
    else
        return 0;
    return 1;
}

/* A dataset's or a space's route: /api/{datasets|spaces}/{id}[/...] (api)
 * or /{datasets|spaces}/{id}/{resolve|raw}/{rev}/{path...}. Every one is
 * ROUTE_HUB_NO_REPO (the lists are ROUTE_HUB_NO_REPOS); the id is the
 * reading of one or two segments that a Hub keyword follows, for the
 * message. Returns ROUTE_NOT_FOUND for a path of neither shape. */
static enum route_kind parse_other_repo(const struct seg *segs, size_t n, int api,
                                        struct route *r, char *err, size_t errlen)
{
    static const char *const api_words[] = {"revision", "tree", "paths-info", "refs", "commits",
                                            NULL};
    size_t from = api ? 2 : 1, k = 0;
    if (api && n == 2)
        return r->kind = ROUTE_HUB_NO_REPOS;
    for (size_t cand = 2; cand >= 1 && !k; cand--) {
        size_t a = from + cand;
        if (api && (a == n || (a < n && seg_in(&segs[a], api_words))))
            k = cand;
        if (!api && a + 2 < n && (seg_is(&segs[a], "resolve") || seg_is(&segs[a], "raw")))
            k = cand;
    }
    if (!k && !api)
        return r->kind = ROUTE_NOT_FOUND;
    if (!k)
        k = n - from >= 2 ? 2 : 1;
    r->model = join_segments(segs, from, from + k, 1, &r->model_len, "repo", err, errlen);
    return r->kind = r->model ? ROUTE_HUB_NO_REPO : ROUTE_BAD_PATH;
}

/* /<repo...>/resolve|raw/<rev>/<path...> with a k-segment repo id. */
static int read_file(const struct seg *segs, size_t n, size_t k, struct hub_reading *h)
{
    if (n < k + 3)
        return 0;
    const struct seg *kw = &segs[k];
    if (!seg_is(kw, "resolve") && !seg_is(kw, "raw"))
        return 0;
    *h = (struct hub_reading){.kind = ROUTE_HUB_FILE, .from = 0, .k = k, .rev = k + 1,
                              .path_from = k + 2, .raw = seg_is(kw, "raw")};
    return 1;
}

/* Whether the k-segment repo id of reading h names an existing repo. */
static int reading_exists(const struct seg *segs, const struct hub_reading *h,
                          route_repo_exists exists, void *ctx)
{
    char err[8];
    size_t len;
    char *id = join_segments(segs, h->from, h->from + h->k, 1, &len, "repo", err, sizeof(err));
    int yes = id && exists(ctx, id, len);
    free(id);
    return yes;
}

static enum route_kind parse_hub(const struct seg *segs, size_t n, int api,
                                 route_repo_exists exists, void *ctx, struct route *r, char *err,
                                 size_t errlen)
{
    struct hub_reading cand[2], *h = NULL;
    int ok[2];
    for (size_t k = 1; k <= 2; k++)
        ok[k - 1] = api ? read_api(segs, n, k, &cand[k - 1]) : read_file(segs, n, k, &cand[k - 1]);
    if (ok[0] && ok[1] && exists)
        h = reading_exists(segs, &cand[1], exists, ctx) ? &cand[1] : &cand[0];
    else if (ok[0] || ok[1])
        h = ok[0] ? &cand[0] : &cand[1];
    if (!h)
        return r->kind = api ? ROUTE_HUB_NOT_FOUND : ROUTE_NOT_FOUND;
    r->model = join_segments(segs, h->from, h->from + h->k, 1, &r->model_len, "repo", err, errlen);
    if (!r->model)
        return r->kind = ROUTE_BAD_PATH;
    if (h->rev) {
        r->rev = pct_decode(segs[h->rev].p, segs[h->rev].len, 0, &r->rev_len);
        /* "." and ".." name no revision; in a mirror's URL upstream they
         * would climb out of the route (/org/r/resolve/../x is /org/r/x). */
        if (!r->rev || r->rev_len == 0 || strcmp(r->rev, ".") == 0 || strcmp(r->rev, "..") == 0) {
            snprintf(err, errlen, "revision has a malformed percent-escape or a NUL byte, or is "
                     "empty, \".\" or \"..\"");
            return r->kind = ROUTE_BAD_PATH;
        }
    }
    if (h->path_from < n) {
        r->name = join_segments(segs, h->path_from, n, 1, &r->name_len, "path", err, errlen);
        if (!r->name)
            return r->kind = ROUTE_BAD_PATH;
    }
    r->raw = h->raw;
    return r->kind = h->kind;
}

/* Splits path (after its leading '/') into segs at each '/'; a trailing
 * slash is tolerated ("/v1/models/"). Returns the count, 0 when there are
 * more than MAX_SEGS. */
static size_t split_path(const char *p, struct seg *segs)
{
    size_t n = 0;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (n == MAX_SEGS)
            return 0;
        segs[n++] = (struct seg){p, len};
        if (!slash)
            break;
        p = slash + 1;
    }
    if (n > 1 && segs[n - 1].len == 0)
        n--;
    return n;
}

/* /v1/models/{model}[/{keyword}[/...]]: the model is every segment up to
 * the first keyword segment. */
static enum route_kind parse_model_path(const struct seg *segs, size_t n, struct route *r,
                                        char *err, size_t errlen)
{
    size_t k = 2;
    while (k < n && !seg_is(&segs[k], "tensors") && !seg_is(&segs[k], "files") &&
           !seg_is(&segs[k], "header") && !seg_is(&segs[k], "gpu") && !seg_is(&segs[k], "fetch"))
        k++;
    if (k == 2)
        return r->kind = ROUTE_NOT_FOUND;
    r->model = join_segments(segs, 2, k, 1, &r->model_len, "model", err, errlen);
    if (!r->model)
        return r->kind = ROUTE_BAD_PATH;
    if (k == n)
        return r->kind = ROUTE_MODEL;

    const struct seg *kw = &segs[k];
    size_t rest = n - k - 1;
    if (seg_is(kw, "header") && rest == 0)
        return r->kind = ROUTE_MODEL_HEADER;
    if (seg_is(kw, "gpu") && rest == 0)
        return r->kind = ROUTE_GPU;
    if (seg_is(kw, "fetch") && rest == 0)
        return r->kind = ROUTE_FETCH;
    if (seg_is(kw, "tensors") && rest >= 1) {
        /* Tensor names may contain '/' and are map keys only: everything after
         * "tensors" is the name, with no component rules beyond decoding. */
        r->name = join_segments(segs, k + 1, n, 0, &r->name_len, "tensor", err, errlen);
        if (!r->name)
            return r->kind = ROUTE_BAD_PATH;
        return r->kind = ROUTE_TENSOR;
    }
    if (seg_is(kw, "files") && (rest == 1 || (rest == 2 && seg_is(&segs[n - 1], "header")))) {
        r->name = join_segments(segs, k + 1, k + 2, 1, &r->name_len, "file", err, errlen);
        if (!r->name)
            return r->kind = ROUTE_BAD_PATH;
        if (memchr(r->name, '/', r->name_len)) {
            snprintf(err, errlen, "file name must not contain '/'");
            return r->kind = ROUTE_BAD_PATH;
        }
        return r->kind = rest == 1 ? ROUTE_FILE : ROUTE_FILE_HEADER;
    }
    return r->kind = ROUTE_NOT_FOUND;
}

/* /s3[/{bucket}[/{key...}]]: the bucket one decoded segment, the key the
 * rest joined with '/' (S3 keys have no component rules: they are only
 * looked up). */
static enum route_kind parse_s3(const struct seg *segs, size_t n, struct route *r, char *err,
                                size_t errlen)
{
    if (n >= 2 && segs[1].len > 0) {
        r->model = pct_decode(segs[1].p, segs[1].len, 0, &r->model_len);
        if (!r->model) {
            snprintf(err, errlen, "bucket has a malformed percent-escape or a NUL byte");
            return r->kind = ROUTE_BAD_PATH;
        }
        /* No bucket is named so (nor does any hold '/'): refused with the
         * other paths that name nothing. */
        if (memchr(r->model, '/', r->model_len) || strcmp(r->model, ".") == 0 ||
            strcmp(r->model, "..") == 0) {
            snprintf(err, errlen, "a bucket name is not \".\" or \"..\" and holds no '/'");
            free(r->model);
            r->model = NULL;
            return r->kind = ROUTE_BAD_PATH;
        }
    }
    if (n >= 3) {
        r->name = join_segments(segs, 2, n, 0, &r->name_len, "key", err, errlen);
        if (!r->name)
            return r->kind = ROUTE_BAD_PATH;
    }
    return r->kind = ROUTE_S3;
}

const char *route_origin_form(const char *target)
{
    size_t skip = strncmp(target, "http://", 7) == 0    ? 7
                  : strncmp(target, "https://", 8) == 0 ? 8
                                                         : 0;
    if (!skip)
        return target;
    const char *slash = strchr(target + skip, '/');
    return slash ? slash : "/";
}

enum route_kind route_parse(const char *path, route_repo_exists exists, void *ctx,
                                 struct route *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof(*r));
    err[0] = '\0';
    if (!path || path[0] != '/')
        return r->kind = ROUTE_BAD_PATH;

    struct seg segs[MAX_SEGS];
    size_t n = split_path(path + 1, segs);
    if (n == 0) {
        snprintf(err, errlen, "path has more than %d segments", MAX_SEGS);
        return r->kind = ROUTE_BAD_PATH;
    }

    if (strcmp(path, "/") == 0)
        return r->kind = ROUTE_ROOT;
    if (n == 1 && seg_is(&segs[0], "healthz"))
        return r->kind = ROUTE_HEALTHZ;
    if (n == 1 && seg_is(&segs[0], "readyz"))
        return r->kind = ROUTE_READYZ;
    if (n == 1 && seg_is(&segs[0], "metrics"))
        return r->kind = ROUTE_METRICS_TEXT;
    if (seg_is(&segs[0], "ui") && n <= 2) {
        /* "/ui/" is the page and "/ui/NAME" an asset (plain names: the raw
         * segment is the name); "/ui" is redirected to "/ui/". */
        r->name = xstrndup(n == 2 ? segs[1].p : "", n == 2 ? segs[1].len : 0);
        r->name_len = n == 2 ? segs[1].len : 0;
        r->raw = strcmp(path, "/ui") == 0;
        return r->kind = ROUTE_UI;
    }
    if (seg_is(&segs[0], "api")) {
        if (n >= 2 && seg_is(&segs[1], "models")) {
            if (n == 2)
                return r->kind = ROUTE_HUB_MODELS;
            return parse_hub(segs, n, 1, exists, ctx, r, err, errlen);
        }
        if (n == 2 && seg_is(&segs[1], "whoami-v2"))
            return r->kind = ROUTE_HUB_WHOAMI;
        if (n >= 2 && (seg_is(&segs[1], "datasets") || seg_is(&segs[1], "spaces")))
            return parse_other_repo(segs, n, 1, r, err, errlen);
        return r->kind = ROUTE_HUB_NOT_FOUND;
    }
    /* /s3/...: the S3 API, unless the path reads as a Hub file of an
     * existing repo named "s3" (or of an org "s3"), which keeps its URLs. */
    if (seg_is(&segs[0], "s3")) {
        enum route_kind k = parse_hub(segs, n, 0, exists, ctx, r, err, errlen);
        if (k == ROUTE_HUB_FILE && exists && exists(ctx, r->model, r->model_len))
            return k;
        route_free(r);
        memset(r, 0, sizeof(*r));
        err[0] = '\0';
        return parse_s3(segs, n, r, err, errlen);
    }
    if (n == 2 && seg_is(&segs[0], "v1") && seg_is(&segs[1], "openapi.json"))
        return r->kind = ROUTE_OPENAPI;
    /* /v1/blobs/{digest}: the segment decoded, checked by its handler. */
    if (n == 3 && seg_is(&segs[0], "v1") && seg_is(&segs[1], "blobs")) {
        r->name = pct_decode(segs[2].p, segs[2].len, 0, &r->name_len);
        if (!r->name) {
            snprintf(err, errlen, "digest has a malformed percent-escape or a NUL byte");
            return r->kind = ROUTE_BAD_PATH;
        }
        return r->kind = ROUTE_BLOB;
    }
    /* /v1/... is tensord's own API; any other path may be a Hub file (a
     * repo named "v1" has its files at /v1/resolve/...). */
    if (n < 2 || !seg_is(&segs[0], "v1") ||
        !(seg_is(&segs[1], "models") || (n == 2 && seg_is(&segs[1], "metrics")))) {
        /* A model repo's reading wins over a dataset's or a space's when it
         * names an existing repo (or nothing can tell). */
        enum route_kind k = parse_hub(segs, n, 0, exists, ctx, r, err, errlen);
        int other = seg_is(&segs[0], "datasets") || seg_is(&segs[0], "spaces");
        if (other && k == ROUTE_HUB_FILE && exists && !exists(ctx, r->model, r->model_len)) {
            route_free(r);
            if (parse_other_repo(segs, n, 0, r, err, errlen) == ROUTE_HUB_NO_REPO)
                return r->kind;
            route_free(r);
            return parse_hub(segs, n, 0, exists, ctx, r, err, errlen);
        }
        if (other && k == ROUTE_NOT_FOUND)
            k = parse_other_repo(segs, n, 0, r, err, errlen);
        return k;
    }
    if (n == 2 && seg_is(&segs[1], "metrics"))
        return r->kind = ROUTE_METRICS;
    if (n == 2)
        return r->kind = ROUTE_MODELS;

    return parse_model_path(segs, n, r, err, errlen);
}

void route_free(struct route *r)
{
    free(r->model);
    free(r->name);
    free(r->rev);
    r->model = r->name = r->rev = NULL;
}

const char *route_allowed_methods(enum route_kind kind)
{
    switch (kind) {
    case ROUTE_GPU:
        return "GET, HEAD, POST, DELETE";
    case ROUTE_FETCH:
    case ROUTE_HUB_NO_REPO:
        return "GET, HEAD, POST";
    case ROUTE_HUB_PATHS_INFO:
        return "POST";
    default:
        return "GET, HEAD";
    }
}
