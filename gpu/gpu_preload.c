/* gpu_preload: preload requests, admission, the load queue and the loader
 * thread (gpu/gpu_manager_int.h). */
#include "gpu_manager_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu_load.h"
#include "gpu_plan.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

/* How long a reload that must reuse its old generation's memory waits for
 * it to be released (the old one's last holders are views and the checksum
 * thread, which let go at once) before it gives up. */
#define RELEASE_WAIT_S 60

/* ---- admission ------------------------------------------------------------- */

/* The device's bytes available to a new preload, before the promises: 0
 * with *bytes; a backend that cannot tell admits everything (logged). */
static void device_available(const struct gpu_backend *be, int dev, uint64_t *bytes)
{
    struct st_error e;
    if (be->ops->mem_available((struct gpu_backend *)be, dev, bytes, &e) < 0) {
        log_msg(LOG_WARN, "gpu: %s:%d: free memory unknown (%s): admitting the preload", be->name,
                dev, e.message);
        *bytes = UINT64_MAX;
    }
}

/* Whether m fits on its device, given dev_avail (device_available's):
 * beside the promises of instances admitted before it and, with a
 * memory_limit, beside what preloads hold there. At request time (queued
 * 0) every promise counts; in the loader (queued 1) m is the next to
 * allocate and only allocated memory counts against the limit. 1, or 0
 * with *avail the bytes it could have. Caller holds the lock. */
static int do_fits(struct gpu_manager *gm, const struct gm_instance *m, uint64_t dev_avail,
                   int loader, uint64_t *avail)
{
    uint64_t promised = loader ? 0 : do_gm_promised(gm, m->be, m->dev, m);
    uint64_t a = dev_avail > promised ? dev_avail - promised : 0;
    if (gm->opt.memory_limit) {
        uint64_t held = do_gm_held(gm, m->be, m->dev, loader, m);
        uint64_t left = gm->opt.memory_limit > held ? gm->opt.memory_limit - held : 0;
        a = left < a ? left : a;
    }
    *avail = a;
    return m->need <= a;
}

/* The message of a preload that cannot fit (limit: the configured
 * memory_limit, which may be what binds). */
static int no_room(struct st_error *err, const struct gm_instance *m, uint64_t avail,
                   uint64_t limit)
{
    char lim[96] = "";
    if (limit)
        snprintf(lim, sizeof(lim), ", within preload_memory_limit = %llu",
                 (unsigned long long)limit);
    return st_error_fail(err, ST_ERR_DEVICE_MEMORY, "insufficient memory: model %.200s needs "
                         "%llu bytes on %s and %llu are available (free memory less the "
                         "reserve and what preloads admitted before it take%s)", m->name,
                         (unsigned long long)m->need, m->device, (unsigned long long)avail, lim);
}

/* ---- the load ---------------------------------------------------------------- */

/* Allocates every shard of m on its device. Returns 0 or -errno with
 * m->error. */
static int alloc_shards(const struct gm_options *opt, struct gm_instance *m, int dev)
{
    int legacy = opt->legacy_ipc && m->be->kind == DEVICE_CUDA;
    struct st_error e;
    for (size_t i = 0; i < m->n_shards; i++) {
        struct gm_shard *s = &m->shards[i];
        char label[160];
        snprintf(label, sizeof(label), "%.80s/%.60s", m->name, s->file);
        if (m->be->ops->alloc(m->be, dev, s->bytes, legacy, label, &s->a, &e) < 0)
            return st_error_fail(&m->error, e.code, "allocating %llu bytes for %s: %s",
                                 (unsigned long long)s->bytes, s->file, e.message);
    }
    return 0;
}

/* What the disk mover's open_direct needs: the instance, and which shards
 * another reader (the hasher) still wants read through the page cache. */
struct direct_ctx {
    struct gm_instance *m;
    const int *buffered;
};

/* The disk mover asks for a shard's O_DIRECT descriptor the first time it
 * has bytes of that shard to read (gpu_load.open_direct): one that cannot be
 * had (not supported, or the path now leads to another file or version), or
 * that the hasher still has to read (its bytes then stay in the page cache
 * for it), is negative, and the shard is read buffered. */
static int open_direct(void *arg, size_t i)
{
    const struct direct_ctx *d = arg;
    if (d->buffered && d->buffered[i])
        return -1;
    return reg_open_below(d->m->rm->root, d->m->shards[i].rf, O_RDONLY | O_DIRECT);
}

/* Tells the other reader of m's files (gm_options.hold) that the preload
 * reads them now; *buffered (the caller frees) says which it still wants.
 * Returns the hold, or NULL. */
static void *hold_files(const struct gm_options *opt, const struct gm_instance *m,
                        int **buffered)
{
    *buffered = NULL;
    if (!opt->hold || m->source || m->n_shards == 0)
        return NULL; /* a mirror's files are not the hasher's */
    const struct reg_file **files = xcalloc(m->n_shards, sizeof(*files));
    *buffered = xcalloc(m->n_shards, sizeof(**buffered));
    for (size_t i = 0; i < m->n_shards; i++)
        files[i] = m->shards[i].rf;
    void *hold = opt->hold(opt->hold_ctx, files, m->n_shards, *buffered);
    free(files);
    return hold;
}

/* Time since *t, and *t moved to now: one phase's nanoseconds. */
static uint64_t lap(uint64_t *t)
{
    uint64_t now = time_mono_ns(), d = now - *t;
    *t = now;
    return d;
}

/* Plans and copies every shard of m through its device's staging ring (the
 * ring and plan phases, then the copy). Returns 0, -ECANCELED, or -errno
 * with m->error. */
static int copy_shards(struct gpu_manager *gm, struct gm_instance *m, int dev, uint64_t *t)
{
    struct gm_ring_shape shape;
    gm_ring_shape(&gm->opt, m->be, &shape);
    struct direct_ctx dctx = {.m = m};
    /* Preloads to several devices at once share the CPUs: each takes its
     * share of the copy threads its ring was made for. */
    pthread_mutex_lock(&gm->lock);
    unsigned busy = gm->loading ? gm->loading : 1;
    pthread_mutex_unlock(&gm->lock);
    unsigned share = shape.threads / busy ? shape.threads / busy : 1;
    struct gm_stage *st = gm_stage_acquire(gm, m->be, dev, m->device, &shape, share, &m->cancel,
                                           &m->error);
    m->phase_ns[GM_PHASE_RING] = lap(t);
    if (!st)
        return atomic_load(&m->cancel) ? -ECANCELED : -EIO;
    struct gpu_load l = {.be = m->be, .threads = share < shape.threads ? share : shape.threads,
                         .depth = shape.depth, .chunk = shape.chunk, .cancel = &m->cancel,
                         .progress = &m->done, .wait_cqe = io_uring_wait_cqe,
                         .open_direct = open_direct, .open_arg = &dctx,
                         .gate = m->source ? &m->source->gate : NULL, .stage = st->stage};
    struct gpu_plan_shard *ps = xcalloc(m->n_shards + 1, sizeof(*ps));
    struct gpu_load_shard *ls = xcalloc(m->n_shards + 1, sizeof(*ls));
    struct gpu_plan plan = {0};
    struct gpu_load_stats stats;
    struct st_error e;
    for (size_t i = 0; i < m->n_shards; i++) {
        struct gm_shard *s = &m->shards[i];
        const void *gf = m->source ? (const void *)s->rf : NULL;
        ps[i] = (struct gpu_plan_shard){.data_start = s->data_start, .size = s->size,
                                        .gate_file = gf, .sel = s->sel};
        ls[i] = (struct gpu_load_shard){.fd = s->rf->fd, .gate_file = gf, .direct_fd = -1,
                                        .data_start = s->data_start, .size = s->size, .a = &s->a,
                                        .sel = s->sel};
    }
    int rc = gpu_plan_build(&plan, ps, m->n_shards, l.chunk, -1, l.gate, &m->error);
    m->phase_ns[GM_PHASE_PLAN] = lap(t);
    if (rc < 0)
        goto out;
    int *buffered;
    void *hold = hold_files(&gm->opt, m, &buffered);
    dctx.buffered = buffered;
    rc = gpu_load_run(&l, ls, m->n_shards, &plan, &stats, &e);
    if (hold)
        gm->opt.release(gm->opt.hold_ctx, hold);
    free(buffered);
    m->phase_ns[GM_PHASE_COPY] = lap(t);
    if (rc < 0 && rc != -ECANCELED && stats.failed_shard >= 0)
        st_error_fail(&m->error, e.code, "%s: %s", m->shards[stats.failed_shard].file, e.message);
    else if (rc < 0 && rc != -ECANCELED)
        m->error = e;
    if (l.unsafe || (rc < 0 && rc != -ECANCELED && e.code == ST_ERR_DEVICE))
        gm_stage_drop(gm, st, l.unsafe); /* a device error: fresh streams next time */
    m->io = (struct gm_io){.page_cache_bytes = stats.bytes[GPU_SRC_PAGE_CACHE],
                           .disk_bytes = stats.bytes[GPU_SRC_DISK],
                           .upstream_bytes = stats.bytes[GPU_SRC_UPSTREAM],
                           .handed_over_bytes = stats.handed_over, .missing_runs = stats.missing_runs,
                           .copy_cpu_ns = stats.copy_cpu_ns,
                           .threads = stats.threads, .depth = l.depth};
    snprintf(m->io.disk_reads, sizeof(m->io.disk_reads), "%s", stats.disk_io);
out:
    gm_stage_release(gm, st);
    gpu_plan_free(&plan);
    free(ls);
    free(ps);
    return rc;
}

/* Makes every shard read-only for sharing, then (verify) reads each back
 * and compares it with its file. Returns 0, -ECANCELED, or -errno with
 * m->error naming the shard. */
static int finish_shards(const struct gm_options *opt, struct gm_instance *m)
{
    struct st_error e;
    for (size_t i = 0; i < m->n_shards; i++) {
        struct gm_shard *s = &m->shards[i];
        if (m->be->ops->finish(m->be, &s->a, &e) < 0)
            return st_error_fail(&m->error, e.code, "%s: %s", s->file, e.message);
    }
    size_t chunk = (size_t)opt->staging_buffer_bytes;
    for (size_t i = 0; opt->verify && i < m->n_shards; i++) {
        struct gm_shard *s = &m->shards[i];
        struct gpu_load_shard ls = {.fd = s->rf->fd, .data_start = s->data_start,
                                    .size = s->size, .a = &s->a, .sel = s->sel};
        int r = gpu_load_verify(m->be, &s->a, &ls, chunk, &m->cancel, &e);
        if (r == -ECANCELED)
            return r;
        if (r < 0)
            return st_error_fail(&m->error, e.code, "%s: %s", s->file, e.message);
    }
    m->verified = opt->verify;
    return 0;
}

/* Waits until no linked instance has generation gen and no memory is being
 * released: the old generation a reload retired is gone. Returns 0, or
 * -ETIMEDOUT after RELEASE_WAIT_S. */
static int wait_released(struct gpu_manager *gm, uint64_t gen)
{
    struct timespec dl = time_real_after(RELEASE_WAIT_S * 1000);
    int rc = 0;
    pthread_mutex_lock(&gm->lock);
    for (;;) {
        int linked = 0;
        for (const struct gm_instance *x = gm->models; x && !linked; x = x->next)
            linked = x->generation == gen;
        if ((!linked && gm->freeing == 0) || rc == ETIMEDOUT)
            break;
        rc = pthread_cond_timedwait(&gm->cond, &gm->lock, &dl);
    }
    pthread_mutex_unlock(&gm->lock);
    return rc == ETIMEDOUT ? -ETIMEDOUT : 0;
}

/* Admission in the loader, just before allocating: the device's memory
 * now. A reload's new generation that does not fit beside its old one
 * parks (1) or, when no lease holds the old one, waits for its release and
 * asks again. Returns 0 to allocate, 1 parked, or -errno with m->error. */
static int admit(struct gpu_manager *gm, struct gm_instance *m, int dev)
{
    for (;;) {
        uint64_t dev_avail, avail;
        device_available(m->be, dev, &dev_avail);
        struct gm_instance *dead = NULL;
        pthread_mutex_lock(&gm->lock);
        int fits = do_fits(gm, m, dev_avail, 1, &avail);
        struct gm_instance *old = fits ? NULL : m->prev_gen;
        uint64_t old_gen = old ? old->generation : 0;
        int parked = old ? do_gm_reload_no_room(gm, m, avail, &dead) : 0;
        if (fits)
            m->allocated = 1;
        pthread_mutex_unlock(&gm->lock);
        gm_dispose(gm, dead);
        if (fits)
            return 0;
        if (parked)
            return 1;
        if (!old)
            return no_room(&m->error, m, avail, gm->opt.memory_limit);
        if (wait_released(gm, old_gen) < 0)
            return st_error_fail(&m->error, ST_ERR_DEVICE_MEMORY, "generation %llu's memory "
                                 "was not released within %d s", (unsigned long long)old_gen,
                                 RELEASE_WAIT_S);
    }
}

/* Fills every allocation of m, timing each phase from t_start_ns. Returns
 * 0, 1 (a reload parked), -ECANCELED, or -errno with m->error. *t_end: when
 * it ended. */
static int load_instance(struct gpu_manager *gm, struct gm_instance *m, uint64_t *t_end)
{
    int dev = m->be->kind == DEVICE_CUDA ? m->be->devices[m->dev].index : 0;
    uint64_t t = m->t_start_ns;
    int rc = admit(gm, m, dev);
    if (rc == 0)
        rc = alloc_shards(&gm->opt, m, dev);
    m->phase_ns[GM_PHASE_ALLOC] = lap(&t);
    if (rc == 0)
        rc = copy_shards(gm, m, dev, &t);
    if (rc == 0) {
        rc = finish_shards(&gm->opt, m);
        m->phase_ns[GM_PHASE_FINISH] = lap(&t);
    }
    *t_end = t;
    return rc;
}

/* Counts a finished preload in the metrics. */
static void count(const struct gm_instance *m)
{
    static const enum metrics_ctr phase[GM_PHASE_COUNT] = {
        MC_GPU_PRELOAD_ALLOC_NS, MC_GPU_PRELOAD_RING_NS, MC_GPU_PRELOAD_PLAN_NS,
        MC_GPU_PRELOAD_COPY_NS, MC_GPU_PRELOAD_FINISH_NS};
    metrics_add(MC_GPU_PRELOAD_BYTES, m->total);
    metrics_add(MC_GPU_PRELOAD_PAGE_CACHE_BYTES, m->io.page_cache_bytes);
    metrics_add(MC_GPU_PRELOAD_DISK_BYTES, m->io.disk_bytes);
    metrics_add(MC_GPU_PRELOAD_UPSTREAM_BYTES, m->io.upstream_bytes);
    for (int p = 0; p < GM_PHASE_COUNT; p++)
        metrics_add(phase[p], m->phase_ns[p]);
}

static void log_ready(const struct gm_instance *m, double secs)
{
    log_msg(LOG_INFO, "gpu: %s ready on %s (generation %llu): %llu bytes in %.3f s (%.2f GB/s; "
            "alloc %.3f, ring %.3f, plan %.3f, copy %.3f, finish %.3f): %llu from the page "
            "cache (%u threads), %llu from the disk%s%s, %llu as the upstream sent them",
            m->name, m->device, (unsigned long long)m->generation, (unsigned long long)m->total,
            secs, secs > 0 ? (double)m->total / secs / 1e9 : 0.0,
            (double)m->phase_ns[GM_PHASE_ALLOC] / 1e9, (double)m->phase_ns[GM_PHASE_RING] / 1e9,
            (double)m->phase_ns[GM_PHASE_PLAN] / 1e9, (double)m->phase_ns[GM_PHASE_COPY] / 1e9,
            (double)m->phase_ns[GM_PHASE_FINISH] / 1e9, (unsigned long long)m->io.page_cache_bytes,
            m->io.threads, (unsigned long long)m->io.disk_bytes,
            m->io.disk_reads[0] ? " with " : "", m->io.disk_reads,
            (unsigned long long)m->io.upstream_bytes);
}

/* Publishes m's outcome (rc from load_instance, not parked). Caller holds
 * the lock; *dead gets an instance to dispose of (a reload's old or failed
 * generation). */
static void do_publish(struct gpu_manager *gm, struct gm_instance *m, int rc,
                       struct gm_instance **dead)
{
    double secs = (double)(m->t_end_ns - m->t_start_ns) / 1e9;
    *dead = NULL;
    if (rc == 0 && !atomic_load(&m->cancel)) {
        m->state = GM_READY;
        m->published = 1;
        gm->last_bps = secs > 0 ? (double)m->total / secs : 0;
        log_ready(m, secs);
        do_gm_reload_ended(gm, m, 1, dead);
        do_gm_sums_queue(gm, m);
    } else if (rc != 0 && rc != -ECANCELED) {
        m->state = GM_FAILED;
        log_msg(LOG_ERROR, "gpu: preloading %s on %s failed: %s", m->name, m->device,
                m->error.message);
        do_gm_reload_ended(gm, m, 0, dead);
    }
    if (m->startup && gm->startup_pending > 0)
        gm->startup_pending--;
    m->startup = 0;
}

/* A device's loader thread: takes instances off its queue one at a time,
 * fills them, and publishes each as ready or failed (or leaves a parked
 * reload until its old generation's leases end). */
void *gm_loader_main(void *arg)
{
    struct gm_loader *ld = arg;
    struct gpu_manager *gm = ld->gm;
    pthread_mutex_lock(&gm->lock);
    for (;;) {
        while (!ld->qhead && !gm->stopping)
            pthread_cond_wait(&gm->cond, &gm->lock);
        if (gm->stopping)
            break;
        struct gm_instance *m = ld->qhead;
        ld->qhead = m->qnext;
        if (!ld->qhead)
            ld->qtail = NULL;
        m->qnext = NULL;
        ld->loading = 1;
        gm->loading++;
        m->t_start_ns = time_mono_ns();
        pthread_mutex_unlock(&gm->lock);

        uint64_t t_end = m->t_start_ns;
        int rc = atomic_load(&m->cancel) ? -ECANCELED : load_instance(gm, m, &t_end);
        if (rc == 1) { /* parked: it keeps the loader's reference, and its files */
            pthread_mutex_lock(&gm->lock);
            ld->loading = 0;
            gm->loading--;
            pthread_cond_broadcast(&gm->cond);
            continue;
        }
        if (rc != 0) {
            /* A failed or cancelled load keeps no memory. Nobody else looks
             * at the allocations before they are published. */
            for (size_t i = 0; i < m->n_shards; i++)
                m->be->ops->free(m->be, &m->shards[i].a);
        } else {
            count(m);
        }

        struct gm_instance *dead;
        pthread_mutex_lock(&gm->lock);
        m->t_end_ns = t_end;
        for (size_t i = 0; i < m->n_shards; i++)
            m->shards[i].rf = NULL;
        const struct reg_model *rm = m->rm;
        m->rm = NULL;
        do_publish(gm, m, rc, &dead);
        ld->loading = 0;
        gm->loading--;
        struct gm_instance *gone = do_gm_instance_unref(gm, m);
        pthread_cond_broadcast(&gm->cond);
        pthread_mutex_unlock(&gm->lock);
        reg_model_unref(rm); /* closes files: outside the lock */
        gm_dispose(gm, dead);
        gm_dispose(gm, gone);
        pthread_mutex_lock(&gm->lock);
    }
    pthread_mutex_unlock(&gm->lock);
    return NULL;
}

/* ---- requests ------------------------------------------------------------------ */

/* The instance a request would load: rm (the model in the newest
 * snapshot, which must be valid) on *where, cut as split says. Built
 * without gm->lock: a split's plan matches its rules against every tensor
 * name, up to FETCH_GLOB_BUDGET steps (seconds, for hostile globs), which
 * must hold up no other model's requests, leases or loads. NULL with *rc
 * and err. */
static struct gm_instance *request_instance(struct gpu_manager *gm, const struct reg_model *rm,
                                            const char *model, const struct gm_device *where,
                                            const struct fetch_req *split, int *rc,
                                            struct st_error *err)
{
    struct gm_instance *m = NULL;
    if (!rm)
        *rc = st_error_fail(err, ST_ERR_NOT_FOUND, "no model named \"%.200s\"", model);
    else if (rm->state != MODEL_READY)
        *rc = st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "model %.200s is invalid: %s", model,
                            rm->error.message);
    else if (!(m = gm_instance_new(gm, rm, where, split, err)))
        *rc = err->code == ST_ERR_NO_MEMORY ? -ENOMEM : -EINVAL;
    return m;
}

/* What a preload request leaves to do after unlocking: an instance to
 * dispose of (a failed attempt it replaced), or one built and refused, never
 * linked, to free. */
struct leftovers {
    struct gm_instance *dead, *unborn;
};

/* Under gm->lock: starts loading m (built by request_instance as model on
 * *where, not linked; with src, which it takes over) when it fits
 * (dev_avail: the device's available bytes, device_available's), or finds
 * that instance (its device, world and rank) there already. m is left in
 * left->unborn unless it was queued. Returns as gpu_preload_request. */
static int do_preload(struct gpu_manager *gm, const char *model, struct gm_instance *m,
                      struct gm_source *src, const struct gm_device *where, int startup,
                      uint64_t dev_avail, struct gm_view *v, struct leftovers *left,
                      struct st_error *err)
{
    struct gm_instance *cur = do_gm_find_current(gm, model, where->be, where->dev, m->world,
                                                 m->rank);
    left->unborn = m;
    if (cur && cur->state != GM_FAILED) {
        int same = (!m->split && !cur->split) ||
                   (m->split && cur->split && strcmp(m->split, cur->split) == 0);
        if (!same)
            return st_error_fail(err, ST_ERR_CONFLICT, "model %.200s: rank %u of %u is on %s "
                                 "already, split by other rules: evict it first", model, m->rank,
                                 m->world, cur->device);
        do_gm_view(cur, v);
        return 0;
    }
    uint64_t avail;
    if (!do_fits(gm, m, dev_avail, 0, &avail))
        return no_room(err, m, avail, gm->opt.memory_limit);
    m->startup = startup;
    if (do_gm_enqueue(gm, m, 1, err) < 0)
        return -EAGAIN;
    left->unborn = NULL;
    m->source = src;
    do_gm_refused_clear(gm, model);
    if (cur) /* a failed attempt there: try again */
        left->dead = do_gm_instance_retire(gm, cur);
    if (startup)
        gm->startup_pending++;
    do_gm_view(m, v);
    return 1;
}

static void clear_leftovers(struct gpu_manager *gm, struct leftovers *left)
{
    gm_dispose(gm, left->dead);
    if (left->unborn)
        gm_instance_free(left->unborn);
}

int gpu_preload_request_model(struct gpu_manager *gm, const char *model,
                              const struct reg_model *rm, struct gm_source *src,
                              const struct gm_device *where, struct gm_view *v,
                              struct st_error *err)
{
    struct leftovers left = {0};
    uint64_t dev_avail = 0;
    int rc = 0;
    memset(v, 0, sizeof(*v));
    struct gm_instance *m = NULL;
    if (rm) {
        device_available(where->be, where->dev, &dev_avail);
        if (!(m = request_instance(gm, rm, model, where, NULL, &rc, err)))
            return rc;
    }
    pthread_mutex_lock(&gm->lock);
    struct gm_instance *cur = do_gm_find_current(gm, model, where->be, where->dev, 1, 0);
    if (m)
        rc = do_preload(gm, model, m, src, where, 0, dev_avail, v, &left, err);
    else if (!cur || cur->state == GM_FAILED) /* without a model: only an instance there */
        rc = st_error_fail(err, ST_ERR_NOT_FOUND, "no model named \"%.200s\" is loaded on %s",
                           model, where->name ? where->name : "that device");
    else
        do_gm_view(cur, v);
    pthread_mutex_unlock(&gm->lock);
    clear_leftovers(gm, &left);
    return rc;
}

/* Under gm->lock: a reference to the snapshot a reload has announced and
 * not yet swapped in when it is newer than snap (or snap is NULL), else
 * NULL. A preload must load the newest files, or its instance would keep
 * the old ones: the reload already compared what it saw. */
static struct reg_snapshot *do_newer_snapshot(struct gpu_manager *gm,
                                              const struct reg_snapshot *snap)
{
    if (gm->latest && (!snap || gm->latest->generation > snap->generation))
        return reg_snapshot_ref(gm->latest);
    return NULL;
}

int gpu_preload_request(struct gpu_manager *gm, const char *model, const struct gm_device *where,
                        const struct fetch_req *split, int startup, struct gm_view *v,
                        struct st_error *err)
{
    struct leftovers left = {0};
    uint64_t dev_avail;
    memset(v, 0, sizeof(*v));
    device_available(where->be, where->dev, &dev_avail);
    struct reg_snapshot *snap = registry_acquire(gm->registry), *newer;
    pthread_mutex_lock(&gm->lock);
    newer = do_newer_snapshot(gm, snap);
    pthread_mutex_unlock(&gm->lock);
    int rc;
    for (;;) {
        if (newer) {
            reg_snapshot_unref(snap);
            snap = newer;
        }
        const struct reg_model *rm = snap ? reg_snapshot_find_model(snap, model, strlen(model))
                                          : NULL;
        struct gm_instance *m = request_instance(gm, rm, model, where, split, &rc, err);
        if (!m)
            break;
        pthread_mutex_lock(&gm->lock);
        newer = do_newer_snapshot(gm, snap);
        if (!newer) /* checked and queued under one lock: a reload after it sees m */
            rc = do_preload(gm, model, m, NULL, where, startup, dev_avail, v, &left, err);
        pthread_mutex_unlock(&gm->lock);
        if (!newer) {
            clear_leftovers(gm, &left);
            break;
        }
        gm_instance_free(m); /* a reload announced newer files meanwhile: plan those */
    }
    reg_snapshot_unref(snap);
    return rc;
}

void gpu_preload_stop(struct gpu_manager *gm)
{
    pthread_mutex_lock(&gm->lock);
    gm->stopping = 1;
    for (struct gm_instance *m = gm->models; m; m = m->next)
        atomic_store(&m->cancel, 1);
    size_t n = gm->n_loaders;
    pthread_cond_broadcast(&gm->cond);
    pthread_mutex_unlock(&gm->lock);
    for (size_t i = 0; i < n; i++) /* no loader is added once stopping is set */
        pthread_join(gm->loaders[i].thread, NULL);
}
