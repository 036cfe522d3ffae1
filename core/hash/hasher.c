/* hasher: the public hasher on top of its parts (design in hasher.h): its
 * life (the state directory, starting and stopping its threads) and the
 * submission of snapshots. The job table is hasher_jobs.c, the threads
 * hasher_work.c, the waiting callers' API hasher_wait.c; this file calls
 * the first two and nothing calls it back. */
#include "hasher.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hasher_int.h"
#include "hashfile.h"
#include "log.h"
#include "util.h"

void hasher_submit(struct hasher *h, struct reg_snapshot *snap)
{
    pthread_mutex_lock(&h->lock);
    uint64_t epoch = ++h->epoch;
    int stopped = h->stopped;
    pthread_mutex_unlock(&h->lock);
    if (stopped || !snap)
        return;
    /* Built without the lock: it only reads the snapshot and the store. */
    struct jobset *set = hasher_jobset_new(h, snap, epoch);
    struct hwait *fire = NULL;
    pthread_mutex_lock(&h->lock);
    struct jobset *old = h->set;
    atomic_store(&h->urgent_queued, 0); /* the old set's wanted jobs go with it */
    for (unsigned w = 0; w < h->n_workers; w++) {
        if (!h->is_running[w])
            continue;
        struct job *j = hasher_find_job(h, set, &h->running[w]);
        if (j && j->state == JOB_QUEUED)
            j->state = JOB_RUNNING; /* that worker's result will be this job's */
        else if (!j)
            atomic_store(&h->drop_run[w], 1); /* nobody needs it any more */
    }
    /* Waiters, and what yielded jobs had hashed, follow their files into
     * the new set when it has them. */
    for (size_t i = 0; old && i < old->n; i++) {
        struct job *o = &old->jobs[i];
        struct job *j = o->partial || o->n_waits ? hasher_find_job(h, set, &o->id) : NULL;
        if (o->partial && j && j->state == JOB_QUEUED && !j->partial) {
            j->partial = o->partial;
            o->partial = NULL;
        }
        if (!o->n_waits)
            continue;
        if (j && j->state == JOB_DONE) {
            hasher_do_finish_waits(h, o, HASHER_DONE, &fire);
        } else if (j && j->state != JOB_FAILED) {
            j->cap_waits = j->n_waits + o->n_waits;
            j->waits = xrealloc(j->waits, j->cap_waits * sizeof(*j->waits));
            memcpy(j->waits + j->n_waits, o->waits, o->n_waits * sizeof(*o->waits));
            j->n_waits += o->n_waits;
            o->n_waits = 0;
            hasher_do_prioritize(h, set, j);
        } else {
            hasher_do_finish_waits(h, o, HASHER_GONE, &fire);
        }
    }
    h->set = set;
    h->files = set->n;
    h->bytes = h->files_known = h->bytes_known = h->files_failed = h->bytes_pending = 0;
    for (size_t i = 0; i < set->n; i++) {
        h->bytes += set->jobs[i].id.size;
        if (set->jobs[i].state == JOB_DONE) {
            h->files_known++;
            h->bytes_known += set->jobs[i].id.size;
        } else {
            h->bytes_pending += set->jobs[i].id.size;
        }
    }
    struct reg_snapshot *drop_old = old ? old->snap : NULL;
    if (set->n_open)
        set->snap = reg_snapshot_ref(snap);
    for (size_t i = 0; !set->snap && i < set->n; i++)
        set->jobs[i].f = NULL; /* nothing to read: no pointer into a snapshot we do not hold */
    size_t n = set->n, n_open = set->n_open;
    hasher_do_publish(h);
    pthread_cond_broadcast(&h->work);
    pthread_cond_broadcast(&h->nap); /* a paced worker whose file was dropped */
    pthread_cond_signal(&h->hk);
    pthread_mutex_unlock(&h->lock);
    reg_snapshot_unref(drop_old); /* without the lock: the last reference closes many fds */
    hasher_call_fired(h, fire);
    pthread_mutex_lock(&h->lock);
    hasher_jobset_free(old);
    pthread_mutex_unlock(&h->lock);
    log_msg(LOG_INFO, "content hashes: %zu of %zu files known, %zu to hash", n - n_open, n,
            n_open);
}

void hasher_progress(struct hasher *h, struct hasher_progress *p)
{
    if (!h) {
        memset(p, 0, sizeof(*p));
        return;
    }
    pthread_mutex_lock(&h->lock);
    *p = (struct hasher_progress){
        .files = h->files, .bytes = h->bytes, .files_known = h->files_known,
        .bytes_known = h->bytes_known, .files_pending = h->set ? h->set->n_open : 0,
        .bytes_pending = h->bytes_pending, .files_failed = h->files_failed,
        .bytes_per_second = (double)atomic_load(&h->rate_bps), .state_file = h->state_file};
    pthread_mutex_unlock(&h->lock);
}

static void open_state(struct hasher *h, const char *dir)
{
    struct st_error err;
    int rc = fileio_mkdirs(dir, 0700); /* XDG's rule for state */
    if (rc == 0) {
        h->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        rc = h->dirfd < 0 ? -errno : 0;
    }
    if (rc != 0) {
        log_msg(LOG_WARN, "content hashes: state_dir %s: %s; hashes are kept in memory only", dir,
                strerror(-rc));
        return;
    }
    h->state_file = xasprintf("%s/%s", dir, HASHFILE_NAME);
    uint64_t t0 = time_mono_ns();
    if (hashfile_load_store(h->store, h->dirfd, HASHFILE_NAME, h->state_file, &err) != 0)
        log_msg(LOG_WARN, "content hashes: ignoring %s, every file is hashed again", err.message);
    else
        log_msg(LOG_INFO, "content hashes: %zu known from %s (%.1f ms)", hashstore_count(h->store),
                h->state_file, (double)(time_mono_ns() - t0) / 1e6);
}

struct hasher *hasher_new(const struct hasher_opts *o, struct st_error *err)
{
    struct hasher *h = xcalloc(1, sizeof(*h));
    h->o = *o;
    h->o.state_dir = NULL;
    if (h->o.threads < 1)
        h->o.threads = 1;
    if (h->o.threads > HASHER_MAX_THREADS)
        h->o.threads = HASHER_MAX_THREADS;
    h->dirfd = -1;
    h->store = hashstore_new();
    h->seed = hash_seed(h);
    atomic_store(&h->rate_bps, 500000000u); /* a first guess, replaced by measurements */
    pthread_mutex_init(&h->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->work, &ca);
    pthread_cond_init(&h->hk, &ca);
    pthread_cond_init(&h->nap, &ca);
    pthread_cond_init(&h->sv, &ca);
    pthread_condattr_destroy(&ca);
    if (o->state_dir && o->state_dir[0])
        open_state(h, o->state_dir);
    h->n_workers = h->o.threads;
    h->running = xcalloc(h->n_workers, sizeof(*h->running));
    h->is_running = xcalloc(h->n_workers, 1);
    h->urgent_run = xcalloc(h->n_workers, sizeof(*h->urgent_run));
    h->drop_run = xcalloc(h->n_workers, sizeof(*h->drop_run));
    h->held_run = xcalloc(h->n_workers, sizeof(*h->held_run));
    if (hasher_work_start(h, err) < 0) {
        h->stopped = 1; /* no thread runs: hasher_free only frees */
        hasher_free(h);
        return NULL;
    }
    return h;
}

void hasher_stop(struct hasher *h)
{
    pthread_mutex_lock(&h->lock);
    if (h->stopped) {
        pthread_mutex_unlock(&h->lock);
        return;
    }
    h->stopped = 1;
    atomic_store(&h->stopping, 1);
    pthread_cond_broadcast(&h->work);
    pthread_cond_broadcast(&h->hk);
    pthread_cond_broadcast(&h->nap);
    pthread_mutex_unlock(&h->lock);
    hasher_work_join(h); /* workers stop at their next block, the housekeeper at once */
    struct hwait *fire = NULL;
    pthread_mutex_lock(&h->lock);
    hasher_do_fire_all(h, HASHER_STOPPED, &fire);
    /* A worker left running may still read from the snapshot. */
    struct reg_snapshot *drop = h->threads_left ? NULL : hasher_do_release_snap(h->set, 1);
    pthread_mutex_unlock(&h->lock);
    hasher_call_fired(h, fire);
    reg_snapshot_unref(drop);
    hasher_work_last_save(h);
}

void hasher_free(struct hasher *h)
{
    if (!h)
        return;
    hasher_stop(h);
    if (h->threads_left)
        return; /* a thread still uses it; the process is ending */
    pthread_mutex_lock(&h->lock);
    hasher_jobset_free(h->set);
    h->set = NULL;
    pthread_mutex_unlock(&h->lock);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->work);
    pthread_cond_destroy(&h->hk);
    pthread_cond_destroy(&h->nap);
    pthread_cond_destroy(&h->sv);
    hashstore_free(h->store);
    if (h->dirfd >= 0)
        close(h->dirfd);
    free(h->state_file);
    free(h->running);
    free(h->is_running);
    free(h->urgent_run);
    free(h->drop_run);
    free(h->held_run);
    free(h->held);
    free(h->workers);
    free(h);
}
