/* JSON endpoints: the model list, one model's description, the merged header,
 * readiness and metrics. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_manager.h"
#include "handlers.h"
#include "hasher.h"
#include "metrics.h"
#include "respond.h"
#include "util.h"

/* The validator of a model document: a hash of its own bytes, which the
 * daemon has in full, so it is strong, equal across replicas and restarts
 * for equal files, and changes whenever a byte of the document does (a
 * file's hash becoming known included). */
static void doc_etag(const char *text, size_t len, char *out, size_t outlen)
{
    snprintf(out, outlen, "\"m%016" PRIx64 "\"", hash_fnv1a(text, len, HASH_FNV_SEED));
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

static json_t *shape_json(const uint64_t *shape, uint32_t ndim)
{
    json_t *a = json_array();
    for (uint32_t i = 0; i < ndim; i++)
        json_array_append_new(a, json_integer((json_int_t)shape[i]));
    return a;
}

static json_t *offsets_json(uint64_t begin, uint64_t end)
{
    return json_pack("[I,I]", (json_int_t)begin, (json_int_t)end);
}

/* Encodes and frees doc; NULL when it cannot be encoded. */
static char *dump_json(json_t *doc)
{
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    return text;
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
        size_t known = model_hashes_known(m);
        json_t *o = json_pack("{s:s,s:s,s:b,s:I,s:I,s:I}", "name", m->name, "state",
                              m->state == MODEL_READY ? "ready" : "invalid", "sharded",
                              m->sharded, "files", (json_int_t)m->n_files, "tensors",
                              (json_int_t)m->n_tensors, "bytes", (json_int_t)m->tensor_bytes);
        if (!o) /* a name that is not UTF-8 cannot be listed in JSON */
            continue;
        if (m->state != MODEL_READY)
            json_object_set_new(o, "error", error_json(&m->error));
        json_object_set_new(o, "gpu", gpu_summary(rq->srv, m));
        json_object_set_new(o, "hashes", hashes_json(known, m->n_files));
        json_array_append_new(list, o);
    }
    /* Whether this host can preload to a GPU, and if not, why. */
    json_t *gpu = rq->srv->gpu ? gpu_manager_status_json(rq->srv->gpu)
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

/* The description of a model (GET /v1/models/{model}) with the hashes
 * known so far. Once all are known it cannot change for the model's
 * lifetime and is rendered once (handle_model). */
static char *render_model(const struct reg_model *m)
{
    json_t *files = json_array(), *metadata = json_object(), *tensors = json_object();
    size_t known = 0;
    for (size_t i = 0; i < m->n_files; i++) {
        const struct reg_file *f = &m->files[i];
        char etag[REG_ETAG_MAX], sha[2 * DIGEST_SHA256_LEN + 1];
        reg_file_etag(f, etag);
        int hashed = reg_file_sha256_hex(f, sha);
        known += (size_t)hashed;
        json_t *o = json_pack("{s:s,s:I,s:s}", "name", f->name, "size", (json_int_t)f->st.size,
                              "etag", etag);
        if (!o)
            continue;
        json_object_set_new(o, "header_length", f->header ? json_integer((json_int_t)f->header->header_len)
                                                          : json_null());
        json_object_set_new(o, "sha256", hashed ? json_string(sha) : json_null());
        if (f->is_safetensors && f->error.code != ST_OK)
            json_object_set_new(o, "error", error_json(&f->error));
        json_array_append_new(files, o);
        if (f->header && f->header->has_metadata) {
            json_t *md = json_object();
            for (size_t k = 0; k < f->header->n_metadata; k++)
                json_object_set_new(md, f->header->metadata[k].key,
                                    json_string(f->header->metadata[k].value));
            json_object_set_new(metadata, f->name, md);
        }
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        const struct reg_tensor *t = &m->tensors[i];
        const struct st_tensor *st = t->t;
        json_object_set_new(tensors, st->name,
                            json_pack("{s:s,s:o,s:s,s:o,s:I}", "dtype", dtype_info(st->dtype)->name,
                                      "shape", shape_json(st->shape, st->ndim), "file",
                                      t->file->name, "data_offsets",
                                      offsets_json(st->begin, st->end), "nbytes",
                                      (json_int_t)(st->end - st->begin)));
    }
    json_t *doc = json_pack("{s:s,s:s,s:b,s:I,s:I,s:o,s:o,s:o}", "name", m->name, "state",
                            m->state == MODEL_READY ? "ready" : "invalid", "sharded", m->sharded,
                            "tensor_count", (json_int_t)m->n_tensors, "bytes",
                            (json_int_t)m->tensor_bytes, "files", files, "metadata", metadata,
                            "tensors", tensors);
    if (m->index_file)
        json_object_set_new(doc, "index", json_string(m->index_file->name));
    if (m->state != MODEL_READY)
        json_object_set_new(doc, "error", error_json(&m->error));
    json_object_set_new(doc, "hashes", hashes_json(known, m->n_files));
    return dump_json(doc);
}

/* The merged header of all shards (GET /v1/models/{model}/header), rendered
 * once per snapshot: for thousands of tensors building it is milliseconds of
 * jansson work, and it only changes when the registry does. */
static char *render_header(const struct reg_model *m)
{
    json_t *doc = json_object(), *md = json_object();
    json_object_set_new(doc, "__metadata__", md);
    /* Shards usually repeat the same metadata; the first file to set a key wins. */
    for (size_t i = 0; i < m->n_files; i++) {
        const struct st_header *h = m->files[i].header;
        for (size_t k = 0; h && k < h->n_metadata; k++)
            if (!json_object_get(md, h->metadata[k].key))
                json_object_set_new(md, h->metadata[k].key, json_string(h->metadata[k].value));
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        const struct st_tensor *st = m->tensors[i].t;
        json_object_set_new(doc, st->name,
                            json_pack("{s:s,s:o,s:o,s:s}", "dtype", dtype_info(st->dtype)->name,
                                      "shape", shape_json(st->shape, st->ndim), "data_offsets",
                                      offsets_json(st->begin, st->end), "file",
                                      m->tensors[i].file->name));
    }
    return dump_json(doc);
}

/* Answers with the model's cached document; the response keeps the model
 * alive until it is sent. */
static enum MHD_Result respond_model_doc(struct MHD_Connection *conn, struct request *rq,
                                         const struct reg_model *m, enum reg_doc_kind kind,
                                         char *(*render)(const struct reg_model *m))
{
    size_t len;
    const char *text = registry_model_doc(m, kind, render, &len);
    if (!text)
        return respond_error(conn, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                             "could not encode model \"%.300s\" as JSON", m->name);
    char etag[40];
    doc_etag(text, len, etag, sizeof(etag));
    return respond_json_text(conn, rq, text, len, etag, m);
}

enum MHD_Result handle_model(struct MHD_Connection *conn, struct request *rq,
                             const struct reg_model *m)
{
    if (model_hashes_known(m) == m->n_files)
        return respond_model_doc(conn, rq, m, REG_DOC_MODEL, render_model);
    /* Still hashing: rendered for this answer only. */
    char *text = render_model(m), etag[40];
    if (!text)
        return respond_error(conn, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                             "could not encode model \"%.300s\" as JSON", m->name);
    doc_etag(text, strlen(text), etag, sizeof(etag));
    return respond_json_text(conn, rq, text, strlen(text), etag, NULL);
}

enum MHD_Result handle_model_header(struct MHD_Connection *conn, struct request *rq,
                                    const struct reg_model *m)
{
    return respond_model_doc(conn, rq, m, REG_DOC_HEADER, render_header);
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
