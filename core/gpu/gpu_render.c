/* gpu_render: the JSON documents of one GPU instance, and error documents. */
#include "gpu_render.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_manager_int.h"
#include "util.h"

static json_t *error_doc(const char *code, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    return json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
}

json_t *gpu_render_http_error(int *http_status, int status, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    json_t *doc = error_doc(code, fmt, ap);
    va_end(ap);
    *http_status = status;
    return doc;
}

json_t *gpu_error_answer(const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    json_t *doc = error_doc(code, fmt, ap);
    va_end(ap);
    json_object_set_new(doc, "ok", json_false());
    return doc;
}

static char *base64(const unsigned char *p, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = xmalloc((n + 2) / 3 * 4 + 1), *o = out;
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

static json_t *tensors_json(const struct gm_model *m)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < m->n_tensors; i++) {
        const struct gm_tensor *t = &m->tensors[i];
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
static void add_legacy(json_t *o, const struct gm_model *m, const struct gm_shard *s)
{
    char *b64 = base64(s->a.legacy_handle, GPU_LEGACY_HANDLE_BYTES);
    json_object_set_new(o, "raw_handle", json_pack("{s:s}", "b64", b64));
    json_object_set_new(o, "device_id", json_integer(m->be->devices[m->dev].index));
    json_object_set_new(o, "legacy_byte_size", json_integer((json_int_t)s->a.legacy_size));
    free(b64);
}

/* Allocations as GET shows them (full) or as "open" answers carry them.
 * published: the loader filled them (their sizes and checksums may be read). */
static json_t *allocs_json(const struct gm_model *m, int published, int for_open)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < m->n_shards; i++) {
        const struct gm_shard *s = &m->shards[i];
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
            json_object_set_new(o, "handle_type", json_string(m->be->handle_type));
            json_object_set_new(o, "fd_index", json_integer((json_int_t)i));
            if (published && s->a.legacy_size)
                add_legacy(o, m, s);
        } else {
            json_t *types = json_array();
            json_array_append_new(types, json_string(m->be->handle_type));
            if (published && s->a.legacy_size)
                json_array_append_new(types, json_string("cuda_ipc"));
            json_object_set_new(o, "handle_types", types);
        }
        json_array_append_new(arr, o);
    }
    return arr;
}

static void add_device(json_t *o, const struct gm_model *m)
{
    const struct gpu_device *d = &m->be->devices[m->dev];
    json_object_set_new(o, "backend", json_string(m->be->name));
    json_object_set_new(o, "device", json_string(m->device));
    json_object_set_new(o, "device_index", json_integer(d->index));
    json_object_set_new(o, "device_uuid", json_string(d->uuid));
    json_object_set_new(o, "generation", json_integer((json_int_t)m->generation));
}

static char *dump(json_t *o)
{
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text ? text : xstrdup("[]");
}

/* m's tensor table as text, rendered on first use and kept: it never
 * changes. Valid while the caller holds a reference on m. */
static const char *tensors_text(struct gm_model *m)
{
    pthread_mutex_lock(&m->render_lock);
    if (!m->tensors_text)
        m->tensors_text = dump(tensors_json(m));
    pthread_mutex_unlock(&m->render_lock);
    return m->tensors_text;
}

/* envelope (a JSON object, taken) with `"allocations":allocs,"tensors":tensors`
 * spliced in before its closing brace. */
static char *splice(json_t *envelope, const char *allocs, const char *tensors)
{
    char *head = json_dumps(envelope, JSON_COMPACT);
    json_decref(envelope);
    if (!head)
        return NULL;
    size_t hn = strlen(head);
    char *out = xasprintf("%.*s%s\"allocations\":%s,\"tensors\":%s}", (int)(hn - 1), head,
                          hn > 2 ? "," : "", allocs, tensors);
    free(head);
    return out;
}

char *gpu_render_model_text(struct gm_model *m, const struct gm_dyn *d)
{
    json_t *o = json_pack("{s:s,s:s}", "model", m->name, "state", gm_state_name(d->state));
    add_device(o, m);
    json_object_set_new(o, "progress",
                        json_pack("{s:I,s:I,s:f}", "bytes_done", (json_int_t)d->done,
                                  "bytes_total", (json_int_t)m->total, "fraction",
                                  m->total ? (double)d->done / (double)m->total : 1.0));
    json_object_set_new(o, "leases", json_integer(d->leases));
    if (d->state == GM_FAILED)
        json_object_set_new(o, "reason", json_string(d->error));
    if (d->t_end_ns) {
        double secs = (double)(d->t_end_ns - d->t_start_ns) / 1e9;
        json_object_set_new(o, "preload",
                            json_pack("{s:f,s:f,s:s,s:b}", "seconds", secs, "bytes_per_second",
                                      secs > 0 ? (double)d->done / secs : 0.0, "io", d->io_mode,
                                      "verified", d->verified));
    }
    char *allocs = NULL;
    const char *at;
    if (d->published) { /* published allocations never change again: keep their text */
        pthread_mutex_lock(&m->render_lock);
        if (!m->allocs_text)
            m->allocs_text = dump(allocs_json(m, 1, 0));
        pthread_mutex_unlock(&m->render_lock);
        at = m->allocs_text;
    } else {
        at = allocs = dump(allocs_json(m, 0, 0));
    }
    char *text = splice(o, at, tensors_text(m));
    free(allocs);
    return text;
}

char *gpu_render_open_text(struct gm_model *m, uint64_t lease)
{
    json_t *o = json_pack("{s:b,s:I,s:s}", "ok", 1, "lease", (json_int_t)lease, "model", m->name);
    add_device(o, m);
    char *allocs = dump(allocs_json(m, 1, 1));
    char *text = splice(o, allocs, tensors_text(m));
    free(allocs);
    return text;
}

char *gpu_error_answer_text(const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    json_t *doc = error_doc(code, fmt, ap);
    va_end(ap);
    json_object_set_new(doc, "ok", json_false());
    return dump(doc);
}

char *gpu_render_error_text(const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    json_t *doc = error_doc(code, fmt, ap);
    va_end(ap);
    return dump(doc);
}
