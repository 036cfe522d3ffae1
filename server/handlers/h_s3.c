/* h_s3: the read-only S3 API (API.md "S3 API"), path-style, under /s3/:
 *
 *   GET /s3/                      ListBuckets: one bucket per repo
 *   GET /s3/{bucket}?list-type=2  ListObjectsV2 (prefix, delimiter, max-keys,
 *                                 continuation-token, start-after; and
 *                                 ListObjects version 1 with marker)
 *   HEAD /s3/{bucket}, GET ?location
 *   GET, HEAD /s3/{bucket}/{key}  the object, with Range
 *
 * A bucket is a repo (core/reg_repo): "name", or "org/name" spelled
 * "org--name" (a bucket name holds no '/'); a key is a file's path in the
 * repo. The ETag is the file's SHA-256 in quotes: a request that needs one
 * while the hasher has not reached the file waits for it on a suspended
 * connection, as the Hub routes do (hash_wait), then answers 503. Errors
 * are S3's XML documents with S3's codes, the one dialect S3 clients read;
 * who may ask is server/handlers/s3_auth's decision. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conditional.h"
#include "handlers.h"
#include "hasher.h"
#include "range.h"
#include "reg_repo.h"
#include "route.h"
#include "s3_auth.h"
#include "s3_req.h"
#include "server.h"
#include "util.h"
#include "xmlw.h"

#define S3_NS "http://s3.amazonaws.com/doc/2006-03-01/"
#define S3_XML "application/xml"
#define S3_REGION "us-east-1"

/* ---- answers ---------------------------------------------------------------- */

static struct answer *send_xml(struct answer *a, unsigned status, struct xmlw *w)
{
    size_t len;
    char *text = xmlw_take(w, &len);
    if (!text)
        return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                            "out of memory rendering the answer");
    answer_defer(a, free, text);
    return answer_doc(a, status, S3_XML, text, len);
}

static void iso_time(int64_t ns, char *out, size_t len)
{
    time_t t = (time_t)(ns / 1000000000);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || tm.tm_year < 0 || tm.tm_year > 9999 - 1900)
        memset(&tm, 0, sizeof(tm)), tm.tm_year = 70, tm.tm_mday = 1;
    snprintf(out, len, "%04d-%02d-%02dT%02d:%02d:%02d.000Z", (tm.tm_year + 1900) % 10000,
             (tm.tm_mon + 1) % 100, tm.tm_mday % 100, tm.tm_hour % 100, tm.tm_min % 100,
             tm.tm_sec % 100);
}

/* ---- buckets ---------------------------------------------------------------- */

/* The bucket name of repo id (caller frees): '/' spelled "--". */
static char *bucket_of(const char *id)
{
    const char *slash = strchr(id, '/');
    if (!slash)
        return xstrdup(id);
    return xasprintf("%.*s--%s", (int)(slash - id), id, slash + 1);
}

/* The repo a bucket names: the repo with that very id, else "org/name"
 * for the first "--" that splits it into an existing one. */
static const struct reg_repo *repo_of(const struct reg_snapshot *reg, const char *bucket,
                                      size_t len)
{
    if (memchr(bucket, '/', len))
        return NULL;
    const struct reg_repo *r = reg_snapshot_find_repo(reg, bucket, len);
    char *id = xstrndup(bucket, len);
    for (char *d = id; !r && (d = strstr(d, "--")) != NULL; d++) {
        /* "a--b" -> "a/b": the id loses one byte. */
        char *joined = xasprintf("%.*s/%s", (int)(d - id), id, d + 2);
        r = reg_snapshot_find_repo(reg, joined, strlen(joined));
        free(joined);
    }
    free(id);
    return r;
}

/* ---- waiting for hashes ------------------------------------------------------ */

/* 1 when every file of files[0..n) (in the arena) has its hash; otherwise 0
 * after answering "wait for them" (the request is dispatched again) or,
 * when it waited already, 503 SlowDown with Retry-After. */
static int need_hashes(const struct request_view *v, struct answer *a,
                       const struct reg_file **files, size_t n)
{
    size_t missing = 0;
    for (size_t i = 0; i < n; i++)
        if (!reg_file_hashed(files[i]))
            files[missing++] = files[i];
    if (missing == 0)
        return 1;
    if (answer_wait_hashes(v, a, files, missing))
        return 0;
    struct hasher *h = v->srv->hasher;
    unsigned after = h ? hasher_retry_after(h, files, missing) : 1;
    answer_s3_error(a, HTTP_SERVICE_UNAVAILABLE, "SlowDown", NULL,
                    "the content hashes (ETags) of %zu object(s) are being computed; retry in "
                    "%u s", missing, after);
    a->error.retry_after = after;
    return 0;
}

/* ---- listings ------------------------------------------------------------------ */

static int key_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

static void put_value(struct xmlw *w, const char *name, const char *v, size_t n, int url)
{
    (url ? xmlw_url_text : xmlw_text)(w, name, v, n);
}

/* The first of the repo's files (sorted by name, byte order) that is not
 * below key[0..n) (strictly above it when after): where a page starts, so
 * that listing N files P at a time costs N log N, not N^2 / P. */
static size_t first_file(const struct reg_repo *r, const char *key, size_t n, int after)
{
    size_t lo = 0, hi = r->n_files;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *name = r->files[mid].name;
        int c = key_cmp(name, strlen(name), key, n);
        if (c < 0 || (after && c == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* One entry of a listing page: a file, or a common prefix of key[0..len). */
struct entry {
    const struct reg_file *f;
    size_t len;
};

static struct answer *list_objects(const struct request_view *v, struct answer *a,
                                   const struct reg_repo *r, const char *bucket,
                                   const struct s3_query *q)
{
    struct s3_list l;
    struct st_error err;
    if (s3_list_parse(q, &l, &err) < 0) {
        answer_s3_error(a, HTTP_BAD_REQUEST, "InvalidArgument", NULL, "%s", err.message);
        goto out;
    }
    struct entry *page = answer_alloc(a, (l.max_keys + 1) * sizeof(*page));
    const struct reg_file **files = answer_alloc(a, (l.max_keys + 1) * sizeof(*files));
    size_t n = 0, n_files = 0;
    int truncated = 0;
    const char *last_cp = NULL;
    size_t last_cp_len = 0;
    /* The keys under the prefix are one run of the sorted files; the page
     * starts past `after` within it. */
    size_t at = l.prefix ? first_file(r, l.prefix, l.prefix_len, 0) : 0;
    if (l.after) {
        size_t past = first_file(r, l.after, l.after_len, 1);
        at = past > at ? past : at;
    }
    for (; at < r->n_files && !truncated; at++) {
        const struct reg_file *f = &r->files[at];
        size_t klen = strlen(f->name);
        if (l.prefix && (klen < l.prefix_len || memcmp(f->name, l.prefix, l.prefix_len) != 0))
            break; /* past the prefix's run */
        size_t len = klen, plen = l.prefix ? l.prefix_len : 0;
        if (l.delimiter) {
            const char *d = memmem(f->name + plen, klen - plen, l.delimiter, l.delimiter_len);
            if (d)
                len = (size_t)(d - f->name) + l.delimiter_len;
        }
        int is_cp = len < klen;
        if (is_cp && last_cp && last_cp_len == len && memcmp(last_cp, f->name, len) == 0)
            continue; /* this common prefix is listed already */
        if (n == l.max_keys) {
            /* max-keys=0 asks for nothing: AWS says not truncated (a truncated
             * page with no key has no token to go on from, and a client that
             * follows IsTruncated would ask again forever). */
            truncated = n > 0;
            break;
        }
        page[n++] = (struct entry){f, len};
        if (is_cp)
            last_cp = f->name, last_cp_len = len;
        else
            files[n_files++] = f;
    }
    if (!need_hashes(v, a, files, n_files))
        goto out;

    struct xmlw w;
    xmlw_init(&w);
    xmlw_open(&w, "ListBucketResult", S3_NS);
    xmlw_cstr(&w, "Name", bucket);
    put_value(&w, "Prefix", l.prefix ? l.prefix : "", l.prefix ? l.prefix_len : 0,
              l.url_encoding);
    if (l.delimiter)
        put_value(&w, "Delimiter", l.delimiter, l.delimiter_len, l.url_encoding);
    xmlw_u64(&w, "MaxKeys", l.max_keys);
    if (l.url_encoding)
        xmlw_cstr(&w, "EncodingType", "url");
    xmlw_bool(&w, "IsTruncated", truncated);
    char *token = NULL;
    if (truncated) {
        const struct entry *e = &page[n - 1];
        token = answer_alloc(a, 2 * e->len + 3);
        s3_list_token(e->f->name, e->len, e->len < strlen(e->f->name), token);
    }
    if (l.v2) {
        xmlw_u64(&w, "KeyCount", n);
        if (l.token)
            xmlw_text(&w, "ContinuationToken", l.token, l.token_len);
        if (token)
            xmlw_cstr(&w, "NextContinuationToken", token);
        if (l.start_after)
            put_value(&w, "StartAfter", l.start_after, l.start_after_len, l.url_encoding);
    } else {
        put_value(&w, "Marker", l.marker ? l.marker : "", l.marker ? l.marker_len : 0,
                  l.url_encoding);
        if (truncated)
            put_value(&w, "NextMarker", page[n - 1].f->name, page[n - 1].len, l.url_encoding);
    }
    for (size_t i = 0; i < n; i++) {
        const struct reg_file *f = page[i].f;
        if (page[i].len < strlen(f->name))
            continue;
        char when[40];
        iso_time(f->st.mtime_ns, when, sizeof(when));
        xmlw_open(&w, "Contents", NULL);
        put_value(&w, "Key", f->name, page[i].len, l.url_encoding);
        xmlw_cstr(&w, "LastModified", when);
        xmlw_cstr(&w, "ETag", f->sha256_etag);
        xmlw_u64(&w, "Size", f->st.size);
        xmlw_cstr(&w, "StorageClass", "STANDARD");
        xmlw_close(&w, "Contents");
    }
    for (size_t i = 0; i < n; i++) {
        if (page[i].len == strlen(page[i].f->name))
            continue;
        xmlw_open(&w, "CommonPrefixes", NULL);
        put_value(&w, "Prefix", page[i].f->name, page[i].len, l.url_encoding);
        xmlw_close(&w, "CommonPrefixes");
    }
    xmlw_close(&w, "ListBucketResult");
    send_xml(a, HTTP_OK, &w);
out:
    s3_list_free(&l);
    return a;
}

static struct answer *list_buckets(struct answer *a, const struct reg_snapshot *reg)
{
    struct xmlw w;
    xmlw_init(&w);
    xmlw_open(&w, "ListAllMyBucketsResult", S3_NS);
    xmlw_open(&w, "Owner", NULL);
    xmlw_cstr(&w, "ID", "tensord");
    xmlw_cstr(&w, "DisplayName", "tensord");
    xmlw_close(&w, "Owner");
    xmlw_open(&w, "Buckets", NULL);
    for (size_t i = 0; i < reg->n_repos; i++) {
        char when[40], *name = bucket_of(reg->repos[i]->id);
        if (repo_of(reg, name, strlen(name)) != reg->repos[i]) {
            /* "a/b" and a repo named "a--b" spell one bucket, which names
             * the latter: the former is not listed twice under it. */
            free(name);
            continue;
        }
        int64_t newest = 0;
        for (size_t k = 0; k < reg->repos[i]->n_files; k++)
            if (reg->repos[i]->files[k].st.mtime_ns > newest)
                newest = reg->repos[i]->files[k].st.mtime_ns;
        iso_time(newest, when, sizeof(when));
        xmlw_open(&w, "Bucket", NULL);
        xmlw_cstr(&w, "Name", name);
        xmlw_cstr(&w, "CreationDate", when);
        xmlw_close(&w, "Bucket");
        free(name);
    }
    xmlw_close(&w, "Buckets");
    xmlw_close(&w, "ListAllMyBucketsResult");
    return send_xml(a, HTTP_OK, &w);
}

/* ---- objects ------------------------------------------------------------------- */

static struct answer *get_object(const struct request_view *v, struct answer *a,
                                 const struct reg_repo *r, const struct route *rt,
                                 const struct s3_query *q, const char *resource)
{
    const struct reg_file *f = reg_repo_find_file(r, rt->name, rt->name_len);
    if (!f)
        return answer_s3_error(a, HTTP_NOT_FOUND, "NoSuchKey", resource,
                               "The specified key does not exist.");
    size_t pn_len;
    const char *pn = s3_query_get(q, "partNumber", &pn_len);
    if (pn && !(pn_len == 1 && pn[0] == '1'))
        return answer_s3_error(a, HTTP_RANGE_NOT_SATISFIABLE, "InvalidPartNumber", resource,
                               "the object has one part");
    const struct reg_file **want = answer_alloc(a, sizeof(*want));
    *want = f;
    if (!need_hashes(v, a, want, 1))
        return a;
    /* A Range none of whose parts overlaps the object is S3's InvalidRange
     * (the front's 416 speaks tensord's JSON). */
    const char *range = view_header(v, "Range");
    if (range && cond_if_range_allows(view_header(v, "If-Range"), f->sha256_etag)) {
        struct byte_range br[16];
        size_t nr;
        unsigned max = v->srv->cfg->max_ranges < 16 ? v->srv->cfg->max_ranges : 16;
        if (range_parse(range, f->st.size, max, br, &nr) == RANGE_UNSATISFIABLE) {
            answer_header(a, "Content-Range", answer_printf(a, "bytes */%" PRIu64, f->st.size));
            return answer_s3_error(a, HTTP_RANGE_NOT_SATISFIABLE, "InvalidRange", resource,
                                   "The requested range is not satisfiable");
        }
    }
    int fd = reg_open_below(r->root, f, O_RDONLY);
    if (fd < 0) {
        if (fd == -ESTALE)
            a->rescan = 1;
        return answer_s3_error(a, fd == -ESTALE || fd == -EMFILE || fd == -ENFILE
                                      ? HTTP_SERVICE_UNAVAILABLE
                                      : HTTP_INTERNAL_SERVER_ERROR,
                               fd == -ESTALE ? "SlowDown" : "InternalError", resource,
                               "%s could not be opened: %s", f->name,
                               fd == -ESTALE ? "it changed on disk; retry" : strerror(-fd));
    }
    a->fd = fd; /* the response holds its own duplicate */
    struct representation rep = {
        .body = {.fd = fd, .data_off = 0, .data_len = f->st.size},
        .content_type = answer_content_type(f->name),
        .mtime = f->st.mtime_ns / 1000000000,
        .file_st = &f->st,
    };
    snprintf(rep.etag, sizeof(rep.etag), "%s", f->sha256_etag);
    return answer_body(a, &rep);
}

/* ---- the route ----------------------------------------------------------------- */

static const char *const auth_codes[] = {
    [S3A_DENIED] = "AccessDenied",           [S3A_MALFORMED] = "AuthorizationHeaderMalformed",
    [S3A_UNKNOWN_KEY] = "InvalidAccessKeyId", [S3A_BAD_SIGNATURE] = "SignatureDoesNotMatch",
    [S3A_SKEWED] = "RequestTimeTooSkewed",    [S3A_UNSUPPORTED] = "InvalidRequest",
};

struct answer *handle_s3(const struct request_view *v, struct answer *a,
                         const struct reg_snapshot *reg, const struct route *rt)
{
    if (strcmp(v->method, "GET") != 0 && !v->is_head) {
        answer_header(a, "Allow", "GET, HEAD");
        return answer_s3_error(a, HTTP_METHOD_NOT_ALLOWED, "MethodNotAllowed", NULL,
                               "this S3 API is read-only: %.20s is not allowed", v->method);
    }
    /* The raw target (absolute-form stripped): its path is what a SigV4
     * signature covers, its query what the listing reads. */
    const char *target = route_origin_form(v->target ? v->target : "/");
    const char *qmark = strchr(target, '?');
    size_t path_len = qmark ? (size_t)(qmark - target) : strlen(target);
    struct s3_query q;
    struct st_error err;
    if (s3_query_parse(qmark ? qmark + 1 : "", qmark ? strlen(qmark + 1) : 0, &q, &err) < 0) {
        answer_s3_error(a, HTTP_BAD_REQUEST, "InvalidArgument", NULL, "%s", err.message);
        goto out;
    }
    char msg[256];
    enum s3_auth_result au = s3_auth_check(v, target, path_len, &q, msg, sizeof(msg));
    if (au != S3A_OK) {
        answer_s3_error(a, au == S3A_MALFORMED || au == S3A_UNSUPPORTED ? HTTP_BAD_REQUEST
                                                                        : HTTP_FORBIDDEN,
                        auth_codes[au], NULL, "%s", msg);
        goto out;
    }
    if (!rt->model) {
        list_buckets(a, reg);
        goto out;
    }
    const char *resource = answer_printf(a, "/%s%s%s", rt->model, rt->name ? "/" : "",
                                         rt->name ? rt->name : "");
    const struct reg_repo *r = repo_of(reg, rt->model, rt->model_len);
    if (!r) {
        answer_s3_error(a, HTTP_NOT_FOUND, "NoSuchBucket", resource,
                        "The specified bucket does not exist");
    } else if (rt->name) {
        get_object(v, a, r, rt, &q, resource);
    } else if (v->is_head) {
        answer_header(a, "x-amz-bucket-region", S3_REGION);
        answer_doc(a, HTTP_OK, S3_XML, "", 0);
    } else if (s3_query_get(&q, "location", NULL)) {
        struct xmlw w;
        xmlw_init(&w);
        xmlw_open(&w, "LocationConstraint", S3_NS);
        xmlw_close(&w, "LocationConstraint");
        send_xml(a, HTTP_OK, &w);
    } else {
        list_objects(v, a, r, rt->model, &q);
    }
out:
    s3_query_free(&q);
    return a;
}
