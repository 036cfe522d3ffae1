/* hasher: the background SHA-256 of every served file.
 *
 * After each scan the daemon hands the new snapshot to hasher_submit. Every
 * file whose identity (hashstore.h) has no known hash becomes a job; a
 * small pool of threads hashes the jobs in snapshot order with pread into a
 * fixed buffer each (digest.h), optionally paced to a byte rate, and records
 * the results in the store, which is saved to the state directory when the
 * queue runs dry and every HASHER_SAVE_INTERVAL_S while it does not. A
 * restart or reload therefore hashes only what changed. Nothing here runs on
 * an HTTP thread, and nothing a request thread calls waits for I/O: no file
 * is opened, read or written under the lock that hasher_want and
 * hasher_progress take. Saves run on their own thread, which only tries the
 * state directory's lock and comes back later when another process holds
 * it, so the deadlines of waiters (the housekeeper's) fire on time whatever
 * a save does, and hasher_stop returns within a bounded time.
 *
 * A background job that yields to a wanted file (below) keeps what it has
 * hashed (its digest contexts and offset) and resumes there.
 *
 * A hash is recorded only when the bytes read were one version of the file:
 * the identity is taken before the first read and compared after the last,
 * and a file whose ctime is within HASHER_RACY_NS of that first look is
 * hashed later instead, because a change inside the same timestamp tick
 * could otherwise go unseen (git's "racily clean" problem).
 *
 * Snapshots: the hasher keeps a reference to the latest snapshot only while
 * some of its files still wait to be hashed, and a worker hashes through its
 * own dup of the file's descriptor, so a reload frees the old snapshot at
 * once and a finished queue pins none.
 *
 * Waiting for a hash (for routes that must not answer without one, issue
 * 13): hasher_lookup never blocks; hasher_want moves files to the front of
 * the queue and calls back once when they are hashed, one fails, or a
 * deadline passes, so an HTTP handler can suspend its connection and resume
 * it from the callback instead of holding a worker thread; hasher_retry_after
 * estimates a Retry-After for a 503 instead. The two combine: wait a bounded
 * time (a wanted file is read unpaced and a background job with more than a
 * second left makes way for it), then answer 503 with Retry-After. A bare 503
 * would fail huggingface_hub's first download, whose metadata HEAD does not
 * retry 5xx and falls back to a local cache that is empty. */
#ifndef TENSORD_HASHER_H
#define TENSORD_HASHER_H

#include <stddef.h>
#include <stdint.h>

#include "hashstore.h"
#include "registry.h"
#include "st_error.h"

/* A ctime this close to the first look (or after it) makes a file wait:
 * more than the coarsest timestamp granularity Linux file systems use (1 s)
 * plus a clock tick. */
#define HASHER_RACY_NS 2000000000ull
/* How often a long hashing run saves what it has so far. */
#define HASHER_SAVE_INTERVAL_S 30
/* Tries per file (a file that keeps changing, or whose ctime is in the
 * future) before it counts as failed until the next scan. */
#define HASHER_MAX_ATTEMPTS 10
#define HASHER_MAX_THREADS 64
/* hasher_stop waits HASHER_STOP_MS for the workers and the housekeeper,
 * then for the last save, which gives up on a locked state directory after
 * HASHER_SAVE_WAIT_MS; a thread that has not ended HASHER_STUCK_MS after
 * that is stuck on a file system that does not answer, and the stop goes
 * on without it. */
#define HASHER_STOP_MS 5000
#define HASHER_SAVE_WAIT_MS 2000
#define HASHER_STUCK_MS 3000
/* A save that finds the state directory locked by another process (another
 * tensord sharing it, `tensord verify`) tries again after this long,
 * doubling up to HASHER_SAVE_RETRY_MAX_MS; the last save at stop retries
 * every HASHER_FINAL_RETRY_MS for at most HASHER_SAVE_WAIT_MS. */
#define HASHER_SAVE_RETRY_MS 1000
#define HASHER_SAVE_RETRY_MAX_MS 30000
#define HASHER_FINAL_RETRY_MS 100

struct hasher_opts {
    unsigned threads;               /* worker threads, 1..HASHER_MAX_THREADS */
    uint64_t max_bytes_per_second;  /* pace of background hashing, 0 = unpaced; files someone
                                       waits for (hasher_want) are never paced */
    const char *state_dir;          /* NULL or "": hashes are kept in memory only */
    uint64_t racy_ns;               /* 0 = HASHER_RACY_NS (tests shorten it) */
    unsigned save_interval_s;       /* 0 = HASHER_SAVE_INTERVAL_S */
};

/* Starts the workers and loads STATE_DIR/hashes (creating the directory,
 * 0700, when it is missing). A state directory that cannot be used or a
 * state file that does not load is logged and the hasher works in memory or
 * from an empty store: the daemon serves either way. Call after signals are
 * blocked (the threads inherit the mask). NULL with err only when a thread
 * cannot start. */
struct hasher *hasher_new(const struct hasher_opts *o, struct st_error *err);

/* Hands the hasher a new snapshot (it takes its own reference for as long as
 * it needs one); files of the previous snapshot that are not in this one are
 * no longer hashed. Called by the thread that swaps snapshots. */
void hasher_submit(struct hasher *h, struct reg_snapshot *snap);

/* Returns 1 and copies f's hashes into *out when they are known for the
 * identity f was opened with, else 0. Any thread; never waits for I/O. */
int hasher_lookup(struct hasher *h, const struct reg_file *f, struct hash_entry *out);

enum hasher_state {
    HASHER_KNOWN,       /* every file's hash is known now; no callback */
    HASHER_PENDING,     /* the callback will be called exactly once */
    HASHER_UNAVAILABLE, /* a file will not be hashed: it could not be opened, it failed
                           or changed, it is not in the latest snapshot, or the hasher
                           stopped; no callback */
};

enum hasher_result {
    HASHER_DONE,    /* every file's hash is known now (hasher_lookup finds it) */
    HASHER_TIMEOUT, /* the deadline passed first */
    HASHER_FAILED,  /* a file could not be hashed (read error, or it changed) */
    HASHER_GONE,    /* a reload dropped a file before it was hashed */
    HASHER_STOPPED, /* the daemon is stopping */
};

typedef void (*hasher_cb)(void *arg, enum hasher_result r);

/* Moves files[0..n) (of a snapshot the caller holds) to the front of the
 * queue, and when cb is not NULL and some hash is not known yet, calls
 * cb(arg, result) once, on a hasher thread and without any hasher lock
 * held, within timeout_ms. The callback must be short (resume a suspended
 * connection, signal a condition). With cb NULL the files are only moved
 * up. */
enum hasher_state hasher_want(struct hasher *h, const struct reg_file *const *files, size_t n,
                              unsigned timeout_ms, hasher_cb cb, void *arg);
/* hasher_want that blocks the calling thread until the result (HASHER_DONE
 * for files already known). For threads that may block: tests, tools. */
enum hasher_result hasher_wait(struct hasher *h, const struct reg_file *const *files, size_t n,
                               unsigned timeout_ms);
/* Whole seconds until files[0..n) are probably hashed, from their unhashed
 * bytes and the recent hashing rate, in 1..3600: a Retry-After value. */
unsigned hasher_retry_after(struct hasher *h, const struct reg_file *const *files, size_t n);

/* Another reader is about to read files[0..n) of a snapshot the caller
 * holds (a GPU preload): one stream on the disk is better than two. Until
 * hasher_release, the hasher reads none of them, and a worker hashing one
 * makes way at its next block, keeping what it hashed (it resumes there
 * afterwards). needed[i] is set when files[i]'s hash is not known yet: the
 * reader may then read it through the page cache, where the hasher finds it
 * afterwards. Returns the hold, or NULL when memory runs out (nothing is
 * held, needed is all 0). Any thread; never waits for I/O. */
struct hasher_hold;
struct hasher_hold *hasher_hold(struct hasher *h, const struct reg_file *const *files, size_t n,
                                int *needed);
/* Ends a hold: the files are hashed again as they come (those set aside
 * first). hold may be NULL. */
void hasher_release(struct hasher *h, struct hasher_hold *hold);

struct hasher_progress {
    uint64_t files, bytes;                 /* distinct files of the latest snapshot */
    uint64_t files_known, bytes_known;     /* ... whose hashes are known */
    uint64_t files_pending, bytes_pending; /* ... queued, waiting to retry, or being hashed */
    uint64_t files_failed;                 /* ... that could not be hashed until the next scan */
    double bytes_per_second;               /* recent hashing rate */
    const char *state_file;                /* path of the state file, or NULL (memory only) */
};
void hasher_progress(struct hasher *h, struct hasher_progress *p);

/* Stops the workers (a file being hashed is abandoned), calls every pending
 * callback with HASHER_STOPPED, releases the snapshot and saves the store.
 * Lookups keep working; hasher_want answers HASHER_UNAVAILABLE. Call before
 * the HTTP server stops, so suspended connections are resumed. Returns
 * within HASHER_STOP_MS + HASHER_SAVE_WAIT_MS + HASHER_STUCK_MS (10 s)
 * whatever the file systems do:
 * a save that cannot take the state directory's lock by then is given up
 * (logged; what it would have kept is hashed again after a restart). */
void hasher_stop(struct hasher *h);
/* hasher_stop if needed, then frees everything. */
void hasher_free(struct hasher *h);

#endif
