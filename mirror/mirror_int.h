/* mirror_int: what the mirror's files share (the design is in mirror.h):
 * mirror.c holds the files, their references, the LRU and the blocks
 * wanted; mirror_read.c the readers and waiters; mirror_fetch.c the
 * fetcher threads, the hashing and a download's failure; mirror_life.c
 * the start (what a previous run left) and the stop.
 * They call one way: mirror_life -> mirror_fetch -> mirror_read -> mirror,
 * mirror_fetch also calling mirror.c's do_ functions. Everything marked
 * (lock) is guarded by m->lock. */
#ifndef TENSORD_MIRROR_INT_H
#define TENSORD_MIRROR_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "mirror.h"
#include "upstream.h"

struct mirror_file {
    struct mirror_file *hnext;     /* the map's chain (lock) */
    struct mirror_file *lru_prev, *lru_next; /* every file, least recently used first (lock) */
    struct mirror_file *ring_next; /* the files with work for a fetcher (lock) */
    int in_ring;                   /* (lock) */
    char key[72];                  /* blobs/<key> */
    struct mirror_id id;
    char sha256_hex[65];           /* the digest in hex for SHA-256 files, else "" */
    uint64_t block;                /* this file's block size (a restart keeps it) */
    uint64_t nblocks;
    /* (lock) from here on */
    unsigned refs;                 /* openers, the download, a fetcher at work on it */
    unsigned openers;              /* of refs, those of mirror_open and mirror_ref: readers,
                                    * preloads; the last to go drops the blocks still wanted */
    int fd, state_fd;              /* open while refs > 0 (state_fd: while partial); else -1 */
    int complete;                  /* every byte is there and the hash matched */
    int failed;                    /* the last download failed: error says why */
    struct st_error error;
    uint64_t gen;                  /* bumped when its bytes are discarded: a fetch begun before is
                                    * not counted */
    uint8_t *present, *wanted, *inflight; /* one bit per block */
    uint64_t n_present, n_queued, n_inflight; /* n_queued: wanted, neither present nor in flight */
    uint64_t cursor;               /* the block fetched next (from here, in order, wrapping) */
    uint64_t held;                 /* bytes it counts in m->used */
    int downloading;               /* holds a reference while blocks are queued or in flight */
    int anonymous;                 /* the upstream gave it to a caller without a token (so the
                                    * by-digest route may serve it); not kept across restarts */
    char *src_repo, *src_commit, *src_path, *src_auth; /* where its bytes come from, or NULL */
    uint64_t hashed;               /* bytes hashed, from 0 (a prefix of present blocks) */
    int hashing;                   /* a thread is hashing it (then only it touches hash_ctx) */
    void *hash_ctx;                /* an OpenSSL EVP_MD_CTX over [0, hashed) */
    struct mirror_waiter *waiters;
};

struct mirror_fetcher {
    struct mirror *m;
    pthread_t thread;
    int started;
    struct upstream_conn *conn;
    /* (lock): the block being fetched, and the bytes of it written so far */
    struct mirror_file *f;
    uint64_t b, done, gen;
};

struct mirror {
    struct mirror_options opt;     /* its strings point to the copies below */
    char *s_upstream, *s_cache_dir, *s_own_auth;
    struct upstream *up;
    int dirfd;                     /* the cache directory */
    pthread_mutex_t lock;
    pthread_cond_t work;           /* a file got work, or stopping */
    pthread_cond_t changed;        /* blocks arrived, a download failed or completed */
    int stopping;                  /* (lock) */
    atomic_int stop_flag;          /* the same, for transfers to poll without the lock */
    struct mirror_file **buckets;  /* the map key -> file (lock) */
    size_t nbuckets;
    uint64_t seed;                 /* the map's (hash_seed): keys name what an upstream sent */
    struct mirror_file *lru_head, *lru_tail, *ring_head, *ring_tail; /* (lock) */
    uint64_t used, n_files, n_partial; /* (lock) */
    uint64_t held;                 /* of used, the bytes of files with references: what no
                                    * eviction can free now (lock) */
    uint64_t model_seq;            /* names of models/<n> (lock) */
    atomic_uint_fast64_t hit_bytes, miss_bytes; /* mirror_count_asked */
    atomic_uint_fast64_t dropped;  /* times bytes no hash confirmed left the cache (a file
                                    * discarded for its hash, a partial file evicted): a
                                    * /v1 model built from them is built again
                                    * (mirror_model_current) */
    unsigned range_waiters;        /* threads in mirror_wait_range: woken by progress too (lock) */
    unsigned n_fetchers;
    struct mirror_fetcher *fetchers;
    struct mirror_jobs *jobs;      /* the questions' queue (mirror_job.c) */
    struct mirror_asks *asks;      /* the answers kept about files (mirror_ask.c) */
    struct mirror_names *names;    /* the last answers about names, for an outage (mirror_names.c) */
    struct mirror_health *health;  /* the upstream's (mirror_health.c) */
    struct mirror_views *views;    /* the upstream's models as /v1 serves them (mirror_view.c) */
    struct mirror_repos *repos;    /* the repos it knows (mirror_repos.c) */
    pthread_mutex_t pace_lock;     /* guards pace_next (a leaf: nothing else is taken with it) */
    uint64_t pace_next;            /* when the next byte from the upstream may come, for
                                    * upstream_max_bytes_per_second (monotonic ns) */
};

static inline int bit_get(const uint8_t *bm, uint64_t b)
{
    return (bm[b / 8] >> (b % 8)) & 1;
}
static inline void bit_set(uint8_t *bm, uint64_t b)
{
    bm[b / 8] |= (uint8_t)(1u << (b % 8));
}
static inline void bit_clear(uint8_t *bm, uint64_t b)
{
    bm[b / 8] &= (uint8_t)~(1u << (b % 8));
}

/* Bytes of block b of f. */
static inline uint64_t block_len(const struct mirror_file *f, uint64_t b)
{
    uint64_t off = b * f->block;
    return f->id.size - off < f->block ? f->id.size - off : f->block;
}

/* ---- mirror.c, for the fetchers and the start ---- */

/* A reference (opening the descriptors on the first). Returns 0 or -errno
 * with err. */
int do_mirror_ref(struct mirror *m, struct mirror_file *f, struct st_error *err);
void do_mirror_unref(struct mirror *m, struct mirror_file *f);
/* Links f into the fetchers' ring when it has work, waking one. */
void do_mirror_ring_add(struct mirror *m, struct mirror_file *f);
/* mirror_want's work: the blocks of [off, off + len) wanted (mirror.h);
 * returns the bytes of the range present already. */
uint64_t do_mirror_want(struct mirror *m, struct mirror_file *f, uint64_t off, uint64_t len,
                        enum mirror_how how);
/* Whether a fetcher has something to hash in f. */
int do_mirror_hash_ready(const struct mirror_file *f);
/* The bytes of f known to be present from 0 on, in whole blocks. */
uint64_t do_mirror_prefix(const struct mirror_file *f);
/* Makes room for len more bytes held by f, evicting files nobody holds,
 * least recently used first. Returns 0, or -ENOSPC when every file is
 * held. */
int do_mirror_reserve(struct mirror *m, struct mirror_file *f, uint64_t len);
void do_mirror_release_bytes(struct mirror *m, struct mirror_file *f, uint64_t len);
/* Publishes the cache's gauges (metrics_set_mirror). */
void do_mirror_gauges(const struct mirror *m);
/* (mirror_read.c) The waiters of f that can read now (or whose download
 * failed), unlinked and moved to *fire. */
void do_mirror_collect(struct mirror *m, struct mirror_file *f, struct mirror_waiter **fire);
/* The download's reference goes once nothing is queued or in flight. */
void do_mirror_download_check(struct mirror *m, struct mirror_file *f);

/* A file of size id->size in blocks of `block` bytes, nothing present,
 * in no map; mirror_file_free frees one (its descriptors closed before). */
struct mirror_file *mirror_file_new(const struct mirror_id *id, uint64_t block);
void mirror_file_free(struct mirror_file *f);
/* Puts f into the map and the LRU (most recently used). */
void do_mirror_insert(struct mirror *m, struct mirror_file *f);
/* Takes f out of the map and the LRU, unlinks its files and frees it. It
 * must be held by nobody. */
void do_mirror_evict(struct mirror *m, struct mirror_file *f);
/* Frees f's hash state (the fetchers compute it). */
void mirror_hash_free(struct mirror_file *f);

/* ---- mirror_fetch.c ---- */

/* Starts the fetchers. Returns 0 or -errno with err. */
int mirror_fetch_start(struct mirror *m, struct st_error *err);
/* Joins them, once mirror_free told them to stop. */
void mirror_fetch_stop(struct mirror *m);

#endif
