/* gpu_doc: the GPU manager's views as JSON, and its status codes as HTTP
 * statuses and wire error codes. */
#include "gpu_doc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_preload.h"
#include "util.h"

/* What a manager call failed with, as the HTTP endpoints and the lease
 * socket say it: the one place where status codes become wire codes. */
enum gpu_op { GPU_OP_DEVICE, GPU_OP_PRELOAD, GPU_OP_EVICT, GPU_OP_OPEN };

static const char *wire_code(enum gpu_op op, enum st_status code, int *http_status)
{
    static const struct {
        enum gpu_op op;
        enum st_status code;
        int http;
        const char *wire;
    } map[] = {
        {GPU_OP_DEVICE, ST_ERR_INVALID_ARGUMENT, 400, "bad_device"},
        {GPU_OP_DEVICE, ST_ERR_NO_DEVICE, 503, "gpu_unavailable"},
        {GPU_OP_PRELOAD, ST_ERR_NOT_FOUND, 404, "not_found"},
        {GPU_OP_PRELOAD, ST_ERR_INVALID_ARGUMENT, 409, "model_invalid"},
        {GPU_OP_PRELOAD, ST_ERR_CONFLICT, 409, "loaded_elsewhere"},
        {GPU_OP_EVICT, ST_ERR_NOT_FOUND, 404, "not_loaded"},
        {GPU_OP_OPEN, ST_ERR_NOT_FOUND, 0, "not_loaded"},
        {GPU_OP_OPEN, ST_ERR_INVALID_ARGUMENT, 0, "wrong_device"},
        {GPU_OP_OPEN, ST_ERR_CONFLICT, 0, "loading"},
        {GPU_OP_OPEN, ST_ERR_DEVICE, 0, "failed"},
        {GPU_OP_OPEN, ST_ERR_LIMIT, 0, "too_many_shards"},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        if (map[i].op == op && map[i].code == code) {
            *http_status = map[i].http;
            return map[i].wire;
        }
    }
    *http_status = code == ST_ERR_NO_MEMORY ? 503 : 500;
    return code == ST_ERR_NO_MEMORY ? "out_of_memory" : "internal";
}

/* {"error": {"code": code, "message": msg}}. */
static json_t *error_json(const char *code, const char *msg)
{
    return json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
}

json_t *gpu_doc_answer_error(const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *doc = error_json(code, msg);
    json_object_set_new(doc, "ok", json_false());
    return doc;
}

static char *base64(const unsigned char *p, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        *o++ = tab[v >> 18 & 63];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

static json_t *tensors_json(const struct gm_view *v)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < v->n_tensors; i++) {
        const struct gm_tensor *t = &v->tensors[i];
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
        json_t *o = json_pack("{s:s,s:s,s:o,s:I,s:I,s:I}", "name", t->name, "dtype",
                              dtype_info(t->dtype)->name, "shape", shape, "alloc",
                              (json_int_t)t->alloc, "offset", (json_int_t)t->offset, "nbytes",
                              (json_int_t)t->nbytes);
        if (o)
            json_array_append_new(arr, o);
    }
    return arr;
}

/* The legacy CUDA IPC handle of shard s, in the shape Triton's CUDA
 * shared-memory extension expects. Only "open" answers carry it: whoever
 * imports it must hold a lease. */
static void add_legacy(json_t *o, const struct gm_view *v, const struct gm_shard *s)
{
    char *b64 = base64(s->a.legacy_handle, GPU_LEGACY_HANDLE_BYTES);
    if (!b64)
        return;
    json_object_set_new(o, "raw_handle", json_pack("{s:s}", "b64", b64));
    json_object_set_new(o, "device_id", json_integer(v->be->devices[v->dev].index));
    json_object_set_new(o, "legacy_byte_size", json_integer((json_int_t)s->a.legacy_size));
    free(b64);
}

/* Allocations as GET shows them (full) or as "open" answers carry them.
 * published: the loader filled them (their sizes and checksums may be read). */
static json_t *allocs_json(const struct gm_view *v, int published, int for_open)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < v->n_shards; i++) {
        const struct gm_shard *s = &v->shards[i];
        json_t *o = json_pack("{s:I,s:s,s:I}", "id", (json_int_t)i, "file", s->file, "byte_size",
                              (json_int_t)s->size);
        if (!o)
            continue;
        if (published) {
            char sum[32];
            snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)s->checksum);
            json_object_set_new(o, "alloc_size", json_integer((json_int_t)s->a.alloc_size));
            json_object_set_new(o, "checksum", json_string(sum));
        }
        if (for_open) {
            json_object_set_new(o, "handle_type", json_string(v->be->handle_type));
            json_object_set_new(o, "fd_index", json_integer((json_int_t)i));
            if (published && s->a.legacy_size)
                add_legacy(o, v, s);
        } else {
            json_t *types = json_array();
            json_array_append_new(types, json_string(v->be->handle_type));
            if (published && s->a.legacy_size)
                json_array_append_new(types, json_string("cuda_ipc"));
            json_object_set_new(o, "handle_types", types);
        }
        json_array_append_new(arr, o);
    }
    return arr;
}

static void add_device(json_t *o, const struct gm_view *v)
{
    const struct gpu_device *d = &v->be->devices[v->dev];
    json_object_set_new(o, "backend", json_string(v->be->name));
    json_object_set_new(o, "device", json_string(v->device));
    json_object_set_new(o, "device_index", json_integer(d->index));
    json_object_set_new(o, "device_uuid", json_string(d->uuid));
    json_object_set_new(o, "generation", json_integer((json_int_t)v->generation));
}

static char *dump(json_t *o)
{
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

static char *make_tensors(const struct gm_view *v)
{
    return dump(tensors_json(v));
}

static char *make_allocations(const struct gm_view *v)
{
    return dump(allocs_json(v, 1, 0));
}

/* envelope (a JSON object, taken) with `"allocations":allocs,"tensors":tensors`
 * spliced in before its closing brace. */
static char *splice(json_t *envelope, const char *allocs, const char *tensors)
{
    char *head = envelope ? json_dumps(envelope, JSON_COMPACT) : NULL;
    json_decref(envelope);
    if (!head || !allocs || !tensors) {
        free(head);
        return NULL;
    }
    size_t hn = strlen(head);
    char *out;
    if (asprintf(&out, "%.*s%s\"allocations\":%s,\"tensors\":%s}", (int)(hn - 1), head,
                 hn > 2 ? "," : "", allocs, tensors) < 0)
        out = NULL;
    free(head);
    return out;
}

/* Where a preload's bytes came from. */
static json_t *io_json(const struct gm_io *io)
{
    return json_pack("{s:I,s:I,s:I,s:I,s:s,s:i,s:i}", "page_cache_bytes",
                     (json_int_t)io->page_cache_bytes, "disk_bytes", (json_int_t)io->disk_bytes,
                     "upstream_bytes", (json_int_t)io->upstream_bytes,
                     "handed_over_bytes", (json_int_t)io->handed_over_bytes, "disk_reads",
                     io->disk_reads[0] ? io->disk_reads : "none", "threads", (int)io->threads,
                     "depth", (int)io->depth);
}

/* What GET adds to the envelope: progress, leases, why it failed, and the
 * preload's timing once it ended. */
static void add_progress(json_t *o, const struct gm_view *v)
{
    json_object_set_new(o, "progress",
                        json_pack("{s:I,s:I,s:f}", "bytes_done", (json_int_t)v->done,
                                  "bytes_total", (json_int_t)v->total, "fraction",
                                  v->total ? (double)v->done / (double)v->total : 1.0));
    json_object_set_new(o, "leases", json_integer(v->leases));
    if (v->state == GM_FAILED)
        json_object_set_new(o, "reason", json_string(v->error));
    if (v->t_end_ns) {
        double secs = (double)(v->t_end_ns - v->t_start_ns) / 1e9;
        json_t *p = json_pack("{s:f,s:f,s:b}", "seconds", secs, "bytes_per_second",
                              secs > 0 ? (double)v->done / secs : 0.0, "verified", v->verified);
        if (v->state != GM_FAILED)
            json_object_set_new(p, "io", io_json(&v->io));
        json_object_set_new(o, "preload", p);
    }
}

/* The model view, as GET shows it (for_open 0) or as the lease socket's
 * "open" answer carries it (published allocations with their descriptors'
 * indexes and legacy handles, and the lease). */
static char *instance_text(const struct gm_view *v, int for_open, uint64_t lease)
{
    json_t *o;
    if (for_open)
        o = json_pack("{s:b,s:I,s:s}", "ok", 1, "lease", (json_int_t)lease, "model", v->name);
    else
        o = json_pack("{s:s,s:s}", "model", v->name, "state", gm_state_name(v->state));
    if (!o)
        return NULL;
    add_device(o, v);
    if (!for_open)
        add_progress(o, v);
    char *allocs = NULL;
    const char *at;
    if (!for_open && v->published) /* published allocations never change again */
        at = gm_view_text(v, GM_TEXT_ALLOCATIONS, make_allocations);
    else
        at = allocs = dump(allocs_json(v, for_open || v->published, for_open));
    char *text = splice(o, at, gm_view_text(v, GM_TEXT_TENSORS, make_tensors));
    free(allocs);
    return text;
}


void gpu_doc_options(struct gm_options *opt, const struct config *cfg)
{
    *opt = (struct gm_options){.preload = (const char *const *)cfg->preload,
                               .n_preload = cfg->n_preload,
                               .staging_buffers = cfg->staging_buffers,
                               .staging_buffer_bytes = cfg->staging_buffer_bytes,
                               .preload_threads = cfg->preload_threads,
                               .verify = cfg->verify,
                               .legacy_ipc = cfg->legacy_ipc};
}

/* ---- HTTP ------------------------------------------------------------------ */

/* The instance table: every instance with its leases (the status), or
 * the current ones only (what the socket's "list" shows). */
static json_t *rows_json(struct gpu_manager *gm, int current_only)
{
    json_t *models = json_array();
    struct gm_row *rows;
    size_t n;
    if (gpu_manager_rows(gm, current_only, &rows, &n) < 0)
        n = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_pack("{s:s,s:s,s:s,s:I}", "name", rows[i].name, "state",
                              gm_state_name(rows[i].state), "device", rows[i].device,
                              "generation", (json_int_t)rows[i].generation);
        if (o && !current_only)
            json_object_set_new(o, "leases", json_integer((int)rows[i].leases));
        json_array_append_new(models, o);
    }
    gm_rows_free(rows, n);
    return models;
}

json_t *gpu_doc_status_json(struct gpu_manager *gm, const char *socket_path)
{
    const char *reason;
    const struct gpu_backend *cuda = gpu_manager_cuda(gm, &reason);
    json_t *devs = json_array(), *backends = json_array(), *models = rows_json(gm, 0);
    json_array_append_new(backends, json_string("host"));
    if (cuda) {
        json_array_append_new(backends, json_string("cuda"));
        for (size_t i = 0; i < cuda->n_devices; i++) {
            const struct gpu_device *d = &cuda->devices[i];
            json_t *o = json_pack("{s:i,s:s,s:s,s:I}", "index", d->index, "uuid", d->uuid, "name",
                                  d->name, "memory_bytes", (json_int_t)d->memory_bytes);
            if (d->error[0])
                json_object_set_new(o, "error", json_string(d->error));
            json_array_append_new(devs, o);
        }
    }
    struct gm_staging staging[16];
    size_t n_staging = gpu_manager_staging(gm, staging, 16);
    json_t *rings = json_object();
    for (size_t i = 0; i < n_staging && i < 16; i++)
        json_object_set_new(rings, staging[i].device, json_integer((json_int_t)staging[i].bytes));
    json_t *o = json_pack("{s:b,s:o,s:o,s:s,s:o,s:o}", "available", cuda != NULL, "devices", devs,
                          "backends", backends, "ipc_socket", socket_path ? socket_path : "",
                          "staging_bytes", rings, "models", models);
    if (!cuda)
        json_object_set_new(o, "reason", json_string(reason));
    return o;
}

json_t *gpu_doc_summary(struct gpu_manager *gm, const char *model)
{
    struct gm_view v;
    gpu_manager_view(gm, model, &v);
    json_t *o = json_pack("{s:s}", "state", v.inst      ? gm_state_name(v.state)
                                            : v.refused ? "failed"
                                                        : "none");
    if (v.inst || v.refused)
        json_object_set_new(o, "device", json_string(v.device));
    if (v.inst)
        json_object_set_new(o, "generation", json_integer((json_int_t)v.generation));
    gpu_manager_view_release(gm, &v);
    return o;
}

char *gpu_doc_model_text(struct gpu_manager *gm, const char *model, int *http_status)
{
    struct gm_view v;
    *http_status = 200;
    gpu_manager_view(gm, model, &v);
    char *text;
    if (v.inst)
        text = instance_text(&v, 0, 0);
    else if (v.refused)
        text = dump(json_pack("{s:s,s:s,s:s,s:s}", "model", model, "state", "failed", "device",
                              v.device, "reason", v.error));
    else
        text = dump(json_pack("{s:s,s:s}", "model", model, "state", "none"));
    gpu_manager_view_release(gm, &v);
    return text;
}

/* text parsed (taken). */
static json_t *parse(char *text)
{
    json_t *o = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return o;
}

json_t *gpu_doc_model_json(struct gpu_manager *gm, const char *model, int *http_status)
{
    return parse(gpu_doc_model_text(gm, model, http_status));
}

/* Resolves device, then asks for the preload. */
/* Preloads model on device: the registry's model, or (src not NULL) rm
 * with *src, which the new instance takes over (*src set to NULL then). */
static char *preload_device(struct gpu_manager *gm, const char *model, const char *device,
                            const struct reg_model *rm, struct gm_source **src, int *http_status)
{
    struct gm_device where;
    struct gm_view v;
    struct st_error err;
    if (gm_resolve_device(gm, device, &where, &err) < 0)
        return dump(error_json(wire_code(GPU_OP_DEVICE, err.code, http_status), err.message));
    int rc = src ? gpu_preload_request_model(gm, model, rm, *src, &where, &v, &err)
                 : gpu_preload_request(gm, model, &where, 0, &v, &err);
    if (rc == 1 && src)
        *src = NULL; /* the instance took it */
    if (rc < 0)
        return dump(error_json(wire_code(GPU_OP_PRELOAD, err.code, http_status), err.message));
    *http_status = rc == 1 ? 202 : 200;
    char *text = instance_text(&v, 0, 0);
    gpu_manager_view_release(gm, &v);
    return text;
}

/* The device a POST body names, or NULL with the 400 document in *doc. */
static json_t *preload_body(const char *body, size_t body_len, const char **device, char **doc,
                            int *http_status)
{
    json_error_t jerr;
    json_t *req = json_loadb(body, body_len, JSON_REJECT_DUPLICATES, &jerr);
    *device = json_string_value(json_object_get(req, "device"));
    if (!req || !json_is_object(req) || !*device) {
        *http_status = 400;
        *doc = dump(error_json("bad_request", "the body must be a JSON object with \"device\": "
                                              "\"cuda:N\", a GPU UUID or \"host\""));
        json_decref(req);
        return NULL;
    }
    return req;
}

int gpu_doc_preload_device(const char *body, size_t body_len, char **device, char **doc,
                           int *http_status)
{
    const char *d;
    json_t *req = preload_body(body, body_len, &d, doc, http_status);
    if (!req)
        return -1;
    *device = strdup(d);
    json_decref(req);
    return *device ? 0 : -1;
}

char *gpu_doc_preload_model_text(struct gpu_manager *gm, const char *model, const char *device,
                                 const struct reg_model *rm, struct gm_source **src,
                                 int *http_status)
{
    return preload_device(gm, model, device, rm, src, http_status);
}

char *gpu_doc_preload_text(struct gpu_manager *gm, const char *model, const char *body,
                           size_t body_len, int *http_status)
{
    const char *device;
    char *doc = NULL;
    json_t *req = preload_body(body, body_len, &device, &doc, http_status);
    if (req)
        doc = preload_device(gm, model, device, NULL, NULL, http_status);
    json_decref(req);
    return doc;
}

json_t *gpu_doc_preload(struct gpu_manager *gm, const char *model, const char *body,
                        size_t body_len, int *http_status)
{
    return parse(gpu_doc_preload_text(gm, model, body, body_len, http_status));
}

json_t *gpu_doc_evict(struct gpu_manager *gm, const char *model, int *http_status)
{
    struct gm_evicted ev;
    struct st_error err;
    if (gpu_manager_evict(gm, model, &ev, &err) < 0) {
        const char *code = wire_code(GPU_OP_EVICT, err.code, http_status);
        return error_json(code, err.message);
    }
    *http_status = ev.draining ? 202 : 200;
    if (!ev.draining)
        return json_pack("{s:s,s:s,s:I}", "model", model, "state", "none", "generation",
                         (json_int_t)ev.generation);
    return json_pack("{s:s,s:s,s:I,s:i}", "model", model, "state", "draining", "generation",
                     (json_int_t)ev.generation, "leases", (int)ev.leases);
}

/* ---- the lease socket -------------------------------------------------------- */

struct gpu_lease *gpu_doc_open(struct gpu_manager *gm, const char *model, const char *device,
                               uint64_t lease_id, char **answer, int *fds, size_t max_fds,
                               size_t *n_fds)
{
    struct gm_device where;
    struct gm_view v;
    struct st_error err;
    int http;
    *n_fds = 0;
    if (device && *device && gm_resolve_device(gm, device, &where, &err) < 0) {
        *answer = dump(gpu_doc_answer_error(wire_code(GPU_OP_DEVICE, err.code, &http), "%s",
                                            err.message));
        return NULL;
    }
    struct gpu_lease *l = gpu_manager_open(gm, model, device && *device ? &where : NULL, &v, fds,
                                           max_fds, n_fds, &err);
    if (!l) {
        *answer = dump(gpu_doc_answer_error(wire_code(GPU_OP_OPEN, err.code, &http), "%s",
                                            err.message));
        return NULL;
    }
    *answer = instance_text(&v, 1, lease_id);
    gpu_manager_view_release(gm, &v);
    return l;
}

json_t *gpu_doc_list_json(struct gpu_manager *gm)
{
    json_t *models = rows_json(gm, 1);
    return json_pack("{s:b,s:o}", "ok", 1, "models", models);
}
