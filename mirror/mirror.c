/* mirror: the cache's files, their references, the LRU and the blocks
 * wanted (the design is in mirror.h; readers and waiters are
 * mirror_read.c, the fetchers mirror_fetch.c, the mirror's start and stop
 * mirror_life.c). */
#include "mirror.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "log.h"
#include "metrics.h"
#include "mirror_int.h"
#include "mirror_store.h"
#include "util.h"


/* ---- the map and the LRU ---------------------------------------------------- */

static size_t bucket_of(const struct mirror *m, const char *key)
{
    return hash_fnv1a(key, strlen(key), m->seed) % m->nbuckets;
}

static struct mirror_file *do_find(struct mirror *m, const char *key)
{
    for (struct mirror_file *f = m->buckets[bucket_of(m, key)]; f; f = f->hnext)
        if (strcmp(f->key, key) == 0)
            return f;
    return NULL;
}

static void do_lru_unlink(struct mirror *m, struct mirror_file *f)
{
    if (f->lru_prev)
        f->lru_prev->lru_next = f->lru_next;
    else
        m->lru_head = f->lru_next;
    if (f->lru_next)
        f->lru_next->lru_prev = f->lru_prev;
    else
        m->lru_tail = f->lru_prev;
    f->lru_prev = f->lru_next = NULL;
}

/* Makes f the most recently used. */
static void do_lru_touch(struct mirror *m, struct mirror_file *f)
{
    if (m->lru_tail == f)
        return;
    if (f->lru_prev || f->lru_next || m->lru_head == f)
        do_lru_unlink(m, f);
    f->lru_prev = m->lru_tail;
    if (m->lru_tail)
        m->lru_tail->lru_next = f;
    else
        m->lru_head = f;
    m->lru_tail = f;
}

void do_mirror_insert(struct mirror *m, struct mirror_file *f)
{
    size_t b = bucket_of(m, f->key);
    f->hnext = m->buckets[b];
    m->buckets[b] = f;
    do_lru_touch(m, f);
    m->n_files++;
    m->n_partial += !f->complete;
    do_mirror_gauges(m);
}

void mirror_hash_free(struct mirror_file *f)
{
    EVP_MD_CTX_free(f->hash_ctx);
    f->hash_ctx = NULL;
}

/* Where f's bytes come from: copies of src's, or none when src is NULL. */
static void set_src(struct mirror_file *f, const struct mirror_src *src)
{
    free(f->src_repo);
    free(f->src_commit);
    free(f->src_path);
    free_secret(f->src_auth); /* a token lives no longer than needed */
    f->src_repo = src ? xstrdup(src->repo) : NULL;
    f->src_commit = src ? xstrdup(src->commit) : NULL;
    f->src_path = src ? xstrdup(src->path) : NULL;
    f->src_auth = src && src->auth ? xstrdup(src->auth) : NULL;
}

void mirror_file_free(struct mirror_file *f)
{
    if (!f)
        return;
    set_src(f, NULL);
    free(f->present);
    free(f->wanted);
    free(f->inflight);
    mirror_hash_free(f);
    free(f);
}

struct mirror_file *mirror_file_new(const struct mirror_id *id, uint64_t block)
{
    struct mirror_file *f = xcalloc(1, sizeof(*f));
    f->id = *id;
    mirror_key(id, f->key);
    if (id->kind == MIRROR_SHA256)
        memcpy(f->sha256_hex, f->key + 7, 65);
    f->block = block;
    f->nblocks = mirror_blocks(id->size, block);
    size_t nbytes = (size_t)((f->nblocks + 7) / 8) + 1;
    f->present = xcalloc(nbytes, 1);
    f->wanted = xcalloc(nbytes, 1);
    f->inflight = xcalloc(nbytes, 1);
    f->fd = f->state_fd = -1;
    return f;
}

/* Takes f out of the map and the LRU, unlinks its files and frees it. It
 * must be held by nobody. */
void do_mirror_evict(struct mirror *m, struct mirror_file *f)
{
    struct mirror_file **pp = &m->buckets[bucket_of(m, f->key)];
    while (*pp != f)
        pp = &(*pp)->hnext;
    *pp = f->hnext;
    do_lru_unlink(m, f);
    if (f->in_ring) { /* queued for hashing by an opener that has gone since */
        struct mirror_file **rp = &m->ring_head, *prev = NULL;
        while (*rp != f) {
            prev = *rp;
            rp = &(*rp)->ring_next;
        }
        *rp = f->ring_next;
        if (m->ring_tail == f)
            m->ring_tail = prev;
    }
    m->used -= f->held;
    m->n_files--;
    m->n_partial -= !f->complete;
    if (!f->complete) /* its bytes, unchecked, may come back other */
        atomic_fetch_add(&m->dropped, 1);
    metrics_add(MC_MIRROR_EVICTIONS, 1);
    do_mirror_gauges(m);
    /* The blob before its state: a crash between the two must not leave a
     * partial blob without a state file, which the next start takes for
     * complete (a state file alone is removed at start). */
    char name[96];
    snprintf(name, sizeof(name), "blobs/%s", f->key);
    unlinkat(m->dirfd, name, 0);
    snprintf(name, sizeof(name), "blobs/%s.state", f->key);
    unlinkat(m->dirfd, name, 0);
    log_msg(LOG_INFO, "mirror: evicted %s (%" PRIu64 " bytes held)", f->key, f->held);
    mirror_file_free(f);
}

void do_mirror_gauges(const struct mirror *m)
{
    metrics_set_mirror(m->used, m->held, m->n_files, m->n_partial);
}

int do_mirror_reserve(struct mirror *m, struct mirror_file *f, uint64_t len)
{
    struct mirror_file *v = m->lru_head;
    while (m->used + len > m->opt.max_bytes) {
        while (v && (v->refs > 0 || v == f))
            v = v->lru_next;
        if (!v)
            return -ENOSPC;
        struct mirror_file *next = v->lru_next;
        do_mirror_evict(m, v);
        v = next;
    }
    m->used += len;
    m->held += f->refs ? len : 0;
    f->held += len;
    do_mirror_gauges(m);
    return 0;
}

void do_mirror_release_bytes(struct mirror *m, struct mirror_file *f, uint64_t len)
{
    m->used -= len;
    m->held -= f->refs ? len : 0;
    f->held -= len;
    do_mirror_gauges(m);
}

/* ---- references ------------------------------------------------------------- */

static int do_open_fds(struct mirror *m, struct mirror_file *f, struct st_error *err)
{
    char name[96];
    snprintf(name, sizeof(name), "blobs/%s", f->key);
    f->fd = openat(m->dirfd, name, (f->complete ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW);
    if (f->fd < 0)
        return st_error_errno(err, errno, "mirror cache: %s", name);
    if (!f->complete) {
        snprintf(name, sizeof(name), "blobs/%s.state", f->key);
        f->state_fd = openat(m->dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (f->state_fd < 0) {
            int e = errno;
            close(f->fd);
            f->fd = -1;
            return st_error_errno(err, e, "mirror cache: %s", name);
        }
    }
    return 0;
}

int do_mirror_ref(struct mirror *m, struct mirror_file *f, struct st_error *err)
{
    int rc = f->refs == 0 ? do_open_fds(m, f, err) : 0;
    if (rc == 0 && f->refs++ == 0) {
        m->held += f->held;
        do_mirror_gauges(m);
    }
    return rc;
}

void do_mirror_unref(struct mirror *m, struct mirror_file *f)
{
    if (--f->refs > 0)
        return;
    m->held -= f->held;
    do_mirror_gauges(m);
    /* The blob's mtime orders the LRU after a restart. */
    futimens(f->fd, NULL);
    close(f->fd);
    f->fd = -1;
    if (f->state_fd >= 0)
        close(f->state_fd);
    f->state_fd = -1;
}

void do_mirror_download_check(struct mirror *m, struct mirror_file *f)
{
    int busy = f->n_queued > 0 || f->n_inflight > 0;
    if (busy && !f->downloading) {
        f->downloading = 1;
        f->refs++; /* the descriptors are open: whoever wants blocks holds f */
    } else if (!busy && f->downloading) {
        f->downloading = 0;
        do_mirror_unref(m, f);
    }
}

/* A new partial file on disk: the state file first, so that a blob is
 * never found without one before it is complete. */
static int create_files(struct mirror *m, struct mirror_file *f, struct st_error *err)
{
    char name[96];
    snprintf(name, sizeof(name), "blobs/%s", f->key);
    unlinkat(m->dirfd, name, 0);
    int sfd = mirror_state_create(m->dirfd, f->key, &f->id, f->block, err);
    if (sfd < 0)
        return sfd;
    close(sfd);
    int fd = openat(m->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    int rc = fd < 0 ? -errno : ftruncate(fd, (off_t)f->id.size) < 0 ? -errno : 0;
    if (fd >= 0)
        close(fd);
    if (rc < 0) {
        unlinkat(m->dirfd, name, 0);
        snprintf(name, sizeof(name), "blobs/%s.state", f->key);
        unlinkat(m->dirfd, name, 0);
        return st_error_errno(err, -rc, "mirror cache: making blobs/%s", f->key);
    }
    return 0;
}

struct mirror_file *mirror_open(struct mirror *m, const struct mirror_id *id,
                                const struct mirror_src *src, struct st_error *err)
{
    char key[72];
    mirror_key(id, key);
    if (id->size > m->opt.max_bytes) {
        st_error_fail(err, ST_ERR_LIMIT, "%s is %" PRIu64 " bytes, more than the mirror's cache "
                      "holds (mirror_cache_max_bytes %" PRIu64 ")", src ? src->path : key,
                      id->size, m->opt.max_bytes);
        return NULL;
    }
    pthread_mutex_lock(&m->lock);
    struct mirror_file *f = do_find(m, key), *made = NULL;
    if (f && f->id.size != id->size) {
        st_error_fail(err, ST_ERR_CONFLICT, "the upstream gives %s a size of %" PRIu64 " bytes; "
                      "the cache holds those content's %" PRIu64, src ? src->path : key,
                      id->size, f->id.size);
        f = NULL;
        goto out;
    }
    if (!f) {
        made = f = mirror_file_new(id, m->opt.block_bytes);
        if (create_files(m, f, err) < 0) {
            f = NULL;
            goto out;
        }
        do_mirror_insert(m, f);
        made = NULL;
    }
    if (do_mirror_ref(m, f, err) < 0) {
        f = NULL;
        goto out;
    }
    f->openers++;
    do_lru_touch(m, f);
    if (src && !src->auth)
        f->anonymous = 1;
    if (src && !f->complete && (!f->src_repo || (f->failed && !f->downloading))) {
        set_src(f, src);
        f->failed = 0;
    }
    if (do_mirror_hash_ready(f))
        do_mirror_ring_add(m, f);
out:
    pthread_mutex_unlock(&m->lock);
    mirror_file_free(made);
    return f;
}

struct mirror_file *mirror_find_complete(struct mirror *m, const uint8_t sha256[32])
{
    struct mirror_id id = {.kind = MIRROR_SHA256};
    char key[72];
    memcpy(id.digest, sha256, 32);
    mirror_key(&id, key);
    pthread_mutex_lock(&m->lock);
    struct mirror_file *f = do_find(m, key);
    if (f && (!f->complete || !f->anonymous || do_mirror_ref(m, f, NULL) < 0))
        f = NULL;
    if (f) {
        f->openers++;
        do_lru_touch(m, f);
    }
    pthread_mutex_unlock(&m->lock);
    return f;
}

uint64_t mirror_cached(struct mirror *m, const struct mirror_id *id, int *complete)
{
    char key[72];
    mirror_key(id, key);
    pthread_mutex_lock(&m->lock);
    const struct mirror_file *f = do_find(m, key);
    uint64_t bytes = 0;
    *complete = f && f->complete && f->id.size == id->size;
    if (f && f->id.size == id->size) {
        bytes = f->complete ? f->id.size : f->n_present * f->block;
        if (!f->complete && f->nblocks && bit_get(f->present, f->nblocks - 1))
            bytes -= f->block - block_len(f, f->nblocks - 1); /* the last block is shorter */
    }
    pthread_mutex_unlock(&m->lock);
    return bytes;
}

void mirror_ref(struct mirror *m, struct mirror_file *f)
{
    pthread_mutex_lock(&m->lock);
    f->refs++; /* the caller's keeps the descriptors open */
    f->openers++;
    pthread_mutex_unlock(&m->lock);
}

/* Nobody reads or preloads f any more: the blocks wanted for them are not
 * fetched (those in flight land), so a client that left holds nothing in
 * the cache; the next reader wants again what it reads. */
static void do_drop_wants(struct mirror *m, struct mirror_file *f)
{
    if (!f->n_queued)
        return;
    memset(f->wanted, 0, (size_t)((f->nblocks + 7) / 8));
    f->n_queued = 0;
    do_mirror_download_check(m, f);
}

void mirror_unref(struct mirror *m, struct mirror_file *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&m->lock);
    do_lru_touch(m, f);
    if (--f->openers == 0)
        do_drop_wants(m, f);
    do_mirror_unref(m, f);
    pthread_mutex_unlock(&m->lock);
}

int mirror_file_fd(const struct mirror_file *f)
{
    return f->fd;
}

uint64_t mirror_file_size(const struct mirror_file *f)
{
    return f->id.size;
}

const struct mirror_id *mirror_file_id(const struct mirror_file *f)
{
    return &f->id;
}

int mirror_file_complete(struct mirror *m, struct mirror_file *f)
{
    pthread_mutex_lock(&m->lock);
    int c = f->complete;
    pthread_mutex_unlock(&m->lock);
    return c;
}

/* ---- wanting blocks ------------------------------------------------------------ */

void do_mirror_ring_add(struct mirror *m, struct mirror_file *f)
{
    if (f->in_ring || m->stopping)
        return;
    f->in_ring = 1;
    f->ring_next = NULL;
    if (m->ring_tail)
        m->ring_tail->ring_next = f;
    else
        m->ring_head = f;
    m->ring_tail = f;
    pthread_cond_signal(&m->work);
}

uint64_t do_mirror_prefix(const struct mirror_file *f)
{
    uint64_t b = f->hashed / f->block;
    while (b < f->nblocks && bit_get(f->present, b))
        b++;
    return b * f->block < f->id.size ? b * f->block : f->id.size;
}

int do_mirror_hash_ready(const struct mirror_file *f)
{
    /* An empty file has nothing to wait for: its hash is the empty one's. */
    return !f->complete && !f->hashing && !f->failed &&
           (do_mirror_prefix(f) > f->hashed || f->id.size == 0);
}

uint64_t do_mirror_want(struct mirror *m, struct mirror_file *f, uint64_t off, uint64_t len,
                        enum mirror_how how)
{
    if (len == 0 || off >= f->id.size)
        return 0;
    uint64_t end = off + len < f->id.size ? off + len : f->id.size, hits = 0;
    if (f->complete)
        return end - off;
    uint64_t first = off / f->block, last = (end - 1) / f->block;
    for (uint64_t b = first; b <= last; b++)
        if (bit_get(f->present, b)) { /* the part of block b inside the range */
            uint64_t lo = b * f->block > off ? b * f->block : off;
            uint64_t hi = b * f->block + block_len(f, b) < end ? b * f->block + block_len(f, b)
                                                                : end;
            hits += hi - lo;
        }
    if (f->failed || !f->src_repo)
        return hits;
    /* The last byte of a download waits for the whole file's hash, which
     * needs every block: after this range's, the rest (the cursor wraps to
     * block 0). */
    if (end == f->id.size && how == MIRROR_WHOLE)
        last = first + f->nblocks - 1;
    for (uint64_t i = first; i <= last; i++) {
        uint64_t b = i % f->nblocks;
        if (bit_get(f->wanted, b) || bit_get(f->present, b) || bit_get(f->inflight, b))
            continue;
        bit_set(f->wanted, b);
        f->n_queued++;
    }
    f->cursor = first;
    do_mirror_download_check(m, f);
    if (f->n_queued)
        do_mirror_ring_add(m, f);
    return hits;
}

uint64_t mirror_want(struct mirror *m, struct mirror_file *f, uint64_t off, uint64_t len,
                     enum mirror_how how)
{
    pthread_mutex_lock(&m->lock);
    uint64_t hits = do_mirror_want(m, f, off, len, how);
    pthread_mutex_unlock(&m->lock);
    return hits;
}

void mirror_stats(struct mirror *m, struct mirror_stats *out)
{
    pthread_mutex_lock(&m->lock);
    *out = (struct mirror_stats){.upstream = m->opt.upstream, .bytes = m->used,
                                 .max_bytes = m->opt.max_bytes, .in_use_bytes = m->held,
                                 .files = m->n_files, .partial_files = m->n_partial};
    pthread_mutex_unlock(&m->lock);
    out->hit_bytes = atomic_load_explicit(&m->hit_bytes, memory_order_relaxed);
    out->miss_bytes = atomic_load_explicit(&m->miss_bytes, memory_order_relaxed);
}

void mirror_count_asked(struct mirror *m, uint64_t asked, uint64_t hits)
{
    atomic_fetch_add_explicit(&m->hit_bytes, hits, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->miss_bytes, asked - hits, memory_order_relaxed);
    metrics_add(MC_MIRROR_HIT_BYTES, hits);
    metrics_add(MC_MIRROR_MISS_BYTES, asked - hits);
}

struct upstream *mirror_upstream(struct mirror *m)
{
    return m->up;
}

const char *mirror_own_auth(const struct mirror *m)
{
    return m->opt.own_auth;
}
