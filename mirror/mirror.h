/* mirror: the pull-through mirror's cache of upstream files and the
 * threads that fill it (`upstream = URL`; docs/OPERATIONS.md "A
 * pull-through mirror").
 *
 * Where the state lives. mirror/ holds all of it: the files of the cache
 * (struct mirror_file, one per content: the SHA-256 of an LFS file, the git
 * blob id of a small one, so one file serves every repo and commit that
 * has those bytes), their blocks, the fetch queue, the waiters, the LRU
 * and the byte count, in one struct mirror (mirror.c); the cache's files
 * on disk (mirror_store.c); the questions that answer metadata (a file's
 * commit, size and hash, with the caller's token; the /api documents; a
 * model's headers for a preload: mirror_ask.c, mirror_model.c), their
 * queue (mirror_job.c: bounded, the clients served in turn, identical
 * questions asked once, a question nobody waits for any more never asked)
 * and the short-lived cache of what the upstream said about files
 * (mirror_ask.c); the repos it knows (mirror_repo.c reads a repo's
 * document, mirror_repos.c keeps the table), the models the /v1 and S3
 * routes serve from them (mirror_view.c: snaps of a repo at its main's
 * commit, views of a model built from its headers by mirror_model.c), the
 * last answers the upstream gave, kept for an outage (mirror_names.c), and
 * the upstream's health (mirror_health.c); mirror/upstream is the HTTP
 * client all of them use. server/handlers/h_mirror*.c answer HTTP from this
 * state and never talk to the upstream themselves.
 *
 * Serving. Every route reads a mirrored file the same way, whatever its
 * answer's shape (a Hub download, a Range, a tensor, a slice's runs, a
 * fetch across shards, an S3 object): the answer holds a reference to each
 * file it reads and the front's gate (server/http/gate.h) asks for the
 * blocks covering exactly the bytes it sends (mirror_want) and sends each
 * once it is readable (mirror_readable, mirror_wait). A download reads a
 * file as MIRROR_WHOLE (its last byte waits for the hash); a tensor or a
 * slice as MIRROR_PARTS (every byte as it arrives, only its blocks asked
 * for). A /v1 model holds nothing of the cache between answers: its files
 * are opened by each answer, so an idle model pins no file and no evicted
 * file's disk space.
 *
 * Outage. Every request to the upstream tells mirror_health whether it got
 * an answer; after a failure questions pause (1 s, doubling to 30 s) and
 * are answered from what is kept: complete files by commit (their bytes
 * never change), and the last answer to the same question, served stale
 * within mirror_stale_max_age to whom mirror_names.h allows, never past
 * mirror_auth_ttl to a caller's token. mirror_offline = strict keeps and
 * serves none of it.
 *
 * Threads. mirror_fetch_threads fetchers, each with its own upstream
 * connection, take blocks round robin over the files that have blocks
 * wanted (a file's blocks in order from its cursor, which a waiting reader
 * moves to where it reads), fetch each with one Range request and write it
 * into the file as it arrives (pwrite), publishing progress as they go:
 * a reader may send a block's first bytes before its last have come. The
 * fetcher that completes a block also advances the file's hash over the
 * prefix that is now contiguous (one thread at a time per file), so the
 * hash is known shortly after the last byte. HTTP threads never block on
 * the mirror: they read what is there (mirror_readable), else register a
 * waiter and suspend their connection; the fetcher that brings the bytes
 * calls the waiter back, and the callback resumes the connection. Preload
 * copy threads wait on a condition variable instead (mirror_wait_range).
 * MIRROR_JOB_THREADS job threads, each with its own upstream connection,
 * ask the upstream's metadata and documents and build models, at most
 * MIRROR_JOB_BUILDS of those at once (a build waits on the fetchers, for
 * as long as a stalled upstream makes it), and stop a question whose
 * clients all left, even one that is running (mirror_job.h).
 *
 * Locks. One mutex, m->lock, guards every file's state, the queue, the LRU
 * and the byte count. Nothing waits on the network or on another lock
 * with it held and no callback runs under it; the only system calls made
 * with it held are on the cache's own metadata (opening and closing a
 * file's descriptors, the one-byte bitmap write when a block completes,
 * unlinking an evicted file), so a file can never be reopened between its
 * eviction and its unlink. Functions named do_* run with it held. Waiter
 * callbacks run after it is released; a waiter counts the callbacks of it
 * that are running (`firing`), and mirror_unwait waits for none, so an
 * answer freed meanwhile is never called. mirror_job.c has one lock of its
 * own for its queue, mirror_ask.c one for its cache; no thread holds two
 * (docs/ARCHITECTURE.md "Lock order").
 *
 * On disk (mirror_cache_dir):
 *   blobs/<key>          the bytes at their offsets, sparse until fetched
 *   blobs/<key>.state    only while the file is partial: its size, block
 *                        size and digest, then a bitmap of the blocks present
 *   models/<n>/          while a preload holds it: one symlink per model
 *                        file, named as in the repo, to its blob
 * where <key> is sha256-<64 hex> or gitsha1-<40 hex>. A block's bit is
 * written after its bytes (both into the page cache); the state file is
 * removed only once the whole file's hash matched and its bytes were
 * synced, so a blob without a state file is complete. A restart reads the
 * state files and resumes where they say: a crash may lose bits (their
 * blocks are fetched again), and the hash, computed again over the bytes
 * on disk, checks everything else.
 *
 * Guarantees. A block is fetched once whoever waits on it (it is wanted,
 * in flight or present). A file is fetched from the one commit URL it was
 * first asked for, and every answer must be that version (mirror/upstream);
 * it counts as complete only once its hash matches, and until then its last
 * byte is held back from readers, so no client finishes a download the
 * hash has not confirmed. The bytes held (present blocks, complete files,
 * and blocks being fetched, reserved before they are asked for) never
 * exceed mirror_cache_max_bytes: the least recently used files that nobody
 * holds are evicted first; readers, downloads with blocks wanted, preloads
 * and GPU instances (for as long as they have leases) hold references.
 * Blocks are wanted only for someone: a reader (its answer's range; a
 * range that runs to the last byte wants the whole file, whose hash that
 * byte waits for) or a preload. When a file's last opener goes (the
 * client left, and the HTTP front ends an answer whose client left or
 * idled past connection_timeout: server/http/conns.h), the blocks still
 * wanted are dropped and only those in flight land: a client that left
 * holds no cache space. */
#ifndef TENSORD_MIRROR_H
#define TENSORD_MIRROR_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "mirror_store.h"
#include "st_error.h"
#include "upstream_addr.h"

struct mirror;
struct mirror_file;
struct upstream;

#define MIRROR_DOC_MAX (64u << 20) /* an upstream document's body (a repo of 100,000 files fits) */

struct mirror_options {
    const char *upstream;          /* base URL */
    const char *cache_dir;         /* made when missing */
    uint64_t max_bytes;            /* the cap */
    uint64_t block_bytes;          /* a multiple of 4096 */
    unsigned fetch_threads;
    uint64_t max_bps;              /* all fetches together; 0 = no limit */
    unsigned auth_ttl;             /* seconds an answer about a file is reused (mirror_ask.c) */
    const char *own_auth;          /* Authorization value of the mirror's own requests, or NULL */
    int serve_stale;               /* mirror_offline = serve-cached: an unreachable upstream
                                    * leaves what the cache holds served (mirror_names.h) */
    unsigned stale_max_age;        /* seconds a name's last answer is served stale */
    enum upstream_private redirect_private; /* upstream_redirect_private (upstream_addr.h) */
};

/* Where a file's bytes come from: its URL at one commit, and the caller's
 * Authorization value (may be NULL). Copied by mirror_open. */
struct mirror_src {
    const char *repo, *commit, *path, *auth;
};

/* Creates the cache directory's layout, reads what a previous run left
 * (complete files, partial ones with their bitmaps), evicts down to the
 * cap, and starts the fetchers. Returns the mirror, or NULL with err. */
struct mirror *mirror_new(const struct mirror_options *o, struct st_error *err);
/* Stops the fetchers (a transfer in flight is cut; its block is fetched
 * again next time) and frees everything. Every file reference must have
 * been released. */
void mirror_free(struct mirror *m);

/* The upstream client (its base URL, for answers that name it). */
struct upstream *mirror_upstream(struct mirror *m);
/* The Authorization value of the mirror's own requests (upstream_token_file),
 * or NULL. */
const char *mirror_own_auth(const struct mirror *m);

/* The cache's file for id, made (sparse, with its state file) when the
 * cache has none, with a reference the caller releases with mirror_unref.
 * src says where to fetch what is missing; a file whose last download
 * failed is tried again from this src. Returns NULL with err: -EFBIG
 * (larger than the cap), -EINVAL (the cache has this digest with another
 * size: one of the two answers lied), or an I/O error. */
struct mirror_file *mirror_open(struct mirror *m, const struct mirror_id *id,
                                const struct mirror_src *src, struct st_error *err);
/* A complete file with this SHA-256 that the upstream gave to a caller
 * without a token since this start, with a reference, or NULL (the
 * by-digest route: a digest names no repo, so nothing of a gated repo may
 * be found by it). */
struct mirror_file *mirror_find_complete(struct mirror *m, const uint8_t sha256[32]);
/* The bytes of content id the cache holds (0 when it has no such file),
 * and whether they are all of it, checked. */
uint64_t mirror_cached(struct mirror *m, const struct mirror_id *id, int *complete);
/* What the cache holds, and how often answers found what they asked for
 * in it. */
struct mirror_stats {
    const char *upstream;          /* its base URL */
    uint64_t bytes, max_bytes;     /* held, of the cap */
    uint64_t in_use_bytes;         /* of those, held by readers, downloads, preloads */
    uint64_t files, partial_files;
    uint64_t hit_bytes, miss_bytes; /* asked by answers: in the cache already / fetched */
};
void mirror_stats(struct mirror *m, struct mirror_stats *out);
/* Counts bytes answers asked of the cache: hits of them were there. */
void mirror_count_asked(struct mirror *m, uint64_t asked, uint64_t hits);
/* Another reference to f, which the caller holds one of. */
void mirror_ref(struct mirror *m, struct mirror_file *f);
void mirror_unref(struct mirror *m, struct mirror_file *f);

/* The file's descriptor (read-only use: pread, sendfile), valid while the
 * caller holds its reference. */
int mirror_file_fd(const struct mirror_file *f);
uint64_t mirror_file_size(const struct mirror_file *f);
/* Its content's id (kind, digest, size). */
const struct mirror_id *mirror_file_id(const struct mirror_file *f);
/* Whether every byte is there and the hash matched. */
int mirror_file_complete(struct mirror *m, struct mirror_file *f);

/* How a reader reads a file: as the file (a download: its last byte only
 * once the whole file's hash matched, so no client finishes a download the
 * hash has not confirmed; a range that reaches the end wants every block),
 * or parts of it (a tensor, a slice: every byte as it arrives, and only
 * the blocks asked for). */
enum mirror_how { MIRROR_WHOLE, MIRROR_PARTS };

/* Asks for the blocks covering [off, off + len) that are neither present,
 * nor in flight, nor wanted yet, and moves the file's cursor to off: they
 * are fetched from there on, in order; read as MIRROR_WHOLE, a range that
 * reaches the file's end asks for every block (its last byte waits for the
 * whole file's hash). The caller holds a reference (mirror_open,
 * mirror_ref); the download holds the file until its wanted blocks are in,
 * it fails, or the last of those references goes (the blocks not in flight
 * are then dropped). Returns the bytes of the range that were in the cache
 * already (whole blocks present; all of it when the file is complete). */
uint64_t mirror_want(struct mirror *m, struct mirror_file *f, uint64_t off, uint64_t len,
                     enum mirror_how how);

/* The bytes readable at off, contiguous, at most max: 0 when none is there
 * yet; -errno with err when none is there and the download failed (a new
 * mirror_open tries again). Read as MIRROR_WHOLE, the last byte of a file
 * is readable only once the file is complete. */
int64_t mirror_readable(struct mirror *m, struct mirror_file *f, uint64_t off, uint64_t max,
                        enum mirror_how how, struct st_error *err);

/* An HTTP answer waiting for bytes. The caller owns the memory (inside its
 * stream) and fills cb and arg; the rest is the mirror's. */
struct mirror_waiter {
    void (*cb)(void *arg);         /* called once, on a fetcher thread, without any lock */
    void *arg;
    enum mirror_how how;           /* how the answer reads the file */
    /* private */
    struct mirror_waiter *next;
    struct mirror_file *f;
    uint64_t off;
    int linked;                    /* m->lock */
    atomic_int firing;             /* callbacks of it running (a fetcher's, at most two at once) */
};

/* Registers w to be called back once bytes at off are readable (as w->how
 * says) or the download failed. Returns 1 when that is already so (w is not
 * registered: read again), 0 when registered. */
int mirror_wait(struct mirror *m, struct mirror_file *f, uint64_t off, struct mirror_waiter *w);
/* Takes w out (a no-op when it fired or was never registered), and waits
 * for a callback that is running to return. */
void mirror_unwait(struct mirror *m, struct mirror_waiter *w);

/* Blocks until [off, off + len) is readable as MIRROR_WHOLE (wanting it
 * first), the download failed (-errno with err), or *cancel is set
 * (-ECANCELED). For threads that may block: a preload's copy threads. */
int mirror_wait_range(struct mirror *m, struct mirror_file *f, uint64_t off, uint64_t len,
                      const atomic_int *cancel, struct st_error *err);

#endif
