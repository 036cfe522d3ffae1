/* JSON endpoints: the model list, one model's description, the merged header,
 * readiness and metrics. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "doc_cache.h"
#include "gpu_doc.h"
#include "handlers.h"
#include "hasher.h"
#include "metrics.h"
#include "respond.h"
#include "util.h"

/* The files of m whose content hash is known. */
static size_t model_hashes_known(const struct reg_model *m)
{
    size_t known = 0;
    for (size_t i = 0; i < m->n_files; i++)
        known += reg_file_hashed(&m->files[i]);
    return known;
}

static json_t *hashes_json(size_t known, size_t files)
{
    return json_pack("{s:I,s:I,s:b}", "known", (json_int_t)known, "files", (json_int_t)files,
                     "complete", known == files);
}

static json_t *error_json(const struct st_error *e)
{
    return json_pack("{s:s,s:s}", "code", st_status_name(e->code), "message", e->message);
}

/* Parameters (elements) of m's tensors by dtype, as the Hub's
 * "safetensors.parameters" counts them; {} for an invalid model. */
static json_t *parameters_json(const struct reg_model *m)
{
    uint64_t by_dtype[DT_COUNT] = {0};
    for (size_t i = 0; i < m->n_tensors; i++)
        by_dtype[m->tensors[i].t->dtype] += m->tensors[i].t->nelems;
    json_t *o = json_object();
    for (int d = 0; d < DT_COUNT; d++)
        if (by_dtype[d])
            json_object_set_new(o, dtype_info((enum dtype)d)->name, json_integer((json_int_t)by_dtype[d]));
    return o;
}

static json_t *gpu_summary(struct server *srv, const struct reg_model *m)
{
    if (!srv->gpu)
        return json_pack("{s:s}", "state", "none");
    return gpu_doc_summary(srv->gpu, m->name);
}

static json_t *gpu_status(struct server *srv)
{
    char *sock = config_ipc_socket_path(srv->cfg);
    json_t *o = gpu_doc_status_json(srv->gpu, sock);
    free(sock);
    return o;
}

enum MHD_Result handle_models(struct MHD_Connection *conn, struct request *rq,
                              const struct reg_snapshot *reg)
{
    json_t *list = json_array();
    for (size_t i = 0; i < reg->n_models; i++) {
        const struct reg_model *m = reg->models[i];
        size_t known = model_hashes_known(m);
        json_t *o = json_pack("{s:s,s:s,s:b,s:I,s:I,s:I}", "name", m->name, "state",
                              m->state == MODEL_READY ? "ready" : "invalid", "sharded",
                              m->sharded, "files", (json_int_t)m->n_files, "tensors",
                              (json_int_t)m->n_tensors, "bytes", (json_int_t)m->tensor_bytes);
        if (!o) /* a name that is not UTF-8 cannot be listed in JSON */
            continue;
        if (m->state != MODEL_READY)
            json_object_set_new(o, "error", error_json(&m->error));
        json_object_set_new(o, "parameters", parameters_json(m));
        json_object_set_new(o, "gpu", gpu_summary(rq->srv, m));
        json_object_set_new(o, "hashes", hashes_json(known, m->n_files));
        json_array_append_new(list, o);
    }
    /* Whether this host can preload to a GPU, and if not, why. */
    json_t *gpu = rq->srv->gpu ? gpu_status(rq->srv)
                               : json_pack("{s:b,s:s}", "available", 0, "reason",
                                           "GPU sharing is not running");
    struct hasher_progress hp;
    hasher_progress(rq->srv->hasher, &hp);
    json_t *hashing = json_pack(
        "{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f}", "state",
        hp.files_pending ? "hashing" : "idle", "files", (json_int_t)hp.files, "bytes",
        (json_int_t)hp.bytes, "files_known", (json_int_t)hp.files_known, "bytes_known",
        (json_int_t)hp.bytes_known, "files_pending", (json_int_t)hp.files_pending,
        "bytes_pending", (json_int_t)hp.bytes_pending, "files_failed",
        (json_int_t)hp.files_failed, "bytes_per_second", hp.bytes_per_second);
    json_t *doc = json_pack("{s:o,s:I,s:o,s:o}", "models", list, "generation",
                            (json_int_t)reg->generation, "gpu", gpu, "hashing", hashing);
    /* GPU states and hashes change without a reload, so the list carries no validator. */
    return respond_json(conn, rq, MHD_HTTP_OK, doc, NULL);
}

/* Rendering fails only when memory runs out: a condition of the host, not
 * of the model, so the answer says to try again. */
static enum MHD_Result respond_no_memory(struct MHD_Connection *conn, struct request *rq,
                                         const struct reg_model *m, enum doc_kind kind)
{
    return respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                         "not enough memory to render the %s of model \"%.300s\" "
                         "(%zu tensors); try again later",
                         kind == DOC_DESCRIPTION ? "description" : "merged header", m->name,
                         m->n_tensors);
}

/* The renderer's callback: the document is there (or cannot be), dispatch
 * the request again (http.c). */
static void doc_ready(void *arg, enum doc_result r)
{
    struct request *rq = arg;
    atomic_store(&rq->wait_result, (int)r);
    atomic_store(&rq->wait, WAIT_RESUMED);
    MHD_resume_connection(rq->mhd);
}

/* Answers with d (the reference is handed to the answer, which keeps it
 * until the last byte is sent: a reader that does not read holds a
 * reference, never a copy). */
static enum MHD_Result send_doc(struct MHD_Connection *conn, struct request *rq,
                                struct shared_doc *d)
{
    struct representation rep = {
        .body = {.fd = -1, .data_len = d->len, .src = &shared_doc_source, .src_ctx = d},
        .src_buf = d,
        .content_type = "application/json",
        .mtime = -1,
    };
    /* The validator is a hash of the document's own bytes, which the daemon
     * has in full, so it is strong, equal across replicas and restarts for
     * equal files, and changes whenever a byte of the document does (a
     * file's hash becoming known included). */
    snprintf(rep.etag, sizeof(rep.etag), "\"m%016" PRIx64 "\"", d->hash);
    return respond_body(conn, rq, &rep);
}

/* Answers with m's document `kind` when the cache has it fresh; otherwise
 * asks the renderer and suspends the connection until it calls back, then
 * answers (dispatched again) with what the cache holds. The HTTP thread
 * neither renders nor waits. */
static enum MHD_Result respond_model_doc(struct MHD_Connection *conn, struct request *rq,
                                         const struct reg_model *m, enum doc_kind kind)
{
    int waited = atomic_load(&rq->wait) == WAIT_DONE;
    struct shared_doc *d = doc_cache_get(m, kind, !waited);
    if (d)
        return send_doc(conn, rq, d);
    int result = atomic_load(&rq->wait_result);
    if (waited && result == DOC_NO_MEMORY)
        return respond_no_memory(conn, rq, m, kind);
    if (waited && result == DOC_STOPPED)
        return respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "stopping",
                             "the daemon is stopping");
    /* Not rendered yet (or, after a wait, a reload brought a new version of
     * the model): suspended before asking, as the callback may come at once. */
    atomic_store(&rq->wait, WAIT_SUSPENDED);
    MHD_suspend_connection(conn);
    if (doc_cache_render(rq->srv->docs, m, kind, doc_ready, rq) != 0)
        doc_ready(rq, DOC_STOPPED);
    return MHD_YES; /* answered when dispatched again */
}

enum MHD_Result handle_model(struct MHD_Connection *conn, struct request *rq,
                             const struct reg_model *m)
{
    return respond_model_doc(conn, rq, m, DOC_DESCRIPTION);
}

enum MHD_Result handle_model_header(struct MHD_Connection *conn, struct request *rq,
                                    const struct reg_model *m)
{
    return respond_model_doc(conn, rq, m, DOC_HEADER);
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
    size_t len = body ? strlen(body) : 0;
    if (body && !text)
        body = respond_json_line(body, &len);
    if (!body)
        return respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                             "not enough memory to render the metrics");
    struct representation rep = {
        .body = {.prefix = body, .prefix_len = len, .fd = -1},
        .prefix_buf = body,
        .content_type = text ? "text/plain; version=0.0.4; charset=utf-8" : "application/json",
        .mtime = -1,
    };
    return respond_body(conn, rq, &rep);
}
