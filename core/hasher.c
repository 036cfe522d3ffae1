/* hasher: job sets, the API and the hasher's life (design in hasher.h;
 * hasher_work.c has the threads, hasher_wait.c the waiters).
 *
 * Locking: one mutex guards the job set, the waiters and the counters. A
 * worker holds it only to take a job (and dup its descriptor) and to record
 * the result; it hashes without it. The store has its own lock, taken
 * after this one or alone, so request threads' lookups never wait behind
 * the hasher's bookkeeping. */
#include "hasher_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "digest.h"
#include "hashfile.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

#define NS 1000000000ull

void hasher_deadline_ts(uint64_t mono_ns, struct timespec *ts)
{
    /* The conditions use CLOCK_MONOTONIC (see hasher_new). */
    ts->tv_sec = (time_t)(mono_ns / NS);
    ts->tv_nsec = (long)(mono_ns % NS);
}

/* ---- job sets ----------------------------------------------------------- */

static size_t id_slot(const struct hasher *h, const struct hash_id *id, size_t cap)
{
    uint64_t f[5] = {id->dev, id->ino, id->size, (uint64_t)id->mtime_ns, (uint64_t)id->ctime_ns};
    return (size_t)hash_fnv1a(f, sizeof(f), h->seed) & (cap - 1);
}

struct job *hasher_find_job(const struct hasher *h, const struct jobset *set,
                            const struct hash_id *id)
{
    if (!set || !set->index_cap)
        return NULL;
    for (size_t i = id_slot(h, id, set->index_cap);; i = (i + 1) & (set->index_cap - 1)) {
        if (set->index[i] == UINT32_MAX)
            return NULL;
        struct job *j = &set->jobs[set->index[i]];
        if (hash_id_equal(&j->id, id))
            return j;
    }
}

void hasher_ready_push(struct jobset *set, struct job *j)
{
    if (j->in_ready)
        return;
    set->ready[(set->ready_head + set->ready_n++) % set->n] = (uint32_t)(j - set->jobs);
    j->in_ready = 1;
}

void hasher_ready_push_front(struct jobset *set, struct job *j)
{
    if (j->in_ready)
        return;
    set->ready_head = (set->ready_head + set->n - 1) % set->n;
    set->ready[set->ready_head] = (uint32_t)(j - set->jobs);
    set->ready_n++;
    j->in_ready = 1;
}

void hasher_do_prioritize(struct hasher *h, struct jobset *set, struct job *j)
{
    if (j->state == JOB_RUNNING) {
        for (unsigned w = 0; w < h->n_workers; w++)
            if (h->is_running[w] && hash_id_equal(&h->running[w], &j->id))
                atomic_store(&h->urgent_run[w], 1);
        pthread_cond_broadcast(&h->nap);
        return;
    }
    if (j->state != JOB_QUEUED || j->urgent_live)
        return;
    j->urgent_live = 1;
    atomic_fetch_add(&h->urgent_queued, 1);
    pthread_cond_broadcast(&h->nap); /* paced workers: stop sleeping */
    if (!j->in_urgent) {
        set->urgent[set->n_urgent++] = (uint32_t)(j - set->jobs);
        j->in_urgent = 1;
    }
}

static struct job *do_taken(struct hasher *h, struct job *j)
{
    if (j->urgent_live) {
        j->urgent_live = 0;
        atomic_fetch_sub(&h->urgent_queued, 1);
    }
    return j;
}

struct job *hasher_take_job(struct hasher *h, struct jobset *set, int *urgent)
{
    while (set->n_urgent) {
        struct job *j = &set->jobs[set->urgent[--set->n_urgent]];
        j->in_urgent = 0;
        if (j->state == JOB_QUEUED) {
            *urgent = 1;
            return do_taken(h, j);
        }
    }
    while (set->ready_n) {
        struct job *j = &set->jobs[set->ready[set->ready_head]];
        set->ready_head = (set->ready_head + 1) % set->n;
        set->ready_n--;
        j->in_ready = 0;
        if (j->state == JOB_QUEUED) {
            *urgent = j->urgent_live;
            return do_taken(h, j);
        }
    }
    return NULL;
}

/* Adds file f (of a model or repo built in root) to set: a new job, or one
 * more file with the identity of a job already listed. */
static void jobset_add(struct hasher *h, struct jobset *set, uint64_t epoch,
                       const struct reg_root *root, const struct reg_file *f)
{
    struct hash_id id;
    struct hash_entry e;
    if (f->error.code != ST_OK && f->fd < 0)
        return; /* it could not be opened */
    hash_id_from_stat(&f->st, &id);
    struct job *j = hasher_find_job(h, set, &id);
    if (j) { /* a hard link, a symlink, or a repo's view of a model's file */
        j->same = xrealloc(j->same, (j->n_same + 1) * sizeof(*j->same));
        j->same[j->n_same++] = f;
        if (j->state == JOB_DONE && hashstore_lookup(h->store, &id, &e))
            hasher_publish(f, &e);
        return;
    }
    size_t k = id_slot(h, &id, set->index_cap);
    while (set->index[k] != UINT32_MAX)
        k = (k + 1) & (set->index_cap - 1);
    set->index[k] = (uint32_t)set->n;
    j = &set->jobs[set->n++];
    j->id = id;
    j->f = f;
    j->root = root;
    j->state = hashstore_touch(h->store, &id, epoch, &e) ? JOB_DONE : JOB_QUEUED;
    if (j->state == JOB_DONE)
        hasher_publish(f, &e);
}

/* The set of snap's distinct identities: known ones DONE (and marked as used
 * by epoch in the store), the rest QUEUED in snapshot order. The models'
 * files come first, so a job reads through a descriptor the model keeps
 * open where it has one; a repo's files add to their jobs. */
static struct jobset *jobset_new(struct hasher *h, struct reg_snapshot *snap, uint64_t epoch)
{
    struct jobset *set = xcalloc(1, sizeof(*set));
    size_t total = snap->n_files + snap->n_repo_files, cap = 1;
    while (cap < 2 * (total + 1))
        cap *= 2;
    set->jobs = xcalloc(total ? total : 1, sizeof(*set->jobs));
    set->index = xmalloc(cap * sizeof(*set->index));
    memset(set->index, 0xff, cap * sizeof(*set->index));
    set->index_cap = cap;
    for (size_t m = 0; m < snap->n_models; m++)
        for (size_t i = 0; i < snap->models[m]->n_files; i++)
            jobset_add(h, set, epoch, snap->models[m]->root, &snap->models[m]->files[i]);
    for (size_t r = 0; r < snap->n_repos; r++)
        for (size_t i = 0; i < snap->repos[r]->n_files; i++)
            jobset_add(h, set, epoch, snap->repos[r]->root, &snap->repos[r]->files[i]);
    set->ready = xmalloc((set->n ? set->n : 1) * sizeof(*set->ready));
    set->urgent = xmalloc((set->n ? set->n : 1) * sizeof(*set->urgent));
    for (size_t i = 0; i < set->n; i++)
        if (set->jobs[i].state == JOB_QUEUED) {
            hasher_ready_push(set, &set->jobs[i]);
            set->n_open++;
        }
    return set;
}

static void jobset_free(struct jobset *set)
{
    if (!set)
        return;
    for (size_t i = 0; i < set->n; i++) {
        for (size_t k = 0; k < set->jobs[i].n_waits; k++)
            hasher_do_release(set->jobs[i].waits[k]);
        free(set->jobs[i].waits);
        free(set->jobs[i].same);
        digest_pass_free(set->jobs[i].partial);
    }
    free(set->jobs);
    free(set->index);
    free(set->ready);
    free(set->urgent);
    free(set);
}

void hasher_do_publish(struct hasher *h)
{
    metrics_set_hashing(h->set ? h->set->n_open : 0, h->bytes_pending, h->files_known, h->files);
}

struct reg_snapshot *hasher_do_maybe_release(struct jobset *set)
{
    if (!set || set->n_open || !set->snap)
        return NULL;
    struct reg_snapshot *r = set->snap;
    set->snap = NULL;
    for (size_t i = 0; i < set->n; i++)
        set->jobs[i].f = NULL;
    return r;
}

/* ---- the API ---------------------------------------------------------------- */

void hasher_submit(struct hasher *h, struct reg_snapshot *snap)
{
    pthread_mutex_lock(&h->lock);
    uint64_t epoch = ++h->epoch;
    int stopped = h->stopped;
    pthread_mutex_unlock(&h->lock);
    if (stopped || !snap)
        return;
    /* Built without the lock: it only reads the snapshot and the store. */
    struct jobset *set = jobset_new(h, snap, epoch);
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
    jobset_free(old);
    pthread_mutex_unlock(&h->lock);
    log_msg(LOG_INFO, "content hashes: %zu of %zu files known, %zu to hash", n - n_open, n,
            n_open);
}

void hasher_publish(const struct reg_file *f, const struct hash_entry *e)
{
    reg_file_set_hashes(f, e->sha256, e->has_git_sha1 ? e->git_sha1 : NULL);
}

int hasher_lookup(struct hasher *h, const struct reg_file *f, struct hash_entry *out)
{
    struct hash_id id;
    if (!h || (f->error.code != ST_OK && f->fd < 0))
        return 0;
    hash_id_from_stat(&f->st, &id);
    return hashstore_lookup(h->store, &id, out);
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
    p->store_entries = hashstore_count(h->store);
}

/* mkdir -p with 0700 for what it creates (XDG's rule for state). */
static int make_dirs(const char *path)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return -errno;
        *p = c;
        if (!c)
            return 0;
    }
}

static void open_state(struct hasher *h, const char *dir)
{
    struct st_error err;
    int rc = make_dirs(dir);
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

struct hasher *hasher_new(const struct hasher_opts *o)
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
    h->workers = xcalloc(h->n_workers, sizeof(*h->workers));
    for (unsigned i = 0; i < h->n_workers; i++) {
        void **arg = xmalloc(2 * sizeof(void *));
        arg[0] = h;
        arg[1] = (void *)(uintptr_t)i;
        if (pthread_create(&h->workers[i], NULL, hasher_worker_main, arg) != 0) {
            fprintf(stderr, "tensord: cannot start a hashing thread\n");
            abort();
        }
        pthread_setname_np(h->workers[i], "tensord-hash");
    }
    if (pthread_create(&h->housekeeper, NULL, hasher_housekeeper_main, h) != 0) {
        fprintf(stderr, "tensord: cannot start the hashing housekeeper\n");
        abort();
    }
    pthread_setname_np(h->housekeeper, "tensord-hashkeep");
    if (pthread_create(&h->saver, NULL, hasher_saver_main, h) != 0) {
        fprintf(stderr, "tensord: cannot start the hash saver\n");
        abort();
    }
    pthread_setname_np(h->saver, "tensord-hashsave");
    return h;
}

/* Joins t unless it is still running at deadline (CLOCK_REALTIME ns): then
 * it is left to itself and counted in threads_left. A thread stuck in a
 * read or a save on a hung file system must not keep the daemon from
 * stopping. */
static void join_by(struct hasher *h, pthread_t t, uint64_t deadline)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline / NS), .tv_nsec = (long)(deadline % NS)};
    if (pthread_timedjoin_np(t, NULL, &ts) == 0)
        return;
    pthread_detach(t);
    h->threads_left++;
}

static uint64_t real_ns_after(unsigned ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec + (uint64_t)ms * 1000000u;
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
    /* Workers stop at their next block, the housekeeper at once. */
    uint64_t deadline = real_ns_after(HASHER_STOP_MS);
    for (unsigned i = 0; i < h->n_workers; i++)
        join_by(h, h->workers[i], deadline);
    join_by(h, h->housekeeper, deadline);
    struct hwait *fire = NULL;
    pthread_mutex_lock(&h->lock);
    hasher_do_fire_all(h, HASHER_STOPPED, &fire);
    struct reg_snapshot *drop = NULL;
    if (h->set && !h->threads_left) { /* a worker left running may still read from it */
        drop = h->set->snap;
        h->set->snap = NULL;
        for (size_t i = 0; i < h->set->n; i++)
            h->set->jobs[i].f = NULL;
    }
    /* The last save, on the saver's thread; it exits after it. */
    h->save_epoch = h->epoch;
    h->save_asked++;
    h->save_final = 1;
    h->save_final_until = time_mono_ns() + (uint64_t)HASHER_SAVE_WAIT_MS * 1000000u;
    pthread_cond_signal(&h->sv);
    pthread_mutex_unlock(&h->lock);
    hasher_call_fired(h, fire);
    reg_snapshot_unref(drop);
    /* The saver gives up on a locked directory at save_final_until; well
     * past that (a loaded machine can be late by a lot) it is stuck in the
     * file system. */
    join_by(h, h->saver, real_ns_after(HASHER_SAVE_WAIT_MS + HASHER_STUCK_MS));
    if (h->threads_left)
        log_msg(LOG_WARN, "content hashes: %d hashing thread%s did not stop within %u ms (a "
                          "file system not answering?); stopping without them",
                h->threads_left, h->threads_left == 1 ? "" : "s",
                HASHER_STOP_MS + HASHER_SAVE_WAIT_MS + HASHER_STUCK_MS);
}

void hasher_free(struct hasher *h)
{
    if (!h)
        return;
    hasher_stop(h);
    if (h->threads_left)
        return; /* a thread still uses it; the process is ending */
    pthread_mutex_lock(&h->lock);
    jobset_free(h->set);
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
    free(h->workers);
    free(h);
}
