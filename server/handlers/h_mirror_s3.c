/* h_mirror_s3: the S3 API over the upstream's repos, on a mirror: a bucket
 * the models root has no repo for is the upstream repo it names ("name",
 * or "org--name" for "org/name"), at the commit its main branch names
 * (mirror/mirror_view.h's snap, asked with upstream_token_file's token
 * once mirror_auth_ttl has passed); its objects are the repo's files that
 * have a hash the mirror can check, listed as a local repo's are (with the
 * content's hash, SHA-256 or git blob id, as the ETag) and read through
 * the cache as they arrive, asking the mirror for the blocks a Range
 * sends. Stale while the upstream cannot be reached, as the /v1 routes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "h_mirror_int.h"
#include "mirror.h"
#include "mirror_health.h"
#include "mirror_job.h"
#include "mirror_repos.h"
#include "mirror_view.h"
#include "route.h"
#include "s3_bucket.h"
#include "upstream.h"
#include "util.h"
#include "xmlw.h"

/* A snap's files with a hash, as a bucket's objects. */
struct objects {
    const struct mirror_repo *doc;
    const size_t *idx;         /* the files with a hash, by index in doc */
    size_t n;
    char (*etags)[68];         /* made as they are listed */
};

static void doc_object(const void *ctx, size_t i, struct s3_object *o)
{
    const struct objects *b = ctx;
    const struct mirror_repo_file *f = &b->doc->files[b->idx[i]];
    char hex[65];
    digest_hex(f->id.digest, f->id.kind == MIRROR_SHA256 ? 32 : 20, hex);
    snprintf(b->etags[i], sizeof(b->etags[i]), "\"%s\"", hex);
    *o = (struct s3_object){f->name, f->id.size, 0, b->etags[i]};
}

static void unref_snap(void *s)
{
    mirror_snap_unref(s);
}

/* The repo a bucket names: "org--name" is "org/name" (the first "--"); NULL
 * when that is no repo id (an empty, "." or ".." part: in the upstream's
 * URLs it would climb out of /api/models/, with the mirror's own token). */
static char *repo_of(const char *bucket)
{
    const char *d = strstr(bucket, "--");
    size_t org = d ? (size_t)(d - bucket) : 0;
    const char *name = d ? d + 2 : bucket;
    if ((d && (org == 0 || (org == 1 && bucket[0] == '.') ||
               (org == 2 && bucket[0] == '.' && bucket[1] == '.'))) ||
        !name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return NULL;
    return d ? xasprintf("%.*s/%s", (int)org, bucket, name) : xstrdup(bucket);
}

/* GET or HEAD of an object: the file's bytes from the cache. */
static struct answer *get_object(const struct request_view *v, struct answer *a,
                                 const struct mirror_snap *s, const struct route *rt,
                                 const struct s3_query *q, const char *resource)
{
    struct mirror *m = v->srv->mirror;
    const struct mirror_repo_file *f = mirror_repo_find(mirror_snap_doc(s), rt->name);
    if (!f || !f->has_id)
        return answer_s3_error(a, HTTP_NOT_FOUND, "NoSuchKey", resource,
                               "The specified key does not exist.");
    char hex[65];
    struct representation rep = {
        .body = {.fd = -1, .data_off = 0, .data_len = f->id.size},
        .content_type = answer_content_type(rt->name),
        .mtime = -1,
        .no_read = v->is_head, /* a HEAD opens nothing */
    };
    digest_hex(f->id.digest, f->id.kind == MIRROR_SHA256 ? 32 : 20, hex);
    snprintf(rep.etag, sizeof(rep.etag), "\"%s\"", hex);
    if (s3_object_check(v, a, f->id.size, rep.etag, q, resource) < 0)
        return a;
    if (!v->is_head) {
        struct st_error e;
        struct mirror_src src = {mirror_snap_repo(s), mirror_snap_doc(s)->commit, f->name,
                                 mirror_own_auth(m)};
        struct mirror_file *mf = mirror_open(m, &f->id, &src, &e);
        if (!mf)
            return answer_s3_error(a, e.code == ST_ERR_CONFLICT ? HTTP_BAD_GATEWAY
                                                                : HTTP_SERVICE_UNAVAILABLE,
                                   e.code == ST_ERR_CONFLICT ? "InternalError" : "SlowDown",
                                   resource, "mirror: %s", e.message);
        mirror_answer_hold(a, m, mf);
        struct mirror_read *rd = answer_alloc(a, sizeof(*rd));
        *rd = (struct mirror_read){.fd = mirror_file_fd(mf), .f = mf,
                                   .complete = mirror_file_complete(m, mf)};
        /* Bytes the cache lacks cannot come while the upstream is away. */
        if (!rd->complete && mirror_health_paused(m))
            return answer_s3_error(a, HTTP_SERVICE_UNAVAILABLE, "ServiceUnavailable", resource,
                                   "the upstream %s cannot be reached, and the mirror's cache "
                                   "does not hold all of %.300s",
                                   upstream_base(mirror_upstream(m)), rt->name);
        rep.body.fd = rd->fd;
        answer_reads_mirrored(&rep, rd, 1);
    }
    return answer_body(a, &rep);
}

struct answer *handle_mirror_s3(const struct request_view *v, struct answer *a,
                                const struct route *rt, const struct s3_query *q,
                                const char *resource)
{
    struct mirror *m = v->srv->mirror;
    struct mirror_snap *s;
    char *repo = repo_of(rt->model);
    if (!repo)
        return answer_s3_error(a, HTTP_NOT_FOUND, "NoSuchBucket", resource,
                               "The specified bucket does not exist (it names no repo)");
    const char *arena_repo = answer_strdup(a, repo);
    free(repo);
    if (mirror_answer_refused(v, a, MD_S3))
        return a;
    if (v->wait_job && mirror_job_runs_view(v->wait_job, 1)) {
        struct st_error e;
        int rc = mirror_job_snap_take(v->wait_job, &s, &e);
        if (rc < 0 && rc != -ECANCELED && e.code == ST_ERR_NOT_FOUND)
            return answer_s3_error(a, HTTP_NOT_FOUND, "NoSuchBucket", resource,
                                   "The specified bucket does not exist (upstream: %s)",
                                   e.message);
        if (rc < 0)
            return mirror_answer_failed(a, MD_S3, rc, &e);
    } else if (!(s = mirror_snap_find(m, arena_repo))) {
        struct mirror_wait w = {.m = m, .client = v->client, .kind = MW_SNAP, .repo = arena_repo};
        return mirror_answer_wait(a, &w);
    }
    answer_defer(a, unref_snap, s); /* its document, until the request ends */
    mirror_answer_stale(a, mirror_snap_age(s));
    if (rt->name)
        return get_object(v, a, s, rt, q, resource);
    const struct mirror_repo *doc = mirror_snap_doc(s);
    struct objects *o = answer_alloc(a, sizeof(*o));
    size_t *idx = answer_alloc(a, (doc->n ? doc->n : 1) * sizeof(*idx));
    size_t n = 0;
    for (size_t i = 0; i < doc->n; i++)
        if (doc->files[i].has_id)
            idx[n++] = i;
    *o = (struct objects){doc, idx, n, answer_alloc(a, (n ? n : 1) * sizeof(*o->etags))};
    struct s3_bucket b = {rt->model, n, doc_object, o, NULL};
    return s3_bucket_answer(v, a, &b, q);
}

/* ---- ListBuckets ----------------------------------------------------------------- */

struct buckets {
    struct xmlw *w;
    const struct reg_snapshot *reg;
};

static void bucket_row(void *arg, const char *repo, const struct mirror_repo_state *st)
{
    const struct buckets *b = arg;
    char *name = s3_bucket_name(repo);
    if (!reg_snapshot_find_repo(b->reg, repo, strlen(repo))) /* the models root's is listed */
        s3_bucket_entry(b->w, name, st->at * 1000000000);
    free(name);
}

void mirror_s3_buckets(const struct request_view *v, struct xmlw *w,
                       const struct reg_snapshot *reg)
{
    struct buckets b = {w, reg};
    mirror_repos_each(v->srv->mirror, bucket_row, &b);
}
