/* JSON endpoints: the model list, one model's description, the merged header,
 * readiness and metrics. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "dtype.h"
#include "doc_cache.h"
#include "gpu/gpu_manager.h"
#include "gpu_doc.h"
#include "handlers.h"
#include "hasher.h"
#include "metrics.h"
#include "server.h"
#include "util.h"

/* Answers a JSON document (consumed), with no validator. */
static struct answer *json_answer(struct answer *a, json_t *doc)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (!text)
        return answer_error(a, HTTP_INTERNAL_SERVER_ERROR, "internal",
                            "could not encode the answer as JSON");
    return answer_json(a, HTTP_OK, text, strlen(text), NULL);
}

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

struct answer *handle_models(const struct request_view *v, struct answer *a,
                             const struct reg_snapshot *reg)
{
    struct server *srv = v->srv;
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
        json_object_set_new(o, "gpu", gpu_summary(srv, m));
        json_object_set_new(o, "hashes", hashes_json(known, m->n_files));
        json_array_append_new(list, o);
    }
    /* Whether this host can preload to a GPU, and if not, why. */
    json_t *gpu = srv->gpu ? gpu_status(srv)
                               : json_pack("{s:b,s:s}", "available", 0, "reason",
                                           "GPU sharing is not running");
    struct hasher_progress hp;
    hasher_progress(srv->hasher, &hp);
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
    return json_answer(a, doc);
}

/* Rendering fails only when memory runs out: a condition of the host, not
 * of the model, so the answer says to try again. */
static struct answer *no_memory(struct answer *a, const struct reg_model *m, enum doc_kind kind)
{
    return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                        "not enough memory to render the %s of model \"%.300s\" "
                        "(%zu tensors); try again later",
                        kind == DOC_DESCRIPTION ? "description" : "merged header", m->name,
                        m->n_tensors);
}

/* The renderer's callback: the document is there (or cannot be), dispatch
 * the request again. */
static void doc_ready(void *arg, enum doc_result r)
{
    answer_resume(arg, (int)r);
}

/* What a model document's answer waits for: its render. */
struct doc_wait {
    struct doc_cache *docs;
    const struct reg_model *m;  /* in the snapshot the request holds while the wait starts */
    enum doc_kind kind;
};

static void *start_render(struct answer *a)
{
    const struct doc_wait *w = a->wait.ctx;
    if (doc_cache_render(w->docs, w->m, w->kind, doc_ready, a) != 0)
        doc_ready(a, DOC_STOPPED);
    return NULL;
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
    if (v->waited && v->wait_result == DOC_NO_MEMORY)
        return no_memory(a, m, kind);
    if (v->waited && v->wait_result == DOC_STOPPED)
        return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "stopping", "the daemon is stopping");
    /* Not rendered yet (or, after a wait, a reload brought a new version of
     * the model). */
    struct doc_wait *w = answer_alloc(a, sizeof(*w));
    *w = (struct doc_wait){v->srv->docs, m, kind};
    return answer_wait(a, start_render, NULL, w);
}

struct answer *handle_model(const struct request_view *v, struct answer *a,
                            const struct reg_model *m)
{
    return model_doc(v, a, m, DOC_DESCRIPTION);
}

struct answer *handle_model_header(const struct request_view *v, struct answer *a,
                                   const struct reg_model *m)
{
    return model_doc(v, a, m, DOC_HEADER);
}

struct answer *handle_healthz(const struct request_view *v, struct answer *a)
{
    (void)v;
    /* Liveness only: it answers without a token, so it names nothing. */
    return json_answer(a, json_pack("{s:s}", "status", "ok"));
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
    return json_answer(a, json_pack("{s:s}", "status", "ready"));
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
    };
    return answer_body(a, &rep);
}
