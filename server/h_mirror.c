/* h_mirror: the HTTP answers of a pull-through mirror (`upstream = URL`;
 * core/mirror.h has the design, docs/OPERATIONS.md "A pull-through
 * mirror" the operator's view).
 *
 * A mirror's Hugging Face endpoint is its upstream's: every Hub route is
 * answered from the upstream, through the cache for file bytes. Nothing
 * here talks to the upstream: a request that needs it (a file's metadata,
 * a document, a model's headers for a preload) suspends its connection and
 * hands a job to the mirror (core/mirror_job.h); the job's callback
 * resumes the connection, which is dispatched again (http.c) and answers
 * from the job's result. File bytes go out as they arrive: the answer's
 * reader suspends the connection when it reaches bytes the mirror has not
 * fetched yet, and the fetcher that brings them resumes it (server/stream.c).
 *
 *   - `/{repo}/resolve|raw/{rev}/{path}`: the upstream is asked about the
 *     file (HEAD, with the caller's Authorization, whose answer is kept
 *     mirror_auth_ttl seconds per caller): its commit, size and hash. A
 *     branch (rev not the commit) answers 302 to the commit's URL, as
 *     tensord does, so a download reads one commit; the commit's URL
 *     answers the bytes, from the cache, fetching what it lacks from that
 *     commit's URL upstream. The upstream's errors (401, 403, 404 with its
 *     X-Error-Code) are passed on.
 *   - every other Hub route (the /api documents): passed through as the
 *     upstream answers it (status, body, X-Repo-Commit, X-Error-Code, ETag,
 *     Cache-Control, Link), with the caller's Authorization.
 *   - `POST /v1/models/{repo}/gpu` for a repo the models root does not
 *     hold: the repo's model prepared by the mirror (core/mirror_model.h),
 *     preloaded as its bytes arrive.
 *   - `/v1/blobs/sha256:{hex}`: also the mirror's complete files. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "digest.h"
#include "gpu/gpu_manager.h"
#include "gpu_doc.h"
#include "h_hub_int.h"
#include "h_mirror.h"
#include "handlers.h"
#include "mirror.h"
#include "mirror_job.h"
#include "mirror_model.h"
#include "respond.h"
#include "route.h"
#include "upstream.h"
#include "util.h"

#define DOC_MAX (64u << 20) /* a document passed through (a repo of 100,000 files fits) */

static const char *auth_of(struct MHD_Connection *conn)
{
    return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
}

static void job_done(void *arg)
{
    struct request *rq = arg;
    atomic_store(&rq->wait, WAIT_RESUMED);
    MHD_resume_connection(rq->mhd);
}

/* Suspends rq until job (just submitted, or NULL when the mirror stops)
 * calls back: the request is dispatched again then. Suspended before the
 * job is submitted, since the callback may come at once: submit is called
 * here. */
static enum MHD_Result suspend_for(struct MHD_Connection *conn, struct request *rq,
                                   struct mirror_job *(*submit)(struct request *rq, void *ctx),
                                   void *ctx)
{
    atomic_store(&rq->wait, WAIT_SUSPENDED);
    MHD_suspend_connection(conn);
    rq->mjob = submit(rq, ctx);
    if (!rq->mjob) /* stopping: answered when dispatched again */
        job_done(rq);
    return MHD_YES;
}

/* The mirror is stopping (a job could not be submitted). */
static enum MHD_Result stopping(struct MHD_Connection *conn, struct request *rq, int hub)
{
    if (hub)
        return respond_hub_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, NULL, 1,
                                 "the mirror is stopping");
    return respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "stopping",
                         "the mirror is stopping");
}

/* An upstream that could not be reached, or gave an answer the mirror
 * cannot use: 502, in the Hub's dialect. */
static enum MHD_Result bad_gateway(struct MHD_Connection *conn, struct request *rq,
                                   const struct st_error *e)
{
    return respond_hub_error(conn, rq, MHD_HTTP_BAD_GATEWAY, NULL, NULL, 0, "upstream: %s",
                             e->message);
}

/* ---- files -------------------------------------------------------------------- */

struct file_ctx {
    const struct route *rt;
    const char *auth;
};

static struct mirror_job *submit_meta(struct request *rq, void *ctx)
{
    const struct file_ctx *c = ctx;
    return mirror_job_meta(rq->srv->mirror, c->rt->model, c->rt->rev, c->rt->name, c->auth,
                           job_done, rq);
}

/* The upstream's error about a file, passed on (its status where clients
 * branch on it, 502 otherwise). */
static enum MHD_Result upstream_error(struct MHD_Connection *conn, struct request *rq,
                                      const struct mirror_meta *meta, const char *path)
{
    long st = meta->status;
    const char *code = meta->error_code[0] ? meta->error_code : NULL;
    const char *msg = meta->error_message[0] ? meta->error_message : NULL;
    if (st == 401 || st == 403 || st == 404 || st == 410)
        return respond_hub_error(conn, rq, (unsigned)st, code, NULL, 0, "%s",
                                 msg ? msg : st == 404 ? "Entry not found" : "Access denied");
    if (st == 429 || st == 503)
        return respond_hub_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, code, NULL,
                                 meta->retry_after ? meta->retry_after : 1,
                                 "upstream: %s", msg ? msg : "busy, retry");
    return respond_hub_error(conn, rq, MHD_HTTP_BAD_GATEWAY, code, NULL, 0,
                             "upstream answered %ld for %.300s%s%s", st, path, msg ? ": " : "",
                             msg ? msg : "");
}

/* A branch: to the commit's URL (as h_hub.c does), with the file's
 * metadata as the Hub's redirect of an LFS file carries it. */
static enum MHD_Result redirect_to_commit(struct MHD_Connection *conn, struct request *rq,
                                          const struct route *rt, const struct mirror_meta *meta,
                                          const char *etag, const char *size)
{
    size_t cap = 3 * (strlen(rt->model) + strlen(rt->name)) + 96, len = 0;
    char *loc = xmalloc(cap);
    upstream_encode(loc, cap, &len, "/", 1);
    upstream_encode(loc, cap, &len, rt->model, 1);
    upstream_encode(loc, cap, &len, rt->raw ? "/raw/" : "/resolve/", 1);
    upstream_encode(loc, cap, &len, meta->commit, 0);
    upstream_encode(loc, cap, &len, "/", 1);
    upstream_encode(loc, cap, &len, rt->name, 1);
    const char *extra[9] = {"X-Repo-Commit", meta->commit, MHD_HTTP_HEADER_CACHE_CONTROL,
                            "no-cache"};
    if (meta->lfs) {
        extra[4] = "X-Linked-Etag";
        extra[5] = etag;
        extra[6] = "X-Linked-Size";
        extra[7] = size;
    }
    enum MHD_Result ret = respond_redirect(conn, rq, MHD_HTTP_FOUND, loc, extra);
    free(loc);
    return ret;
}

/* The file's bytes at its commit: from the cache, fetched as they are
 * read. */
static enum MHD_Result serve_bytes(struct MHD_Connection *conn, struct request *rq,
                                   const struct route *rt, const struct mirror_meta *meta,
                                   const char *auth, const char *etag, const char *size)
{
    struct mirror *m = rq->srv->mirror;
    char disp[4 * 256 + 80];
    const char *base = strrchr(rt->name, '/');
    base = base ? base + 1 : rt->name;
    size_t blen = strlen(base);
    if (blen > 255)
        blen = 255;
    while (blen > 0 && blen < strlen(base) && ((unsigned char)base[blen] & 0xc0) == 0x80)
        blen--;
    const char *extra[9] = {"X-Repo-Commit", meta->commit};
    if (meta->lfs) {
        extra[2] = "X-Linked-Etag";
        extra[3] = etag;
        extra[4] = "X-Linked-Size";
        extra[5] = size;
    }
    struct representation rep = {
        .body = {.fd = -1, .data_off = 0, .data_len = meta->id.size},
        .content_type = respond_content_type(rt->name),
        .mtime = -1, /* the content has no date (h_hub_int.h, HUB_REVISION_DATE) */
        .cache_control = HUB_CACHE_IMMUTABLE,
        .disposition = respond_disposition(disp, sizeof(disp), rt->raw ? "inline" : "attachment",
                                           base, blen),
        .extra = extra,
        .no_read = rq->is_head,
    };
    snprintf(rep.etag, sizeof(rep.etag), "%s", etag);
    if (rq->is_head) /* headers only: nothing is opened or fetched */
        return respond_body(conn, rq, &rep);
    struct st_error e;
    struct mirror_src src = {rt->model, meta->commit, rt->name, auth};
    struct mirror_file *f = mirror_open(m, &meta->id, &src, &e);
    if (!f)
        return respond_hub_error(conn, rq, e.code == ST_ERR_CONFLICT ? MHD_HTTP_BAD_GATEWAY
                                                                     : MHD_HTTP_SERVICE_UNAVAILABLE,
                                 NULL, NULL, 5, "mirror: %s", e.message);
    rep.body.fd = mirror_file_fd(f);
    if (mirror_file_complete(m, f))
        rq->mirror_pin = f; /* sent like any file; held until the answer ends */
    else
        rep.mirror = f;     /* read as it arrives: the answer takes its own reference */
    enum MHD_Result ret = respond_body(conn, rq, &rep);
    if (rep.mirror)
        mirror_unref(m, f);
    return ret;
}

static enum MHD_Result mirror_file_route(struct MHD_Connection *conn, struct request *rq,
                                         const struct route *rt)
{
    struct mirror *m = rq->srv->mirror;
    const char *auth = auth_of(conn);
    struct mirror_meta meta;
    if (rq->mjob) {
        struct st_error e;
        int rc = mirror_job_status(rq->mjob, &e);
        if (rc < 0)
            return rc == -ECANCELED ? stopping(conn, rq, 1) : bad_gateway(conn, rq, &e);
        meta = *mirror_job_meta_result(rq->mjob);
    } else if (!mirror_meta_cached(m, rt->model, rt->rev, rt->name, auth, &meta)) {
        struct file_ctx c = {rt, auth};
        return suspend_for(conn, rq, submit_meta, &c);
    }
    if (meta.status != 200)
        return upstream_error(conn, rq, &meta, rt->name);
    char hex[65], etag[80], size[24];
    digest_hex(meta.id.digest, meta.id.kind == MIRROR_SHA256 ? 32 : 20, hex);
    snprintf(etag, sizeof(etag), "\"%s\"", hex);
    snprintf(size, sizeof(size), "%" PRIu64, meta.id.size);
    if (strcmp(rt->rev, meta.commit) != 0)
        return redirect_to_commit(conn, rq, rt, &meta, etag, size);
    return serve_bytes(conn, rq, rt, &meta, auth, etag, size);
}

/* ---- documents ------------------------------------------------------------------ */

static struct mirror_job *submit_doc(struct request *rq, void *ctx)
{
    struct MHD_Connection *conn = ctx;
    /* A HEAD is asked as a GET: the answer's Content-Length is the body's. */
    const char *method = rq->is_head ? "GET" : rq->method;
    return mirror_job_doc(rq->srv->mirror, method, route_origin_form(rq->uri), rq->upload,
                          rq->upload_len,
                          MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                      MHD_HTTP_HEADER_CONTENT_TYPE),
                          auth_of(conn), DOC_MAX, job_done, rq);
}

/* The upstream's Link header with its own URLs turned into this server's
 * (the Hub's pagination names the next page by absolute URL). */
static char *local_link(struct MHD_Connection *conn, const struct request *rq, const char *link)
{
    const char *base = upstream_base(mirror_upstream(rq->srv->mirror));
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!host || strpbrk(host, " \t<>\"\\"))
        return xstrdup(link);
    char *mine = xasprintf("%s://%s", (rq->srv->daemon_flags & MHD_USE_TLS) ? "https" : "http",
                           host);
    size_t blen = strlen(base), n = 0;
    char *out = xmalloc(strlen(link) * (strlen(mine) + 1) + 1);
    for (const char *p = link; *p;) {
        if (strncmp(p, base, blen) == 0) {
            n += (size_t)sprintf(out + n, "%s", mine);
            p += blen;
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    free(mine);
    return out;
}

static enum MHD_Result mirror_doc_route(struct MHD_Connection *conn, struct request *rq)
{
    if (!rq->mjob)
        return suspend_for(conn, rq, submit_doc, conn);
    struct st_error e;
    int rc = mirror_job_status(rq->mjob, &e);
    if (rc < 0)
        return rc == -ECANCELED ? stopping(conn, rq, 1) : bad_gateway(conn, rq, &e);
    const struct mirror_doc *d = mirror_job_doc_result(rq->mjob);
    const struct upstream_answer *a = &d->a;
    char etag[100], *link = a->link[0] ? local_link(conn, rq, a->link) : NULL;
    const char *extra[13];
    size_t k = 0;
    snprintf(etag, sizeof(etag), "\"%s\"", a->etag);
#define PASS(name, v)                                                                          \
    do {                                                                                       \
        if ((v)[0]) {                                                                          \
            extra[k++] = name;                                                                 \
            extra[k++] = v;                                                                    \
        }                                                                                      \
    } while (0)
    PASS("X-Repo-Commit", a->commit);
    PASS("X-Error-Code", a->error_code);
    PASS("X-Error-Message", a->error_message);
    PASS(MHD_HTTP_HEADER_CACHE_CONTROL, a->cache_control[0] ? a->cache_control : "no-cache");
    if (a->etag[0])
        PASS(MHD_HTTP_HEADER_ETAG, etag);
    if (link)
        PASS(MHD_HTTP_HEADER_LINK, link);
#undef PASS
    extra[k] = NULL;
    char *body = xmalloc(d->len + 1);
    memcpy(body, d->body, d->len);
    unsigned status = a->status >= 200 && a->status < 600 ? (unsigned)a->status
                                                          : MHD_HTTP_BAD_GATEWAY;
    enum MHD_Result ret = respond_doc(conn, rq, status,
                                      a->content_type[0] ? a->content_type : "application/json",
                                      body, d->len, extra,
                                      a->status >= 400 && a->error_code[0] ? "upstream" : NULL);
    free(link);
    return ret;
}

enum MHD_Result handle_mirror_hub(struct MHD_Connection *conn, struct request *rq,
                                  const struct route *rt)
{
    if (rt->kind == ROUTE_HUB_FILE)
        return mirror_file_route(conn, rq, rt);
    return mirror_doc_route(conn, rq);
}

/* ---- preloads ------------------------------------------------------------------- */

/* A mirror's model as the GPU manager's source of bytes. */
struct model_source {
    struct gm_source base;     /* first: the manager hands this back */
    struct mirror_model *mm;
};

static int source_present(void *arg, const void *file, uint64_t off, uint64_t len)
{
    return mirror_model_present(arg, file, off, len);
}

static int source_wait(void *arg, const void *file, uint64_t off, uint64_t len,
                       const atomic_int *cancel, struct st_error *err)
{
    return mirror_model_wait(arg, file, off, len, cancel, err);
}

static void source_release(struct gm_source *s)
{
    struct model_source *ms = (struct model_source *)s;
    mirror_model_free(ms->mm);
    free(ms);
}

static struct gm_source *source_new(struct mirror_model *mm)
{
    struct model_source *ms = xcalloc(1, sizeof(*ms));
    ms->mm = mm;
    ms->base.gate = (struct gpu_gate){.present = source_present, .wait = source_wait, .arg = mm};
    ms->base.release = source_release;
    return &ms->base;
}

struct model_ctx {
    const char *model;
};

static struct mirror_job *submit_model(struct request *rq, void *ctx)
{
    const struct model_ctx *c = ctx;
    return mirror_job_model(rq->srv->mirror, c->model, "main", job_done, rq);
}

static enum MHD_Result mirror_preload(struct MHD_Connection *conn, struct request *rq,
                                      const char *model)
{
    struct gpu_manager *gm = rq->srv->gpu;
    struct gpu_doc_error de;
    struct jsonw w = JSONW_INIT;
    char *device = NULL;
    int status = 0, rc;
    if ((rc = gpu_doc_preload_device(rq->upload ? rq->upload : "", rq->upload_len, &device,
                                     &de)) < 0)
        return handle_gpu_answer(conn, rq, rc, status, &w, &de);
    if (!rq->mjob) {
        /* Loaded or loading already: that instance, without asking the upstream. */
        rc = gpu_doc_preload(gm, model, device, &w, &status, &de);
        free(device);
        if (rc == 0 || de.http_status != MHD_HTTP_NOT_FOUND)
            return handle_gpu_answer(conn, rq, rc, status, &w, &de);
        struct model_ctx c = {model};
        return suspend_for(conn, rq, submit_model, &c);
    }
    struct mirror_model *mm;
    struct st_error e;
    rc = mirror_job_model_take(rq->mjob, &mm, &e);
    if (rc < 0) {
        free(device);
        if (rc == -ECANCELED)
            return stopping(conn, rq, 0);
        unsigned st = e.code == ST_ERR_NOT_FOUND          ? MHD_HTTP_NOT_FOUND
                      : e.code == ST_ERR_INVALID_ARGUMENT ? MHD_HTTP_CONFLICT
                                                          : MHD_HTTP_BAD_GATEWAY;
        return respond_error(conn, rq, st, st == MHD_HTTP_NOT_FOUND ? "model_not_found"
                                           : st == MHD_HTTP_CONFLICT ? "model_invalid"
                                                                     : "upstream_error",
                             "%s", e.message);
    }
    struct gm_source *src = source_new(mm);
    rc = gpu_doc_preload_model(gm, model, device, mirror_model_reg(mm), &src, &w, &status, &de);
    if (src) /* no new instance took it: the model goes */
        src->release(src);
    free(device);
    return handle_gpu_answer(conn, rq, rc, status, &w, &de);
}

enum MHD_Result handle_mirror_gpu(struct MHD_Connection *conn, struct request *rq,
                                  const char *model, const char *method)
{
    if (!rq->srv->gpu)
        return respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "gpu_unavailable",
                             "GPU sharing is not running in this daemon");
    if (strcmp(method, MHD_HTTP_METHOD_POST) != 0)
        return handle_gpu(conn, rq, model, method); /* GET, DELETE: the instance's by name */
    if (!rq->mjob && !respond_preconditions_hold(conn))
        return respond_error(conn, rq, MHD_HTTP_PRECONDITION_FAILED, "precondition_failed",
                             "If-Match or If-None-Match did not hold; nothing was done");
    return mirror_preload(conn, rq, model);
}

/* ---- by digest ---------------------------------------------------------------- */

struct mirror_file *mirror_blob_find(struct server *srv, const uint8_t sha256[32])
{
    return srv->mirror ? mirror_find_complete(srv->mirror, sha256) : NULL;
}
