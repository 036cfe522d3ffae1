/* h_mirror: the Hugging Face routes of a pull-through mirror (`upstream =
 * URL`; mirror/mirror.h has the design, docs/OPERATIONS.md "A pull-through
 * mirror" the operator's view; the mirror's other routes are h_mirror_v1.c,
 * h_mirror_s3.c, h_mirror_gpu.c and h_mirror_list.c, what they share
 * h_mirror_job.c).
 *
 * A mirror's Hugging Face endpoint is its upstream's: every Hub route is
 * answered from the upstream, through the cache for file bytes. Nothing
 * here talks to the upstream: a request that needs it (a file's metadata,
 * a document) suspends its connection and answers "wait for this job"
 * (mirror/mirror_job.h); the job's callback ends the wait, and the request
 * is dispatched again and answers from the job's result. File bytes go out
 * as they arrive: the answer's reader suspends the connection when it
 * reaches bytes the mirror has not fetched yet, and the fetcher that
 * brings them resumes it (server/http/gate.c).
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
 *     Cache-Control, Link), with the caller's Authorization, once the job
 *     found the body to be JSON, and as application/json whatever type the
 *     upstream named (an HTML page would run on this origin); a body that is
 *     not JSON is refused (502).
 *   - While the upstream cannot be reached, the job answers with the last
 *     answer the upstream gave to the same question, when this caller may
 *     have it (mirror/mirror_names.h): marked stale (Age, X-Tensord-Stale);
 *     a file it names that the cache does not hold whole is 504 at once,
 *     to a HEAD too (of its branch or its commit: what its GET would get).
 *   - `/v1/blobs/sha256:{hex}`: also the mirror's complete files (h_blob.c,
 *     with mirror_answer_hold). */
#include <stdio.h>
#include <string.h>

#include "digest.h"
#include "h_hub_int.h"
#include "h_mirror_int.h"
#include "mirror.h"
#include "mirror_ask.h"
#include "mirror_job.h"
#include "route.h"
#include "upstream.h"

/* ---- files -------------------------------------------------------------------- */

/* The upstream's error about a file, passed on (its status where clients
 * branch on it, 502 otherwise). */
static struct answer *upstream_error(struct answer *a, const struct mirror_meta *meta,
                                     const char *path)
{
    long st = meta->status;
    const char *code = meta->error_code[0] ? meta->error_code : NULL;
    const char *msg = meta->error_message[0] ? meta->error_message : NULL;
    if (st == 401 || st == 403 || st == 404 || st == 410)
        return answer_hub_error(a, (unsigned)st, code, 0, "%s",
                                msg ? msg : st == 404 ? "Entry not found" : "Access denied");
    if (st == 429 || st == 503)
        return answer_hub_error(a, HTTP_SERVICE_UNAVAILABLE, code,
                                meta->retry_after ? meta->retry_after : 1, "upstream: %s",
                                msg ? msg : "busy, retry");
    return answer_hub_error(a, HTTP_BAD_GATEWAY, code, 0, "upstream answered %ld for %.300s%s%s",
                            st, path, msg ? ": " : "", msg ? msg : "");
}

/* A file named by a kept answer (the upstream cannot be reached) that the
 * cache does not hold whole: its bytes cannot come, and HEAD says so as
 * GET does (huggingface_hub then looks in its own cache, and raises
 * LocalEntryNotFoundError when the file is not there either). */
static struct answer *not_held(struct answer *a, struct mirror *m, const char *path)
{
    return answer_hub_error(a, HTTP_GATEWAY_TIMEOUT, NULL, 0, "the upstream %s cannot be "
                            "reached, and the mirror's cache does not hold all of %.300s",
                            upstream_base(mirror_upstream(m)), path);
}

/* The file's bytes at its commit: from the cache, fetched as they are
 * read. */
static struct answer *serve_bytes(const struct request_view *v, struct answer *a,
                                  const struct route *rt, const struct mirror_meta *meta,
                                  const char *etag)
{
    struct mirror *m = v->srv->mirror;
    struct representation rep = {
        .body = {.fd = -1, .data_off = 0, .data_len = meta->id.size},
        .no_read = v->is_head,
    };
    hub_file_rep(a, &rep, rt->name, rt->raw, etag);
    if (!v->is_head) { /* a HEAD answers headers only: nothing is opened or fetched */
        struct st_error e;
        struct mirror_src src = {rt->model, meta->commit, rt->name,
                                 view_header(v, "Authorization")};
        struct mirror_file *f = mirror_open(m, &meta->id, &src, &e);
        if (!f)
            return answer_hub_error(a, e.code == ST_ERR_CONFLICT ? HTTP_BAD_GATEWAY
                                                                 : HTTP_SERVICE_UNAVAILABLE,
                                    NULL, 5, "mirror: %s", e.message);
        mirror_answer_hold(a, m, f); /* until the request ends */
        rep.body.fd = mirror_file_fd(f);
        struct mirror_read *rd = answer_alloc(a, sizeof(*rd));
        *rd = (struct mirror_read){.fd = rep.body.fd, .f = f,
                                   .complete = mirror_file_complete(m, f)};
        /* Evicted since mirror_file_route looked: bytes it lacks cannot come. */
        if (meta->stale >= 0 && !rd->complete)
            return not_held(a, m, rt->name);
        answer_reads_mirrored(&rep, rd, 1);
    }
    answer_header(a, "X-Repo-Commit", meta->commit);
    hub_linked(a, meta->lfs, etag, meta->id.size);
    return answer_body(a, &rep);
}

static struct answer *mirror_file_route(const struct request_view *v, struct answer *a,
                                        const struct route *rt)
{
    struct mirror *m = v->srv->mirror;
    const char *auth = view_header(v, "Authorization");
    struct mirror_meta meta;
    if (mirror_answer_refused(v, a, MD_HUB))
        return a;
    if (v->wait_job) {
        struct st_error e;
        int rc = mirror_job_status(v->wait_job, &e);
        if (rc < 0)
            return mirror_answer_failed(a, MD_HUB, rc, &e);
        meta = *mirror_job_meta_result(v->wait_job);
    } else if (!mirror_meta_cached(m, rt->model, rt->rev, rt->name, auth, &meta)) {
        struct mirror_wait w = {.m = m, .client = v->client, .kind = MW_META, .repo = rt->model,
                                .rev = rt->rev, .path = rt->name, .auth = auth};
        return mirror_answer_wait(a, &w);
    }
    if (meta.status != 200)
        return upstream_error(a, &meta, rt->name);
    /* A kept answer names a file whose bytes only the cache can give: a
     * HEAD (of the branch or the commit) answers what the GET would. */
    int whole = 0;
    if (meta.stale >= 0)
        mirror_cached(m, &meta.id, &whole);
    if (meta.stale >= 0 && !whole)
        return not_held(a, m, rt->name);
    mirror_answer_stale(a, meta.stale);
    char hex[65], etag[80];
    digest_hex(meta.id.digest, meta.id.kind == MIRROR_SHA256 ? 32 : 20, hex);
    snprintf(etag, sizeof(etag), "\"%s\"", hex);
    if (strcmp(rt->rev, meta.commit) != 0) /* a branch: to the commit's URL, as h_hub.c does */
        return hub_redirect_to_commit(a, rt->model, rt->raw, meta.commit, rt->name, meta.lfs,
                                      etag, meta.id.size);
    return serve_bytes(v, a, rt, &meta, etag);
}

/* ---- documents ------------------------------------------------------------------ */

/* The longest Link passed on: an answer's headers are built in what the
 * connection's memory pool keeps for them (8 KiB at least, see
 * server/http/http.c's POOL_RESERVE), which a longer one would not fit.
 * The Hub's are a few hundred bytes. */
#define MIRROR_LINK_MAX 4096u

/* The upstream's Link header with its own URLs turned into this server's
 * (the Hub's pagination names the next page by absolute URL), in the
 * answer's arena. Sized by counting first: a long Link (the upstream's)
 * times a long Host (the client's) is never what is allocated. */
static const char *local_link(const struct request_view *v, struct answer *a, const char *link)
{
    const char *base = upstream_base(mirror_upstream(v->srv->mirror));
    const char *host = view_header(v, "Host");
    if (!host || !host[0] || strpbrk(host, " \t<>\"\\"))
        return link;
    const char *scheme = v->tls ? "https://" : "http://";
    size_t blen = strlen(base), mlen = strlen(scheme) + strlen(host), hits = 0;
    for (const char *p = strstr(link, base); p; p = strstr(p + blen, base))
        hits++;
    if (!hits)
        return link;
    size_t len = strlen(link) - hits * blen + hits * mlen;
    char *out = answer_alloc(a, len + 1), *o = out;
    for (const char *p = link, *q; *p; p = q + blen) {
        q = strstr(p, base);
        size_t keep = q ? (size_t)(q - p) : strlen(p);
        memcpy(o, p, keep);
        o += keep;
        if (!q)
            break;
        o += sprintf(o, "%s%s", scheme, host);
    }
    *o = '\0';
    return out;
}

/* The upstream's answer to target was not JSON: its client error (401,
 * 404 ...) passed on in the Hub's dialect, anything else refused (502),
 * saying why. */
static struct answer *not_json(struct answer *a, const struct mirror_doc *d, const char *target)
{
    const struct upstream_answer *u = &d->a;
    if (u->status >= 400 && u->status < 500)
        return answer_hub_error(a, (unsigned)u->status, u->error_code[0] ? u->error_code : NULL,
                                0, "upstream answered %ld%s%s", u->status,
                                u->error_message[0] ? ": " : "", u->error_message);
    return answer_hub_error(a, HTTP_BAD_GATEWAY, NULL, 0, "upstream: its answer (%ld) to %.300s "
                            "is not JSON (%s)", u->status, target, d->not_json);
}

static struct answer *mirror_doc_route(const struct request_view *v, struct answer *a)
{
    if (mirror_answer_refused(v, a, MD_HUB))
        return a;
    if (!v->wait_job) {
        /* A HEAD is asked as a GET: the answer's Content-Length is the body's. */
        struct mirror_wait w = {.m = v->srv->mirror, .client = v->client, .kind = MW_DOC,
                                .method = v->is_head ? "GET" : v->method,
                                .target = route_origin_form(v->target), .body = v->body,
                                .body_len = v->body_len,
                                .ctype = view_header(v, "Content-Type"),
                                .auth = view_header(v, "Authorization")};
        return mirror_answer_wait(a, &w);
    }
    struct st_error e;
    int rc = mirror_job_status(v->wait_job, &e);
    if (rc < 0)
        return mirror_answer_failed(a, MD_HUB, rc, &e);
    const struct mirror_doc *d = mirror_job_doc_result(v->wait_job);
    const struct upstream_answer *u = &d->a;
    if (!d->json) /* an HTML page would run on this origin: never passed on */
        return not_json(a, d, route_origin_form(v->target));
    mirror_answer_stale(a, d->stale);
    const char *pass[][2] = {{"X-Repo-Commit", u->commit}, {"X-Error-Code", u->error_code},
                             {"X-Error-Message", u->error_message}};
    for (size_t i = 0; i < sizeof(pass) / sizeof(pass[0]); i++)
        if (pass[i][1][0])
            answer_header(a, pass[i][0], pass[i][1]);
    answer_header(a, "Cache-Control", u->cache_control[0] ? u->cache_control : "no-cache");
    if (u->etag[0])
        answer_header(a, "ETag", answer_printf(a, "\"%s\"", u->etag));
    if (u->link) {
        const char *link = local_link(v, a, u->link);
        /* Cut, the pagination would stop without a word: refused instead. */
        if (strlen(link) > MIRROR_LINK_MAX)
            return answer_hub_error(a, HTTP_BAD_GATEWAY, NULL, 0, "upstream: its Link header "
                                    "is %zu bytes, more than the %u this mirror passes on",
                                    strlen(link), MIRROR_LINK_MAX);
        answer_header(a, "Link", link);
    }
    /* The body stays the job's, which the request holds until it ends. Its
     * type is tensord's, whatever the upstream said: checked JSON. */
    unsigned status = u->status >= 200 && u->status < 600 ? (unsigned)u->status : HTTP_BAD_GATEWAY;
    return answer_doc(a, status, "application/json", d->body, d->len);
}

struct answer *handle_mirror_hub(const struct request_view *v, struct answer *a,
                                 const struct route *rt)
{
    if (rt->kind == ROUTE_HUB_FILE)
        return mirror_file_route(v, a, rt);
    return mirror_doc_route(v, a);
}

