/* JSON endpoints: the model list, one model's description, the merged header,
 * readiness and metrics. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gpu_manager.h"
#include "handlers.h"
#include "metrics.h"
#include "model_doc.h"
#include "respond.h"
#include "util.h"

/* A validator for documents derived from a model: its files' ETags determine
 * every byte of them, so equal files give equal documents across restarts. */
static void model_etag(const struct reg_model *m, const char *kind, char *out, size_t len)
{
    uint64_t h = hash_fnv1a(kind, strlen(kind), HASH_FNV_SEED);
    h = hash_fnv1a(m->name, strlen(m->name) + 1, h);
    for (size_t i = 0; i < m->n_files; i++)
        h = hash_fnv1a(m->files[i].etag, strlen(m->files[i].etag), h);
    snprintf(out, len, "\"m%016" PRIx64 "\"", h);
}

static json_t *error_json(const struct st_error *e)
{
    return json_pack("{s:s,s:s}", "code", st_status_name(e->code), "message", e->message);
}

static json_t *gpu_summary(struct server *srv, const struct reg_model *m)
{
    if (!srv->gpu)
        return json_pack("{s:s}", "state", "none");
    return gpu_manager_model_summary(srv->gpu, m->name);
}

enum MHD_Result handle_models(struct MHD_Connection *conn, struct request *rq,
                              const struct registry *reg)
{
    json_t *list = json_array();
    for (size_t i = 0; i < reg->n_models; i++) {
        const struct reg_model *m = reg->models[i];
        json_t *o = json_pack("{s:s,s:s,s:b,s:I,s:I,s:I}", "name", m->name, "state",
                              m->state == MODEL_READY ? "ready" : "invalid", "sharded",
                              m->sharded, "files", (json_int_t)m->n_files, "tensors",
                              (json_int_t)m->n_tensors, "bytes", (json_int_t)m->tensor_bytes);
        if (!o) /* a name that is not UTF-8 cannot be listed in JSON */
            continue;
        if (m->state != MODEL_READY)
            json_object_set_new(o, "error", error_json(&m->error));
        json_object_set_new(o, "gpu", gpu_summary(rq->srv, m));
        json_array_append_new(list, o);
    }
    /* Whether this host can preload to a GPU, and if not, why. */
    json_t *gpu = rq->srv->gpu ? gpu_manager_status_json(rq->srv->gpu)
                               : json_pack("{s:b,s:s}", "available", 0, "reason",
                                           "GPU sharing is not running");
    json_t *doc = json_pack("{s:o,s:I,s:o}", "models", list, "generation",
                            (json_int_t)reg->generation, "gpu", gpu);
    /* GPU states change without a reload, so the list carries no validator. */
    return respond_json(conn, rq, MHD_HTTP_OK, doc, NULL);
}

/* Never renders: registry_model_doc answers NULL through it when the
 * document is not cached yet. */
static char *not_cached(const struct reg_model *m)
{
    (void)m;
    return NULL;
}

/* One document is rendered at a time, process-wide: a burst of first
 * requests for a model with a million tensors (or for many such models)
 * then costs one document's memory at a time, and the requests queued
 * behind the render find it cached. */
static pthread_mutex_t g_render_lock = PTHREAD_MUTEX_INITIALIZER;

/* Answers with the snapshot's cached document; the response keeps the
 * snapshot alive until it is sent. */
static enum MHD_Result respond_model_doc(struct MHD_Connection *conn, struct request *rq,
                                         struct registry *reg, const struct reg_model *m,
                                         enum reg_doc_kind kind,
                                         char *(*render)(const struct reg_model *m),
                                         const char *etag_kind)
{
    size_t len;
    const char *text = registry_model_doc(m, kind, not_cached, &len);
    if (!text) {
        pthread_mutex_lock(&g_render_lock);
        text = registry_model_doc(m, kind, render, &len);
        pthread_mutex_unlock(&g_render_lock);
    }
    /* Rendering fails only when memory runs out: a condition of the host,
     * not of the model, so the answer says to try again. */
    if (!text)
        return respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                             "not enough memory to render the %s of model \"%.300s\" "
                             "(%zu tensors); try again later",
                             kind == REG_DOC_MODEL ? "description" : "merged header", m->name,
                             m->n_tensors);
    char etag[40];
    model_etag(m, etag_kind, etag, sizeof(etag));
    return respond_json_text(conn, rq, text, len, etag, reg);
}

enum MHD_Result handle_model(struct MHD_Connection *conn, struct request *rq,
                             struct registry *reg, const struct reg_model *m)
{
    return respond_model_doc(conn, rq, reg, m, REG_DOC_MODEL, model_doc_description, "model");
}

enum MHD_Result handle_model_header(struct MHD_Connection *conn, struct request *rq,
                                    struct registry *reg, const struct reg_model *m)
{
    return respond_model_doc(conn, rq, reg, m, REG_DOC_HEADER, model_doc_header, "header");
}

enum MHD_Result handle_healthz(struct MHD_Connection *conn, struct request *rq)
{
    /* Liveness only: it answers without a token, so it names nothing. */
    return respond_json(conn, rq, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"), NULL);
}

enum MHD_Result handle_readyz(struct MHD_Connection *conn, struct request *rq)
{
    struct server *srv = rq->srv;
    if (!atomic_load(&srv->ready))
        return respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                             "the models root is being scanned");
    if (srv->gpu && !gpu_manager_ready(srv->gpu))
        return respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                             "start-up preloads are still loading");
    return respond_json(conn, rq, MHD_HTTP_OK, json_pack("{s:s}", "status", "ready"), NULL);
}

enum MHD_Result handle_metrics(struct MHD_Connection *conn, struct request *rq, int text)
{
    const char *accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    const char *fmt = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "format");
    if (fmt && strcmp(fmt, "prometheus") != 0 && strcmp(fmt, "json") != 0)
        return respond_error(conn, rq, MHD_HTTP_BAD_REQUEST, "bad_parameter",
                             "format must be \"json\" or \"prometheus\"");
    if (fmt)
        text = strcmp(fmt, "prometheus") == 0;
    else if (!text && accept && strstr(accept, "text/plain") && !strstr(accept, "application/json"))
        text = 1;
    if (rq->srv->gpu)
        gpu_manager_update_metrics(rq->srv->gpu);
    char *body = text ? metrics_render_prometheus() : metrics_render_json();
    struct representation rep = {
        .body = {.prefix = body, .prefix_len = strlen(body), .fd = -1},
        .prefix_buf = body,
        .content_type = text ? "text/plain; version=0.0.4; charset=utf-8" : "application/json",
        .mtime = -1,
    };
    return respond_body(conn, rq, &rep);
}
