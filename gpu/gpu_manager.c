/* gpu_manager: the public API over the instance table: start and free,
 * device names, views, evict, the metrics. Leases are gpu/gpu_lease.c's;
 * the rest of the manager (rings, instances, checksums, reloads, preloads)
 * and its locking rules are described in gpu/gpu_manager_int.h. */
#include "gpu_manager.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu.h"
#include "gpu_manager_int.h"
#include "log.h"
#include "machine.h"
#include "metrics.h"
#include "util.h"

/* Whether m is shown as one of model's instances: a reload's new generation
 * is shown in the view of the one it replaces. */
static int shown(const struct gm_instance *m, const char *model)
{
    return !m->prev_gen && strcmp(m->name, model) == 0;
}

/* The primary instance: the one current instance, else (none current) the
 * newest draining one; NULL when there is none, or several current. Caller
 * holds the lock. */
static struct gm_instance *do_gm_find_shown(struct gpu_manager *gm, const char *model)
{
    struct gm_instance *one = NULL;
    for (struct gm_instance *m = gm->models; m; m = m->next) {
        if (!m->current || !shown(m, model))
            continue;
        if (one)
            return NULL;
        one = m;
    }
    if (one)
        return one;
    for (struct gm_instance *m = gm->models; m; m = m->next) /* newest first */
        if (shown(m, model))
            return m;
    return NULL;
}

/* The order of current instances in views: host first, then by ordinal,
 * then by rank (then world, then the newest first). For qsort. */
static int view_order(const void *pa, const void *pb)
{
    const struct gm_instance *a = *(struct gm_instance *const *)pa;
    const struct gm_instance *b = *(struct gm_instance *const *)pb;
    int ka = a->be->kind == DEVICE_HOST ? -1 : a->dev, kb = b->be->kind == DEVICE_HOST ? -1 : b->dev;
    if (ka != kb)
        return ka < kb ? -1 : 1;
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    if (a->world != b->world)
        return a->world < b->world ? -1 : 1;
    return a->generation > b->generation ? -1 : a->generation < b->generation;
}

/* ---- device names ------------------------------------------------------ */

int gm_resolve_device(struct gpu_manager *gm, const char *name, struct gm_device *where,
                      struct st_error *err)
{
    enum device_kind kind;
    int index;
    const char *uuid;
    if (device_name_parse(name, &kind, &index, &uuid) < 0)
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "device \"%.100s\" is not \"host\", "
                             "\"cuda:N\", or a GPU-... or MIG-... UUID as nvidia-smi -L prints it",
                             name);
    where->name = name;
    if (kind == DEVICE_HOST) {
        where->be = gm->host;
        where->dev = 0;
        return 0;
    }
    if (!gm->cuda)
        return st_error_fail(err, ST_ERR_NO_DEVICE, "no GPU: %s", gm->cuda_err.message);
    int dev = gpu_find_device(gm->cuda, index, uuid);
    if (dev < 0)
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "no CUDA device %.100s (%zu present)",
                             name, gm->cuda->n_devices);
    const struct gpu_device *d = &gm->cuda->devices[dev];
    if (d->error[0])
        return st_error_fail(err, ST_ERR_NO_DEVICE, "CUDA device %d (%.60s) cannot be used: %s",
                             d->index, d->name, d->error);
    where->be = gm->cuda;
    where->dev = dev;
    return 0;
}

/* ---- public API -------------------------------------------------------- */

struct gpu_manager *gpu_manager_new(const struct gm_options *opt, struct registry *registry)
{
    struct gpu_manager *gm = xcalloc(1, sizeof(*gm));
    gm->opt = *opt;
    struct machine_memory mem;
    if (!gm->opt.staging_limit && machine_memory(&mem) == 0)
        gm->opt.staging_limit = mem.total / 4;
    gm->registry = registry;
    pthread_mutex_init(&gm->lock, NULL);
    pthread_cond_init(&gm->cond, NULL);
    gm->host = gpu_host_new();
    gm->cuda = gpu_cuda_probe(&gm->cuda_err);
    gm->loader_main = gm_loader_main;
    if (gm->cuda)
        log_msg(LOG_INFO, "gpu: %zu CUDA device(s)", gm->cuda->n_devices);
    else
        log_msg(LOG_INFO, "gpu: no CUDA (%s); the host backend serves leases", gm->cuda_err.message);
    return gm;
}

/* One start-up preload, "MODEL@DEVICE". A device that cannot take it (no
 * usable driver, no such device) leaves it shown failed, with why, rather
 * than never asked for; a model that does not exist is only logged. */
static void preload_spec(struct gpu_manager *gm, const char *spec)
{
    const char *at = strrchr(spec, '@');
    if (!at) {
        log_msg(LOG_ERROR, "gpu: preload \"%s\" is not MODEL@DEVICE", spec);
        return;
    }
    char *model = xstrndup(spec, (size_t)(at - spec));
    struct gm_device where;
    struct gm_view v;
    struct st_error err;
    int rc = gm_resolve_device(gm, at + 1, &where, &err);
    int no_device = rc < 0;
    if (rc == 0)
        rc = gpu_preload_request(gm, model, &where, NULL, 1, &v, &err);
    if (rc < 0)
        log_msg(LOG_ERROR, "gpu: preload %s: %s", spec, err.message);
    else
        gpu_manager_view_release(gm, &v);
    if (no_device || (rc < 0 && err.code == ST_ERR_DEVICE_MEMORY)) {
        pthread_mutex_lock(&gm->lock);
        do_gm_refused_set(gm, model, at + 1, err.message); /* GET says why it is not there */
        pthread_mutex_unlock(&gm->lock);
    }
    free(model);
}

/* With preloads configured, every usable device's staging ring is pinned
 * now, each on a thread of its own, so that no preload (the configured
 * ones, or the first one asked for later) pays for it. */
static void pin_rings(struct gpu_manager *gm)
{
    struct gm_ring_shape shape;
    pthread_mutex_lock(&gm->lock);
    for (size_t i = 0; gm->cuda && i < gm->cuda->n_devices; i++) {
        if (gm->cuda->devices[i].error[0])
            continue;
        gm_ring_shape(&gm->opt, gm->cuda, &shape);
        do_gm_stage_prepare(gm, gm->cuda, gm->cuda->devices[i].index, &shape);
    }
    for (unsigned i = 0; i < gm->opt.n_preload; i++) {
        const char *at = strrchr(gm->opt.preload[i], '@');
        if (at && strcmp(at + 1, "host") == 0) {
            gm_ring_shape(&gm->opt, gm->host, &shape);
            do_gm_stage_prepare(gm, gm->host, 0, &shape);
            break;
        }
    }
    pthread_mutex_unlock(&gm->lock);
}

int gpu_manager_start(struct gpu_manager *gm, struct st_error *err)
{
    int rc = gm_sums_start(gm, err);
    if (rc < 0)
        return rc;
    if (gm->opt.n_preload)
        pin_rings(gm);
    for (unsigned i = 0; i < gm->opt.n_preload; i++)
        preload_spec(gm, gm->opt.preload[i]);
    pthread_mutex_lock(&gm->lock);
    gm->started = 1;
    pthread_mutex_unlock(&gm->lock);
    return 0;
}

const struct gpu_backend *gpu_manager_cuda(struct gpu_manager *gm, const char **reason)
{
    *reason = gm->cuda ? NULL : gm->cuda_err.message;
    return gm->cuda;
}

void gpu_manager_rows(struct gpu_manager *gm, int current_only,
                      void (*fn)(const struct gm_row *row, void *ctx), void *ctx)
{
    pthread_mutex_lock(&gm->lock);
    for (struct gm_instance *m = gm->models; m; m = m->next) {
        struct gm_row row = {.name = m->name, .device = m->device, .world = m->world,
                             .rank = m->rank, .state = m->state, .generation = m->generation,
                             .leases = m->leases};
        if (m->current || !current_only)
            fn(&row, ctx);
    }
    pthread_mutex_unlock(&gm->lock);
}

void gpu_manager_view(struct gpu_manager *gm, const char *model, struct gm_view *v)
{
    pthread_mutex_lock(&gm->lock);
    struct gm_instance *m = do_gm_find_shown(gm, model);
    do_gm_view(m, v);
    const struct gm_refused *r = m ? NULL : do_gm_refused_find(gm, model);
    if (r) {
        v->refused = 1;
        v->state = GM_FAILED;
        snprintf(v->refused_device, sizeof(v->refused_device), "%s", r->device);
        snprintf(v->error, sizeof(v->error), "%s", r->reason);
        v->device = v->refused_device;
    }
    pthread_mutex_unlock(&gm->lock);
}

size_t gpu_manager_views(struct gpu_manager *gm, const char *model, struct gm_view *v,
                         size_t max)
{
    size_t n = 0, n_cur = 0;
    pthread_mutex_lock(&gm->lock);
    /* The current ones in order, however many (a hostile client may make
     * thousands of ranks); then the draining ones, newest first. */
    for (struct gm_instance *m = gm->models; m; m = m->next)
        n_cur += m->current && shown(m, model);
    struct gm_instance **cur = xmalloc((n_cur ? n_cur : 1) * sizeof(*cur));
    n_cur = 0;
    for (struct gm_instance *m = gm->models; m; m = m->next)
        if (m->current && shown(m, model))
            cur[n_cur++] = m;
    qsort(cur, n_cur, sizeof(*cur), view_order);
    for (size_t i = 0; i < n_cur; i++, n++)
        if (n < max)
            do_gm_view(cur[i], &v[n]);
    for (struct gm_instance *m = gm->models; m; m = m->next) {
        if (m->current || !shown(m, model))
            continue;
        if (n < max)
            do_gm_view(m, &v[n]);
        n++;
    }
    pthread_mutex_unlock(&gm->lock);
    free(cur);
    return n;
}

void gpu_manager_view_release(struct gpu_manager *gm, struct gm_view *v)
{
    if (!v->inst)
        return;
    pthread_mutex_lock(&gm->lock);
    struct gm_instance *dead = do_gm_instance_unref(gm, v->inst);
    pthread_mutex_unlock(&gm->lock);
    v->inst = NULL;
    gm_dispose(gm, dead);
}

const char *gm_view_text(const struct gm_view *v, enum gm_text slot,
                         char *(*make)(const struct gm_view *v))
{
    struct gm_instance *m = v->inst;
    pthread_mutex_lock(&m->text_lock);
    if (!m->texts[slot])
        m->texts[slot] = make(v);
    const char *text = m->texts[slot];
    pthread_mutex_unlock(&m->text_lock);
    return text;
}

int gpu_manager_evict(struct gpu_manager *gm, const char *model, const struct gm_which *which,
                      struct gm_evicted **out, struct st_error *err)
{
    struct gm_instance *dead_list = NULL;
    size_t n = 0, cap = 0;
    *out = NULL;
    pthread_mutex_lock(&gm->lock);
    struct gm_instance *next;
    for (struct gm_instance *m = gm->models; m; m = next) {
        next = m->next; /* retiring m may unlink it */
        if (!m->current || strcmp(m->name, model) != 0 || !gm_instance_is(m, which))
            continue;
        *out = xgrow(*out, &cap, n, sizeof(**out), 4);
        struct gm_instance *pending, *dead;
        do_gm_reload_abandon(gm, m, &pending);
        struct gm_evicted *ev = &(*out)[n++];
        *ev = (struct gm_evicted){.world = m->world, .rank = m->rank,
                                  .generation = m->generation, .leases = m->leases};
        snprintf(ev->device, sizeof(ev->device), "%s", m->device);
        dead = do_gm_instance_retire(gm, m);
        ev->draining = dead == NULL;
        char part[48] = "";
        if (m->world > 1)
            snprintf(part, sizeof(part), " (rank %u of %u)", m->rank, m->world);
        log_msg(LOG_INFO, "gpu: evicted %s from %s%s%s", model, m->device, part,
                dead ? "" : ", draining until its leases end");
        gm_keep_dead(&dead_list, pending);
        gm_keep_dead(&dead_list, dead);
    }
    pthread_mutex_unlock(&gm->lock);
    while (dead_list) {
        struct gm_instance *d = dead_list;
        dead_list = d->qnext;
        gm_dispose(gm, d);
    }
    if (n == 0)
        return st_error_fail(err, ST_ERR_NOT_FOUND, "model %.200s is not preloaded%s", model,
                             which->where || which->rank >= 0 ? " there" : "");
    return (int)n;
}

int gpu_manager_ready(struct gpu_manager *gm)
{
    pthread_mutex_lock(&gm->lock);
    int ready = gm->started && gm->startup_pending == 0;
    pthread_mutex_unlock(&gm->lock);
    return ready;
}

/* The metrics row of be's device dev in rows[0..*n), added when new. */
static struct metrics_gpu_device *device_row(struct metrics_gpu_device *rows, size_t *n,
                                             const struct gpu_backend *be, int dev)
{
    char name[24];
    if (be->kind == DEVICE_HOST)
        snprintf(name, sizeof(name), "host");
    else
        snprintf(name, sizeof(name), "cuda:%d", dev);
    for (size_t i = 0; i < *n; i++)
        if (strcmp(rows[i].device, name) == 0)
            return &rows[i];
    if (*n == METRICS_GPU_DEVICES)
        return NULL;
    struct metrics_gpu_device *r = &rows[(*n)++];
    memset(r, 0, sizeof(*r));
    snprintf(r->device, sizeof(r->device), "%s", name);
    return r;
}

void gpu_manager_update_metrics(struct gpu_manager *gm)
{
    struct metrics_gpu_device rows[METRICS_GPU_DEVICES], *r;
    size_t n = 0;
    uint64_t bytes = 0, leases = 0, staging = 0;
    pthread_mutex_lock(&gm->lock);
    for (struct gm_instance *m = gm->models; m; m = m->next) {
        uint64_t held = 0;
        if (m->published)
            for (size_t i = 0; i < m->n_shards; i++)
                held += m->shards[i].a.alloc_size;
        leases += m->leases;
        bytes += held;
        if ((r = device_row(rows, &n, m->be, m->dev)) != NULL) {
            r->resident_bytes += held;
            r->leases_active += m->leases;
            r->instances++;
        }
    }
    for (size_t i = 0; i < gm->n_stages; i++) {
        const struct gm_stage *st = &gm->stages[i];
        uint64_t ring = (uint64_t)st->nbuf * st->buf_bytes;
        staging += ring;
        if (ring && (r = device_row(rows, &n, st->be, st->dev)) != NULL)
            r->staging_bytes += ring;
    }
    for (size_t i = 0; i < gm->n_loaders; i++)
        if ((r = device_row(rows, &n, gm->loaders[i].be, gm->loaders[i].dev)) != NULL)
            r->loading = (unsigned)gm->loaders[i].loading;
    double bps = gm->last_bps;
    pthread_mutex_unlock(&gm->lock);
    metrics_set_gpu(bytes, leases, bps, staging);
    metrics_set_gpu_devices(rows, n);
}

size_t gpu_manager_staging(struct gpu_manager *gm, struct gm_staging *out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&gm->lock);
    for (size_t i = 0; i < gm->n_stages; i++) {
        const struct gm_stage *st = &gm->stages[i];
        if (!st->stage)
            continue;
        if (n < max) {
            if (st->be->kind == DEVICE_HOST)
                snprintf(out[n].device, sizeof(out[n].device), "host");
            else
                snprintf(out[n].device, sizeof(out[n].device), "cuda:%d", st->dev);
            out[n].bytes = (uint64_t)st->nbuf * st->buf_bytes;
        }
        n++;
    }
    pthread_mutex_unlock(&gm->lock);
    return n;
}

uint64_t gpu_manager_staging_limit(struct gpu_manager *gm)
{
    return gm->opt.staging_limit; /* set once, before any thread */
}

int gpu_manager_wait_idle(struct gpu_manager *gm, int timeout_ms)
{
    struct timespec dl = time_real_after(timeout_ms > 0 ? (unsigned)timeout_ms : 0);
    int rc = 0;
    pthread_mutex_lock(&gm->lock);
    for (;;) {
        int queued = 0;
        for (size_t i = 0; i < gm->n_loaders; i++)
            queued |= gm->loaders[i].qhead != NULL;
        if (!(queued || gm->loading || gm->shead || gm->summing) || rc != 0)
            break;
        rc = pthread_cond_timedwait(&gm->cond, &gm->lock, &dl);
    }
    pthread_mutex_unlock(&gm->lock);
    return -rc;
}

void gpu_manager_free(struct gpu_manager *gm)
{
    if (!gm)
        return;
    gpu_preload_stop(gm);
    gm_sums_stop(gm);
    while (gm->models) {
        struct gm_instance *m = gm->models;
        gm->models = m->next;
        gm_instance_free(m);
    }
    reg_snapshot_unref(gm->latest);
    while (gm->refused)
        do_gm_refused_clear(gm, gm->refused->model);
    gm_stages_free(gm); /* the loader has stopped: nobody copies */
    if (gm->cuda)
        gm->cuda->ops->destroy(gm->cuda);
    gm->host->ops->destroy(gm->host);
    pthread_cond_destroy(&gm->cond);
    pthread_mutex_destroy(&gm->lock);
    free(gm);
}
