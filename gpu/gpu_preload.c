/* gpu_preload: preload requests, the load queue and the loader thread. */
#include "gpu_manager_int.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu_load.h"
#include "gpu_plan.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

void do_gm_enqueue(struct gpu_manager *gm, struct gm_instance *m)
{
    m->refs = 2;
    m->current = 1;
    m->next = gm->models;
    gm->models = m;
    if (gm->qtail)
        gm->qtail->qnext = m;
    else
        gm->qhead = m;
    gm->qtail = m;
    pthread_cond_broadcast(&gm->cond);
}

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
        if (m->be->ops->alloc(m->be, dev, s->size, legacy, label, &s->a, &e) < 0)
            return st_error_fail(&m->error, e.code, "allocating %llu bytes for %s: %s",
                                 (unsigned long long)s->size, s->file, e.message);
    }
    return 0;
}

/* Copy threads: the option, or one per CPU this process may run on, at
 * most 16 (on 16 cores, 12 threads copied 36.6 GB/s from the page cache
 * into pinned memory; docs/PERFORMANCE.md). */
static unsigned copy_threads(const struct gm_options *opt)
{
    if (opt->preload_threads)
        return opt->preload_threads;
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    return n < 1 ? 1 : n > 16 ? 16 : (unsigned)n;
}

/* After a load that failed: a ring whose reads may still land is leaked
 * (never freed, never reused); one that saw a device error is closed, so
 * that the next preload starts from fresh streams. Also closes a ring too
 * small for the next load (device_stage). */
static void drop_stage(struct gpu_manager *gm, struct gm_stage *st, int leak)
{
    struct gpu_stage *stage = st->stage;
    pthread_mutex_lock(&gm->lock);
    st->stage = NULL;
    st->nbuf = 0;
    pthread_mutex_unlock(&gm->lock);
    if (leak)
        log_msg(LOG_ERROR, "gpu: io_uring reads may still be in flight after an error: "
                           "leaking the staging buffers rather than freeing them");
    else
        st->be->ops->stage_close(stage);
}

/* The staging ring of m's device, made on the device's first preload and
 * kept while it holds nbuf buffers of buf_bytes: one made for fewer copy
 * threads (the CPUs this process may use grew since: taskset, a cgroup's
 * cpuset) is made again, or the new threads' buffers would lie past its
 * end. Loader thread only, between loads. Returns it, or NULL with
 * m->error. */
static struct gm_stage *device_stage(struct gpu_manager *gm, struct gm_instance *m, int dev,
                                     unsigned nbuf, size_t buf_bytes)
{
    struct gm_stage *st = NULL;
    for (size_t i = 0; i < gm->n_stages && !st; i++)
        if (gm->stages[i].be == m->be && gm->stages[i].dev == dev)
            st = &gm->stages[i];
    if (st && st->stage && st->nbuf >= nbuf && st->buf_bytes >= buf_bytes)
        return st;
    if (st && st->stage) {
        log_msg(LOG_INFO, "gpu: %s: the staging ring of %u buffers is too small for this "
                "preload's %u: made again", m->device, st->nbuf, nbuf);
        drop_stage(gm, st, 0);
    }
    if (!st && gm->n_stages == GM_MAX_STAGES) {
        st_error_fail(&m->error, ST_ERR_LIMIT, "staging rings for more than %d devices",
                      GM_MAX_STAGES);
        return NULL;
    }
    struct st_error e;
    struct gpu_stage *stage = m->be->ops->stage_open(m->be, dev, nbuf, buf_bytes, &e);
    if (!stage) {
        st_error_fail(&m->error, e.code, "%s (%u staging buffers of %zu bytes: lower "
                      "preload_threads, staging_buffers or staging_buffer_bytes)", e.message,
                      nbuf, buf_bytes);
        return NULL;
    }
    pthread_mutex_lock(&gm->lock);
    if (!st)
        st = &gm->stages[gm->n_stages++];
    *st = (struct gm_stage){.be = m->be, .dev = dev, .stage = stage, .nbuf = nbuf,
                            .buf_bytes = buf_bytes};
    pthread_mutex_unlock(&gm->lock);
    log_msg(LOG_INFO, "gpu: %s: staging ring of %u x %zu bytes", m->device, nbuf, buf_bytes);
    return st;
}

/* Plans and copies every shard of m through the device's staging ring.
 * Returns 0, -ECANCELED, or -errno with m->error. */
static int copy_shards(struct gpu_manager *gm, struct gm_instance *m, int dev)
{
    const struct gm_options *opt = &gm->opt;
    struct gpu_load l = {.be = m->be, .threads = copy_threads(opt),
                         .depth = opt->staging_buffers, .cancel = &m->cancel,
                         .progress = &m->done, .wait_cqe = io_uring_wait_cqe,
                         .gate = m->source ? &m->source->gate : NULL};
    l.chunk = (size_t)(opt->staging_buffer_bytes + GPU_LOAD_ALIGN - 1) / GPU_LOAD_ALIGN *
              GPU_LOAD_ALIGN;
    struct gpu_plan_shard *ps = xcalloc(m->n_shards + 1, sizeof(*ps));
    struct gpu_load_shard *ls = xcalloc(m->n_shards + 1, sizeof(*ls));
    struct gpu_plan plan = {0};
    struct gpu_load_stats stats;
    struct st_error e;
    int rc;
    for (size_t i = 0; i < m->n_shards; i++) {
        struct gm_shard *s = &m->shards[i];
        const void *gf = m->source ? (const void *)s->rf : NULL;
        ps[i] = (struct gpu_plan_shard){s->rf->fd, s->data_start, s->size, gf};
        ls[i] = (struct gpu_load_shard){.fd = s->rf->fd, .gate_file = gf, .direct_fd = -1,
                                        .data_start = s->data_start, .size = s->size, .a = &s->a};
    }
    struct gm_stage *st = device_stage(gm, m, dev, gpu_load_stage_buffers(m->be, l.threads,
                                       l.depth), gpu_load_stage_bytes(l.chunk));
    if (!st) {
        rc = -EIO;
        goto out;
    }
    l.stage = st->stage;
    if ((rc = gpu_plan_build(&plan, ps, m->n_shards, l.chunk, -1, l.gate, &m->error)) < 0)
        goto out;
    /* O_DIRECT descriptors only for the shards with bytes on the disk: a
     * warm load of many shards opens none (bytes handed over from the page
     * cache of another shard are read buffered). One that cannot be had
     * (not supported, or the path now leads to another file or version) is
     * negative: the shard is read buffered. */
    size_t first = plan.n_src[GPU_SRC_PAGE_CACHE];
    for (size_t k = first; k < plan.n_chunks; k++) { /* disk chunks come shard by shard */
        uint32_t i = plan.chunks[k].shard;
        if (k == first || plan.chunks[k - 1].shard != i)
            ls[i].direct_fd = reg_open_below(m->rm->root, m->shards[i].rf, O_RDONLY | O_DIRECT);
    }
    rc = gpu_load_run(&l, ls, m->n_shards, &plan, &stats, &e);
    if (rc < 0 && rc != -ECANCELED && stats.failed_shard >= 0)
        st_error_fail(&m->error, e.code, "%s: %s", m->shards[stats.failed_shard].file, e.message);
    else if (rc < 0 && rc != -ECANCELED)
        m->error = e;
    if (l.unsafe || (rc < 0 && rc != -ECANCELED && e.code == ST_ERR_DEVICE))
        drop_stage(gm, st, l.unsafe);
    for (size_t i = 0; rc == 0 && i < m->n_shards; i++)
        m->shards[i].checksum = ls[i].checksum;
    m->io = (struct gm_io){.page_cache_bytes = stats.bytes[GPU_SRC_PAGE_CACHE],
                           .disk_bytes = stats.bytes[GPU_SRC_DISK],
                           .upstream_bytes = stats.bytes[GPU_SRC_UPSTREAM],
                           .handed_over_bytes = stats.handed_over, .threads = stats.threads,
                           .depth = l.depth};
    snprintf(m->io.disk_reads, sizeof(m->io.disk_reads), "%s", stats.disk_io);
out:
    for (size_t i = 0; i < m->n_shards; i++)
        if (ls[i].direct_fd >= 0)
            close(ls[i].direct_fd);
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
        int r = gpu_load_verify(m->be, &s->a, s->rf->fd, s->data_start, s->size, chunk,
                                &m->cancel, &e);
        if (r == -ECANCELED)
            return r;
        if (r < 0)
            return st_error_fail(&m->error, e.code, "%s: %s", s->file, e.message);
    }
    m->verified = opt->verify;
    return 0;
}

/* Fills every allocation of m. Returns 0, -ECANCELED, or -errno with
 * m->error. */
static int load_instance(struct gpu_manager *gm, struct gm_instance *m)
{
    int dev = m->be->kind == DEVICE_CUDA ? m->be->devices[m->dev].index : 0;
    int rc = alloc_shards(&gm->opt, m, dev);
    if (rc == 0)
        rc = copy_shards(gm, m, dev);
    if (rc == 0)
        rc = finish_shards(&gm->opt, m);
    return rc;
}

/* The loader thread: takes instances off the queue one at a time, fills
 * them, and publishes each as ready or failed. */
static void *loader_main(void *arg)
{
    struct gpu_manager *gm = arg;
    pthread_mutex_lock(&gm->lock);
    for (;;) {
        while (!gm->qhead && !gm->stopping)
            pthread_cond_wait(&gm->cond, &gm->lock);
        if (gm->stopping)
            break;
        struct gm_instance *m = gm->qhead;
        gm->qhead = m->qnext;
        if (!gm->qhead)
            gm->qtail = NULL;
        m->qnext = NULL;
        gm->loading = 1;
        m->t_start_ns = time_mono_ns();
        pthread_mutex_unlock(&gm->lock);

        int rc = atomic_load(&m->cancel) ? -ECANCELED : load_instance(gm, m);
        if (rc != 0) {
            /* A failed or cancelled load keeps no memory. Nobody else looks
             * at the allocations before they are published. */
            for (size_t i = 0; i < m->n_shards; i++)
                m->be->ops->free(m->be, &m->shards[i].a);
        } else {
            metrics_add(MC_GPU_PRELOAD_BYTES, m->total);
            metrics_add(MC_GPU_PRELOAD_PAGE_CACHE_BYTES, m->io.page_cache_bytes);
            metrics_add(MC_GPU_PRELOAD_DISK_BYTES, m->io.disk_bytes);
            metrics_add(MC_GPU_PRELOAD_UPSTREAM_BYTES, m->io.upstream_bytes);
        }

        pthread_mutex_lock(&gm->lock);
        m->t_end_ns = time_mono_ns();
        for (size_t i = 0; i < m->n_shards; i++)
            m->shards[i].rf = NULL;
        const struct reg_model *rm = m->rm;
        m->rm = NULL;
        double secs = (double)(m->t_end_ns - m->t_start_ns) / 1e9;
        if (rc == 0 && !atomic_load(&m->cancel)) {
            m->state = GM_READY;
            m->published = 1;
            gm->last_bps = secs > 0 ? (double)m->total / secs : 0;
            log_msg(LOG_INFO, "gpu: %s ready on %s (generation %llu): %llu bytes in %.3f s "
                    "(%.2f GB/s): %llu from the page cache (%u threads), %llu from the disk%s%s"
                    ", %llu as the upstream sent them",
                    m->name, m->device, (unsigned long long)m->generation,
                    (unsigned long long)m->total, secs, secs > 0 ? (double)m->total / secs / 1e9 : 0.0,
                    (unsigned long long)m->io.page_cache_bytes, m->io.threads,
                    (unsigned long long)m->io.disk_bytes, m->io.disk_reads[0] ? " with " : "",
                    m->io.disk_reads, (unsigned long long)m->io.upstream_bytes);
        } else if (rc != 0 && rc != -ECANCELED) {
            m->state = GM_FAILED;
            log_msg(LOG_ERROR, "gpu: preloading %s on %s failed: %s", m->name, m->device,
                    m->error.message);
        }
        if (m->startup && gm->startup_pending > 0)
            gm->startup_pending--;
        m->startup = 0;
        gm->loading = 0;
        struct gm_instance *dead = do_gm_instance_unref(gm, m);
        pthread_cond_broadcast(&gm->cond);
        pthread_mutex_unlock(&gm->lock);
        reg_model_unref(rm); /* closes files: outside the lock */
        if (dead)
            gm_instance_free(dead);
        pthread_mutex_lock(&gm->lock);
    }
    pthread_mutex_unlock(&gm->lock);
    return NULL;
}

/* Under gm->lock: whether model (rm in the newest snapshot) may be loaded
 * on *where, and if it is already there. Returns 1 to start a load, 0 when
 * cur already is the answer, or -errno with err. */
static int do_preload_check(const struct reg_model *rm, const struct gm_instance *cur,
                            const char *model, const struct gm_device *where,
                            struct st_error *err)
{
    if (!rm)
        return st_error_fail(err, ST_ERR_NOT_FOUND, "no model named \"%.200s\"", model);
    if (rm->state != MODEL_READY)
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "model %.200s is invalid: %s", model,
                             rm->error.message);
    if (cur && (cur->be != where->be || cur->dev != where->dev))
        return st_error_fail(err, ST_ERR_CONFLICT, "model %.200s is already on %s: evict it "
                             "first", model, cur->device);
    return cur && cur->state != GM_FAILED ? 0 : 1;
}

/* Under gm->lock: starts loading rm as model on *where (with src, which
 * the new instance takes over), or finds it there. Returns as
 * gpu_preload_request; *dead gets an instance to free after unlocking. */
static int do_preload(struct gpu_manager *gm, const char *model, const struct reg_model *rm,
                      struct gm_source *src, const struct gm_device *where, int startup,
                      struct gm_view *v, struct gm_instance **dead, struct st_error *err)
{
    struct gm_instance *cur = do_gm_find_current(gm, model);
    int rc = do_preload_check(rm, cur, model, where, err);
    if (rc == 0) {
        do_gm_view(cur, v);
    } else if (rc == 1) {
        struct gm_instance *m = do_gm_instance_new(gm, rm, where);
        if (!m)
            return st_error_fail(err, ST_ERR_NO_MEMORY, "model %.200s: not enough memory for "
                                 "its instance", model);
        m->source = src;
        do_gm_refused_clear(gm, model);
        if (cur) /* a failed attempt on this device: try again */
            *dead = do_gm_instance_retire(gm, cur);
        m->startup = startup;
        if (startup)
            gm->startup_pending++;
        do_gm_enqueue(gm, m);
        do_gm_view(m, v);
    }
    return rc;
}

int gpu_preload_request_model(struct gpu_manager *gm, const char *model,
                              const struct reg_model *rm, struct gm_source *src,
                              const struct gm_device *where, struct gm_view *v,
                              struct st_error *err)
{
    struct gm_instance *dead = NULL;
    memset(v, 0, sizeof(*v));
    pthread_mutex_lock(&gm->lock);
    struct gm_instance *cur = do_gm_find_current(gm, model);
    int rc;
    if (rm)
        rc = do_preload(gm, model, rm, src, where, 0, v, &dead, err);
    else if (!cur || cur->state == GM_FAILED) /* without a model: only an instance there */
        rc = st_error_fail(err, ST_ERR_NOT_FOUND, "no model named \"%.200s\" is loaded", model);
    else if (cur->be != where->be || cur->dev != where->dev)
        rc = st_error_fail(err, ST_ERR_CONFLICT, "model %.200s is already on %s: evict it first",
                           model, cur->device);
    else
        rc = 0;
    if (rc == 0 && !rm)
        do_gm_view(cur, v);
    pthread_mutex_unlock(&gm->lock);
    if (dead)
        gm_instance_free(dead);
    return rc;
}

int gpu_preload_request(struct gpu_manager *gm, const char *model, const struct gm_device *where,
                        int startup, struct gm_view *v, struct st_error *err)
{
    struct reg_snapshot *snap = registry_acquire(gm->registry), *stale = NULL;
    struct gm_instance *dead = NULL;
    memset(v, 0, sizeof(*v));
    pthread_mutex_lock(&gm->lock);
    /* A reload announces its snapshot before the registry swaps it in: a
     * request in between must load the new files, or its instance would
     * keep the old ones (the reload already compared what it saw). */
    if (gm->latest && (!snap || gm->latest->generation > snap->generation)) {
        stale = snap;
        snap = reg_snapshot_ref(gm->latest);
    }
    const struct reg_model *rm = snap ? reg_snapshot_find_model(snap, model, strlen(model)) : NULL;
    int rc = do_preload(gm, model, rm, NULL, where, startup, v, &dead, err);
    pthread_mutex_unlock(&gm->lock);
    if (dead)
        gm_instance_free(dead);
    if (stale)
        reg_snapshot_unref(stale);
    if (snap)
        reg_snapshot_unref(snap);
    return rc;
}

int gpu_preload_start(struct gpu_manager *gm, struct st_error *err)
{
    int rc = pthread_create(&gm->loader, NULL, loader_main, gm);
    if (rc != 0)
        return st_error_errno(err, rc, "cannot start the preload thread");
    gm->loader_started = 1;
    return 0;
}

void gpu_preload_stop(struct gpu_manager *gm)
{
    pthread_mutex_lock(&gm->lock);
    gm->stopping = 1;
    for (struct gm_instance *m = gm->models; m; m = m->next)
        atomic_store(&m->cancel, 1);
    pthread_cond_broadcast(&gm->cond);
    pthread_mutex_unlock(&gm->lock);
    if (gm->loader_started)
        pthread_join(gm->loader, NULL);
}
