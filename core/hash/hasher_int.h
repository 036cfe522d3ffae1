/* hasher_int: what the hasher's files share (not part of the API): the
 * state (struct hasher), the job and waiter structures, and the functions
 * of each part, which call one way down:
 *   hasher.c (life, submit) -> hasher_work.c (threads) -> hasher_jobs.c
 *   hasher.c -> hasher_jobs.c <- hasher_wait.c (lookup, want, wait)
 * hasher_jobs.c, the job table at the bottom, calls none of the others.
 *
 * Locking: one mutex (struct hasher.lock) guards the job set, the waiters
 * and the counters; functions named hasher_do_* expect the caller to hold
 * it. A worker holds it only to take a job (and dup its descriptor) and to
 * record the result; it hashes without it. The store has its own lock,
 * taken after this one or alone, so request threads' lookups never wait
 * behind the hasher's bookkeeping. */
#ifndef TENSORD_HASHER_INT_H
#define TENSORD_HASHER_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "digest.h"
#include "hasher.h"

#define HASHER_BLOCK DIGEST_BLOCK /* each worker's read buffer */

enum job_state { JOB_QUEUED, JOB_DELAYED, JOB_RUNNING, JOB_DONE, JOB_FAILED };

/* Someone waiting for files (hasher_want). Guarded by the hasher's lock. */
struct hwait {
    hasher_cb cb;
    void *arg;
    size_t remaining;        /* links still to finish */
    uint64_t deadline_ns;    /* monotonic */
    int fired;
    enum hasher_result result;
    unsigned refs;           /* job links + 1 while live or about to be called */
    struct hwait *prev, *next; /* the live list */
    struct hwait *fire_next;   /* the list of callbacks to make */
};

/* One distinct identity of a snapshot. */
struct job {
    struct hash_id id;
    const struct reg_file *f;  /* in the set's snapshot; valid while set->snap is held */
    const struct reg_root *root; /* the root f's model or repo opens it below (when f is not
                                  * kept open) */
    const struct reg_file **same; /* other files of the snapshot with this identity (links) */
    size_t n_same;
    enum job_state state;
    uint8_t in_ready, in_urgent; /* an index of it sits in that queue */
    uint8_t set_aside;         /* queued, but held (hasher_hold): in no queue until released */
    uint8_t was_urgent;        /* ... and wanted when it was set aside */
    uint8_t urgent_live;       /* counted in urgent_queued: wanted and still queued */
    unsigned attempts;
    uint64_t not_before_ns;    /* JOB_DELAYED: when to try again (monotonic) */
    struct hwait **waits;      /* waiters linked to this job */
    size_t n_waits, cap_waits;
    struct digest_pass *partial; /* what it hashed before it yielded (owned), resumed from
                                  * there by the next worker; NULL when it never ran */
};

/* The jobs of one snapshot. */
struct jobset {
    struct reg_snapshot *snap; /* held while n_open > 0 */
    struct job *jobs;
    size_t n;
    uint32_t *index;           /* identity -> job, open addressing; index_cap a power of two */
    size_t index_cap;
    uint32_t *ready;           /* ring of job numbers in hashing order */
    size_t ready_head, ready_n;
    uint32_t *urgent;          /* stack of job numbers someone waits for */
    size_t n_urgent;
    size_t n_open, n_delayed;  /* jobs queued, delayed or running / delayed */
};

/* Makes e the hashes of file f (reg_file_set_hashes), where requests read
 * them without a lock. */
void hasher_publish(const struct reg_file *f, const struct hash_entry *e);

struct hasher {
    struct hasher_opts o;
    char *state_file;          /* for messages; NULL when memory only */
    int dirfd;                 /* the state directory, or -1 */
    struct hashstore *store;
    uint64_t seed;

    pthread_mutex_t lock;      /* everything below */
    pthread_cond_t work;       /* workers: a job is ready, or stop */
    pthread_cond_t hk;         /* housekeeper: a deadline, a delay or a save to look at */
    pthread_cond_t nap;        /* paced workers sleep on it; broadcast on stop */
    pthread_cond_t sv;         /* the saver: a save is asked for, or stop */
    atomic_int stopping;
    int stopped;
    struct jobset *set;        /* the latest snapshot's jobs, or NULL */
    uint64_t epoch;            /* submits so far: marks the store entries in use */
    struct hwait *waiters;     /* live waiters */
    struct hash_id *running;   /* per worker: the identity it hashes */
    uint8_t *is_running;
    atomic_int *urgent_run;    /* per worker: someone waits for the file it hashes */
    atomic_int *drop_run;      /* per worker: a reload dropped the file it hashes */
    atomic_int *held_run;      /* per worker: another reader holds the file it hashes */
    struct hash_id *held;      /* identities held (hasher_hold), one entry per hold of each */
    size_t n_held, cap_held;
    atomic_size_t urgent_queued; /* wanted jobs still queued: pacing is lifted meanwhile */
    uint64_t files, bytes, files_known, bytes_known, files_failed, bytes_pending;
    uint64_t unsaved;          /* results recorded since the last save */
    uint64_t pace_next_ns;     /* pacing: when the next block may be read */
    _Atomic uint64_t rate_bps; /* recent hashing rate (moving average) */
    /* Saves are the saver thread's (hasher_work.c): the housekeeper
     * asks, and never waits for the state directory. */
    uint64_t save_asked;       /* saves asked for so far */
    uint64_t save_done;        /* ... of them the saver has finished (or given up) */
    uint64_t save_epoch;       /* the epoch whose entries the latest ask keeps */
    int save_final;            /* hasher_stop's last save: the saver exits after it */
    uint64_t save_final_until; /* ... which gives up on a locked directory then (monotonic) */
    int save_warned;
    unsigned n_workers;
    pthread_t *workers, housekeeper, saver;
    int threads_left;          /* threads that had not ended when hasher_stop gave up on them
                                * (a hung file system): the hasher is then never freed */
};

/* ---- the job table (hasher_jobs.c) ---- */
/* The jobs of snap: every distinct identity, known ones DONE (and marked as
 * used by epoch in the store), the rest queued in snapshot order. Built
 * without the lock: it reads only the snapshot and the store. */
struct jobset *hasher_jobset_new(struct hasher *h, struct reg_snapshot *snap, uint64_t epoch);
/* Frees set, dropping its jobs' links to waiters (caller holds the lock). */
void hasher_jobset_free(struct jobset *set);
struct job *hasher_find_job(const struct hasher *h, const struct jobset *set,
                            const struct hash_id *id);
/* Moves a queued job to the front; a running one stops being paced. */
void hasher_do_prioritize(struct hasher *h, struct jobset *set, struct job *j);
void hasher_ready_push(struct jobset *set, struct job *j);
/* Puts j first in the queue (a job that yielded resumes before new ones
 * start, so few passes wait half-done). */
void hasher_ready_push_front(struct jobset *set, struct job *j);
/* The next queued job, wanted ones first (*urgent says which), or NULL.
 * A job whose file is held is set aside instead (hasher_do_unhold). */
struct job *hasher_take_job(struct hasher *h, struct jobset *set, int *urgent);
/* Whether id is held by another reader (hasher_hold). */
int hasher_do_held(const struct hasher *h, const struct hash_id *id);
/* Queues again, first, the jobs set aside whose files are no longer held. */
void hasher_do_unhold(struct hasher *h, struct jobset *set);
void hasher_do_publish(struct hasher *h);
/* Takes the set's snapshot (and every job's pointer into it) away when no
 * job needs it any more, or always: the caller unrefs what it returns
 * (NULL for none) after releasing the lock. */
struct reg_snapshot *hasher_do_release_snap(struct jobset *set, int always);

/* ---- the waiters linked to jobs; the caller holds the lock ---- */
/* A job finished (DONE: one link less per waiter; otherwise the waiters fail
 * with r) and drops its links. */
void hasher_do_finish_waits(struct hasher *h, struct job *j, enum hasher_result r,
                            struct hwait **fire);
/* Fires waiters whose deadline passed; returns the next deadline or UINT64_MAX. */
uint64_t hasher_do_expire(struct hasher *h, uint64_t now, struct hwait **fire);
void hasher_do_fire_all(struct hasher *h, enum hasher_result r, struct hwait **fire);
/* Makes the callbacks of fire, then drops their references (takes the
 * lock for that: call it without). */
void hasher_call_fired(struct hasher *h, struct hwait *fire);
/* Drops one reference (caller holds the lock). */
void hasher_do_release(struct hwait *w);

/* ---- the threads (hasher_work.c): the workers, the housekeeper
 * (retries, waiters' deadlines, asking for saves) and the saver (writes
 * the state file, only trying its lock) ---- */
/* Starts h's n_workers workers, the housekeeper and the saver. Returns 0,
 * or -errno with err when a thread cannot start (those started are stopped
 * and joined again). */
int hasher_work_start(struct hasher *h, struct st_error *err);
/* After h->stopping is set: joins the workers (they stop at their next
 * block) and the housekeeper within HASHER_STOP_MS; one that has not ended
 * by then is left to itself and counted in h->threads_left. */
void hasher_work_join(struct hasher *h);
/* Asks the saver for the last save, which gives up on a locked directory
 * after HASHER_SAVE_WAIT_MS, and joins it within HASHER_STUCK_MS more. */
void hasher_work_last_save(struct hasher *h);

#endif
