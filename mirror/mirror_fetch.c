/* mirror_fetch: the fetcher threads and the hashing of what they bring
 * (the design is in mirror.h).
 *
 * A fetcher takes the file at the head of the ring, one block of it (the
 * first wanted from its cursor), and puts the file back at the tail while
 * it has more: files share the fetchers block by block. The block's bytes
 * are written where they belong as they arrive, and every write publishes
 * its progress (fe->done) and wakes the readers it satisfies. A transfer
 * cut part-way resumes at the byte it reached; an answer that names
 * another version of the file, a refused token or a missing file fails the
 * download at once (the upstream changed: it is never retried against
 * another commit); other failures are retried three times, backing off. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "digest.h"
#include "fileio.h"
#include "log.h"
#include "metrics.h"
#include "mirror_int.h"
#include "mirror_store.h"
#include "util.h"

#define RETRIES 3
#define HASH_PIECE (1u << 20)

/* The first wanted block from the cursor on (wrapping); f->n_queued > 0. */
static uint64_t do_next_block(struct mirror_file *f)
{
    for (uint64_t i = 0; i < f->nblocks; i++) {
        uint64_t b = (f->cursor + i) % f->nblocks;
        if (bit_get(f->wanted, b) && !bit_get(f->present, b) && !bit_get(f->inflight, b))
            return b;
    }
    return f->nblocks; /* cannot happen while n_queued > 0 */
}

/* Sleeps until `until` (time_mono_ns), or less when the mirror stops. */
static void sleep_until(struct mirror *m, uint64_t until)
{
    uint64_t now;
    while (!atomic_load(&m->stop_flag) && (now = time_mono_ns()) < until) {
        struct timespec ts = {0, (long)(until - now < 50000000u ? until - now : 50000000u)};
        nanosleep(&ts, NULL);
    }
}

/* ---- failures --------------------------------------------------------------- */

/* Calls back the waiters of a list made by do_mirror_collect (no lock held). */
static void fire_waiters(struct mirror_waiter *list)
{
    while (list) {
        struct mirror_waiter *w = list;
        list = w->next; /* read before the callback: w may be freed once firing is 0 */
        w->cb(w->arg);
        atomic_fetch_sub(&w->firing, 1);
    }
}

/* Fails f's download: wanted blocks dropped, every waiter called back
 * (moved to *fire, to call after unlocking). */
static void do_fail(struct mirror *m, struct mirror_file *f, const struct st_error *e,
                    struct mirror_waiter **fire)
{
    if (!f->failed)
        log_msg(LOG_ERROR, "mirror: %s (%s): %s", f->src_path ? f->src_path : f->key, f->key,
                e->message);
    f->failed = 1;
    f->error = *e;
    memset(f->wanted, 0, (size_t)((f->nblocks + 7) / 8));
    f->n_queued = 0;
    do_mirror_download_check(m, f);
    do_mirror_collect(m, f, fire);
    pthread_cond_broadcast(&m->changed);
}

/* Discards every byte of f (its hash did not match): bits cleared, bytes
 * released, the state file's bitmap and the blob's bytes freed (holes). */
static void do_discard(struct mirror *m, struct mirror_file *f)
{
    uint64_t bytes = 0;
    for (uint64_t b = 0; b < f->nblocks; b++)
        if (bit_get(f->present, b)) {
            bytes += block_len(f, b);
            bit_clear(f->present, b);
        }
    do_mirror_release_bytes(m, f, bytes);
    f->n_present = 0;
    f->hashed = 0;
    f->gen++;
    atomic_fetch_add(&m->dropped, 1);
    uint64_t nbytes = (f->nblocks + 7) / 8;
    if (f->state_fd >= 0 && (ftruncate(f->state_fd, MIRROR_STATE_HEADER) < 0 ||
                             ftruncate(f->state_fd, (off_t)(MIRROR_STATE_HEADER + nbytes)) < 0))
        log_msg(LOG_WARN, "mirror: clearing blobs/%s.state: %s", f->key, strerror(errno));
    if (f->fd >= 0 && (ftruncate(f->fd, 0) < 0 || ftruncate(f->fd, (off_t)f->id.size) < 0))
        log_msg(LOG_WARN, "mirror: clearing blobs/%s: %s", f->key, strerror(errno));
}

/* ---- hashing --------------------------------------------------------------- */

static int hash_start(struct mirror_file *f)
{
    f->hash_ctx = EVP_MD_CTX_new();
    if (!f->hash_ctx ||
        !EVP_DigestInit_ex(f->hash_ctx, f->id.kind == MIRROR_SHA256 ? EVP_sha256() : EVP_sha1(),
                           NULL)) {
        mirror_hash_free(f);
        return -ENOMEM;
    }
    if (f->id.kind == MIRROR_GIT_SHA1) {
        char head[40];
        int n = snprintf(head, sizeof(head), "blob %" PRIu64, f->id.size);
        EVP_DigestUpdate(f->hash_ctx, head, (size_t)n + 1); /* with its NUL */
    }
    return 0;
}

/* Hashes [from, to) of f (hashing is set: only this thread touches the
 * context). Returns 0 or -errno with err. */
static int hash_range(struct mirror_file *f, int fd, char *buf, uint64_t from, uint64_t to,
                      struct st_error *err)
{
    for (uint64_t off = from; off < to;) {
        size_t n = (size_t)(to - off < HASH_PIECE ? to - off : HASH_PIECE);
        int rc = fileio_pread_full(fd, buf, n, off);
        if (rc < 0)
            return st_error_errno(err, -rc, "reading blobs/%s at %" PRIu64 " to hash it", f->key,
                                  off);
        EVP_DigestUpdate(f->hash_ctx, buf, n);
        off += n;
    }
    return 0;
}

/* The file's bytes are all there and hashed: complete when the digest is
 * the one it was asked for, else discarded. Lock held; releases it around
 * the sync. */
static void do_finish_hash(struct mirror *m, struct mirror_file *f, struct mirror_waiter **fire)
{
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    size_t want = f->id.kind == MIRROR_SHA256 ? 32 : 20;
    EVP_DigestFinal_ex(f->hash_ctx, md, &mdlen);
    mirror_hash_free(f);
    if (mdlen == want && memcmp(md, f->id.digest, want) == 0) {
        int fd = f->fd;
        char state[96];
        snprintf(state, sizeof(state), "blobs/%s.state", f->key);
        pthread_mutex_unlock(&m->lock);
        /* The bytes are on the disk before the file says it is complete. */
        if (fdatasync(fd) < 0)
            log_msg(LOG_WARN, "mirror: fdatasync blobs/%s: %s", f->key, strerror(errno));
        unlinkat(m->dirfd, state, 0);
        pthread_mutex_lock(&m->lock);
        f->complete = 1;
        m->n_partial--;
        do_mirror_gauges(m);
        if (f->state_fd >= 0)
            close(f->state_fd);
        f->state_fd = -1;
        log_msg(LOG_INFO, "mirror: %s complete: %" PRIu64 " bytes, %s checked", f->key,
                f->id.size, f->id.kind == MIRROR_SHA256 ? "sha256" : "git blob id");
        return;
    }
    char got[65];
    struct st_error e;
    digest_hex(md, mdlen < want ? mdlen : want, got);
    st_error_fail(&e, ST_ERR_IO, "the upstream's bytes of %s hash to %s, not to the %s it "
                  "named: discarded (did the upstream change during the download?)",
                  f->src_path ? f->src_path : f->key, got, f->key);
    metrics_add(MC_MIRROR_VERIFY_FAILURES, 1);
    do_discard(m, f);
    do_fail(m, f, &e, fire);
}

/* Advances f's hash over the prefix of present blocks, as far as it goes.
 * Lock held (released while reading). */
static void do_hash(struct mirror *m, struct mirror_file *f, char *buf,
                    struct mirror_waiter **fire)
{
    struct st_error e;
    if (!do_mirror_hash_ready(f) || do_mirror_ref(m, f, &e) < 0)
        return;
    f->hashing = 1;
    int rc = f->hash_ctx ? 0 : hash_start(f);
    if (rc < 0)
        st_error_fail(&e, ST_ERR_NO_MEMORY, "no memory to hash %s", f->key);
    while (rc == 0) {
        uint64_t from = f->hashed, to = do_mirror_prefix(f);
        if (to <= from)
            break;
        int fd = f->fd;
        pthread_mutex_unlock(&m->lock);
        rc = hash_range(f, fd, buf, from, to, &e);
        pthread_mutex_lock(&m->lock);
        if (rc == 0)
            f->hashed = to;
    }
    if (rc < 0) {
        mirror_hash_free(f);
        f->hashed = 0;
        do_fail(m, f, &e, fire);
    } else if (f->hashed == f->id.size) {
        do_finish_hash(m, f, fire);
    }
    f->hashing = 0;
    do_mirror_collect(m, f, fire);
    pthread_cond_broadcast(&m->changed);
    do_mirror_unref(m, f);
}

/* ---- fetching ----------------------------------------------------------------- */

struct sink {
    struct mirror_fetcher *fe;
    struct mirror_file *f;
    int fd;
    uint64_t off;              /* the block's first byte */
};

/* upstream_max_bytes_per_second, for all fetchers together: each piece
 * that arrives takes its time on one schedule, and its fetcher waits for
 * that time before it reads more (TCP then slows the sender). No credit
 * is saved up while nothing arrives. */
static void pace(struct mirror *m, size_t len)
{
    if (!m->opt.max_bps)
        return;
    pthread_mutex_lock(&m->pace_lock);
    uint64_t now = time_mono_ns();
    if (m->pace_next < now)
        m->pace_next = now;
    m->pace_next += (uint64_t)((double)len * 1e9 / (double)m->opt.max_bps);
    uint64_t until = m->pace_next;
    pthread_mutex_unlock(&m->pace_lock);
    sleep_until(m, until);
}

static int sink_write(void *arg, const void *data, size_t len)
{
    struct sink *s = arg;
    struct mirror *m = s->fe->m;
    pace(m, len);
    if (atomic_load(&m->stop_flag))
        return -ECANCELED;
    int rc = fileio_pwrite_full(s->fd, data, len, s->off + s->fe->done);
    if (rc < 0)
        return rc;
    struct mirror_waiter *fire = NULL;
    pthread_mutex_lock(&m->lock);
    s->fe->done += len;
    if (s->f->waiters)
        do_mirror_collect(m, s->f, &fire);
    if (m->range_waiters) /* a model's header may be all it waits for */
        pthread_cond_broadcast(&m->changed);
    pthread_mutex_unlock(&m->lock);
    metrics_add(MC_MIRROR_UPSTREAM_BYTES, len);
    fire_waiters(fire);
    return 0;
}

/* Whether a failure is the upstream's last word on this version: no
 * retry. */
static int fatal(int rc)
{
    return rc == -ESTALE || rc == -ENOENT || rc == -EACCES || rc == -EPROTO || rc == -ENOSPC ||
           rc == -EDQUOT || rc == -ECANCELED || rc == -EINVAL ||
           rc == -EPERM; /* a redirect refused (upstream_redirect_private) */
}

/* Fetches [done, len) of block b into the blob, retrying. Returns 0 or
 * -errno with err. No lock held. */
static int fetch_bytes(struct mirror *m, struct mirror_fetcher *fe, struct sink *s,
                       const char *const src[4], uint64_t len, struct st_error *err)
{
    struct upstream_answer a;
    int rc = 0;
    for (unsigned attempt = 0; fe->done < len; attempt++) {
        uint64_t got, before = fe->done;
        rc = upstream_get_range(fe->conn, src[0], src[1], src[2], src[3], s->off + fe->done,
                                len - fe->done, s->f->id.size,
                                s->f->sha256_hex[0] ? s->f->sha256_hex : NULL, sink_write, s, &got,
                                &a, err);
        if (rc == 0 && fe->done == len)
            break;
        if (rc == 0) { /* the answer ended early: ask for the rest */
            st_error_fail(err, ST_ERR_IO, "the upstream sent %" PRIu64 " of %" PRIu64 " bytes",
                          got, len - before);
            rc = -EIO;
        }
        if (fatal(rc) || attempt == RETRIES)
            return rc;
        if (fe->done == before) /* no progress: back off 0.2, 0.8, 3.2 s */
            sleep_until(m, time_mono_ns() + (a.retry_after ? a.retry_after * 1000000000ull
                                                           : 200000000ull << (2 * attempt)));
        else
            attempt = 0; /* progress: a cut connection, not a failing upstream */
    }
    return 0;
}

/* Fetches block b of f. Lock held on entry and return (released while the
 * block is transferred). */
static void do_fetch_block(struct mirror *m, struct mirror_fetcher *fe, struct mirror_file *f,
                           uint64_t b, struct mirror_waiter **fire)
{
    uint64_t len = block_len(f, b);
    struct st_error e;
    bit_clear(f->wanted, b);
    f->n_queued--;
    if (do_mirror_reserve(m, f, len) < 0) {
        st_error_fail(&e, ST_ERR_LIMIT, "the mirror's cache is full: every file in it is being "
                      "read, fetched or preloaded (mirror_cache_max_bytes %" PRIu64 ")",
                      m->opt.max_bytes);
        do_fail(m, f, &e, fire);
        return;
    }
    bit_set(f->inflight, b);
    f->n_inflight++;
    f->refs++; /* this fetch's (the download's keeps the descriptors open) */
    fe->f = f;
    fe->b = b;
    fe->done = 0;
    fe->gen = f->gen;
    char *src[4] = {xstrdup(f->src_repo), xstrdup(f->src_commit), xstrdup(f->src_path),
                    f->src_auth ? xstrdup(f->src_auth) : NULL};
    struct sink s = {.fe = fe, .f = f, .fd = f->fd, .off = b * f->block};
    pthread_mutex_unlock(&m->lock);

    int rc = fetch_bytes(m, fe, &s, (const char *const *)src, len, &e);
    for (int i = 0; i < 3; i++)
        free(src[i]);
    free_secret(src[3]);

    pthread_mutex_lock(&m->lock);
    uint64_t done = fe->done;
    int same = fe->gen == f->gen;
    fe->f = NULL;
    bit_clear(f->inflight, b);
    f->n_inflight--;
    if (rc == 0 && same) {
        bit_set(f->present, b);
        f->n_present++;
        metrics_add(MC_MIRROR_BLOCKS, 1);
        if (f->state_fd >= 0 && mirror_state_put(f->state_fd, b, f->present[b / 8]) < 0)
            log_msg(LOG_WARN, "mirror: blobs/%s.state: %s (the block is fetched again after a "
                    "restart)", f->key, strerror(errno));
    } else {
        do_mirror_release_bytes(m, f, len);
        /* What arrived of a block that failed is not counted: free it. */
        if (done > 0 && fallocate(s.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                  (off_t)s.off, (off_t)done) < 0)
            log_msg(LOG_WARN, "mirror: freeing a failed block of blobs/%s: %s", f->key,
                    strerror(errno));
        if (rc < 0 && rc != -ECANCELED)
            do_fail(m, f, &e, fire);
    }
    do_mirror_collect(m, f, fire);
    pthread_cond_broadcast(&m->changed);
    do_mirror_download_check(m, f);
    do_mirror_unref(m, f);
}

static void *fetcher_main(void *arg)
{
    struct mirror_fetcher *fe = arg;
    struct mirror *m = fe->m;
    char *buf = xmalloc(HASH_PIECE);
    pthread_mutex_lock(&m->lock);
    while (!m->stopping) {
        struct mirror_file *f = m->ring_head;
        if (!f) {
            pthread_cond_wait(&m->work, &m->lock);
            continue;
        }
        m->ring_head = f->ring_next;
        if (!m->ring_head)
            m->ring_tail = NULL;
        f->in_ring = 0;
        f->ring_next = NULL;
        struct mirror_waiter *fire = NULL;
        if (f->n_queued > 0 && !f->failed) {
            uint64_t b = do_next_block(f);
            if (f->n_queued > 1)
                do_mirror_ring_add(m, f); /* the next fetcher takes its next block */
            do_fetch_block(m, fe, f, b, &fire);
        }
        /* The fetcher that brings a block hashes what it makes contiguous. */
        if (!m->stopping && do_mirror_hash_ready(f))
            do_hash(m, f, buf, &fire);
        if (fire) {
            pthread_mutex_unlock(&m->lock);
            fire_waiters(fire);
            pthread_mutex_lock(&m->lock);
        }
    }
    pthread_mutex_unlock(&m->lock);
    free(buf);
    return NULL;
}

int mirror_fetch_start(struct mirror *m, struct st_error *err)
{
    m->n_fetchers = m->opt.fetch_threads ? m->opt.fetch_threads : 1;
    m->fetchers = xcalloc(m->n_fetchers, sizeof(*m->fetchers));
    for (unsigned i = 0; i < m->n_fetchers; i++) {
        struct mirror_fetcher *fe = &m->fetchers[i];
        fe->m = m;
        fe->conn = upstream_conn_new(m->up, &m->stop_flag);
        if (!fe->conn)
            return st_error_fail(err, ST_ERR_NO_MEMORY, "libcurl could not make a handle");
        int rc = pthread_create(&fe->thread, NULL, fetcher_main, fe);
        if (rc != 0)
            return st_error_errno(err, rc, "cannot start the mirror's fetchers");
        fe->started = 1;
    }
    return 0;
}

void mirror_fetch_stop(struct mirror *m)
{
    for (unsigned i = 0; i < m->n_fetchers; i++) {
        if (m->fetchers[i].started)
            pthread_join(m->fetchers[i].thread, NULL);
        upstream_conn_free(m->fetchers[i].conn);
    }
    free(m->fetchers);
    m->fetchers = NULL;
    m->n_fetchers = 0;
}
