/* gpu_doc: the GPU manager's views as JSON, and its status codes as HTTP
 * statuses and wire error codes. */
#include "gpu_doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static void base64(struct jsonw *w, const unsigned char *p, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char out[(GPU_LEGACY_HANDLE_BYTES + 2) / 3 * 4], *o = out;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        *o++ = tab[v >> 18 & 63];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tab[v & 63] : '=';
    }
    jsonw_strn(w, out, (size_t)(o - out));
}

/* The tensor table (text the instance keeps). */
static char *make_tensors(const struct gm_view *v)
{
    struct jsonw w = JSONW_INIT;
    jsonw_arr(&w);
    for (size_t i = 0; i < v->n_tensors; i++) {
        const struct gm_tensor *t = &v->tensors[i];
        jsonw_obj(&w);
        jsonw_kstr(&w, "name", t->name);
        jsonw_kstr(&w, "dtype", dtype_info(t->dtype)->name);
        jsonw_karr(&w, "shape");
        for (uint32_t d = 0; d < t->ndim; d++)
            jsonw_u64(&w, t->shape[d]);
        jsonw_arr_end(&w);
        jsonw_ku64(&w, "alloc", t->alloc);
        jsonw_ku64(&w, "offset", t->offset);
        jsonw_ku64(&w, "nbytes", t->nbytes);
        if (t->part.split) { /* a partition's part: where it was cut */
            jsonw_kobj(&w, "part");
            jsonw_ku64(&w, "dim", t->part.dim);
            jsonw_ku64(&w, "start", t->part.lo);
            jsonw_ku64(&w, "stop", t->part.hi);
            jsonw_ku64(&w, "length", t->part.full);
            jsonw_obj_end(&w);
        }
        jsonw_obj_end(&w);
    }
    jsonw_arr_end(&w);
    return jsonw_take(&w, NULL);
}

/* The legacy CUDA IPC handle of shard s, in the shape Triton's CUDA
 * shared-memory extension expects. Only "open" answers carry it: whoever
 * imports it must hold a lease. */
static void legacy(struct jsonw *w, const struct gm_view *v, const struct gm_shard *s)
{
    jsonw_kobj(w, "raw_handle");
    jsonw_key(w, "b64");
    base64(w, s->a.legacy_handle, GPU_LEGACY_HANDLE_BYTES);
    jsonw_obj_end(w);
    jsonw_ki64(w, "device_id", v->be->devices[v->dev].index);
    jsonw_ku64(w, "legacy_byte_size", s->a.legacy_size);
}

/* Allocations as GET shows them (full) or as "open" answers carry them.
 * published: the loader filled them (their sizes may be read); their
 * checksums are there once v->sums is ready (gpu/gpu_sums.c). */
static void allocs(struct jsonw *w, const struct gm_view *v, int published, int for_open)
{
    jsonw_arr(w);
    for (size_t i = 0; i < v->n_shards; i++) {
        const struct gm_shard *s = &v->shards[i];
        jsonw_obj(w);
        jsonw_ku64(w, "id", i);
        jsonw_kstr(w, "file", s->file);
        jsonw_ku64(w, "byte_size", s->bytes); /* what the allocation holds */
        if (published)
            jsonw_ku64(w, "alloc_size", s->a.alloc_size);
        if (published && v->sums == GM_SUMS_READY) {
            char sum[32];
            snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)s->checksum);
            jsonw_kstr(w, "checksum", sum);
        }
        if (for_open) {
            jsonw_kstr(w, "handle_type", v->be->handle_type);
            jsonw_ku64(w, "fd_index", i);
            if (published && s->a.legacy_size)
                legacy(w, v, s);
        } else {
            jsonw_karr(w, "handle_types");
            jsonw_str(w, v->be->handle_type);
            if (published && s->a.legacy_size)
                jsonw_str(w, "cuda_ipc");
            jsonw_arr_end(w);
        }
        jsonw_obj_end(w);
    }
    jsonw_arr_end(w);
}

/* The published allocations as GET shows them, once their checksums are
 * final (text the instance keeps: they never change again). */
static char *make_allocations(const struct gm_view *v)
{
    struct jsonw w = JSONW_INIT;
    allocs(&w, v, 1, 0);
    return jsonw_take(&w, NULL);
}

static void device(struct jsonw *w, const struct gm_view *v)
{
    const struct gpu_device *d = &v->be->devices[v->dev];
    jsonw_kstr(w, "backend", v->be->name);
    jsonw_kstr(w, "device", v->device);
    jsonw_ki64(w, "device_index", d->index);
    jsonw_kstr(w, "device_uuid", d->uuid);
    jsonw_ku64(w, "generation", v->generation);
    jsonw_ku64(w, "world", v->world);
    jsonw_ku64(w, "rank", v->rank);
    if (v->split) {
        jsonw_key(w, "split");
        jsonw_raw(w, v->split, strlen(v->split));
    }
}

/* Where a preload's bytes came from. */
static void io(struct jsonw *w, const struct gm_io *io)
{
    jsonw_kobj(w, "io");
    jsonw_ku64(w, "page_cache_bytes", io->page_cache_bytes);
    jsonw_ku64(w, "disk_bytes", io->disk_bytes);
    jsonw_ku64(w, "upstream_bytes", io->upstream_bytes);
    jsonw_ku64(w, "handed_over_bytes", io->handed_over_bytes);
    jsonw_ku64(w, "missing_runs", io->missing_runs);
    jsonw_kreal(w, "copy_cpu_seconds", (double)io->copy_cpu_ns / 1e9);
    jsonw_kstr(w, "disk_reads", io->disk_reads[0] ? io->disk_reads : "none");
    jsonw_ku64(w, "threads", io->threads);
    jsonw_ku64(w, "depth", io->depth);
    jsonw_obj_end(w);
}

/* A reload under way beside the instance, or the last one that failed. */
static void reload(struct jsonw *w, const struct gm_reload_view *r)
{
    if (!r->present)
        return;
    jsonw_kobj(w, "reload");
    jsonw_ku64(w, "generation", r->generation);
    jsonw_kstr(w, "state", r->state == GM_FAILED ? "failed" : r->waiting ? "waiting" : "loading");
    if (r->state == GM_FAILED) {
        jsonw_kstr(w, "reason", r->error);
    } else {
        jsonw_kobj(w, "progress");
        jsonw_ku64(w, "bytes_done", r->done);
        jsonw_ku64(w, "bytes_total", r->total);
        jsonw_obj_end(w);
        jsonw_ku64(w, "bytes_needed", r->need);
    }
    if (r->waiting) {
        char why[160];
        snprintf(why, sizeof(why), "waiting for %u lease%s", r->leases, r->leases == 1 ? "" : "s");
        jsonw_kstr(w, "reason", why);
        jsonw_ku64(w, "leases", r->leases);
        jsonw_ku64(w, "bytes_available", r->available);
    }
    jsonw_obj_end(w);
}

/* What GET adds to the instance: progress, leases, why it failed, its
 * checksums' state, a reload, and the preload's timing once it ended. */
static void progress(struct jsonw *w, const struct gm_view *v)
{
    jsonw_kobj(w, "progress");
    jsonw_ku64(w, "bytes_done", v->done);
    jsonw_ku64(w, "bytes_total", v->total);
    jsonw_kreal(w, "fraction", v->total ? (double)v->done / (double)v->total : 1.0);
    jsonw_obj_end(w);
    jsonw_ku64(w, "leases", v->leases);
    if (v->state == GM_FAILED)
        jsonw_kstr(w, "reason", v->error);
    if (v->published) {
        jsonw_kstr(w, "checksums", gm_sums_name(v->sums));
        if (v->sums == GM_SUMS_UNAVAILABLE)
            jsonw_kstr(w, "checksums_reason", v->sums_error);
    }
    reload(w, &v->reload);
    if (!v->t_end_ns)
        return;
    double secs = (double)(v->t_end_ns - v->t_start_ns) / 1e9;
    jsonw_kobj(w, "preload");
    jsonw_kreal(w, "seconds", secs);
    jsonw_kreal(w, "bytes_per_second", secs > 0 ? (double)v->done / secs : 0.0);
    jsonw_kbool(w, "verified", v->verified);
    jsonw_kobj(w, "phases");
    for (int p = 0; p < GM_PHASE_COUNT; p++)
        jsonw_kreal(w, gm_phase_name((enum gm_phase)p), v->phases[p]);
    jsonw_obj_end(w);
    if (v->state != GM_FAILED)
        io(w, &v->io);
    jsonw_obj_end(w);
}

/* gpu_doc_instance's object (see gpu_doc.h), left open for the caller to
 * add its members and close. */
static void instance_body(struct jsonw *w, const struct gm_view *v, int for_open, uint64_t lease)
{
    jsonw_obj(w);
    if (for_open) {
        jsonw_kbool(w, "ok", 1);
        jsonw_ku64(w, "lease", lease);
        jsonw_kstr(w, "model", v->name);
    } else {
        jsonw_kstr(w, "model", v->name);
        jsonw_kstr(w, "state", gm_state_name(v->state));
    }
    device(w, v);
    if (!for_open)
        progress(w, v);
    jsonw_key(w, "allocations");
    int final = v->published && v->sums != GM_SUMS_PENDING;
    const char *kept = !for_open && final
                           ? gm_view_text(v, GM_TEXT_ALLOCATIONS, make_allocations)
                           : "";
    if (!kept)
        jsonw_fail(w);
    else if (*kept)
        jsonw_raw(w, kept, strlen(kept));
    else
        allocs(w, v, for_open || v->published, for_open);
    const char *tensors = gm_view_text(v, GM_TEXT_TENSORS, make_tensors);
    jsonw_key(w, "tensors");
    if (tensors)
        jsonw_raw(w, tensors, strlen(tensors));
    else
        jsonw_fail(w);
}

void gpu_doc_instance(struct jsonw *w, const struct gm_view *v, int for_open, uint64_t lease)
{
    instance_body(w, v, for_open, lease);
    jsonw_obj_end(w);
}

void gpu_doc_options(struct gm_options *opt, const struct config *cfg)
{
    *opt = (struct gm_options){.preload = (const char *const *)cfg->preload,
                               .n_preload = cfg->n_preload,
                               .staging_buffers = cfg->staging_buffers,
                               .staging_buffer_bytes = cfg->staging_buffer_bytes,
                               .preload_threads = cfg->preload_threads,
                               .memory_limit = cfg->preload_memory_limit,
                               .staging_limit = cfg->staging_memory_limit,
                               .verify = cfg->verify,
                               .legacy_ipc = cfg->legacy_ipc};
}

/* ---- HTTP ------------------------------------------------------------------ */

/* One row of the instance table, with its leases in the status (ctx: the
 * writer, and whether "list" asked: the current instances only). */
struct rows_ctx {
    struct jsonw *w;
    int current_only;
};

static void row(const struct gm_row *r, void *ctx)
{
    const struct rows_ctx *c = ctx;
    jsonw_obj(c->w);
    jsonw_kstr(c->w, "name", r->name);
    jsonw_kstr(c->w, "state", gm_state_name(r->state));
    jsonw_kstr(c->w, "device", r->device);
    if (r->world > 1) {
        jsonw_ku64(c->w, "world", r->world);
        jsonw_ku64(c->w, "rank", r->rank);
    }
    jsonw_ku64(c->w, "generation", r->generation);
    if (!c->current_only)
        jsonw_ku64(c->w, "leases", r->leases);
    jsonw_obj_end(c->w);
}

/* The instance table: every instance with its leases (the status), or
 * the current ones only (what the socket's "list" shows). */
static void rows(struct jsonw *w, struct gpu_manager *gm, int current_only)
{
    struct rows_ctx c = {w, current_only};
    jsonw_arr(w);
    gpu_manager_rows(gm, current_only, row, &c);
    jsonw_arr_end(w);
}

static void devices(struct jsonw *w, const struct gpu_backend *cuda)
{
    jsonw_arr(w);
    for (size_t i = 0; cuda && i < cuda->n_devices; i++) {
        const struct gpu_device *d = &cuda->devices[i];
        jsonw_obj(w);
        jsonw_ki64(w, "index", d->index);
        jsonw_kstr(w, "uuid", d->uuid);
        jsonw_kstr(w, "name", d->name);
        jsonw_ku64(w, "memory_bytes", d->memory_bytes);
        if (d->numa_node >= 0)
            jsonw_ki64(w, "numa_node", d->numa_node);
        if (d->error[0])
            jsonw_kstr(w, "error", d->error);
        jsonw_obj_end(w);
    }
    jsonw_arr_end(w);
}

void gpu_doc_status(struct gpu_manager *gm, const char *socket_path, struct jsonw *w)
{
    const char *reason;
    const struct gpu_backend *cuda = gpu_manager_cuda(gm, &reason);
    struct gm_staging staging[GM_MAX_DEVICES];
    size_t n_staging = gpu_manager_staging(gm, staging, GM_MAX_DEVICES);
    jsonw_obj(w);
    jsonw_kbool(w, "available", cuda != NULL);
    jsonw_key(w, "devices");
    devices(w, cuda);
    jsonw_karr(w, "backends");
    jsonw_str(w, "host");
    if (cuda)
        jsonw_str(w, "cuda");
    jsonw_arr_end(w);
    jsonw_kstr(w, "ipc_socket", socket_path ? socket_path : "");
    jsonw_kobj(w, "staging_bytes");
    for (size_t i = 0; i < n_staging && i < GM_MAX_DEVICES; i++)
        jsonw_ku64(w, staging[i].device, staging[i].bytes);
    jsonw_obj_end(w);
    jsonw_ku64(w, "staging_memory_limit", gpu_manager_staging_limit(gm));
    jsonw_key(w, "models");
    rows(w, gm, 0);
    if (!cuda)
        jsonw_kstr(w, "reason", reason);
    jsonw_obj_end(w);
}


/* An instance's short form: what the model list and the instances of GET
 * show (full: also its progress, leases, reason and preload figures). */
static void short_form(struct jsonw *w, const struct gm_view *v, int full)
{
    jsonw_obj(w);
    jsonw_kstr(w, "state", gm_state_name(v->state));
    jsonw_kstr(w, "device", v->device);
    if (v->world > 1) {
        jsonw_ku64(w, "world", v->world);
        jsonw_ku64(w, "rank", v->rank);
    }
    jsonw_ku64(w, "generation", v->generation);
    if (full) {
        jsonw_kstr(w, "device_uuid", v->be->devices[v->dev].uuid);
        progress(w, v);
    }
    jsonw_obj_end(w);
}

/* Every instance of model as views, however many there are: *vs (release
 * them with release_views). Returns how many. */
static size_t shown_views(struct gpu_manager *gm, const char *model, struct gm_view **vs)
{
    size_t cap = 8;
    for (;;) {
        struct gm_view *v = xcalloc(cap, sizeof(*v));
        size_t n = gpu_manager_views(gm, model, v, cap);
        if (n <= cap) {
            *vs = v;
            return n;
        }
        for (size_t i = 0; i < cap; i++)
            gpu_manager_view_release(gm, &v[i]);
        free(v);
        cap = n + n / 4; /* room for those made meanwhile */
    }
}

static void release_views(struct gpu_manager *gm, struct gm_view *vs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        gpu_manager_view_release(gm, &vs[i]);
    free(vs);
}

/* The state a model with several instances shows: the first of failed,
 * loading, draining, ready that one of them is. */
static const char *summary_state(const struct gm_view *vs, size_t n)
{
    static const enum gm_state order[] = {GM_FAILED, GM_LOADING, GM_DRAINING, GM_READY};
    for (size_t k = 0; k < 4; k++)
        for (size_t i = 0; i < n; i++)
            if (vs[i].state == order[k])
                return gm_state_name(order[k]);
    return "none";
}

void gpu_doc_summary(struct gpu_manager *gm, const char *model, struct jsonw *w)
{
    if (!gm) { /* no GPU manager (the handlers' unit tests): as never preloaded */
        jsonw_obj(w);
        jsonw_kstr(w, "state", "none");
        jsonw_obj_end(w);
        return;
    }
    struct gm_view v, *vs = NULL;
    gpu_manager_view(gm, model, &v);
    size_t n = v.inst ? 0 : shown_views(gm, model, &vs);
    if (v.inst) {
        short_form(w, &v, 0);
    } else if (n == 0) {
        jsonw_obj(w);
        jsonw_kstr(w, "state", v.refused ? "failed" : "none");
        if (v.refused)
            jsonw_kstr(w, "device", v.device);
        jsonw_obj_end(w);
    } else {
        jsonw_obj(w);
        jsonw_kstr(w, "state", summary_state(vs, n));
        jsonw_karr(w, "instances");
        for (size_t i = 0; i < n; i++)
            short_form(w, &vs[i], 0);
        jsonw_arr_end(w);
        jsonw_obj_end(w);
    }
    release_views(gm, vs, n);
    gpu_manager_view_release(gm, &v);
}

void gpu_doc_model(struct gpu_manager *gm, const char *model, const struct gm_which *which,
                   struct jsonw *w)
{
    struct gm_view v, *vs;
    size_t n = shown_views(gm, model, &vs), pick = n, matching = 0;
    for (size_t i = 0; which && i < n; i++)
        if (gm_which_holds(which, vs[i].be, vs[i].dev, vs[i].world, vs[i].rank)) {
            matching++;
            if (pick == n)
                pick = i;
        }
    memset(&v, 0, sizeof(v));
    if (which && matching)
        v = vs[pick]; /* borrowed: released with the others */
    else if (!which)
        gpu_manager_view(gm, model, &v);
    /* Several current instances, none of them asked for: GET ?device=&rank=
     * shows one. */
    int several = !v.inst && n && !which;
    if (v.inst) {
        /* One instance: its whole document, and the list of every one. */
        instance_body(w, &v, 0, 0); /* GET's object, left open for the list */
    } else {
        jsonw_obj(w);
        jsonw_kstr(w, "model", model);
        jsonw_kstr(w, "state", several ? summary_state(vs, n) : v.refused ? "failed" : "none");
    }
    if (!v.inst && !several && v.refused) {
        jsonw_kstr(w, "device", v.device);
        jsonw_kstr(w, "reason", v.error);
    }
    if (v.inst || several) {
        jsonw_karr(w, "instances");
        for (size_t i = 0; i < n; i++)
            short_form(w, &vs[i], 1);
        jsonw_arr_end(w);
    }
    jsonw_obj_end(w);
    release_views(gm, vs, n);
    if (!which)
        gpu_manager_view_release(gm, &v);
}

void gpu_doc_list(struct gpu_manager *gm, struct jsonw *w)
{
    jsonw_obj(w);
    jsonw_kbool(w, "ok", 1);
    jsonw_key(w, "models");
    rows(w, gm, 1);
    jsonw_obj_end(w);
}

void gpu_doc_checksums(struct gpu_manager *gm, struct gpu_lease *l, struct jsonw *w)
{
    struct gm_view v;
    gpu_lease_view(gm, l, &v);
    jsonw_obj(w);
    jsonw_kbool(w, "ok", 1);
    jsonw_kstr(w, "state", gm_sums_name(v.sums));
    if (v.sums == GM_SUMS_UNAVAILABLE)
        jsonw_kstr(w, "reason", v.sums_error);
    jsonw_karr(w, "checksums");
    for (size_t i = 0; v.sums == GM_SUMS_READY && i < v.n_shards; i++) {
        char sum[32];
        snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)v.shards[i].checksum);
        jsonw_str(w, sum);
    }
    jsonw_arr_end(w);
    jsonw_obj_end(w);
    gpu_manager_view_release(gm, &v);
}
