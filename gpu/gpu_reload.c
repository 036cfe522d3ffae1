/* gpu_reload: reloads of preloaded models (gpu/gpu_manager_int.h,
 * "reloads"). A file change must never leave a model worse off than
 * before: the generation that serves keeps serving, and opens keep
 * succeeding on it, until the new one is ready; where both cannot be on
 * the device at once, the new one waits for the old one's leases to end,
 * and the old memory is released before the new is allocated, never at the
 * same time. */
#include <string.h>

#include "gpu_manager_int.h"
#include "log.h"

/* Abandons m's pending reload (its new generation is retired). */
void do_gm_reload_abandon(struct gpu_manager *gm, struct gm_instance *m,
                          struct gm_instance **dead)
{
    struct gm_instance *nm = m->next_gen;
    *dead = NULL;
    if (!nm)
        return;
    m->next_gen = NULL;
    nm->prev_gen = NULL;
    m->refs--; /* nm's reference; the table's is still there */
    *dead = do_gm_instance_retire(gm, nm);
}

/* A new generation of m (same device, same split) from rm, not linked;
 * NULL (logged) when it cannot be made. */
static struct gm_instance *do_next_generation(struct gpu_manager *gm, const struct gm_instance *m,
                                              const struct reg_model *rm)
{
    struct gm_device where = {.be = m->be, .dev = m->dev};
    struct fetch_req split;
    struct st_error err;
    struct gm_instance *nm = gm_instance_split(m, &split, &err) < 0
                                 ? NULL : gm_instance_new(gm, rm, &where, &split, &err);
    fetch_req_free(&split);
    if (!nm)
        log_msg(LOG_ERROR, "gpu: %s on %s: no new generation: %s", m->name, m->device,
                err.message);
    return nm;
}

/* Starts a new generation of m (current, ready) from rm beside it, unless
 * one of these very files is under way. *dead gets an abandoned older
 * attempt to dispose of, *unborn one that could not be queued to free. */
static void do_reload_beside(struct gpu_manager *gm, struct gm_instance *m,
                             const struct reg_model *rm, struct gm_instance **dead,
                             struct gm_instance **unborn)
{
    struct st_error err;
    *dead = *unborn = NULL;
    if (m->next_gen && gm_instance_same_files(m->next_gen, rm))
        return;
    do_gm_reload_abandon(gm, m, dead);
    struct gm_instance *nm = do_next_generation(gm, m, rm);
    if (!nm)
        return; /* generation m serves on */
    if (do_gm_enqueue(gm, nm, 0, &err) < 0) {
        log_msg(LOG_ERROR, "gpu: %s on %s: %s: generation %llu serves on", m->name, m->device,
                err.message, (unsigned long long)m->generation);
        *unborn = nm;
        return;
    }
    log_msg(LOG_INFO, "gpu: %s changed on disk: loading generation %llu beside generation %llu, "
            "which serves until it is ready", m->name, (unsigned long long)nm->generation,
            (unsigned long long)m->generation);
    m->refs++;
    m->next_gen = nm;
    m->reload_failed_gen = 0;
    nm->prev_gen = m;
}

/* Replaces m (current, not serving: loading or failed) by a new instance of
 * rm at once, or evicts it when rm is NULL (gone or invalid). Returns an
 * instance to dispose of. */
static struct gm_instance *do_replace(struct gpu_manager *gm, struct gm_instance *m,
                                      const struct reg_model *rm, struct gm_instance **unborn)
{
    struct st_error err;
    int startup = m->startup;
    struct gm_instance *nm = rm ? do_next_generation(gm, m, rm) : NULL;
    m->startup = 0; /* the replacement inherits the start-up accounting */
    struct gm_instance *dead = do_gm_instance_retire(gm, m);
    *unborn = NULL;
    if (nm && do_gm_enqueue(gm, nm, 1, &err) < 0) {
        log_msg(LOG_ERROR, "gpu: %s on %s: %s: evicted", nm->name, nm->device, err.message);
        *unborn = nm;
        nm = NULL;
    }
    if (nm)
        nm->startup = startup;
    if (!nm && startup && gm->startup_pending > 0)
        gm->startup_pending--;
    return dead;
}

void gpu_manager_on_reload(struct gpu_manager *gm, struct reg_snapshot *snap)
{
    struct gm_instance *dead_list = NULL, *unborn_list = NULL, *dead, *unborn;
    pthread_mutex_lock(&gm->lock);
    /* A preload that took the registry's snapshot before this one is swapped
     * in must not load the old files: it compares with this (see
     * gpu_preload_request). */
    struct reg_snapshot *old_latest = gm->latest;
    gm->latest = reg_snapshot_ref(snap);
    struct gm_instance *next;
    for (struct gm_instance *m = gm->models; m; m = next) {
        /* Retiring m may unlink it; new instances go in at the head, behind
         * this walk. */
        next = m->next;
        if (!m->current || m->source) /* a mirror's model: not the registry's to replace */
            continue;
        const struct reg_model *rm = reg_snapshot_find_model(snap, m->name, strlen(m->name));
        int valid = rm && rm->state == MODEL_READY;
        if (valid && gm_instance_same_files(m, rm)) {
            do_gm_reload_abandon(gm, m, &dead); /* changed back while a reload ran */
            gm_keep_dead(&dead_list, dead);
            continue;
        }
        if (valid && m->state == GM_READY) {
            do_reload_beside(gm, m, rm, &dead, &unborn);
            gm_keep_dead(&dead_list, dead);
            gm_keep_dead(&unborn_list, unborn);
            continue;
        }
        log_msg(LOG_INFO, "gpu: %s changed on disk: %s", m->name,
                valid ? "reloading it into a new generation" : "evicting it");
        do_gm_reload_abandon(gm, m, &dead);
        gm_keep_dead(&dead_list, dead);
        gm_keep_dead(&dead_list, do_replace(gm, m, valid ? rm : NULL, &unborn));
        gm_keep_dead(&unborn_list, unborn);
    }
    pthread_mutex_unlock(&gm->lock);
    reg_snapshot_unref(old_latest);
    while (dead_list) {
        struct gm_instance *d = dead_list;
        dead_list = d->qnext;
        gm_dispose(gm, d);
    }
    while (unborn_list) { /* never linked: freed, not disposed of */
        struct gm_instance *d = unborn_list;
        unborn_list = d->qnext;
        gm_instance_free(d);
    }
}

int do_gm_reload_no_room(struct gpu_manager *gm, struct gm_instance *m, uint64_t avail,
                         struct gm_instance **dead)
{
    struct gm_instance *old = m->prev_gen;
    *dead = NULL;
    m->avail_seen = avail;
    if (old->leases > 0) {
        if (!m->waiting)
            log_msg(LOG_INFO, "gpu: %s: generation %llu needs %llu bytes on %s, %llu are "
                    "available: it waits for the %u lease(s) on generation %llu to end",
                    m->name, (unsigned long long)m->generation, (unsigned long long)m->need,
                    m->device, (unsigned long long)avail, old->leases,
                    (unsigned long long)old->generation);
        m->waiting = 1; /* the loader's reference stays with it */
        return 1;
    }
    log_msg(LOG_INFO, "gpu: %s: generation %llu does not fit beside generation %llu, which "
            "no lease holds: releasing it first", m->name, (unsigned long long)m->generation,
            (unsigned long long)old->generation);
    old->next_gen = NULL;
    m->prev_gen = NULL;
    m->current = 1;
    m->reloaded = 1;
    m->startup = 0;
    struct gm_instance *d = do_gm_instance_retire(gm, old); /* the table's reference */
    *dead = d ? d : do_gm_instance_unref(gm, old);          /* and m's */
    return 0;
}

void do_gm_reload_ended(struct gpu_manager *gm, struct gm_instance *m, int ready,
                        struct gm_instance **dead)
{
    struct gm_instance *old = m->prev_gen;
    *dead = NULL;
    if (!old)
        return;
    m->prev_gen = NULL;
    old->next_gen = NULL;
    if (ready) {
        m->current = 1;
        old->reload_failed_gen = 0;
        struct gm_instance *d = do_gm_instance_retire(gm, old);
        *dead = d ? d : do_gm_instance_unref(gm, old);
        log_msg(LOG_INFO, "gpu: %s: generation %llu replaces generation %llu (draining until "
                "its leases end)", m->name, (unsigned long long)m->generation,
                (unsigned long long)old->generation);
        return;
    }
    old->reload_failed_gen = m->generation;
    old->reload_error = m->error;
    log_msg(LOG_ERROR, "gpu: %s: reloading into generation %llu failed (%s): generation %llu "
            "serves on", m->name, (unsigned long long)m->generation, m->error.message,
            (unsigned long long)old->generation);
    old->refs--; /* m's reference; the table's is still there */
    *dead = do_gm_instance_retire(gm, m);
}

void do_gm_reload_lease_ended(struct gpu_manager *gm, struct gm_instance *m)
{
    struct gm_instance *nm = m->next_gen;
    if (m->leases == 0 && nm && nm->waiting) {
        nm->waiting = 0;
        do_gm_requeue(gm, nm);
    }
}
