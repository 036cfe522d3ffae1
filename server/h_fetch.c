/* POST /v1/models/{model}/fetch and its GET ?q= form: many tensors, slices
 * and tensor-parallel parts as one safetensors file. The request is parsed
 * by core/fetch_req, the answer planned by core/fetch_plan; this file maps
 * their outcomes to HTTP and hands the planned body to respond_body, so
 * Range, conditional requests, sendfile of contiguous spans and the streamed
 * reader all apply as for any other byte body. */
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

/* Checks, before any header goes out, that no file of the answer changed
 * since it was validated (respond_body checks single-file bodies itself).
 * Pieces of one file are usually adjacent, so this is one fstat per file. */
static int files_unchanged(const struct fetch_plan *plan)
{
    for (size_t i = 0; i < plan->n_pieces; i++) {
        const struct body_piece *p = &plan->pieces[i];
        if (i && plan->pieces[i - 1].fd == p->fd)
            continue;
        if (!fileio_unchanged(p->fd, p->st))
            return 0;
    }
    return 1;
}

static enum MHD_Result plan_error(struct MHD_Connection *conn, struct request *rq,
                                  enum fetch_plan_status st, const char *err)
{
    switch (st) {
    case FETCH_PLAN_NO_TENSOR:
        return respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "tensor_not_found", "%s", err);
    case FETCH_PLAN_DUPLICATE:
        return respond_error(conn, rq, MHD_HTTP_BAD_REQUEST, "duplicate_tensor", "%s", err);
    case FETCH_PLAN_BAD_SLICE:
        return respond_error(conn, rq, MHD_HTTP_BAD_REQUEST, "bad_slice", "%s", err);
    case FETCH_PLAN_BAD_SPLIT:
        return respond_error(conn, rq, MHD_HTTP_BAD_REQUEST, "bad_split", "%s", err);
    case FETCH_PLAN_TOO_LARGE:
        return respond_error(conn, rq, MHD_HTTP_CONTENT_TOO_LARGE, "fetch_too_large", "%s", err);
    default:
        return respond_error(conn, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, "io_error", "%s", err);
    }
}

enum MHD_Result handle_fetch(struct MHD_Connection *conn, struct request *rq,
                             const struct reg_model *m)
{
    const struct config *cfg = rq->srv->cfg;
    int is_post = strcmp(rq->method, MHD_HTTP_METHOD_POST) == 0, bad = 0;
    size_t qlen = 0;
    char *q = handler_query(conn, "q", 1, &qlen, &bad);
    char err[1024];
    enum MHD_Result ret;
    struct fetch_req req;
    struct fetch_plan plan;

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
    if (fetch_req_parse(text, len, &lim, &req, &rerr) != 0) {
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
    enum fetch_plan_status ps = fetch_plan_build(m, &req, &plim, &plan, err, sizeof(err));
    fetch_req_free(&req);
    if (ps != FETCH_PLAN_OK) {
        ret = plan_error(conn, rq, ps, err);
        goto out;
    }
    if (!files_unchanged(&plan)) { /* HEAD answers what GET would */
        fetch_plan_free(&plan);
        ret = respond_file_changed(conn, rq);
        goto out;
    }

    /* The pieces borrow the model's descriptors: the answer pins it. */
    struct representation rep = {
        .body = {.prefix = plan.prefix, .prefix_len = plan.prefix_len, .fd = -1,
                 .data_len = plan.data_len, .pieces = plan.pieces, .n_pieces = plan.n_pieces},
        .prefix_buf = plan.prefix,
        .pieces_buf = plan.pieces_buf,
        .pin = m,
        .content_type = "application/octet-stream",
        .mtime = plan.mtime_ns / 1000000000,
    };
    /* Weak while any file's tag is: the answer is only as provably the same
     * as the files it is cut from. */
    snprintf(rep.etag, sizeof(rep.etag), "%s\"f%016" PRIx64 "%016" PRIx64 "\"",
             plan.weak ? "W/" : "", plan.hash[0], plan.hash[1]);
    ret = respond_body(conn, rq, &rep);
out:
    free(q);
    return ret;
}
