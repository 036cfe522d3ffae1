/* h_mirror_v1: the /v1 routes of a model the models root does not hold, a
 * model of the upstream (mirror/mirror_view.h), answered as a local one's
 * by the same handlers (server/handlers/h_model.c): its description and
 * merged header (rendered from the headers, fetched once), its files,
 * tensors, slices and fetches. The handlers read its files through the
 * model_files source below: each answer opens the cache's files it reads,
 * holds them, and the front reads them as their bytes arrive
 * (server/http/gate.h), asking the mirror only for the blocks the answer
 * sends.
 *
 * The upstream is asked what main is (with upstream_token_file's token)
 * once mirror_auth_ttl has passed; while it cannot be reached the last
 * answer is used and every answer made from it is marked stale (Age,
 * X-Tensord-Stale). A file the answer reads that the cache lacks, then,
 * cannot come: 504 at once rather than an answer cut short. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "digest.h"
#include "h_mirror_int.h"
#include "handlers.h"
#include "mirror.h"
#include "mirror_health.h"
#include "mirror_job.h"
#include "mirror_view.h"
#include "route.h"
#include "upstream.h"

/* A mirrored model as the handlers' source of its files. */
struct mirrored {
    struct model_files mf;     /* first: the handlers hand it back */
    struct mirror *m;
    struct mirror_view *view;
};

static void unref_view(void *v)
{
    mirror_view_unref(v);
}

/* The answer for a file the cache cannot give (mirror_open's err). */
static void open_failed(struct answer *a, const struct st_error *e)
{
    if (e->code == ST_ERR_CONFLICT)
        answer_error(a, HTTP_BAD_GATEWAY, "upstream_error", "mirror: %s", e->message);
    else
        answer_error(a, HTTP_SERVICE_UNAVAILABLE, "mirror_cache", "mirror: %s", e->message);
}

static void hold_read(struct answer *a, struct mirror *m, struct mirror_file *f, int parts,
                      struct mirror_read *rd)
{
    mirror_answer_hold(a, m, f);
    *rd = (struct mirror_read){.fd = mirror_file_fd(f), .f = f, .parts = parts,
                               .complete = mirror_file_complete(m, f)};
}

static int open_file(const struct model_files *mf, const struct request_view *v,
                     struct answer *a, const struct reg_file *rf, int parts,
                     struct mirror_read *rd)
{
    (void)v;
    const struct mirrored *md = (const struct mirrored *)mf;
    struct st_error e;
    struct mirror_file *f = mirror_view_open(md->m, md->view, rf, &e);
    if (!f) {
        open_failed(a, &e);
        return -1;
    }
    hold_read(a, md->m, f, parts, rd);
    return rd->fd;
}

/* Whether every file byte rep's body reads is in the cache now. A body
 * of more spans than this is not looked at all (its reader cuts it if a
 * byte cannot come): the HTTP thread's work stays bounded. */
#define CACHED_WALK_SPANS (1u << 20)

struct cached_walk {
    struct mirror *m;
    const struct representation *rep;
    unsigned spans;
};

static int span_missing(void *arg, int fd, uint64_t file_off, uint64_t n, uint64_t body_off)
{
    (void)body_off;
    struct cached_walk *w = arg;
    if (w->spans++ == CACHED_WALK_SPANS)
        return 2; /* too many to tell */
    for (size_t i = 0; i < w->rep->n_mirror; i++) {
        const struct mirror_read *rd = &w->rep->mirror[i];
        if (rd->fd == fd && !rd->complete)
            return mirror_readable(w->m, rd->f, file_off, n,
                                   rd->parts ? MIRROR_PARTS : MIRROR_WHOLE, NULL) != (int64_t)n;
    }
    return 0;
}

/* While the upstream cannot be reached, an answer whose bytes the cache
 * lacks is 504 at once: they cannot come. */
static void check_cached(struct mirror *m, struct answer *a, const char *name)
{
    if (a->kind != ANSWER_BODY || !a->rep.arriving || a->rep.no_read || !mirror_health_paused(m))
        return;
    struct cached_walk w = {m, &a->rep, 0};
    const struct body *b = &a->rep.body;
    if (body_each_span(b, 0, body_size(b), span_missing, &w) == 1)
        answer_error(a, HTTP_GATEWAY_TIMEOUT, "upstream_unreachable",
                     "the upstream %s cannot be reached, and the mirror's cache does not hold "
                     "all the bytes of this answer from %.300s",
                     upstream_base(mirror_upstream(m)), name);
}

/* A file of the model's directory that is not one of its weight files
 * (config.json, tokenizer.json ...): its bytes, as the Hub route sends them. */
static struct answer *other_file(const struct request_view *v, struct answer *a,
                                 const struct mirrored *md, const struct route *rt)
{
    const struct reg_model *rm = mirror_model_reg(mirror_view_model(md->view));
    if (rt->kind == ROUTE_FILE_HEADER)
        return answer_error(a, HTTP_BAD_REQUEST, "not_safetensors",
                            "\"%.300s\" is not a valid safetensors file", rt->name);
    struct st_error e;
    struct mirror_file *f = mirror_view_open_other(md->m, md->view, rt->name, &e);
    if (!f) {
        if (e.code == ST_ERR_NOT_FOUND)
            return answer_error(a, HTTP_NOT_FOUND, "file_not_found",
                                "model \"%.300s\" has no file \"%.300s\"", rm->name, rt->name);
        open_failed(a, &e);
        return a;
    }
    struct mirror_read *rd = answer_alloc(a, sizeof(*rd));
    hold_read(a, md->m, f, 0, rd);
    struct representation rep = {
        .body = {.fd = rd->fd, .data_off = 0, .data_len = mirror_file_size(f)},
        .content_type = answer_content_type(rt->name),
        .mtime = -1,
        .no_read = v->is_head,
    };
    answer_reads_mirrored(&rep, rd, 1);
    const struct mirror_id *id = mirror_file_id(f);
    char hex[65];
    digest_hex(id->digest, id->kind == MIRROR_SHA256 ? 32 : 20, hex);
    snprintf(rep.etag, sizeof(rep.etag), "\"%s\"", hex);
    return answer_body(a, &rep);
}

struct answer *handle_mirror_model(const struct request_view *v, struct answer *a,
                                   const struct route *rt)
{
    struct mirror *m = v->srv->mirror;
    struct mirror_view *view;
    int64_t age = -1;
    if (mirror_answer_refused(v, a, MD_TENSORD))
        return a;
    if (v->wait_job && mirror_job_runs_view(v->wait_job, 0)) {
        struct st_error e;
        int rc = mirror_job_view_take(v->wait_job, &view, &age, &e);
        if (rc < 0 && rc != -ECANCELED && e.code == ST_ERR_NOT_FOUND)
            return answer_error(a, HTTP_NOT_FOUND, "model_not_found",
                                "no model named \"%.300s\": %s", rt->model, e.message);
        if (rc < 0 && rc != -ECANCELED && e.code == ST_ERR_INVALID_ARGUMENT)
            return answer_error(a, HTTP_CONFLICT, "model_invalid", "%s", e.message);
        if (rc < 0)
            return mirror_answer_failed(a, MD_TENSORD, rc, &e);
    } else if (!(view = mirror_view_find(m, rt->model, &age))) {
        struct mirror_wait w = {.m = m, .client = v->client, .kind = MW_VIEW, .repo = rt->model};
        return mirror_answer_wait(a, &w);
    }
    answer_defer(a, unref_view, view); /* its model and the files it names, until the end */
    struct mirrored *md = answer_alloc(a, sizeof(*md));
    *md = (struct mirrored){{open_file, NULL}, m, view};
    const struct reg_model *rm = mirror_model_reg(mirror_view_model(view));
    if ((rt->kind == ROUTE_FILE || rt->kind == ROUTE_FILE_HEADER) &&
        !reg_model_find_file(rm, rt->name, rt->name_len))
        other_file(v, a, md, rt);
    else
        handle_model_route(v, a, rt, rm, &md->mf);
    check_cached(m, a, rt->model);
    mirror_answer_stale(a, age);
    return a;
}
