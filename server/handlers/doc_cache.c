/* doc_cache: see doc_cache.h.
 *
 * Locking: the cache's mutex guards the queue and is held only to add or
 * take a job or a waiter, never across a render or a callback; a model's
 * doc_lock (core/registry/registry.h) only to copy or swap a document pointer. The
 * two are never held together. */
#include "doc_cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hub_doc.h"
#include "log.h"
#include "metrics.h"
#include "model_doc.h"
#include "util.h"

struct doc_waiter {
    doc_cb cb;
    void *arg;
    struct doc_waiter *next;
};

/* One document to render, and who waits for it. */
struct doc_job {
    const struct reg_model *m;  /* held (a repo's: its model, or NULL) */
    const struct reg_repo *r;   /* a repo's document: held; else NULL */
    enum doc_kind kind;
    struct doc_waiter *waiters;
    struct doc_job *next;
};

struct doc_cache {
    pthread_mutex_t lock;
    pthread_cond_t cond;        /* the renderer: a job, or stop */
    struct doc_job *head, *tail;
    struct doc_job *current;    /* being rendered (off the queue) */
    int stopping;
    int stopped;                /* the thread has been joined */
    pthread_t thread;
};

/* Whether description d of m may be sent as it is (doc_cache.h). */
static int description_fresh(const struct reg_model *m, const struct shared_doc *d)
{
    size_t known = model_doc_hashes_known(m);
    if (d->key == known)
        return 1;
    if (known == m->n_files)
        return 0; /* complete now: the next answer shows it */
    return time_mono_ns() - d->made_ns < (uint64_t)DOC_REFRESH_MS * 1000000u;
}

struct shared_doc *doc_cache_get(const struct reg_model *m, enum doc_kind kind, int fresh)
{
    if (kind == DOC_HEADER)
        return reg_model_doc(m, REG_DOC_HEADER);
    struct shared_doc *d = reg_model_doc(m, REG_DOC_MODEL);
    if (d && fresh && !description_fresh(m, d)) {
        shared_doc_unref(d);
        d = NULL;
    }
    return d;
}

/* ---- rendering (the renderer's thread) ---------------------------------- */

/* The description's middle: cached while the model's hashes come in, so
 * each state of the description shares it. NULL when out of memory. */
static struct shared_doc *description_middle(const struct reg_model *m,
                                             const struct shared_doc *cur)
{
    struct shared_doc *mid = reg_model_doc(m, REG_DOC_MODEL_BODY);
    if (!mid && cur)
        mid = shared_doc_ref(cur->middle);
    if (mid)
        return mid;
    size_t len;
    char *text = model_doc_description_middle(m, &len);
    if (!text)
        return NULL;
    metrics_add(MC_DOCS_RENDERED, 1);
    return shared_doc_new(text, len, 0);
}

static enum doc_result render_description(const struct reg_model *m)
{
    struct shared_doc *cur = reg_model_doc(m, REG_DOC_MODEL), *mid = NULL, *d = NULL;
    enum doc_result r = DOC_NO_MEMORY;
    char *ends = NULL;
    if (cur && description_fresh(m, cur)) {
        r = DOC_READY; /* made for an earlier request, after this one asked */
        goto out;
    }
    mid = description_middle(m, cur);
    if (!mid)
        goto out;
    size_t head_len, len, known;
    ends = model_doc_description_ends(m, &head_len, &len, &known);
    if (!ends)
        goto out;
    d = shared_doc_join(ends, head_len, mid, ends + head_len, len - head_len, known);
    if (!d)
        goto out;
    shared_doc_compress(d); /* here, once per state: never on an HTTP thread */
    metrics_add(MC_DOCS_RENDERED, 1);
    reg_model_set_doc(m, REG_DOC_MODEL, d);
    /* Complete: the description never changes again and holds the middle
     * itself; until then the model keeps it for the next state. */
    reg_model_set_doc(m, REG_DOC_MODEL_BODY, known == m->n_files ? NULL : mid);
    r = DOC_READY;
out:
    free(ends);
    shared_doc_unref(d);
    shared_doc_unref(mid);
    shared_doc_unref(cur);
    return r;
}

static enum doc_result render_header(const struct reg_model *m)
{
    struct shared_doc *cur = reg_model_doc(m, REG_DOC_HEADER);
    if (cur) {
        shared_doc_unref(cur);
        return DOC_READY;
    }
    char *text = model_doc_header(m);
    if (!text)
        return DOC_NO_MEMORY;
    struct shared_doc *d = shared_doc_new(text, strlen(text), 0);
    shared_doc_compress(d);
    metrics_add(MC_DOCS_RENDERED, 1);
    reg_model_set_doc(m, REG_DOC_HEADER, d);
    shared_doc_unref(d);
    return DOC_READY;
}

/* The repo's slot of a document kind. */
static enum reg_repo_doc_kind repo_slot(enum doc_kind kind)
{
    return kind == DOC_REPO_INFO              ? REG_REPO_DOC_INFO
           : kind == DOC_REPO_LISTING_EXPANDED ? REG_REPO_DOC_LISTING_EXPANDED
                                              : REG_REPO_DOC_LISTING;
}

static struct shared_doc *repo_kept(const struct reg_repo *r, enum doc_kind kind)
{
    return reg_repo_doc(r, repo_slot(kind));
}

struct shared_doc *doc_cache_get_repo(const struct reg_repo *r, enum doc_kind kind)
{
    return shared_doc_ref(repo_kept(r, kind));
}

/* A repo's document, made once and kept by the repo (hub_doc.h). */
static enum doc_result render_repo(const struct doc_job *j)
{
    const struct reg_repo_rev *rev = reg_repo_revision(j->r);
    if (repo_kept(j->r, j->kind))
        return DOC_READY; /* made for an earlier request, after this one asked */
    int rc = -ENOMEM;
    struct shared_doc *d = !rev ? NULL
                           : j->kind == DOC_REPO_INFO
                               ? hub_doc_info(j->r, rev, j->m, &rc)
                               : hub_doc_listing(j->r, rev, j->kind == DOC_REPO_LISTING_EXPANDED);
    if (!d)
        return rc == -ESTALE ? DOC_STALE : DOC_NO_MEMORY;
    if (j->kind == DOC_REPO_INFO)
        shared_doc_compress(d); /* answers send it whole: compressed once, here */
    metrics_add(MC_DOCS_RENDERED, 1);
    reg_repo_set_doc(j->r, repo_slot(j->kind), d);
    return DOC_READY;
}

static enum doc_result render(const struct doc_job *j)
{
    switch (j->kind) {
    case DOC_HEADER:
        return render_header(j->m);
    case DOC_DESCRIPTION:
        return render_description(j->m);
    default:
        return render_repo(j);
    }
}

/* The job is done: what it held goes. */
static void job_free(struct doc_job *j)
{
    reg_model_unref(j->m);
    reg_repo_unref(j->r);
    free(j);
}

static void call_waiters(struct doc_waiter *w, enum doc_result r)
{
    while (w) {
        struct doc_waiter *next = w->next;
        w->cb(w->arg, r);
        free(w);
        w = next;
    }
}

static void *renderer_main(void *arg)
{
    struct doc_cache *dc = arg;
    pthread_mutex_lock(&dc->lock);
    for (;;) {
        while (!dc->stopping && !dc->head)
            pthread_cond_wait(&dc->cond, &dc->lock);
        if (dc->stopping)
            break;
        struct doc_job *j = dc->head;
        dc->head = j->next;
        if (!dc->head)
            dc->tail = NULL;
        dc->current = j;
        pthread_mutex_unlock(&dc->lock);
        enum doc_result r = render(j);
        if (r == DOC_NO_MEMORY && !j->r)
            log_msg(LOG_WARN, "out of memory rendering the %s of model %s (%zu tensors)",
                    j->kind == DOC_HEADER ? "merged header" : "description", j->m->name,
                    j->m->n_tensors);
        else if (r == DOC_NO_MEMORY)
            log_msg(LOG_WARN, "out of memory rendering the %s of repo %s (%zu files)",
                    j->kind == DOC_REPO_INFO ? "document" : "listing", j->r->id, j->r->n_files);
        pthread_mutex_lock(&dc->lock);
        dc->current = NULL;
        struct doc_waiter *w = j->waiters; /* NULL when doc_cache_stop took them */
        pthread_mutex_unlock(&dc->lock);
        call_waiters(w, r);
        job_free(j);
        pthread_mutex_lock(&dc->lock);
    }
    pthread_mutex_unlock(&dc->lock);
    return NULL;
}

/* ---- the API ------------------------------------------------------------- */

struct doc_cache *doc_cache_start(void)
{
    struct doc_cache *dc = xcalloc(1, sizeof(*dc));
    pthread_mutex_init(&dc->lock, NULL);
    pthread_cond_init(&dc->cond, NULL);
    if (pthread_create(&dc->thread, NULL, renderer_main, dc) != 0) {
        fprintf(stderr, "tensord: cannot start the document renderer\n");
        abort();
    }
    pthread_setname_np(dc->thread, "tensord-docs");
    return dc;
}

/* The job for (m, r, kind), queued or being rendered, or NULL. Caller
 * holds the lock. */
static struct doc_job *do_find_job(struct doc_cache *dc, const struct reg_model *m,
                                   const struct reg_repo *r, enum doc_kind kind)
{
    if (dc->current && dc->current->m == m && dc->current->r == r && dc->current->kind == kind)
        return dc->current;
    for (struct doc_job *j = dc->head; j; j = j->next)
        if (j->m == m && j->r == r && j->kind == kind)
            return j;
    return NULL;
}

/* Queues (m, r, kind) unless it is queued or rendering, and adds a waiter. */
int doc_cache_render(struct doc_cache *dc, const struct reg_model *m, const struct reg_repo *r,
                     enum doc_kind kind, doc_cb cb, void *arg)
{
    struct doc_waiter *w = xcalloc(1, sizeof(*w));
    w->cb = cb;
    w->arg = arg;
    pthread_mutex_lock(&dc->lock);
    if (dc->stopping) {
        pthread_mutex_unlock(&dc->lock);
        free(w);
        return -1;
    }
    struct doc_job *j = do_find_job(dc, m, r, kind);
    if (!j) {
        j = xcalloc(1, sizeof(*j));
        j->m = m ? reg_model_ref(m) : NULL;
        j->r = r ? reg_repo_ref(r) : NULL;
        j->kind = kind;
        if (dc->tail)
            dc->tail->next = j;
        else
            dc->head = j;
        dc->tail = j;
        pthread_cond_signal(&dc->cond);
    }
    w->next = j->waiters;
    j->waiters = w;
    pthread_mutex_unlock(&dc->lock);
    return 0;
}

void doc_cache_stop(struct doc_cache *dc)
{
    pthread_mutex_lock(&dc->lock);
    if (dc->stopped) {
        pthread_mutex_unlock(&dc->lock);
        return;
    }
    dc->stopping = 1;
    struct doc_job *queued = dc->head;
    dc->head = dc->tail = NULL;
    struct doc_waiter *rendering = dc->current ? dc->current->waiters : NULL;
    if (dc->current)
        dc->current->waiters = NULL;
    pthread_cond_signal(&dc->cond);
    pthread_mutex_unlock(&dc->lock);
    call_waiters(rendering, DOC_STOPPED);
    while (queued) {
        struct doc_job *next = queued->next;
        call_waiters(queued->waiters, DOC_STOPPED);
        job_free(queued);
        queued = next;
    }
    pthread_join(dc->thread, NULL);
    pthread_mutex_lock(&dc->lock);
    dc->stopped = 1;
    pthread_mutex_unlock(&dc->lock);
}

void doc_cache_free(struct doc_cache *dc)
{
    if (!dc)
        return;
    doc_cache_stop(dc);
    pthread_mutex_destroy(&dc->lock);
    pthread_cond_destroy(&dc->cond);
    free(dc);
}
