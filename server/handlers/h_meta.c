/* JSON endpoints: the model list, one model's description, the merged header,
 * readiness and metrics. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc_cache.h"
#include "gpu_manager.h"
#include "gpu_doc.h"
#include "handlers.h"
#include "h_mirror.h"
#include "hasher.h"
#include "metrics.h"
#include "model_doc.h"
#include "server.h"

/* One model of the list (its name is UTF-8: the registry serves no other). */
static void model_row(struct jsonw *w, struct server *srv, const struct reg_model *m)
{
    size_t known = model_doc_hashes_known(m);
    jsonw_obj(w);
    jsonw_kstr(w, "name", m->name);
    jsonw_kstr(w, "source", "local");
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
    model_doc_parameters(w, m);
    jsonw_key(w, "gpu");
    gpu_doc_summary(srv->gpu, m->name, w);
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

struct answer *handle_models(const struct request_view *v, struct answer *a,
                             const struct reg_snapshot *reg)
{
    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    jsonw_karr(&w, "models");
    for (size_t i = 0; i < reg->n_models; i++)
        model_row(&w, v->srv, reg->models[i]);
    if (v->srv->mirror)
        mirror_list_models(&w, v->srv, reg);
    jsonw_arr_end(&w);
    jsonw_ku64(&w, "generation", reg->generation);
    gpu_status(&w, v->srv);
    hashing(&w, v->srv->hasher);
    if (v->srv->mirror)
        mirror_status(&w, v->srv);
    jsonw_obj_end(&w);
    /* GPU states and hashes change without a reload, so the list carries no validator. */
    return answer_jsonw(a, HTTP_OK, &w);
}

static void unref_doc(void *d)
{
    shared_doc_unref(d);
}

/* Answers with d (the reference is handed to the answer, which keeps it
 * until the request ends: a reader that does not read holds a reference,
 * never a copy). */
static struct answer *send_doc(struct answer *a, struct shared_doc *d)
{
    answer_defer(a, unref_doc, d);
    struct representation rep = {
        .body = {.fd = -1, .data_len = d->len, .src = &shared_doc_source, .src_ctx = d},
        .content_type = "application/json",
        .mtime = -1,
        .document = 1,
        .gzip = d->gzip, /* made with the document, on the renderer's thread */
        .gzip_len = d->gzip_len,
    };
    /* The validator is a hash of the document's own bytes, which the daemon
     * has in full, so it is strong, equal across replicas and restarts for
     * equal files, and changes whenever a byte of the document does (a
     * file's hash becoming known included). */
    snprintf(rep.etag, sizeof(rep.etag), "\"m%016" PRIx64 "\"", d->hash);
    return answer_body(a, &rep);
}

/* Answers with m's document `kind` when the cache has it fresh; otherwise
 * waits for the renderer, then answers (dispatched again) with what the
 * cache holds. The HTTP thread neither renders nor waits. */
static struct answer *model_doc(const struct request_view *v, struct answer *a,
                                const struct reg_model *m, enum doc_kind kind)
{
    struct shared_doc *d = doc_cache_get(m, kind, !v->waited);
    if (d)
        return send_doc(a, d);
    /* Rendering fails only when memory runs out: a condition of the host,
     * not of the model, so the answer says to try again. */
    if (v->waited && v->wait_result == DOC_NO_MEMORY)
        return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                            "not enough memory to render the %s of model \"%.300s\" "
                            "(%zu tensors); try again later",
                            kind == DOC_DESCRIPTION ? "description" : "merged header", m->name,
                            m->n_tensors);
    if (v->waited && v->wait_result == DOC_STOPPED)
        return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "stopping", "the daemon is stopping");
    /* Not rendered yet (or, after a wait, a reload brought a new version of
     * the model). */
    return answer_wait_doc(v, a, m, NULL, kind);
}

struct answer *handle_model(const struct request_view *v, struct answer *a,
                            const struct reg_model *m, int merged_header)
{
    return model_doc(v, a, m, merged_header ? DOC_HEADER : DOC_DESCRIPTION);
}

/* {"status": status}. */
static struct answer *status_answer(struct answer *a, const char *status)
{
    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    jsonw_kstr(&w, "status", status);
    jsonw_obj_end(&w);
    return answer_jsonw(a, HTTP_OK, &w);
}

struct answer *handle_healthz(const struct request_view *v, struct answer *a)
{
    (void)v;
    /* Liveness only: it answers without a token, so it names nothing. */
    return status_answer(a, "ok");
}

struct answer *handle_readyz(const struct request_view *v, struct answer *a)
{
    struct server *srv = v->srv;
    if (!atomic_load(&srv->ready))
        return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "not_ready",
                            "the models root is being scanned");
    if (srv->gpu && !gpu_manager_ready(srv->gpu))
        return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "not_ready",
                            "start-up preloads are still loading");
    return status_answer(a, "ready");
}

struct answer *handle_metrics(const struct request_view *v, struct answer *a, int text)
{
    const char *accept = view_header(v, "Accept");
    const char *fmt = v->query(v, "format");
    if (fmt && strcmp(fmt, "prometheus") != 0 && strcmp(fmt, "json") != 0)
        return answer_error(a, HTTP_BAD_REQUEST, "bad_parameter",
                            "format must be \"json\" or \"prometheus\"");
    if (fmt)
        text = strcmp(fmt, "prometheus") == 0;
    else if (!text && accept && strstr(accept, "text/plain") && !strstr(accept, "application/json"))
        text = 1;
    if (v->srv->gpu)
        gpu_manager_update_metrics(v->srv->gpu);
    char *body = text ? metrics_render_prometheus() : metrics_render_json();
    size_t len = body ? strlen(body) : 0;
    if (body && !text)
        body = answer_json_line(body, &len);
    if (!body)
        return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                            "not enough memory to render the metrics");
    answer_defer(a, free, body);
    struct representation rep = {
        .body = {.prefix = body, .prefix_len = len, .fd = -1},
        .content_type = text ? "text/plain; version=0.0.4; charset=utf-8" : "application/json",
        .mtime = -1,
        .document = 1,
    };
    return answer_body(a, &rep);
}
