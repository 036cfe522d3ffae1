/* POST /v1/models/{model}/fetch and its GET ?q= form: many tensors, slices
 * and tensor-parallel parts as one safetensors file. The request is parsed
 * by core/fetch_req, the answer planned by core/fetch_plan; this file maps
 * their outcomes to HTTP and hands the plan to respond_body as the body's
 * source, so Range, conditional requests, sendfile of contiguous spans and
 * the streamed reader all apply as for any other byte body. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch_plan.h"
#include "fetch_req.h"
#include "handlers.h"
#include "respond.h"
#include "route.h"
#include "util.h"

static enum MHD_Result plan_error(struct MHD_Connection *conn, struct request *rq,
                                  const struct st_error *e)
{
    static const struct {
        enum st_status code;
        unsigned http;
        const char *wire;
    } map[] = {
        {ST_ERR_NOT_FOUND, MHD_HTTP_NOT_FOUND, "tensor_not_found"},
        {ST_ERR_DUPLICATE_TENSOR, MHD_HTTP_BAD_REQUEST, "duplicate_tensor"},
        {ST_ERR_SLICE, MHD_HTTP_BAD_REQUEST, "bad_slice"},
        {ST_ERR_SPLIT, MHD_HTTP_BAD_REQUEST, "bad_split"},
        {ST_ERR_LIMIT, MHD_HTTP_CONTENT_TOO_LARGE, "fetch_too_large"},
        {ST_ERR_NO_MEMORY, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory"},
    };
    for (size_t i = 0; i < ARRAY_LEN(map); i++)
        if (map[i].code == e->code)
            return respond_error(conn, rq, map[i].http, map[i].wire, "%s", e->message);
    return respond_error(conn, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, "io_error", "%s", e->message);
}

enum MHD_Result handle_fetch(struct MHD_Connection *conn, struct request *rq,
                             const struct reg_model *m)
{
    const struct config *cfg = rq->srv->cfg;
    int is_post = strcmp(rq->method, MHD_HTTP_METHOD_POST) == 0, bad = 0;
    size_t qlen = 0;
    char *q = handler_query(conn, "q", 1, &qlen, &bad);
    enum MHD_Result ret;
    struct fetch_req req;
    struct fetch_plan *plan;

    if (bad) {
        ret = respond_error(conn, rq, MHD_HTTP_BAD_REQUEST, "bad_parameter",
                            "q has a malformed percent-escape or a NUL byte");
        goto out;
    }
    if (is_post && q) {
        ret = respond_error(conn, rq, MHD_HTTP_BAD_REQUEST, "bad_parameter",
                            "q is the GET form of the request; a POST sends it as its body");
        goto out;
    }
    const char *text = is_post ? (rq->upload ? rq->upload : "") : (q ? q : "");
    size_t len = is_post ? rq->upload_len : qlen;
    struct fetch_limits lim = {.max_tensors = cfg->max_fetch_tensors};
    struct st_error rerr;
    int parsed = fetch_req_parse(text, len, &lim, &req, &rerr);
    /* The request is in req now: the body it came in goes, so a connection
     * that does not read its answer holds no more than the parsed request. */
    free(rq->upload);
    rq->upload = NULL;
    rq->upload_len = 0;
    if (parsed != 0) {
        if (rerr.code == ST_ERR_LIMIT)
            ret = respond_error(conn, rq, MHD_HTTP_CONTENT_TOO_LARGE, "too_many_tensors", "%s",
                                rerr.message);
        else
            ret = respond_error(conn, rq, MHD_HTTP_BAD_REQUEST, "bad_request", "%s", rerr.message);
        goto out;
    }
    if (req.all && m->n_tensors > cfg->max_fetch_tensors) {
        fetch_req_free(&req);
        ret = respond_error(conn, rq, MHD_HTTP_CONTENT_TOO_LARGE, "too_many_tensors",
                            "model \"%.300s\" has %zu tensors, more than the %u one fetch may "
                            "hold (max_fetch_tensors); list the ones you need",
                            m->name, m->n_tensors, cfg->max_fetch_tensors);
        goto out;
    }
    struct fetch_plan_limits plim = {.max_bytes = cfg->max_fetch_bytes};
    if (fetch_plan_build(m, &req, &plim, &plan, &rerr) < 0) {
        ret = plan_error(conn, rq, &rerr);
        goto out;
    }
    /* Checked before any header goes out: no file of the answer changed
     * since it was validated (each block read is checked again). */
    if (!fetch_plan_files_unchanged(plan)) { /* HEAD answers what GET would */
        fetch_plan_free(plan);
        ret = respond_file_changed(conn, rq);
        goto out;
    }

    /* The answer is produced on demand from the plan, which reads the
     * model's descriptors: the answer pins the model and owns the plan. */
    struct representation rep = {
        .body = {.fd = -1, .data_len = fetch_plan_size(plan), .src = &fetch_plan_source,
                 .src_ctx = plan},
        .src_buf = plan,
        .pin = m,
        .content_type = "application/octet-stream",
        .mtime = plan->mtime_ns / 1000000000,
    };
    /* Weak while any file's tag is: the answer is only as provably the same
     * as the files it is cut from. */
    snprintf(rep.etag, sizeof(rep.etag), "%s\"f%016" PRIx64 "%016" PRIx64 "\"",
             plan->weak ? "W/" : "", plan->hash[0], plan->hash[1]);
    ret = respond_body(conn, rq, &rep);
out:
    free(q);
    return ret;
}
