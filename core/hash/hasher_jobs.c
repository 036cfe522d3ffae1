/* hasher_jobs: the job table the hasher's other parts share (see
 * hasher_int.h): jobs, their queues, and the waiters linked to them. */
#include "hasher_int.h"

#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "util.h"

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

int hasher_do_held(const struct hasher *h, const struct hash_id *id)
{
    for (size_t i = 0; i < h->n_held; i++)
        if (hash_id_equal(&h->held[i], id))
            return 1;
    return 0;
}

/* Sets queued job j aside while its file is held (another reader reads it
 * now): no queue has it, and it does not count as wanted, so nobody yields
 * to it meanwhile. Returns 1 when it was. */
static int do_set_aside(struct hasher *h, struct job *j)
{
    if (!h->n_held || !hasher_do_held(h, &j->id))
        return 0;
    j->set_aside = 1;
    j->was_urgent |= j->urgent_live;
    do_taken(h, j);
    return 1;
}

void hasher_do_unhold(struct hasher *h, struct jobset *set)
{
    for (size_t i = 0; set && i < set->n; i++) {
        struct job *j = &set->jobs[i];
        if (!j->set_aside || hasher_do_held(h, &j->id))
            continue;
        j->set_aside = 0;
        if (j->state != JOB_QUEUED)
            continue;
        hasher_ready_push_front(set, j);
        if (j->was_urgent)
            hasher_do_prioritize(h, set, j);
        j->was_urgent = 0;
    }
}

struct job *hasher_take_job(struct hasher *h, struct jobset *set, int *urgent)
{
    while (set->n_urgent) {
        struct job *j = &set->jobs[set->urgent[--set->n_urgent]];
        j->in_urgent = 0;
        if (j->state == JOB_QUEUED && !do_set_aside(h, j)) {
            *urgent = 1;
            return do_taken(h, j);
        }
    }
    while (set->ready_n) {
        struct job *j = &set->jobs[set->ready[set->ready_head]];
        set->ready_head = (set->ready_head + 1) % set->n;
        set->ready_n--;
        j->in_ready = 0;
        if (j->state == JOB_QUEUED && !do_set_aside(h, j)) {
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
struct jobset *hasher_jobset_new(struct hasher *h, struct reg_snapshot *snap, uint64_t epoch)
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

void hasher_jobset_free(struct jobset *set)
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

struct reg_snapshot *hasher_do_release_snap(struct jobset *set, int always)
{
    if (!set || (set->n_open && !always) || !set->snap)
        return NULL;
    struct reg_snapshot *r = set->snap;
    set->snap = NULL;
    for (size_t i = 0; i < set->n; i++)
        set->jobs[i].f = NULL;
    return r;
}

void hasher_publish(const struct reg_file *f, const struct hash_entry *e)
{
    reg_file_set_hashes(f, e->sha256, e->has_git_sha1 ? e->git_sha1 : NULL);
}

/* ---- waiters ------------------------------------------------------------- */

void hasher_do_release(struct hwait *w)
{
    if (--w->refs == 0)
        free(w);
}

/* Firing adds w to *fire; the callbacks are made by hasher_call_fired after
 * the lock is released. */
static void hasher_do_fire(struct hasher *h, struct hwait *w, enum hasher_result r,
                           struct hwait **fire)
{
    if (w->fired)
        return;
    w->fired = 1;
    w->result = r;
    if (w->prev)
        w->prev->next = w->next;
    else
        h->waiters = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
    w->fire_next = *fire; /* the live list's reference now belongs to the fire list */
    *fire = w;
}

void hasher_do_finish_waits(struct hasher *h, struct job *j, enum hasher_result r,
                            struct hwait **fire)
{
    for (size_t k = 0; k < j->n_waits; k++) {
        struct hwait *w = j->waits[k];
        if (!w->fired && (r != HASHER_DONE || --w->remaining == 0))
            hasher_do_fire(h, w, r, fire);
        hasher_do_release(w);
    }
    free(j->waits);
    j->waits = NULL;
    j->n_waits = j->cap_waits = 0;
}

uint64_t hasher_do_expire(struct hasher *h, uint64_t now, struct hwait **fire)
{
    uint64_t next = UINT64_MAX;
    for (struct hwait *w = h->waiters, *nx; w; w = nx) {
        nx = w->next;
        if (w->deadline_ns <= now)
            hasher_do_fire(h, w, HASHER_TIMEOUT, fire);
        else if (w->deadline_ns < next)
            next = w->deadline_ns;
    }
    return next;
}

void hasher_do_fire_all(struct hasher *h, enum hasher_result r, struct hwait **fire)
{
    while (h->waiters)
        hasher_do_fire(h, h->waiters, r, fire);
}

void hasher_call_fired(struct hasher *h, struct hwait *fire)
{
    if (!fire)
        return;
    for (struct hwait *w = fire; w; w = w->fire_next)
        w->cb(w->arg, w->result);
    pthread_mutex_lock(&h->lock);
    for (struct hwait *w = fire, *nx; w; w = nx) {
        nx = w->fire_next;
        hasher_do_release(w);
    }
    pthread_mutex_unlock(&h->lock);
}

