/* h_s3: the read-only S3 API (API.md "S3 API"), path-style, under /s3/:
 *
 *   GET /s3/                      ListBuckets: one bucket per repo
 *   GET /s3/{bucket}?list-type=2  ListObjectsV2 (prefix, delimiter, max-keys,
 *                                 continuation-token, start-after; and
 *                                 ListObjects version 1 with marker)
 *   HEAD /s3/{bucket}, GET ?location
 *   GET, HEAD /s3/{bucket}/{key}  the object, with Range
 *
 * A bucket is a repo (core/registry/reg_repo): "name", or "org/name" spelled
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

#include "h_mirror.h"
#include "handlers.h"
#include "hasher.h"
#include "reg_repo.h"
#include "route.h"
#include "s3_bucket.h"
#include "s3_auth.h"
#include "s3_req.h"
#include "util.h"
#include "xmlw.h"

/* ---- buckets ---------------------------------------------------------------- */

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

/* ---- a repo as a bucket ------------------------------------------------------------ */

static void repo_object(const void *ctx, size_t i, struct s3_object *o)
{
    const struct reg_file *f = &((const struct reg_repo *)ctx)->files[i];
    *o = (struct s3_object){f->name, f->st.size, f->st.mtime_ns, f->sha256_etag};
}

/* The listing's ETags are the files' hashes: waited for. */
static int repo_ready(const struct request_view *v, struct answer *a, const void *ctx,
                      const size_t *idx, size_t k)
{
    const struct reg_repo *r = ctx;
    const struct reg_file **files = answer_alloc(a, (k ? k : 1) * sizeof(*files));
    for (size_t i = 0; i < k; i++)
        files[i] = &r->files[idx[i]];
    return need_hashes(v, a, files, k);
}

static struct answer *list_buckets(const struct request_view *v, struct answer *a,
                                   const struct reg_snapshot *reg)
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
        char *name = s3_bucket_name(reg->repos[i]->id);
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
        s3_bucket_entry(&w, name, newest);
        free(name);
    }
    if (v->srv->mirror) /* and the repos its upstream has that the models root does not */
        mirror_s3_buckets(v, &w, reg);
    xmlw_close(&w, "Buckets");
    xmlw_close(&w, "ListAllMyBucketsResult");
    return s3_send_xml(a, HTTP_OK, &w);
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
    const struct reg_file **want = answer_alloc(a, sizeof(*want));
    *want = f;
    if (!need_hashes(v, a, want, 1) ||
        s3_object_check(v, a, f->st.size, f->sha256_etag, q, resource) < 0)
        return a;
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
        list_buckets(v, a, reg);
        goto out;
    }
    const char *resource = answer_printf(a, "/%s%s%s", rt->model, rt->name ? "/" : "",
                                         rt->name ? rt->name : "");
    const struct reg_repo *r = repo_of(reg, rt->model, rt->model_len);
    if (!r && v->srv->mirror) { /* a repo of the upstream's */
        handle_mirror_s3(v, a, rt, &q, resource);
    } else if (!r) {
        answer_s3_error(a, HTTP_NOT_FOUND, "NoSuchBucket", resource,
                        "The specified bucket does not exist");
    } else if (rt->name) {
        get_object(v, a, r, rt, &q, resource);
    } else {
        struct s3_bucket b = {rt->model, r->n_files, repo_object, r, repo_ready};
        s3_bucket_answer(v, a, &b, &q);
    }
out:
    s3_query_free(&q);
    return a;
}
