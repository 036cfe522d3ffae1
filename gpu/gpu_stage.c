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

static struct gm_stage *do_find(struct gpu_manager *gm, const struct gpu_backend *be, int dev)
{
    for (size_t i = 0; i < gm->n_stages; i++)
        if (gm->stages[i].be == be && gm->stages[i].dev == dev)
            return &gm->stages[i];
    return NULL;
}

static int big_enough(const struct gm_stage *st, const struct gm_ring_shape *shape)
{
    return st->stage && st->nbuf >= shape->nbuf && st->buf_bytes >= shape->buf_bytes;
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
    struct gpu_stage *stage = st->be->ops->stage_open(st->be, st->dev, job->nbuf,
                                                      job->buf_bytes, &err);
    double secs = (double)(time_mono_ns() - t0) / 1e9;
    pthread_mutex_lock(&gm->lock);
    st->stage = stage;
    st->nbuf = stage ? job->nbuf : 0;
    st->buf_bytes = stage ? job->buf_bytes : 0;
    st->pin_err = err;
    st->pinning = 0;
    pthread_cond_broadcast(&gm->cond);
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
    struct gm_stage *st = do_find(gm, be, dev);
    if (st && (st->pinning || big_enough(st, shape)))
        return;
    if (!st && gm->n_stages == GM_MAX_STAGES)
        return; /* the loader says why */
    if (!st) {
        st = &gm->stages[gm->n_stages++];
        *st = (struct gm_stage){.be = be, .dev = dev};
    }
    if (st->stage)
        return; /* too small: the loader, alone with it, makes it again */
    do_reap(st);
    struct pin_job *job = malloc(sizeof(*job));
    if (!job)
        return; /* the loader makes it */
    *job = (struct pin_job){gm, st, shape->nbuf, shape->buf_bytes};
    st->pinning = 1;
    if (pthread_create(&st->pinner, NULL, pinner_main, job) != 0) {
        st->pinning = 0;
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

struct gm_stage *gm_stage_acquire(struct gpu_manager *gm, struct gpu_backend *be, int dev,
                                  const char *device, const struct gm_ring_shape *shape,
                                  struct st_error *err)
{
    pthread_mutex_lock(&gm->lock);
    struct gm_stage *st = do_find(gm, be, dev);
    while (st && st->pinning)
        pthread_cond_wait(&gm->cond, &gm->lock);
    if (st)
        do_reap(st);
    if (st && big_enough(st, shape)) {
        pthread_mutex_unlock(&gm->lock);
        return st;
    }
    if (!st && gm->n_stages == GM_MAX_STAGES) {
        pthread_mutex_unlock(&gm->lock);
        st_error_fail(err, ST_ERR_LIMIT, "staging rings for more than %d devices", GM_MAX_STAGES);
        return NULL;
    }
    if (!st) {
        st = &gm->stages[gm->n_stages++];
        *st = (struct gm_stage){.be = be, .dev = dev};
    }
    int grow = st->stage != NULL;
    pthread_mutex_unlock(&gm->lock);
    if (grow) {
        /* Made for fewer copy threads (the CPUs this process may use grew:
         * taskset, a cgroup's cpuset or quota), or smaller buffers: the new
         * threads' buffers would lie past its end. */
        log_msg(LOG_INFO, "gpu: %s: the staging ring of %u buffers is too small for this "
                "preload's %u: made again", device, st->nbuf, shape->nbuf);
        gm_stage_drop(gm, st, 0);
    }
    struct st_error e;
    struct gpu_stage *stage = be->ops->stage_open(be, dev, shape->nbuf, shape->buf_bytes, &e);
    if (!stage) {
        st_error_fail(err, e.code, "%s (%u staging buffers of %zu bytes: lower "
                      "preload_threads, staging_buffers or staging_buffer_bytes)", e.message,
                      shape->nbuf, shape->buf_bytes);
        return NULL;
    }
    pthread_mutex_lock(&gm->lock);
    st->stage = stage;
    st->nbuf = shape->nbuf;
    st->buf_bytes = shape->buf_bytes;
    pthread_mutex_unlock(&gm->lock);
    log_msg(LOG_INFO, "gpu: %s: staging ring of %u x %zu bytes", device, shape->nbuf,
            shape->buf_bytes);
    return st;
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
