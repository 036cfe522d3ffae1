/* POST /v1/models/{model}/fetch and its GET ?q= form: many tensors, slices
 * and tensor-parallel parts as one safetensors file. The request is parsed
 * by core/req/fetch_req, the answer planned by core/req/fetch_plan; this file maps
 * their outcomes to HTTP and hands the plan to the answer as the body's
 * source, so Range, conditional requests, sendfile of contiguous spans and
 * the streamed reader all apply as for any other byte body. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch_plan.h"
#include "fetch_req.h"
#include "handlers.h"
#include "server.h"
#include "util.h"

static struct answer *plan_error(struct answer *a, const struct st_error *e)
{
    static const struct {
        enum st_status code;
        unsigned http;
        const char *wire;
    } map[] = {
        {ST_ERR_NOT_FOUND, HTTP_NOT_FOUND, "tensor_not_found"},
        {ST_ERR_DUPLICATE_TENSOR, HTTP_BAD_REQUEST, "duplicate_tensor"},
        {ST_ERR_SLICE, HTTP_BAD_REQUEST, "bad_slice"},
        {ST_ERR_SPLIT, HTTP_BAD_REQUEST, "bad_split"},
        {ST_ERR_LIMIT, HTTP_CONTENT_TOO_LARGE, "fetch_too_large"},
        {ST_ERR_NO_MEMORY, HTTP_SERVICE_UNAVAILABLE, "out_of_memory"},
    };
    for (size_t i = 0; i < ARRAY_LEN(map); i++)
        if (map[i].code == e->code)
            return answer_error(a, map[i].http, map[i].wire, "%s", e->message);
    return answer_error(a, HTTP_INTERNAL_SERVER_ERROR, "io_error", "%s", e->message);
}

static void free_plan(void *plan)
{
    fetch_plan_free(plan);
}

/* A mirrored model's plan reads the files it uses through descriptors the
 * answer opens and holds (their bytes may still be arriving). Returns 0,
 * or -1 with the answer filled. */
static int open_elsewhere(const struct request_view *v, struct answer *a,
                          const struct reg_model *m, const struct model_files *mf,
                          struct fetch_plan *plan, struct representation *rep)
{
    int *fds = answer_alloc(a, (m->n_files ? m->n_files : 1) * sizeof(*fds));
    struct mirror_read *rd = answer_alloc(a, (m->n_files ? m->n_files : 1) * sizeof(*rd));
    size_t n = 0;
    for (size_t i = 0; i < m->n_files; i++) {
        fds[i] = -1;
        if (!fetch_plan_uses(plan, i))
            continue;
        if ((fds[i] = mf->open(mf, v, a, &m->files[i], 1, &rd[n])) < 0)
            return -1;
        n++;
    }
    fetch_plan_read_through(plan, fds);
    answer_reads_mirrored(rep, rd, n);
    return 0;
}

struct answer *handle_fetch(const struct request_view *v, struct answer *a,
                            const struct reg_model *m, const struct model_files *mf)
{
    const struct config *cfg = v->srv->cfg;
    int is_post = strcmp(v->method, "POST") == 0, bad = 0;
    size_t qlen = 0;
    char *q = view_query(v, "q", 1, &qlen, &bad);
    struct fetch_req req;
    struct fetch_plan *plan;

    if (bad) {
        answer_error(a, HTTP_BAD_REQUEST, "bad_parameter",
                     "q has a malformed percent-escape or a NUL byte");
        goto out;
    }
    if (is_post && q) {
        answer_error(a, HTTP_BAD_REQUEST, "bad_parameter",
                     "q is the GET form of the request; a POST sends it as its body");
        goto out;
    }
    /* The front frees the body once the answer is rendered, so a connection
     * that does not read its answer holds no more than the parsed request. */
    const char *text = is_post ? (v->body ? v->body : "") : (q ? q : "");
    size_t len = is_post ? v->body_len : qlen;
    struct fetch_limits lim = {.max_tensors = cfg->max_fetch_tensors};
    struct st_error rerr;
    if (fetch_req_parse(text, len, &lim, &req, &rerr) != 0) {
        if (rerr.code == ST_ERR_LIMIT)
            answer_error(a, HTTP_CONTENT_TOO_LARGE, "too_many_tensors", "%s", rerr.message);
        else
            answer_error(a, HTTP_BAD_REQUEST, "bad_request", "%s", rerr.message);
        goto out;
    }
    if (req.all && m->n_tensors > cfg->max_fetch_tensors) {
        fetch_req_free(&req);
        answer_error(a, HTTP_CONTENT_TOO_LARGE, "too_many_tensors",
                     "model \"%.300s\" has %zu tensors, more than the %u one fetch may "
                     "hold (max_fetch_tensors); list the ones you need",
                     m->name, m->n_tensors, cfg->max_fetch_tensors);
        goto out;
    }
    struct fetch_plan_limits plim = {.max_bytes = cfg->max_fetch_bytes, .elsewhere = mf != NULL};
    if (fetch_plan_build(m, &req, &plim, &plan, &rerr) < 0) {
        plan_error(a, &rerr);
        goto out;
    }
    /* The plan reads through the model's descriptors: the answer holds the
     * model, and frees the plan before dropping it. */
    answer_hold_model(a, m);
    answer_defer(a, free_plan, plan);
    /* Checked before any header goes out: no file of the answer changed
     * since it was validated (each block read is checked again). */
    if (!fetch_plan_files_unchanged(plan)) { /* HEAD answers what GET would */
        answer_file_changed(a);
        goto out;
    }

    /* The answer is produced on demand from the plan. */
    struct representation rep = {
        .body = {.fd = -1, .data_len = fetch_plan_size(plan), .src = &fetch_plan_source,
                 .src_ctx = plan},
        .content_type = "application/octet-stream",
        .mtime = plan->mtime_ns / 1000000000,
    };
    /* A mirrored model's HEAD opens nothing: headers only. */
    rep.no_read = mf && v->is_head;
    if (mf && !v->is_head && open_elsewhere(v, a, m, mf, plan, &rep) < 0)
        goto out;
    /* Weak while any file's tag is: the answer is only as provably the same
     * as the files it is cut from. */
    snprintf(rep.etag, sizeof(rep.etag), "%s\"f%016" PRIx64 "%016" PRIx64 "\"",
             plan->weak ? "W/" : "", plan->hash[0], plan->hash[1]);
    answer_body(a, &rep);
out:
    free(q);
    return a;
}
