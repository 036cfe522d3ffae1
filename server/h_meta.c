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

/* Parameters (elements) of m's tensors by dtype, as the Hub's
 * "safetensors.parameters" counts them; {} for an invalid model. */
static void parameters(struct jsonw *w, const struct reg_model *m)
{
    uint64_t by_dtype[DT_COUNT] = {0};
    for (size_t i = 0; i < m->n_tensors; i++)
        by_dtype[m->tensors[i].t->dtype] += m->tensors[i].t->nelems;
    jsonw_kobj(w, "parameters");
    for (int d = 0; d < DT_COUNT; d++)
        if (by_dtype[d])
            jsonw_ku64(w, dtype_info((enum dtype)d)->name, by_dtype[d]);
    jsonw_obj_end(w);
}

/* One model of the list (its name is UTF-8: the registry serves no other). */
static void model_row(struct jsonw *w, struct server *srv, const struct reg_model *m)
{
    size_t known = model_hashes_known(m);
    jsonw_obj(w);
    jsonw_kstr(w, "name", m->name);
    jsonw_kstr(w, "state", m->state == MODEL_READY ? "ready" : "invalid");
    jsonw_kbool(w, "sharded", m->sharded);
    jsonw_ku64(w, "files", m->n_files);
    jsonw_ku64(w, "tensors", m->n_tensors);
    jsonw_ku64(w, "bytes", m->tensor_bytes);
    if (m->state != MODEL_READY) {
        jsonw_kobj(w, "error");
        jsonw_kstr(w, "code", st_status_name(m->error.code));
        jsonw_kstr(w, "message", m->error.message);
        jsonw_obj_end(w);
    }
    parameters(w, m);
    jsonw_key(w, "gpu");
    if (srv->gpu) {
        gpu_doc_summary(srv->gpu, m->name, w);
    } else {
        jsonw_obj(w);
        jsonw_kstr(w, "state", "none");
        jsonw_obj_end(w);
    }
    jsonw_kobj(w, "hashes");
    jsonw_ku64(w, "known", known);
    jsonw_ku64(w, "files", m->n_files);
    jsonw_kbool(w, "complete", known == m->n_files);
    jsonw_obj_end(w);
    jsonw_obj_end(w);
}

/* Whether this host can preload to a GPU, and if not, why. */
static void gpu_status(struct jsonw *w, struct server *srv)
{
    jsonw_key(w, "gpu");
    if (srv->gpu) {
        char *sock = config_ipc_socket_path(srv->cfg);
        gpu_doc_status(srv->gpu, sock, w);
        free(sock);
        return;
    }
    jsonw_obj(w);
    jsonw_kbool(w, "available", 0);
    jsonw_kstr(w, "reason", "GPU sharing is not running");
    jsonw_obj_end(w);
}

static void hashing(struct jsonw *w, struct hasher *h)
{
    struct hasher_progress hp;
    hasher_progress(h, &hp);
    jsonw_kobj(w, "hashing");
    jsonw_kstr(w, "state", hp.files_pending ? "hashing" : "idle");
    jsonw_ku64(w, "files", hp.files);
    jsonw_ku64(w, "bytes", hp.bytes);
    jsonw_ku64(w, "files_known", hp.files_known);
    jsonw_ku64(w, "bytes_known", hp.bytes_known);
    jsonw_ku64(w, "files_pending", hp.files_pending);
    jsonw_ku64(w, "bytes_pending", hp.bytes_pending);
    jsonw_ku64(w, "files_failed", hp.files_failed);
    jsonw_kreal(w, "bytes_per_second", hp.bytes_per_second);
    jsonw_obj_end(w);
}

enum MHD_Result handle_models(struct MHD_Connection *conn, struct request *rq,
                              const struct reg_snapshot *reg)
{
    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    jsonw_karr(&w, "models");
    for (size_t i = 0; i < reg->n_models; i++)
        model_row(&w, rq->srv, reg->models[i]);
    jsonw_arr_end(&w);
    jsonw_ku64(&w, "generation", reg->generation);
    gpu_status(&w, rq->srv);
    hashing(&w, rq->srv->hasher);
    jsonw_obj_end(&w);
    /* GPU states and hashes change without a reload, so the list carries no validator. */
    return respond_json(conn, rq, MHD_HTTP_OK, &w);
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

/* {"status": status}. */
static enum MHD_Result respond_status(struct MHD_Connection *conn, struct request *rq,
                                      const char *status)
{
    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    jsonw_kstr(&w, "status", status);
    jsonw_obj_end(&w);
    return respond_json(conn, rq, MHD_HTTP_OK, &w);
}

enum MHD_Result handle_healthz(struct MHD_Connection *conn, struct request *rq)
{
    /* Liveness only: it answers without a token, so it names nothing. */
    return respond_status(conn, rq, "ok");
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
    return respond_status(conn, rq, "ready");
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
