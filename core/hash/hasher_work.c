/* hasher_work: the hasher's threads on its job table (hasher_int.h): the
 * workers that hash files, the housekeeper that retries, expires waiters
 * and asks for saves, and the saver (design in hasher.h).
 *
 * Someone waiting: while any queued job is wanted (h->urgent_queued), the
 * byte-rate limit is lifted for everyone, so the workers free up quickly,
 * and a background job with more than about a second of reading left
 * yields (it goes back to the front of the queue with what it has hashed,
 * and resumes at that offset) so a wanted file never waits behind a 100 GB
 * shard. A job that is wanted while it runs is
 * told so through its worker's urgent flag, and one that a reload dropped
 * (the file changed or left) through its drop flag: it stops at once. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hashfile.h"
#include "hasher_int.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

#define NS 1000000000ull
#define RETRY_MAX_NS (10 * NS) /* the longest wait before another try */
#define RETRY_MIN_NS (NS / 100)
#define YIELD_NS NS            /* reading left beyond which a background job yields */

enum outcome {
    OUT_OK,      /* e holds the hashes of the identity */
    OUT_RETRY,   /* too fresh to trust, or no descriptor to be had: later */
    OUT_YIELD,   /* made way for a wanted file: resumed later where it stopped */
    OUT_CHANGED, /* not the identity the snapshot saw, or it changed while read */
    OUT_ERROR,   /* a read error (errno) */
    OUT_STOPPED,
};

/* A deadline in ns as a timespec: CLOCK_MONOTONIC for the conditions (see
 * hasher_new), CLOCK_REALTIME for pthread_timedjoin_np. */
static struct timespec ts_of(uint64_t ns)
{
    return (struct timespec){.tv_sec = (time_t)(ns / NS), .tv_nsec = (long)(ns % NS)};
}

struct pace_ctx {
    struct hasher *h;
    unsigned worker;
    uint64_t size, done; /* bytes of the file / handed to pread so far */
    int yielded;
};

/* Before each block: stop on shutdown, yield to wanted files, count
 * progress, and keep background hashing to max_bytes_per_second over all
 * workers together (each block takes the next slot of a shared clock). */
static int pace(void *arg, size_t n)
{
    struct pace_ctx *c = arg;
    struct hasher *h = c->h;
    if (atomic_load(&h->stopping))
        return 1;
    if (atomic_load(&h->drop_run[c->worker]) || atomic_load(&h->held_run[c->worker])) {
        /* the job is gone (its finish finds nothing to update), or another
         * reader holds the file: resumed where it stopped once released */
        c->yielded = 1;
        return 1;
    }
    int wanted = atomic_load(&h->urgent_run[c->worker]);
    if (!wanted && atomic_load(&h->urgent_queued) > 0) {
        double rate = (double)atomic_load(&h->rate_bps);
        if ((double)(c->size - c->done) > rate * (double)YIELD_NS / 1e9) {
            c->yielded = 1;
            return 1;
        }
    }
    c->done += n;
    metrics_hash_progress(n, 0, 0);
    if (wanted || atomic_load(&h->urgent_queued) > 0 || h->o.max_bytes_per_second == 0)
        return 0;
    pthread_mutex_lock(&h->lock);
    uint64_t now = time_mono_ns();
    uint64_t start = h->pace_next_ns > now ? h->pace_next_ns : now;
    h->pace_next_ns = start + (uint64_t)((double)n * 1e9 / (double)h->o.max_bytes_per_second);
    struct timespec ts = ts_of(start);
    while (!atomic_load(&h->stopping) && !atomic_load(&h->urgent_queued) &&
           !atomic_load(&h->urgent_run[c->worker]) && !atomic_load(&h->drop_run[c->worker]) &&
           !atomic_load(&h->held_run[c->worker]) &&
           time_mono_ns() < start)
        pthread_cond_timedwait(&h->nap, &h->lock, &ts);
    pthread_mutex_unlock(&h->lock);
    return atomic_load(&h->stopping);
}

/* CLOCK_REALTIME ns, ms from now: the clock ctimes and thread joins use. */
static uint64_t real_ns_after(unsigned ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec + (uint64_t)ms * 1000000u;
}

/* Hashes fd, which should be `want`, into *e, going on from *pass when a
 * yielded job left one (else starting one there). *pass stays set only
 * after OUT_YIELD. *retry_at gets when to try again after OUT_RETRY. */
static enum outcome hash_one(struct hasher *h, unsigned worker, int fd, const struct hash_id *want,
                             void *buf, struct hash_entry *e, uint64_t *retry_at,
                             struct digest_pass **pass)
{
    struct stat sb;
    struct hash_id before, after;
    struct digest_result d;
    int64_t t0 = (int64_t)real_ns_after(0);
    if (fstat(fd, &sb) != 0)
        return OUT_ERROR;
    hash_id_from_sys_stat(&sb, &before);
    if (!hash_id_equal(&before, want))
        return OUT_CHANGED;
    /* A change in the same timestamp tick as the ctime we saw would leave
     * the identity as it is: such a file is read only once that tick is
     * safely past. A resumed pass was past it when it started, and any
     * write since would have moved the identity. */
    int64_t racy = (int64_t)(h->o.racy_ns ? h->o.racy_ns : HASHER_RACY_NS);
    if (!*pass && before.ctime_ns > t0 - racy) {
        uint64_t wait = (uint64_t)(before.ctime_ns - (t0 - racy));
        wait = wait > RETRY_MAX_NS ? RETRY_MAX_NS : wait < RETRY_MIN_NS ? RETRY_MIN_NS : wait;
        *retry_at = time_mono_ns() + wait;
        return OUT_RETRY;
    }
    if (!*pass && !(*pass = digest_pass_new(before.size))) {
        errno = EOVERFLOW;
        return OUT_ERROR;
    }
    struct pace_ctx pc = {.h = h, .worker = worker, .size = before.size,
                          .done = digest_pass_offset(*pass)};
    int rc = digest_pass_run(*pass, fd, buf, HASHER_BLOCK, pace, &pc);
    if (rc == -ECANCELED)
        return pc.yielded ? OUT_YIELD : OUT_STOPPED;
    if (rc == -ENODATA)
        return OUT_CHANGED; /* truncated under us */
    if (rc != 0) {
        errno = -rc;
        return OUT_ERROR;
    }
    if (fstat(fd, &sb) != 0)
        return OUT_ERROR;
    hash_id_from_sys_stat(&sb, &after);
    if (!hash_id_equal(&before, &after))
        return OUT_CHANGED;
    digest_pass_final(*pass, &d);
    *pass = NULL;
    *e = (struct hash_entry){.id = before, .has_git_sha1 = (uint8_t)d.has_git_sha1};
    memcpy(e->sha256, d.sha256, sizeof(e->sha256));
    memcpy(e->git_sha1, d.git_sha1, sizeof(e->git_sha1));
    return OUT_OK;
}

/* Records a worker's outcome for id (caller holds the lock). The job is
 * looked up by identity in the current set: a reload while it ran may have
 * replaced the set, and the new one may still have it. */
static void do_finish(struct hasher *h, const struct hash_id *id, enum outcome out,
                      const struct hash_entry *e, uint64_t retry_at, struct digest_pass *pass,
                      struct hwait **fire)
{
    struct jobset *set = h->set;
    struct job *j = hasher_find_job(h, set, id);
    if (!j || j->state != JOB_RUNNING) {
        digest_pass_free(pass);
        return;
    }
    if (out == OUT_YIELD || out == OUT_STOPPED) {
        j->state = JOB_QUEUED;
        digest_pass_free(j->partial);
        j->partial = pass; /* resumed from there */
        hasher_ready_push_front(set, j);
        return;
    }
    digest_pass_free(pass);
    if (out == OUT_RETRY && ++j->attempts < HASHER_MAX_ATTEMPTS) {
        j->state = JOB_DELAYED;
        j->not_before_ns = retry_at;
        set->n_delayed++;
        pthread_cond_signal(&h->hk);
        return;
    }
    set->n_open--;
    h->bytes_pending -= j->id.size;
    if (out == OUT_OK) {
        j->state = JOB_DONE;
        hasher_publish(j->f, e);
        for (size_t i = 0; i < j->n_same; i++)
            hasher_publish(j->same[i], e);
        h->files_known++;
        h->bytes_known += j->id.size;
        hasher_do_finish_waits(h, j, HASHER_DONE, fire);
    } else {
        j->state = JOB_FAILED;
        h->files_failed++;
        hasher_do_finish_waits(h, j, HASHER_FAILED, fire);
    }
}

/* Hashes without the lock; returns the outcome and fills *e (*pass: see
 * hash_one). */
static enum outcome run_job(struct hasher *h, unsigned me, int fd, const struct hash_id *id,
                            uint64_t epoch, void *buf, struct hash_entry *e, uint64_t *retry_at,
                            struct digest_pass **pass)
{
    uint64_t t0 = time_mono_ns();
    *retry_at = t0 + NS;
    enum outcome out = fd < 0 ? OUT_RETRY : hash_one(h, me, fd, id, buf, e, retry_at, pass);
    int err = errno;
    if (out == OUT_OK && hashstore_put(h->store, e, epoch) != 0) {
        out = OUT_ERROR;
        err = ENOSPC;
    }
    if (out == OUT_OK) {
        double secs = (double)(time_mono_ns() - t0) / 1e9;
        if (id->size >= (1u << 20) && secs > 0) /* small files say little about throughput */
            atomic_store(&h->rate_bps, (uint64_t)((double)atomic_load(&h->rate_bps) * 0.7 +
                                                  (double)id->size / secs * 0.3));
        metrics_hash_progress(0, 1, 0);
    } else if (out == OUT_ERROR) {
        metrics_hash_progress(0, 0, 1);
        log_msg(LOG_WARN, "content hash: inode %llu on device %llu: %s",
                (unsigned long long)id->ino, (unsigned long long)id->dev, strerror(err));
    }
    return out;
}

/* The worker's own descriptor of job j's file: the snapshot may be freed
 * while it reads. A file the snapshot does not keep open is opened again
 * below the root, as an answer would (the same version, or nothing). Called
 * without the hasher's lock, holding a reference to the snapshot that has j:
 * an open can wait on a slow or hung file system, and hasher_want and
 * hasher_progress (HTTP threads) take that lock. */
static int job_fd(const struct reg_file *f, const struct reg_root *root)
{
    return f->fd >= 0 ? fcntl(f->fd, F_DUPFD_CLOEXEC, 0) : reg_open_below(root, f, O_RDONLY);
}

static void *worker_main(void *arg)
{
    struct hasher *h = ((void **)arg)[0];
    unsigned me = (unsigned)(uintptr_t)((void **)arg)[1];
    free(arg);
    void *buf = xmalloc(HASHER_BLOCK);
    pthread_mutex_lock(&h->lock);
    for (;;) {
        struct job *j = NULL;
        int urgent = 0;
        while (!atomic_load(&h->stopping) && !(h->set && (j = hasher_take_job(h, h->set, &urgent))))
            pthread_cond_wait(&h->work, &h->lock);
        if (!j)
            break;
        struct hash_id id = j->id;
        uint64_t epoch = h->epoch, retry_at = 0;
        enum outcome out = OUT_OK;
        struct hash_entry e;
        struct digest_pass *pass = NULL;
        j->state = JOB_RUNNING;
        /* A worker that finished just as a reload built this set may have
         * recorded it already: then there is nothing to read. */
        if (!hashstore_lookup(h->store, &id, &e)) {
            pass = j->partial;
            j->partial = NULL;
            /* An open job's set holds its snapshot; this reference keeps
             * j->f valid for the open after the lock is let go. */
            struct reg_snapshot *snap = reg_snapshot_ref(h->set->snap);
            const struct reg_file *f = j->f;
            const struct reg_root *root = j->root;
            h->running[me] = id;
            h->is_running[me] = 1;
            atomic_store(&h->urgent_run[me], urgent);
            atomic_store(&h->drop_run[me], 0);
            atomic_store(&h->held_run[me], 0);
            pthread_mutex_unlock(&h->lock);
            int fd = job_fd(f, root);
            reg_snapshot_unref(snap);
            out = run_job(h, me, fd, &id, epoch, buf, &e, &retry_at, &pass);
            if (fd >= 0)
                close(fd);
            if (out != OUT_YIELD) {
                digest_pass_free(pass);
                pass = NULL;
            }
            pthread_mutex_lock(&h->lock);
            h->is_running[me] = 0;
            atomic_store(&h->urgent_run[me], 0);
            h->unsaved += out == OUT_OK;
        }
        struct hwait *fire = NULL;
        do_finish(h, &id, out, &e, retry_at, pass, &fire);
        struct reg_snapshot *drop = hasher_do_release_snap(h->set, 0);
        hasher_do_publish(h);
        if (!h->set || h->set->n_open == h->set->n_delayed)
            pthread_cond_signal(&h->hk); /* nothing left to read now: save, or retry later */
        if (fire || drop) {
            pthread_mutex_unlock(&h->lock);
            reg_snapshot_unref(drop);
            hasher_call_fired(h, fire);
            pthread_mutex_lock(&h->lock);
        }
    }
    pthread_mutex_unlock(&h->lock);
    free(buf);
    return NULL;
}

/* Writes the state file (hashfile_save_store): returns 0, -EWOULDBLOCK when
 * another process holds the directory's lock, or another negative errno
 * (warned about once: a read-only state directory stays read-only). */
static int save_store(struct hasher *h, uint64_t epoch)
{
    int rc = hashfile_save_store(h->store, epoch, h->dirfd, HASHFILE_NAME);
    if (rc != 0 && rc != -EWOULDBLOCK && !h->save_warned)
        log_msg(LOG_WARN, "content hashes: cannot save %s: %s; they are kept in memory",
                h->state_file, strerror(-rc));
    h->save_warned = h->save_warned || (rc != 0 && rc != -EWOULDBLOCK);
    return rc;
}

/* Jobs whose retry time came go back to the queue; returns the next retry
 * time or UINT64_MAX (caller holds the lock). */
static uint64_t do_promote(struct hasher *h, uint64_t now)
{
    struct jobset *set = h->set;
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; set && set->n_delayed && i < set->n; i++) {
        struct job *j = &set->jobs[i];
        if (j->state != JOB_DELAYED)
            continue;
        if (j->not_before_ns > now) {
            next = j->not_before_ns < next ? j->not_before_ns : next;
            continue;
        }
        j->state = JOB_QUEUED;
        set->n_delayed--;
        hasher_ready_push(set, j);
        if (j->n_waits)
            hasher_do_prioritize(h, set, j);
        pthread_cond_signal(&h->work);
    }
    return next;
}

static void *housekeeper_main(void *arg)
{
    struct hasher *h = arg;
    uint64_t interval = (uint64_t)(h->o.save_interval_s ? h->o.save_interval_s
                                                        : HASHER_SAVE_INTERVAL_S) * NS;
    uint64_t last_save = time_mono_ns();
    pthread_mutex_lock(&h->lock);
    while (!atomic_load(&h->stopping)) {
        uint64_t now = time_mono_ns();
        struct hwait *fire = NULL;
        uint64_t next = hasher_do_expire(h, now, &fire);
        uint64_t retry = do_promote(h, now);
        next = retry < next ? retry : next;
        int idle = !h->set || h->set->n_open == h->set->n_delayed;
        if (h->unsaved && h->dirfd >= 0 && (idle || now - last_save >= interval)) {
            /* Asked of the saver, never done here: a save can wait on the
             * state directory's lock or its file system, deadlines cannot. */
            h->unsaved = 0;
            h->save_epoch = h->epoch;
            h->save_asked++;
            last_save = now;
            pthread_cond_signal(&h->sv);
        }
        if (fire) {
            pthread_mutex_unlock(&h->lock);
            hasher_call_fired(h, fire);
            pthread_mutex_lock(&h->lock);
            continue;
        }
        if (h->unsaved && h->dirfd >= 0 && last_save + interval < next)
            next = last_save + interval;
        if (next == UINT64_MAX) {
            pthread_cond_wait(&h->hk, &h->lock);
        } else {
            struct timespec ts = ts_of(next);
            pthread_cond_timedwait(&h->hk, &h->lock, &ts);
        }
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

/* The saver: writes the state file whenever the housekeeper (or
 * hasher_stop, last) asks. It only tries the state directory's lock: while
 * another process holds it the save waits HASHER_SAVE_RETRY_MS (doubling)
 * and tries again, and the last save gives up after HASHER_SAVE_WAIT_MS. A
 * save writes without the hasher's lock: a slow disk holds up this thread
 * alone. */
static void *saver_main(void *arg)
{
    struct hasher *h = arg;
    uint64_t retry_at = 0;
    int final_tried = 0;
    unsigned backoff_ms = HASHER_SAVE_RETRY_MS;
    int told = 0;
    pthread_mutex_lock(&h->lock);
    for (;;) {
        uint64_t now = time_mono_ns();
        if (h->save_done == h->save_asked) {
            if (h->save_final)
                break;
            pthread_cond_wait(&h->sv, &h->lock);
            continue;
        }
        if (h->save_final && !final_tried) {
            final_tried = 1;
            retry_at = 0; /* the last save tries at once */
        }
        if (retry_at > now) {
            struct timespec ts = ts_of(retry_at);
            pthread_cond_timedwait(&h->sv, &h->lock, &ts);
            continue;
        }
        uint64_t asked = h->save_asked, epoch = h->save_epoch;
        int final = h->save_final;
        pthread_mutex_unlock(&h->lock);
        int rc = h->dirfd >= 0 ? save_store(h, epoch) : 0;
        pthread_mutex_lock(&h->lock);
        now = time_mono_ns();
        if (rc == -EWOULDBLOCK && (!final || now < h->save_final_until)) {
            if (!told)
                log_msg(LOG_INFO, "content hashes: %s is locked by another process; saving "
                                  "again later", h->state_file);
            told = 1;
            retry_at = now + (uint64_t)(final ? HASHER_FINAL_RETRY_MS : backoff_ms) * 1000000u;
            backoff_ms = backoff_ms * 2 > HASHER_SAVE_RETRY_MAX_MS ? HASHER_SAVE_RETRY_MAX_MS
                                                                   : backoff_ms * 2;
            continue;
        }
        if (rc == -EWOULDBLOCK)
            log_msg(LOG_WARN, "content hashes: %s stayed locked by another process; the hashes "
                              "found since the last save are not saved (they are computed "
                              "again after a restart)", h->state_file);
        else if (rc == 0 && told)
            log_msg(LOG_INFO, "content hashes: saved %s", h->state_file);
        told = rc == -EWOULDBLOCK && told;
        backoff_ms = HASHER_SAVE_RETRY_MS;
        retry_at = 0;
        h->save_done = asked;
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

/* Starts fn(arg) as thread *t, named name. */
static int start(pthread_t *t, void *(*fn)(void *), void *arg, const char *name,
                 struct st_error *err)
{
    int rc = pthread_create(t, NULL, fn, arg);
    if (rc != 0)
        return st_error_errno(err, rc, "content hashes: cannot start a %s thread", name);
    pthread_setname_np(*t, name);
    return 0;
}

int hasher_work_start(struct hasher *h, struct st_error *err)
{
    int rc = 0, keeper = 0;
    unsigned started = 0;
    h->workers = xcalloc(h->n_workers, sizeof(*h->workers));
    while (rc == 0 && started < h->n_workers) {
        void **arg = xmalloc(2 * sizeof(void *));
        arg[0] = h;
        arg[1] = (void *)(uintptr_t)started;
        if ((rc = start(&h->workers[started], worker_main, arg, "tensord-hash", err)) < 0)
            free(arg);
        else
            started++;
    }
    if (rc == 0 && (rc = start(&h->housekeeper, housekeeper_main, h, "tensord-hashkeep", err)) == 0)
        keeper = 1;
    if (rc == 0 && (rc = start(&h->saver, saver_main, h, "tensord-hashsave", err)) == 0)
        return 0;
    /* Undo: what started ends at once, nothing being queued yet. */
    pthread_mutex_lock(&h->lock);
    atomic_store(&h->stopping, 1);
    pthread_cond_broadcast(&h->work);
    pthread_cond_broadcast(&h->hk);
    pthread_mutex_unlock(&h->lock);
    for (unsigned i = 0; i < started; i++)
        pthread_join(h->workers[i], NULL);
    if (keeper)
        pthread_join(h->housekeeper, NULL);
    return rc;
}

/* Joins t unless it is still running at deadline (CLOCK_REALTIME ns): then
 * it is left to itself and counted in threads_left. A thread stuck in a
 * read or a save on a hung file system must not keep the daemon from
 * stopping. */
static void join_by(struct hasher *h, pthread_t t, uint64_t deadline)
{
    struct timespec ts = ts_of(deadline);
    if (pthread_timedjoin_np(t, NULL, &ts) == 0)
        return;
    pthread_detach(t);
    h->threads_left++;
}

void hasher_work_join(struct hasher *h)
{
    uint64_t deadline = real_ns_after(HASHER_STOP_MS);
    for (unsigned i = 0; i < h->n_workers; i++)
        join_by(h, h->workers[i], deadline);
    join_by(h, h->housekeeper, deadline);
}

void hasher_work_last_save(struct hasher *h)
{
    pthread_mutex_lock(&h->lock);
    h->save_epoch = h->epoch;
    h->save_asked++;
    h->save_final = 1;
    h->save_final_until = time_mono_ns() + (uint64_t)HASHER_SAVE_WAIT_MS * 1000000u;
    pthread_cond_signal(&h->sv);
    pthread_mutex_unlock(&h->lock);
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
