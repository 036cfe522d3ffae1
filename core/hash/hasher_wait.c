/* hasher_wait: the API of callers that need a hash before they can answer
 * (hasher_lookup, hasher_want, hasher_wait, hasher_retry_after), and of
 * other readers of the same files (hasher_hold, hasher_release), on the job
 * table (hasher_int.h).
 *
 * A waiter is linked to the job of every file it waits for; each job that
 * finishes takes one from its count, and the last one, a failure, the
 * deadline (the housekeeper's) or a stop fires it. A fired waiter is
 * unlinked lazily: jobs drop their references as they finish or their set
 * is freed, and the waiter is freed with the last one. Callbacks are made
 * after the hasher's lock is released, so one may call back into the
 * hasher (hasher_lookup) or into libmicrohttpd. */
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>

#include "hasher_int.h"
#include "util.h"

int hasher_lookup(struct hasher *h, const struct reg_file *f, struct hash_entry *out)
{
    struct hash_id id;
    if (!h || (f->error.code != ST_OK && f->fd < 0))
        return 0;
    hash_id_from_stat(&f->st, &id);
    return hashstore_lookup(h->store, &id, out);
}

/* Drops j's links to waiters that already fired (timed out): a client that
 * asks again and again for a slow file must not grow the list for as long
 * as the file takes. */
static void do_prune(struct job *j)
{
    size_t out = 0;
    for (size_t k = 0; k < j->n_waits; k++) {
        if (j->waits[k]->fired)
            hasher_do_release(j->waits[k]);
        else
            j->waits[out++] = j->waits[k];
    }
    j->n_waits = out;
}

/* The job each file still waits on, or NULL when its hash is known. Returns
 * -1 when some file will not be hashed. */
static int pending_jobs(struct hasher *h, const struct reg_file *const *files, size_t n,
                        struct job **jobs)
{
    for (size_t i = 0; i < n; i++) {
        struct hash_id id;
        jobs[i] = NULL;
        if (files[i]->error.code != ST_OK && files[i]->fd < 0)
            return -1; /* it could not be opened: it will not be hashed */
        hash_id_from_stat(&files[i]->st, &id);
        if (hashstore_lookup(h->store, &id, NULL))
            continue;
        struct job *j = hasher_find_job(h, h->set, &id);
        if (!j || j->state == JOB_FAILED)
            return -1;
        if (j->state != JOB_DONE)
            jobs[i] = j;
    }
    return 0;
}

enum hasher_state hasher_want(struct hasher *h, const struct reg_file *const *files, size_t n,
                              unsigned timeout_ms, hasher_cb cb, void *arg)
{
    struct job *one, **jobs = n > 1 ? xmalloc(n * sizeof(*jobs)) : &one;
    enum hasher_state st = HASHER_KNOWN;
    pthread_mutex_lock(&h->lock);
    if (h->stopped || pending_jobs(h, files, n, jobs) != 0) {
        st = HASHER_UNAVAILABLE;
        goto out;
    }
    struct hwait *w = NULL;
    for (size_t i = 0; i < n; i++) {
        struct job *j = jobs[i];
        if (!j)
            continue;
        st = HASHER_PENDING;
        hasher_do_prioritize(h, h->set, j);
        if (!cb)
            continue;
        if (!w) {
            w = xcalloc(1, sizeof(*w));
            w->cb = cb;
            w->arg = arg;
            w->deadline_ns = time_mono_ns() + (uint64_t)timeout_ms * 1000000u;
            w->refs = 1; /* the live list's */
            w->next = h->waiters;
            if (h->waiters)
                h->waiters->prev = w;
            h->waiters = w;
        }
        if (j->n_waits == j->cap_waits)
            do_prune(j);
        j->waits = xgrow(j->waits, &j->cap_waits, j->n_waits, sizeof(*j->waits), 2);
        j->waits[j->n_waits++] = w;
        w->refs++;
        w->remaining++;
    }
    if (st == HASHER_PENDING) {
        pthread_cond_broadcast(&h->work);
        pthread_cond_signal(&h->hk); /* a new deadline */
    }
out:
    pthread_mutex_unlock(&h->lock);
    if (jobs != &one)
        free(jobs);
    return st;
}

struct blocking {
    sem_t done;                /* posted once r is set */
    enum hasher_result r;
};

static void wake(void *arg, enum hasher_result r)
{
    struct blocking *b = arg;
    b->r = r;
    sem_post(&b->done);
}

enum hasher_result hasher_wait(struct hasher *h, const struct reg_file *const *files, size_t n,
                               unsigned timeout_ms)
{
    struct blocking b;
    sem_init(&b.done, 0, 0);
    enum hasher_state st = hasher_want(h, files, n, timeout_ms, wake, &b);
    enum hasher_result r = st == HASHER_KNOWN ? HASHER_DONE : HASHER_FAILED;
    if (st == HASHER_PENDING) {
        /* The callback comes exactly once (the deadline is the hasher's). */
        while (sem_wait(&b.done) != 0)
            ; /* EINTR */
        r = b.r;
    }
    sem_destroy(&b.done);
    return r;
}

unsigned hasher_retry_after(struct hasher *h, const struct reg_file *const *files, size_t n)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        if (!hasher_lookup(h, files[i], NULL))
            bytes += files[i]->st.size;
    double rate = (double)atomic_load(&h->rate_bps);
    rate = rate > 50e6 ? rate : 50e6;
    double secs = (double)bytes / rate + 1.0; /* plus whatever is being hashed right now */
    return secs >= 3600 ? 3600u : (unsigned)secs;
}

/* ---- holds: another reader of the same files ---------------------------- */

struct hasher_hold {
    size_t n;
    struct hash_id ids[]; /* the files held, one entry each in h->held */
};

struct hasher_hold *hasher_hold(struct hasher *h, const struct reg_file *const *files, size_t n,
                                int *needed)
{
    memset(needed, 0, n * sizeof(*needed));
    struct hasher_hold *hold = malloc(sizeof(*hold) + (n ? n : 1) * sizeof(hold->ids[0]));
    if (!hold)
        return NULL;
    hold->n = n;
    for (size_t i = 0; i < n; i++)
        hash_id_from_stat(&files[i]->st, &hold->ids[i]);
    pthread_mutex_lock(&h->lock);
    if (h->n_held + n > h->cap_held) {
        size_t cap = 2 * (h->n_held + n);
        struct hash_id *v = realloc(h->held, cap * sizeof(*v));
        if (!v) {
            pthread_mutex_unlock(&h->lock);
            free(hold);
            return NULL;
        }
        h->held = v;
        h->cap_held = cap;
    }
    memcpy(h->held + h->n_held, hold->ids, n * sizeof(hold->ids[0]));
    h->n_held += n;
    for (size_t i = 0; i < n; i++) {
        const struct job *j = h->set ? hasher_find_job(h, h->set, &hold->ids[i]) : NULL;
        needed[i] = j && j->state != JOB_DONE && j->state != JOB_FAILED;
    }
    for (unsigned w = 0; w < h->n_workers; w++)
        if (h->is_running[w] && hasher_do_held(h, &h->running[w]))
            atomic_store(&h->held_run[w], 1);
    pthread_cond_broadcast(&h->nap); /* a paced worker on a held file: make way now */
    pthread_mutex_unlock(&h->lock);
    return hold;
}

void hasher_release(struct hasher *h, struct hasher_hold *hold)
{
    if (!hold)
        return;
    pthread_mutex_lock(&h->lock);
    for (size_t i = 0; i < hold->n; i++) {
        for (size_t k = 0; k < h->n_held; k++) {
            if (hash_id_equal(&h->held[k], &hold->ids[i])) {
                h->held[k] = h->held[--h->n_held];
                break;
            }
        }
    }
    hasher_do_unhold(h, h->set);
    pthread_cond_broadcast(&h->work);
    pthread_mutex_unlock(&h->lock);
    free(hold);
}
