/* mirror_job: see mirror_job.h.
 *
 * One mutex, js->lock, guards the clients' queues, the questions in
 * flight by key, and every question's state and holders; a leaf (nothing
 * else is taken with it, no callback runs under it). Functions named do_*
 * run with it held. */
#include "mirror_job.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "mirror_int.h"
#include "util.h"

enum q_state { Q_QUEUED, Q_RUNNING, Q_DONE };

_Static_assert(MIRROR_JOB_BUILDS < MIRROR_JOB_THREADS, "a build never takes the last thread");

#define KEY_BUCKETS 256 /* questions in flight by key: a few thousand at most */

/* A question to the upstream, held by its submitters' jobs and, while it
 * runs, by the thread running it. */
struct question {
    char *key;                 /* in js->by_key while queued or running; NULL when never shared */
    struct question *hnext;    /* its js->by_key chain */
    struct client *client;     /* whose queue it waits in (Q_QUEUED) */
    struct question *next;     /* that queue */
    enum q_state state;
    int build;                 /* it builds a model: MIRROR_JOB_BUILDS run at once */
    struct runner *runner;     /* the thread running it (Q_RUNNING; NULL when the stop ends it) */
    unsigned holders;          /* jobs not released, and the running thread */
    struct mirror_job *jobs;   /* the submitters to call back, while not Q_DONE */
    mirror_job_fn run;
    void *data;
    void (*free_data)(void *data);
    int rc;                    /* what run returned (-ECANCELED until it ran) */
    struct st_error err;
};

/* A submitter's hold on a question. */
struct mirror_job {
    struct mirror_jobs *js;
    struct question *q;
    struct mirror_job *next;   /* the question's submitters to call back */
    void (*cb)(void *arg);
    void *arg;
    int detached;              /* the submitter took the callback back */
    atomic_int firing;         /* the callback is running */
};

/* A client with questions waiting: in the ring while it has any. */
struct client {
    uint64_t id;
    struct question *head, *tail;
    unsigned n;
    struct client *next;       /* the ring (circular); js->turn is the next one to serve */
};

/* A job thread and its upstream connection. */
struct runner {
    struct mirror_jobs *js;
    pthread_t thread;
    int started;
    struct upstream_conn *conn;
    atomic_int abort;          /* stops conn's requests: its question lost its submitters, or
                                * the mirror stops (set under js->lock, cleared at each take) */
};

struct mirror_jobs {
    struct mirror *m;
    pthread_mutex_t lock;
    pthread_cond_t cond;       /* a question was queued, a build ended, or stopping */
    struct client *turn;       /* the ring of clients with questions; NULL when none */
    unsigned queued;           /* questions waiting, all clients */
    unsigned builds;           /* build questions running */
    struct question *by_key[KEY_BUCKETS]; /* the questions in flight that have a key */
    uint64_t seed;             /* by_key's (hash_seed): the keys are callers' names */
    int stopping;
    struct runner runners[MIRROR_JOB_THREADS];
};

/* ---- questions ----------------------------------------------------------------- */

static void question_free(struct question *q)
{
    if (q->free_data)
        q->free_data(q->data);
    free(q->key);
    free(q);
}

/* Drops a hold on q; returns q when that was the last (the caller frees it
 * after unlocking). */
static struct question *do_drop(struct question *q)
{
    return --q->holders == 0 ? q : NULL;
}

static struct question **bucket(struct mirror_jobs *js, const char *key)
{
    return &js->by_key[hash_fnv1a(key, strlen(key), js->seed) % KEY_BUCKETS];
}

/* The question in flight asked with key, or NULL. */
static struct question *do_find(struct mirror_jobs *js, const char *key)
{
    for (struct question *q = *bucket(js, key); q; q = q->hnext)
        if (strcmp(q->key, key) == 0)
            return q;
    return NULL;
}

/* Takes q out of the questions in flight by key (a no-op when it is not
 * there: forgotten when its submitters left). */
static void do_forget_key(struct mirror_jobs *js, struct question *q)
{
    if (!q->key)
        return;
    struct question **pp = bucket(js, q->key);
    while (*pp && *pp != q)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = q->hnext;
}

/* Takes q out of its client's queue (the client leaves the ring when that
 * was its last). */
static void do_unqueue(struct mirror_jobs *js, struct question *q)
{
    struct client *c = q->client;
    struct question **pp = &c->head, *prev = NULL;
    while (*pp != q) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    *pp = q->next;
    if (c->tail == q)
        c->tail = prev;
    q->next = NULL;
    q->client = NULL;
    c->n--;
    js->queued--;
    metrics_set_mirror_queue(js->queued);
    if (c->n)
        return;
    struct client *before = c;
    while (before->next != c)
        before = before->next;
    if (before == c) {
        js->turn = NULL;
    } else {
        before->next = c->next;
        if (js->turn == c)
            js->turn = c->next;
    }
    free(c);
}

/* The next question to ask: the first of the client whose turn it is
 * (the turn then passes on), or NULL. While MIRROR_JOB_BUILDS builds
 * run, a build waits: the client's first other question goes instead, and
 * a client with builds only passes its turn on. */
static struct question *do_take(struct mirror_jobs *js)
{
    struct client *c = js->turn;
    int builds_full = js->builds >= MIRROR_JOB_BUILDS;
    struct question *q = NULL;
    if (!c)
        return NULL;
    do {
        for (q = c->head; q && builds_full && q->build; q = q->next)
            ;
        if (!q)
            c = c->next;
    } while (!q && c != js->turn);
    if (!q)
        return NULL;
    js->turn = c->next;
    do_unqueue(js, q);
    q->state = Q_RUNNING;
    js->builds += q->build ? 1 : 0;
    return q;
}

/* The question has its answer (or was cancelled): its submitters' jobs are
 * called back, outside the lock, unless they took their callback back;
 * then the caller's hold on it goes. A job being called back is marked
 * (firing) under the lock, so its release waits for the call; one not
 * called may be freed as soon as the lock is released, and is not
 * touched again. */
static void finish(struct mirror_jobs *js, struct question *q)
{
    pthread_mutex_lock(&js->lock);
    if (q->build) { /* its place: a build that waits for one may run */
        js->builds--;
        pthread_cond_signal(&js->cond);
    }
    q->runner = NULL;
    if (q->state != Q_DONE)
        do_forget_key(js, q);
    q->state = Q_DONE;
    size_t n = 0;
    for (struct mirror_job *j = q->jobs; j; j = j->next)
        n++;
    struct mirror_job **call = xmalloc((n ? n : 1) * sizeof(*call));
    n = 0;
    for (struct mirror_job *j = q->jobs; j; j = j->next)
        if (!j->detached) {
            atomic_store(&j->firing, 1);
            call[n++] = j;
        }
    q->jobs = NULL;
    pthread_mutex_unlock(&js->lock);
    for (size_t i = 0; i < n; i++) {
        call[i]->cb(call[i]->arg);
        atomic_store(&call[i]->firing, 0);
    }
    free(call);
    pthread_mutex_lock(&js->lock);
    struct question *last = do_drop(q);
    pthread_mutex_unlock(&js->lock);
    if (last)
        question_free(last);
}

static void *runner_main(void *arg)
{
    struct runner *r = arg;
    struct mirror_jobs *js = r->js;
    pthread_mutex_lock(&js->lock);
    while (!js->stopping) {
        struct question *q = do_take(js);
        if (!q) {
            pthread_cond_wait(&js->cond, &js->lock);
            continue;
        }
        q->holders++; /* this thread's, which finish drops */
        q->runner = r;
        atomic_store(&r->abort, 0);
        pthread_mutex_unlock(&js->lock);
        q->rc = q->run(js->m, r->conn, q->data, &q->err);
        finish(js, q);
        pthread_mutex_lock(&js->lock);
    }
    pthread_mutex_unlock(&js->lock);
    return NULL;
}

/* ---- submitting ---------------------------------------------------------------- */

/* The client id's entry of the ring, made (as the last to be served) when
 * it has none, or NULL when its share of the queue is full. */
static struct client *do_client(struct mirror_jobs *js, uint64_t id)
{
    struct client *c = js->turn;
    if (c) {
        do {
            if (c->id == id)
                return c->n < MIRROR_JOBS_PER_CLIENT ? c : NULL;
            c = c->next;
        } while (c != js->turn);
    }
    c = xcalloc(1, sizeof(*c));
    c->id = id;
    if (!js->turn) {
        c->next = c;
        js->turn = c;
    } else { /* just before the one whose turn it is: served last */
        struct client *before = js->turn;
        while (before->next != js->turn)
            before = before->next;
        before->next = c;
        c->next = js->turn;
    }
    return c;
}

struct mirror_job *mirror_job_submit(struct mirror *m, const struct mirror_job_spec *spec,
                                     void (*cb)(void *arg), void *arg, int *why)
{
    struct mirror_jobs *js = m->jobs;
    struct mirror_job *j = xcalloc(1, sizeof(*j));
    *j = (struct mirror_job){.js = js, .cb = cb, .arg = arg};
    struct question *q = NULL;
    int shared = 0;
    *why = 0;
    pthread_mutex_lock(&js->lock);
    if (js->stopping) {
        *why = -ECANCELED;
        goto refused;
    }
    q = spec->key ? do_find(js, spec->key) : NULL;
    if (q) { /* asked already: its answer is this one's too */
        shared = 1;
        metrics_add(MC_MIRROR_QUESTIONS_SHARED, 1);
    } else {
        struct client *c = js->queued < MIRROR_JOBS_QUEUED ? do_client(js, spec->client) : NULL;
        if (!c) {
            *why = -EAGAIN;
            metrics_add(MC_MIRROR_QUESTIONS_REFUSED, 1);
            goto refused;
        }
        q = xcalloc(1, sizeof(*q));
        *q = (struct question){.key = spec->key ? xstrdup(spec->key) : NULL, .client = c,
                               .build = spec->build, .run = spec->run, .data = spec->data,
                               .free_data = spec->free_data, .rc = -ECANCELED};
        st_error_fail(&q->err, ST_ERR_IO, "the mirror is stopping");
        if (c->tail)
            c->tail->next = q;
        else
            c->head = q;
        c->tail = q;
        c->n++;
        js->queued++;
        metrics_set_mirror_queue(js->queued);
        if (q->key) {
            struct question **b = bucket(js, q->key);
            q->hnext = *b;
            *b = q;
        }
        pthread_cond_signal(&js->cond);
    }
    q->holders++;
    j->q = q;
    j->next = q->jobs;
    q->jobs = j;
    pthread_mutex_unlock(&js->lock);
    if (shared && spec->free_data) /* the one in flight answers */
        spec->free_data(spec->data);
    return j;
refused:
    pthread_mutex_unlock(&js->lock);
    if (spec->free_data)
        spec->free_data(spec->data);
    free(j);
    return NULL;
}

void *mirror_job_data(struct mirror_job *j)
{
    return j->q->data;
}

int mirror_job_runs(const struct mirror_job *j, mirror_job_fn fn)
{
    return j->q->run == fn;
}

int mirror_job_status(struct mirror_job *j, struct st_error *err)
{
    if (j->q->rc < 0 && err)
        *err = j->q->err;
    return j->q->rc;
}

void mirror_job_release(struct mirror_job *j)
{
    if (!j)
        return;
    struct mirror_jobs *js = j->js;
    struct question *q = j->q, *last;
    pthread_mutex_lock(&js->lock);
    j->detached = 1;
    if (q->state != Q_DONE) { /* no callback to come: out of the list */
        struct mirror_job **pp = &q->jobs;
        while (*pp != j)
            pp = &(*pp)->next;
        *pp = j->next;
    }
    if (q->state == Q_QUEUED && !q->jobs) { /* nobody waits for it: never asked */
        do_unqueue(js, q);
        do_forget_key(js, q);
        q->state = Q_DONE;
        metrics_add(MC_MIRROR_QUESTIONS_ABANDONED, 1);
    } else if (q->state == Q_RUNNING && !q->jobs && q->runner) { /* stopped where it waits */
        atomic_store(&q->runner->abort, 1);
        do_forget_key(js, q); /* an identical question from now on is asked anew */
        metrics_add(MC_MIRROR_QUESTIONS_ABANDONED, 1);
    }
    last = do_drop(q);
    pthread_mutex_unlock(&js->lock);
    while (atomic_load(&j->firing))
        sched_yield();
    free(j);
    if (last)
        question_free(last);
}

/* ---- start and stop ------------------------------------------------------------ */

int mirror_jobs_start(struct mirror *m, struct st_error *err)
{
    struct mirror_jobs *js = xcalloc(1, sizeof(*js));
    js->seed = hash_seed(js);
    js->m = m;
    pthread_mutex_init(&js->lock, NULL);
    pthread_cond_init(&js->cond, NULL);
    m->jobs = js;
    for (unsigned i = 0; i < MIRROR_JOB_THREADS; i++) {
        struct runner *r = &js->runners[i];
        r->js = js;
        atomic_init(&r->abort, 0);
        r->conn = upstream_conn_new(m->up, &r->abort);
        if (!r->conn)
            return st_error_fail(err, ST_ERR_NO_MEMORY, "libcurl could not make a handle");
        int rc = pthread_create(&r->thread, NULL, runner_main, r);
        if (rc != 0)
            return st_error_errno(err, rc, "cannot start the mirror's job threads");
        r->started = 1;
    }
    return 0;
}

void mirror_jobs_stop(struct mirror *m)
{
    struct mirror_jobs *js = m->jobs;
    if (!js)
        return;
    pthread_mutex_lock(&js->lock);
    js->stopping = 1;
    for (unsigned i = 0; i < MIRROR_JOB_THREADS; i++) /* requests in flight end at once */
        atomic_store(&js->runners[i].abort, 1);
    pthread_cond_broadcast(&js->cond);
    pthread_mutex_unlock(&js->lock);
    for (unsigned i = 0; i < MIRROR_JOB_THREADS; i++)
        if (js->runners[i].started)
            pthread_join(js->runners[i].thread, NULL);
    /* What still waits is answered as cancelled (the threads are gone). */
    for (;;) {
        pthread_mutex_lock(&js->lock);
        struct question *q = do_take(js);
        if (q)
            q->holders++;
        pthread_mutex_unlock(&js->lock);
        if (!q)
            break;
        finish(js, q);
    }
    for (unsigned i = 0; i < MIRROR_JOB_THREADS; i++)
        upstream_conn_free(js->runners[i].conn);
    pthread_cond_destroy(&js->cond);
    pthread_mutex_destroy(&js->lock);
    m->jobs = NULL;
    free(js);
}
