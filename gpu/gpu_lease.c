/* gpu_lease: leases on the manager's instances (gpu/gpu_manager.h): which
 * instance an open names (its device and rank, or the worker's device among
 * several), whether it can be leased, and granting, viewing and ending a
 * lease. The locking rules are gpu/gpu_manager_int.h's. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_manager.h"
#include "gpu_manager_int.h"
#include "log.h"
#include "metrics.h"

/* Whether m (the instance an open found) can be leased with max_fds
 * descriptors. Returns 0 or -errno with err (see gpu_manager_open). */
static int do_gm_leasable(const struct gm_instance *m, const char *model, size_t max_fds,
                          struct st_error *err)
{
    if (m->state == GM_LOADING) {
        uint64_t done = atomic_load(&m->done);
        double pct = m->total ? 100.0 * (double)done / (double)m->total : 0.0;
        if (m->reloaded) /* a reload took the old generation's place: it is moments away */
            return st_error_fail(err, ST_ERR_RETRY, "model %.200s is being reloaded in place "
                                 "(generation %llu, %.0f%%): open it again shortly", model,
                                 (unsigned long long)m->generation, pct);
        return st_error_fail(err, ST_ERR_CONFLICT, "model %.200s is still loading on %s "
                             "(%.0f%%)", model, m->device, pct);
    }
    if (m->state != GM_READY)
        return st_error_fail(err, ST_ERR_DEVICE, "preloading model %.200s on %s failed: %s",
                             model, m->device, m->error.message);
    if (m->n_shards > max_fds)
        return st_error_fail(err, ST_ERR_LIMIT, "model %.200s has %zu shards; at most %zu can "
                             "be passed in one answer", model, m->n_shards, max_fds);
    return 0;
}

/* "cuda:0 (rank 1 of 2), cuda:1 (rank 0 of 2)": where model's current
 * instances are, for a message, into buf. */
static const char *do_where_text(struct gpu_manager *gm, const char *model, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (struct gm_instance *m = gm->models; m && o < len; m = m->next) {
        if (!m->current || strcmp(m->name, model) != 0)
            continue;
        int n = m->world > 1 ? snprintf(buf + o, len - o, "%s%s (rank %u of %u)", o ? ", " : "",
                                        m->device, m->rank, m->world)
                             : snprintf(buf + o, len - o, "%s%s", o ? ", " : "", m->device);
        o += n > 0 ? (size_t)n : 0;
    }
    return buf;
}

/* The instance an open asks for: the one current instance of model that
 * which names, or among several the one on prefer (resolved, or NULL), or,
 * for a named rank, the one partition among them. NULL with err when there
 * is none or several. */
static struct gm_instance *do_gm_find_open(struct gpu_manager *gm, const char *model,
                                           const struct gm_which *which,
                                           const struct gm_device *prefer, struct st_error *err)
{
    struct gm_instance *one = NULL, *preferred = NULL, *part = NULL;
    unsigned n = 0, n_preferred = 0, n_parts = 0, any = 0;
    char where[256];
    for (struct gm_instance *m = gm->models; m; m = m->next) {
        if (!m->current || strcmp(m->name, model) != 0)
            continue;
        any++;
        if (!gm_instance_is(m, which))
            continue;
        one = m;
        n++;
        if (prefer && m->be == prefer->be && m->dev == prefer->dev) {
            preferred = m;
            n_preferred++;
        }
        if (m->world > 1) {
            part = m;
            n_parts++;
        }
    }
    if (n == 1)
        return one;
    if (n_preferred == 1)
        return preferred;
    /* A worker naming its rank wants a partition's, not a whole copy's
     * (rank 0 of a world of 1). */
    if (which->rank >= 0 && n_parts == 1)
        return part;
    if (n == 0 && !any)
        st_error_fail(err, ST_ERR_NOT_FOUND, "model %.200s is not preloaded", model);
    else if (n == 0)
        st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "model %.200s is on %s: not on that device "
                      "or rank", model, do_where_text(gm, model, where, sizeof(where)));
    else
        st_error_fail(err, ST_ERR_AMBIGUOUS, "model %.200s is on %s: name the device and the "
                      "rank to open", model, do_where_text(gm, model, where, sizeof(where)));
    return NULL;
}

struct gpu_lease *gpu_manager_open(struct gpu_manager *gm, const char *model,
                                   const struct gm_which *which, struct gm_view *v, int *fds,
                                   size_t max_fds, size_t *n_fds, struct st_error *err)
{
    *n_fds = 0;
    memset(v, 0, sizeof(*v));
    struct gm_device prefer;
    struct st_error unused;
    int have_prefer = which->prefer && *which->prefer &&
                      gm_resolve_device(gm, which->prefer, &prefer, &unused) == 0;
    struct gpu_lease *l = malloc(sizeof(*l));
    if (!l) {
        st_error_fail(err, ST_ERR_NO_MEMORY, "out of memory opening a lease");
        return NULL;
    }
    pthread_mutex_lock(&gm->lock);
    struct gm_instance *m = do_gm_find_open(gm, model, which, have_prefer ? &prefer : NULL, err);
    if (!m || do_gm_leasable(m, model, max_fds, err) < 0) {
        pthread_mutex_unlock(&gm->lock);
        free(l);
        return NULL;
    }
    for (size_t i = 0; i < m->n_shards; i++)
        fds[i] = m->shards[i].a.fd;
    *n_fds = m->n_shards;
    m->refs++;
    m->leases++;
    l->m = m;
    /* The view's own reference keeps m, and its published allocations,
     * as they are while the caller renders the answer without the lock. */
    do_gm_view(m, v);
    pthread_mutex_unlock(&gm->lock);
    metrics_add(MC_LEASES_TOTAL, 1);
    return l;
}

void gpu_lease_release(struct gpu_manager *gm, struct gpu_lease *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&gm->lock);
    struct gm_instance *m = l->m;
    m->leases--;
    do_gm_reload_lease_ended(gm, m);
    struct gm_instance *dead = do_gm_instance_unref(gm, m);
    pthread_mutex_unlock(&gm->lock);
    if (dead)
        log_msg(LOG_INFO, "gpu: last lease on %s (generation %llu) ended: memory released",
                dead->name, (unsigned long long)dead->generation);
    gm_dispose(gm, dead);
    free(l);
}

void gpu_lease_view(struct gpu_manager *gm, struct gpu_lease *l, struct gm_view *v)
{
    pthread_mutex_lock(&gm->lock);
    do_gm_view(l->m, v);
    pthread_mutex_unlock(&gm->lock);
}
