/* gpu_queue: the load queues, one per device, and their loaders' threads
 * (gpu/gpu_manager_int.h): an instance linked into the table and queued
 * for its device's loader, made (its thread started through
 * gm->loader_main, gpu_preload.c's) on the device's first preload, and
 * queued again when a parked reload may go on. Below the reloads, which
 * requeue, and the preload requests, which enqueue. */
#include <errno.h>
#include <pthread.h>

#include "gpu_manager_int.h"

/* be's device dev's loader, made (its thread started) when there is none.
 * NULL with err when there is no room or the thread cannot start. */
static struct gm_loader *do_loader(struct gpu_manager *gm, struct gpu_backend *be, int dev,
                                   struct st_error *err)
{
    for (size_t i = 0; i < gm->n_loaders; i++)
        if (gm->loaders[i].be == be && gm->loaders[i].dev == dev)
            return &gm->loaders[i];
    if (gm->n_loaders == GM_MAX_LOADERS) {
        st_error_fail(err, ST_ERR_LIMIT, "loaders for more than %d devices", GM_MAX_LOADERS);
        return NULL;
    }
    struct gm_loader *l = &gm->loaders[gm->n_loaders];
    *l = (struct gm_loader){.gm = gm, .be = be, .dev = dev};
    int rc = pthread_create(&l->thread, NULL, gm->loader_main, l); /* it waits for the lock */
    if (rc != 0) {
        st_error_errno(err, rc, "cannot start the loader thread of %s:%d", be->name, dev);
        return NULL;
    }
    gm->n_loaders++;
    return l;
}

int do_gm_enqueue(struct gpu_manager *gm, struct gm_instance *m, int current,
                  struct st_error *err)
{
    if (!do_loader(gm, m->be, m->dev, err))
        return -EAGAIN;
    m->generation = ++gm->next_generation;
    m->refs = 2;
    m->current = current;
    m->next = gm->models;
    gm->models = m;
    do_gm_requeue(gm, m);
    struct gm_ring_shape shape;
    gm_ring_shape(&gm->opt, m->be, &shape);
    int dev = m->be->kind == DEVICE_CUDA ? m->be->devices[m->dev].index : 0;
    do_gm_stage_prepare(gm, m->be, dev, &shape);
    return 0;
}

void do_gm_requeue(struct gpu_manager *gm, struct gm_instance *m)
{
    struct st_error unused;
    struct gm_loader *l = do_loader(gm, m->be, m->dev, &unused); /* there since m was queued */
    m->qnext = NULL;
    if (l->qtail)
        l->qtail->qnext = m;
    else
        l->qhead = m;
    l->qtail = m;
    pthread_cond_broadcast(&gm->cond);
}
