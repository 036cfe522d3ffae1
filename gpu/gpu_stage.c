/* gpu_stage: the devices' staging rings (gpu/gpu_manager_int.h).
 *
 * A ring is pinned host memory on a GPU (cuMemHostAlloc: most of a second
 * per GiB, and a 16-thread ring is 2.25 GiB), so it is made once per device
 * and kept, and made ahead of the first preload rather than inside it: at
 * start for every usable device when preloads are configured
 * (gpu_manager_start), else as soon as a preload is queued, on a thread of
 * its own while the loader allocates the device memory. Its shape follows
 * the copy threads, which follow the CPUs this process may use. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_load.h"
#include "gpu_manager_int.h"
#include "log.h"
#include "machine.h"
#include "util.h"

/* The most copy threads the rule gives: where the rule stops paying (on a
 * 16-core H100 host, 12 threads copied 36.6 GB/s from the page cache into
 * pinned memory, /work/shared/gpu: docs/PERFORMANCE.md "GPU preload"). */
#define RULE_MAX_THREADS 16

/* Copy threads on `cpus` CPUs: all of them on a small machine; from 4 CPUs
 * on, one is left to the disk mover, the driver's threads and the daemon,
 * and from 8 on, two. */
static unsigned rule_threads(unsigned cpus)
{
    unsigned keep = cpus >= 8 ? 2 : cpus >= 4 ? 1 : 0;
    unsigned n = cpus - keep;
    return n > RULE_MAX_THREADS ? RULE_MAX_THREADS : n < 1 ? 1 : n;
}

void gm_ring_shape(const struct gm_options *opt, const struct gpu_backend *be,
                   struct gm_ring_shape *shape)
{
    shape->threads = opt->preload_threads ? opt->preload_threads : rule_threads(machine_cpus());
    shape->depth = opt->staging_buffers;
    shape->chunk = (size_t)(opt->staging_buffer_bytes + GPU_LOAD_ALIGN - 1) / GPU_LOAD_ALIGN *
                   GPU_LOAD_ALIGN;
    shape->nbuf = gpu_load_stage_buffers(be, shape->threads, shape->depth);
    shape->buf_bytes = gpu_load_stage_bytes(shape->chunk);
}

/* be's device dev's entry in the ring table, added (without a ring) when
 * there is none; NULL when the table is full. */
static struct gm_stage *do_entry(struct gpu_manager *gm, struct gpu_backend *be, int dev)
{
    for (size_t i = 0; i < gm->n_stages; i++)
        if (gm->stages[i].be == be && gm->stages[i].dev == dev)
            return &gm->stages[i];
    if (gm->n_stages == GM_MAX_STAGES)
        return NULL;
    gm->stages[gm->n_stages] = (struct gm_stage){.be = be, .dev = dev};
    return &gm->stages[gm->n_stages++];
}

static int big_enough(const struct gm_stage *st, const struct gm_ring_shape *shape)
{
    return st->stage && st->nbuf >= shape->nbuf && st->buf_bytes >= shape->buf_bytes;
}

static uint64_t ring_bytes(unsigned nbuf, size_t buf_bytes)
{
    return (uint64_t)nbuf * buf_bytes;
}

/* What the rings other than me hold, made or being made (gm->lock). */
static uint64_t do_others(const struct gpu_manager *gm, const struct gm_stage *me)
{
    uint64_t n = 0;
    for (size_t i = 0; i < gm->n_stages; i++) {
        const struct gm_stage *st = &gm->stages[i];
        if (st != me)
            n += ring_bytes(st->nbuf, st->buf_bytes) + (st->pinning ? st->pin_bytes : 0);
    }
    return n;
}

/* What staging_limit leaves for me (gm->lock). */
static uint64_t do_budget(const struct gpu_manager *gm, const struct gm_stage *me)
{
    uint64_t others = do_others(gm, me), limit = gm->opt.staging_limit;
    return !limit ? UINT64_MAX : others < limit ? limit - others : 0;
}

/* A ring was released, pinned or given up: a loader waiting for staging
 * room looks again (gm->lock). */
static void do_stage_changed(struct gpu_manager *gm)
{
    gm->stage_changes++;
    pthread_cond_broadcast(&gm->cond);
}

/* Takes the idle rings of other devices out of the table, into out[]
 * (closed by the caller without the lock): their devices make them again
 * on their next preload. Returns how many (gm->lock). */
static size_t do_take_idle(struct gpu_manager *gm, const struct gm_stage *me,
                           struct gpu_stage **out, const struct gpu_backend **be)
{
    size_t n = 0;
    for (size_t i = 0; i < gm->n_stages; i++) {
        struct gm_stage *st = &gm->stages[i];
        if (st == me || !st->stage || st->in_use || st->pinning)
            continue;
        be[n] = st->be;
        out[n++] = st->stage;
        st->stage = NULL;
        st->nbuf = 0;
        st->buf_bytes = 0;
    }
    return n;
}

/* Copy threads a ring of nbuf buffers serves (0: not even one). */
static unsigned threads_served(const struct gpu_backend *be, unsigned nbuf, unsigned depth,
                               unsigned most)
{
    unsigned t = most;
    while (t > 0 && gpu_load_stage_buffers(be, t, depth) > nbuf)
        t--;
    return t;
}

/* Opens a ring on dev with its pinned memory on the device's NUMA node. */
static struct gpu_stage *open_ring(struct gpu_backend *be, int dev, unsigned nbuf,
                                   size_t buf_bytes, struct st_error *err)
{
    int node = be->devices[dev].numa_node;
    int placed = node >= 0 && machine_prefer_node(node) == 0;
    struct gpu_stage *stage = be->ops->stage_open(be, dev, nbuf, buf_bytes, err);
    if (placed)
        machine_prefer_node(-1);
    return stage;
}

struct pin_job {
    struct gpu_manager *gm;
    struct gm_stage *st;
    unsigned nbuf;
    size_t buf_bytes;
};

/* The pinner: makes the ring the job says and publishes it in st. */
static void *pinner_main(void *arg)
{
    struct pin_job *job = arg;
    struct gpu_manager *gm = job->gm;
    struct gm_stage *st = job->st;
    struct st_error err = {0};
    uint64_t t0 = time_mono_ns();
    struct gpu_stage *stage = open_ring(st->be, st->dev, job->nbuf, job->buf_bytes, &err);
    double secs = (double)(time_mono_ns() - t0) / 1e9;
    pthread_mutex_lock(&gm->lock);
    st->stage = stage;
    st->nbuf = stage ? job->nbuf : 0;
    st->buf_bytes = stage ? job->buf_bytes : 0;
    st->pin_err = err;
    st->pinning = 0;
    st->pin_bytes = 0;
    do_stage_changed(gm); /* an idle ring now, which a loader short of room may free;
                           * and the loader that waits for this pin */
    pthread_mutex_unlock(&gm->lock);
    if (stage)
        log_msg(LOG_INFO, "gpu: %s:%d: staging ring of %u x %zu bytes made in %.3f s",
                st->be->name, st->dev, job->nbuf, job->buf_bytes, secs);
    else
        log_msg(LOG_WARN, "gpu: %s:%d: staging ring of %u x %zu bytes: %s (the next preload "
                "tries again)", st->be->name, st->dev, job->nbuf, job->buf_bytes, err.message);
    free(job);
    return NULL;
}

/* Joins st's finished pinner, if any. Caller holds the lock; the pinner has
 * published (pinning is 0), so the join does not wait. */
static void do_reap(struct gm_stage *st)
{
    if (st->joinable && !st->pinning) {
        pthread_join(st->pinner, NULL);
        st->joinable = 0;
    }
}

void do_gm_stage_prepare(struct gpu_manager *gm, struct gpu_backend *be, int dev,
                         const struct gm_ring_shape *shape)
{
    struct gm_stage *st = do_entry(gm, be, dev);
    if (!st)
        return; /* the table is full: the loader says why */
    if (st->pinning || st->in_use || big_enough(st, shape))
        return; /* being made, or its loader makes it */
    uint64_t need = ring_bytes(shape->nbuf, shape->buf_bytes);
    if (st->stage || need > do_budget(gm, st))
        return; /* too small, or over the limit: the loader, alone with it, sees to it */
    do_reap(st);
    struct pin_job *job = malloc(sizeof(*job));
    if (!job)
        return; /* the loader makes it */
    *job = (struct pin_job){gm, st, shape->nbuf, shape->buf_bytes};
    st->pinning = 1;
    st->pin_bytes = need;
    if (pthread_create(&st->pinner, NULL, pinner_main, job) != 0) {
        st->pinning = 0;
        st->pin_bytes = 0;
        free(job);
        return;
    }
    st->joinable = 1;
}

void gm_stage_drop(struct gpu_manager *gm, struct gm_stage *st, int leak)
{
    pthread_mutex_lock(&gm->lock);
    struct gpu_stage *stage = st->stage;
    st->stage = NULL;
    st->nbuf = 0;
    st->buf_bytes = 0;
    pthread_mutex_unlock(&gm->lock);
    if (leak)
        log_msg(LOG_ERROR, "gpu: io_uring reads may still be in flight after an error: "
                           "leaking the staging buffers rather than freeing them");
    else if (stage)
        st->be->ops->stage_close(stage);
}

void gm_stage_release(struct gpu_manager *gm, struct gm_stage *st)
{
    pthread_mutex_lock(&gm->lock);
    st->in_use = 0;
    do_stage_changed(gm);
    pthread_mutex_unlock(&gm->lock);
}

/* Under gm->lock, for a ring st must make: the shape that fits what
 * staging_limit leaves it, freeing idle rings of other devices into
 * freed[] when the full one does not fit. Returns 0, or -1 when not even
 * `share` threads' ring fits, nor one thread's. */
static int do_fit(struct gpu_manager *gm, struct gm_stage *st, struct gm_ring_shape *shape,
                  unsigned share, struct gpu_stage **freed, const struct gpu_backend **freed_be,
                  size_t *n_freed)
{
    if (ring_bytes(shape->nbuf, shape->buf_bytes) > do_budget(gm, st))
        *n_freed = do_take_idle(gm, st, freed, freed_be);
    uint64_t budget = do_budget(gm, st);
    if (ring_bytes(shape->nbuf, shape->buf_bytes) <= budget)
        return 0;
    unsigned most = share < shape->threads ? share : shape->threads;
    unsigned nbuf = (unsigned)(budget / shape->buf_bytes < UINT32_MAX ? budget / shape->buf_bytes
                                                                        : UINT32_MAX);
    unsigned t = threads_served(st->be, nbuf, shape->depth, most);
    if (t == 0)
        return -1;
    shape->threads = t;
    shape->nbuf = gpu_load_stage_buffers(st->be, t, shape->depth);
    return 0;
}

/* One try of gm_stage_acquire. NULL with err when the ring cannot be had
 * now; *wait then says whether another device's ring in use may leave
 * room for it once released. */
static struct gm_stage *acquire_once(struct gpu_manager *gm, struct gpu_backend *be, int dev,
                                     const char *device, struct gm_ring_shape *shape,
                                     unsigned share, int *wait, uint64_t *changes,
                                     struct st_error *err)
{
    struct gpu_stage *freed[GM_MAX_STAGES];
    const struct gpu_backend *freed_be[GM_MAX_STAGES];
    size_t n_freed = 0;
    pthread_mutex_lock(&gm->lock);
    struct gm_stage *st = do_entry(gm, be, dev);
    if (!st) {
        pthread_mutex_unlock(&gm->lock);
        *wait = 0;
        st_error_fail(err, ST_ERR_LIMIT, "staging rings for more than %d devices", GM_MAX_STAGES);
        return NULL;
    }
    while (st->pinning)
        pthread_cond_wait(&gm->cond, &gm->lock);
    do_reap(st);
    unsigned served = st->stage && st->buf_bytes >= shape->buf_bytes
                          ? threads_served(be, st->nbuf, shape->depth, shape->threads)
                          : 0;
    /* Big enough for all the threads, or for this load's share when a
     * bigger one would not fit the limit: kept. */
    if (served && (big_enough(st, shape) ||
                   (served >= share && ring_bytes(shape->nbuf, shape->buf_bytes) >
                                           do_budget(gm, st)))) {
        shape->threads = served;
        st->in_use = 1;
        pthread_mutex_unlock(&gm->lock);
        return st;
    }
    struct gpu_stage *old = st->stage; /* too small: made again */
    unsigned old_nbuf = st->nbuf;
    st->stage = NULL;
    st->nbuf = 0;
    st->buf_bytes = 0;
    int fits = do_fit(gm, st, shape, share, freed, freed_be, &n_freed) == 0;
    uint64_t limit = gm->opt.staging_limit, others = do_others(gm, st);
    uint64_t least = ring_bytes(gpu_load_stage_buffers(be, 1, shape->depth), shape->buf_bytes);
    if (fits) { /* its bytes counted while it is made, outside the lock */
        st->in_use = 1;
        st->nbuf = shape->nbuf;
        st->buf_bytes = shape->buf_bytes;
    }
    /* Room for one thread's ring were it alone: the others are in use (an
     * idle one was freed above) and give it back when their loads end. */
    *wait = !fits && others && least <= limit;
    *changes = gm->stage_changes;
    pthread_mutex_unlock(&gm->lock);
    for (size_t i = 0; i < n_freed; i++)
        freed_be[i]->ops->stage_close(freed[i]);
    if (n_freed)
        log_msg(LOG_INFO, "gpu: %s: freed %zu idle device(s)' staging rings to stay within "
                "staging_memory_limit = %llu", device, n_freed, (unsigned long long)limit);
    if (old) {
        log_msg(LOG_INFO, "gpu: %s: the staging ring of %u buffers is too small for this "
                "preload's %u: made again", device, old_nbuf, shape->nbuf);
        be->ops->stage_close(old);
    }
    if (!fits && *wait)
        return NULL;
    if (!fits) {
        st_error_fail(err, ST_ERR_LIMIT, "the staging rings of the devices loading now hold "
                      "%llu bytes: staging_memory_limit = %llu leaves no room for one copy "
                      "thread's ring of %u x %zu bytes on %s (raise it, or lower "
                      "staging_buffer_bytes)", (unsigned long long)others,
                      (unsigned long long)limit, gpu_load_stage_buffers(be, 1, shape->depth),
                      shape->buf_bytes, device);
        return NULL;
    }
    struct st_error e;
    struct gpu_stage *stage = open_ring(be, dev, shape->nbuf, shape->buf_bytes, &e);
    pthread_mutex_lock(&gm->lock);
    st->stage = stage;
    st->nbuf = stage ? shape->nbuf : 0;
    st->buf_bytes = stage ? shape->buf_bytes : 0;
    st->in_use = stage != NULL;
    if (!stage)
        do_stage_changed(gm); /* the room it held is free again */
    pthread_mutex_unlock(&gm->lock);
    if (!stage) {
        st_error_fail(err, e.code, "%s (%u staging buffers of %zu bytes: lower "
                      "preload_threads, staging_buffers or staging_buffer_bytes)", e.message,
                      shape->nbuf, shape->buf_bytes);
        return NULL;
    }
    log_msg(LOG_INFO, "gpu: %s: staging ring of %u x %zu bytes for %u copy threads", device,
            shape->nbuf, shape->buf_bytes, shape->threads);
    return st;
}

struct gm_stage *gm_stage_acquire(struct gpu_manager *gm, struct gpu_backend *be, int dev,
                                  const char *device, struct gm_ring_shape *shape,
                                  unsigned share, const atomic_int *cancel, struct st_error *err)
{
    struct gm_ring_shape want = *shape;
    int wait, waited = 0;
    uint64_t seen;
    for (;;) {
        *shape = want;
        struct gm_stage *st = acquire_once(gm, be, dev, device, shape, share, &wait, &seen, err);
        if (st || !wait)
            return st;
        if (!waited++)
            log_msg(LOG_INFO, "gpu: %s: waiting for another device's staging ring to be "
                    "released (staging_memory_limit = %llu leaves no room for one now)",
                    device, (unsigned long long)gm->opt.staging_limit);
        /* Woken by a ring released or pinned, a retirement (which cancels)
         * or the stop. */
        pthread_mutex_lock(&gm->lock);
        int stop;
        while (!(stop = gm->stopping || atomic_load(cancel)) && gm->stage_changes == seen)
            pthread_cond_wait(&gm->cond, &gm->lock);
        pthread_mutex_unlock(&gm->lock);
        if (stop) {
            st_error_fail(err, ST_ERR_LIMIT, "cancelled while waiting for staging memory on %s",
                          device);
            return NULL;
        }
    }
}

void gm_stages_free(struct gpu_manager *gm)
{
    for (size_t i = 0; i < gm->n_stages; i++) {
        struct gm_stage *st = &gm->stages[i];
        if (st->joinable)
            pthread_join(st->pinner, NULL); /* a pin in progress ends by itself */
        st->joinable = 0;
        if (st->stage)
            st->be->ops->stage_close(st->stage);
        st->stage = NULL;
    }
}
