/* mirror_job: see mirror_job.h. */
#include "mirror_job.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "digest.h"
#include "json_scan.h"
#include "mirror_int.h"
#include "util.h"

#define META_SLOTS 1024        /* answers kept about files (the oldest one makes room) */

struct mirror_job {
    struct mirror_jobs *js;    /* whose lock guards the fields marked so */
    struct mirror_job *next;   /* the queue (jobs->lock) */
    unsigned refs;             /* jobs->lock */
    int detached;              /* the submitter took the callback back (jobs->lock) */
    int done;                  /* ran, or was cancelled (jobs->lock) */
    atomic_int firing;         /* the callback is running */
    mirror_job_fn run;
    void *data;
    void (*free_data)(void *data);
    void (*cb)(void *arg);
    void *arg;
    int rc;                    /* what run returned (-ECANCELED until it ran) */
    struct st_error err;
};

struct meta_slot {
    char *key;                 /* repo \n rev \n path \n sha256(auth) */
    uint64_t expires_ns;
    struct mirror_meta meta;
};

/* A job thread and its upstream connection. */
struct runner {
    struct mirror_jobs *js;
    pthread_t thread;
    int started;
    struct upstream_conn *conn;
};

struct mirror_jobs {
    struct mirror *m;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct mirror_job *head, *tail;
    int stopping;
    unsigned n_runners;
    struct runner *runners;
    struct meta_slot slots[META_SLOTS];
};

/* ---- jobs ---------------------------------------------------------------------- */

static void job_free(struct mirror_job *j)
{
    if (j->free_data)
        j->free_data(j->data);
    free(j);
}

/* Drops a reference; frees the job with the last. */
static void job_unref(struct mirror_jobs *js, struct mirror_job *j)
{
    pthread_mutex_lock(&js->lock);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&js->lock);
    if (last)
        job_free(j);
}

/* The job ran (or was cancelled): its callback, unless taken back. */
static void job_finish(struct mirror_jobs *js, struct mirror_job *j)
{
    pthread_mutex_lock(&js->lock);
    j->done = 1;
    int call = !j->detached && j->cb;
    if (call)
        atomic_store(&j->firing, 1);
    pthread_mutex_unlock(&js->lock);
    if (call) {
        j->cb(j->arg);
        atomic_store(&j->firing, 0);
    }
    job_unref(js, j);
}

static void *runner_main(void *arg)
{
    struct runner *r = arg;
    struct mirror_jobs *js = r->js;
    pthread_mutex_lock(&js->lock);
    for (;;) {
        while (!js->head && !js->stopping)
            pthread_cond_wait(&js->cond, &js->lock);
        if (!js->head)
            break;
        struct mirror_job *j = js->head;
        js->head = j->next;
        if (!js->head)
            js->tail = NULL;
        int cancelled = js->stopping;
        pthread_mutex_unlock(&js->lock);
        if (!cancelled)
            j->rc = j->run(js->m, r->conn, j->data, &j->err);
        job_finish(js, j);
        pthread_mutex_lock(&js->lock);
    }
    pthread_mutex_unlock(&js->lock);
    return NULL;
}

struct mirror_job *mirror_job_submit(struct mirror *m, mirror_job_fn run, void *data,
                                     void (*free_data)(void *data), void (*cb)(void *arg),
                                     void *arg)
{
    struct mirror_jobs *js = m->jobs;
    struct mirror_job *j = xcalloc(1, sizeof(*j));
    *j = (struct mirror_job){.js = js, .refs = 2, .run = run, .data = data, .free_data = free_data,
                             .cb = cb, .arg = arg, .rc = -ECANCELED};
    st_error_fail(&j->err, ST_ERR_IO, "the mirror is stopping");
    pthread_mutex_lock(&js->lock);
    if (js->stopping) {
        pthread_mutex_unlock(&js->lock);
        j->refs = 0;
        job_free(j);
        return NULL;
    }
    if (js->tail)
        js->tail->next = j;
    else
        js->head = j;
    js->tail = j;
    pthread_cond_signal(&js->cond);
    pthread_mutex_unlock(&js->lock);
    return j;
}

void *mirror_job_data(struct mirror_job *j)
{
    return j->data;
}

void mirror_job_release(struct mirror_job *j)
{
    if (!j)
        return;
    struct mirror_jobs *js = j->js;
    pthread_mutex_lock(&js->lock);
    j->detached = 1;
    pthread_mutex_unlock(&js->lock);
    while (atomic_load(&j->firing))
        sched_yield();
    job_unref(js, j);
}

int mirror_jobs_start(struct mirror *m, unsigned threads, struct st_error *err)
{
    struct mirror_jobs *js = xcalloc(1, sizeof(*js));
    js->m = m;
    pthread_mutex_init(&js->lock, NULL);
    pthread_cond_init(&js->cond, NULL);
    js->runners = xcalloc(threads, sizeof(*js->runners));
    js->n_runners = threads;
    m->jobs = js;
    for (unsigned i = 0; i < threads; i++) {
        struct runner *r = &js->runners[i];
        r->js = js;
        r->conn = upstream_conn_new(m->up, &m->stop_flag);
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
    pthread_cond_broadcast(&js->cond);
    pthread_mutex_unlock(&js->lock);
    for (unsigned i = 0; i < js->n_runners; i++)
        if (js->runners[i].started)
            pthread_join(js->runners[i].thread, NULL);
    /* Without threads (they could not start) the queue is emptied here. */
    while (js->head) {
        struct mirror_job *j = js->head;
        js->head = j->next;
        job_finish(js, j);
    }
    for (unsigned i = 0; i < js->n_runners; i++)
        upstream_conn_free(js->runners[i].conn);
    free(js->runners);
    for (size_t i = 0; i < META_SLOTS; i++)
        free(js->slots[i].key);
    pthread_cond_destroy(&js->cond);
    pthread_mutex_destroy(&js->lock);
    m->jobs = NULL;
    free(js);
}

/* ---- what the upstream says about a file -------------------------------------- */

int mirror_meta_from_answer(const struct upstream_answer *a, struct mirror_meta *meta,
                            struct st_error *err)
{
    memset(meta, 0, sizeof(*meta));
    meta->status = a->status;
    memcpy(meta->error_code, a->error_code, sizeof(meta->error_code));
    memcpy(meta->error_message, a->error_message, sizeof(meta->error_message));
    meta->retry_after = a->retry_after;
    int found = (a->status >= 200 && a->status < 300) ||
                (a->status >= 300 && a->status < 400 && a->redirected_away);
    if (!found)
        return 0;
    meta->status = 200;
    uint8_t commit[20];
    if (strlen(a->commit) != 40 || digest_unhex(a->commit, 20, commit) < 0) {
        st_error_fail(err, ST_ERR_IO, "the upstream named no commit (X-Repo-Commit)");
        return -EPROTO;
    }
    memcpy(meta->commit, a->commit, 41);
    meta->lfs = a->linked_etag[0] != '\0';
    const char *tag = meta->lfs ? a->linked_etag : a->etag;
    if (meta->lfs ? !a->has_linked_size : !a->has_length) {
        st_error_fail(err, ST_ERR_IO, "the upstream gave no size (%s)",
                      meta->lfs ? "X-Linked-Size" : "Content-Length");
        return -EPROTO;
    }
    meta->id.size = meta->lfs ? a->linked_size : a->length;
    if (strlen(tag) == 64 && digest_unhex(tag, 32, meta->id.digest) == 0) {
        meta->id.kind = MIRROR_SHA256;
    } else if (strlen(tag) == 40 && digest_unhex(tag, 20, meta->id.digest) == 0) {
        meta->id.kind = MIRROR_GIT_SHA1;
    } else {
        st_error_fail(err, ST_ERR_IO, "the upstream's %s \"%.80s\" is neither a SHA-256 nor a "
                      "git blob id: the mirror could not check the bytes",
                      meta->lfs ? "X-Linked-Etag" : "ETag", tag);
        return -EPROTO;
    }
    return 0;
}

/* repo, rev, path and the SHA-256 of auth, in one string. */
static char *meta_key(const char *repo, const char *rev, const char *path, const char *auth)
{
    uint8_t md[32];
    unsigned len = 0;
    char hex[65];
    const char *a = auth ? auth : "";
    EVP_Digest(a, strlen(a), md, &len, EVP_sha256(), NULL);
    digest_hex(md, 32, hex);
    return xasprintf("%s\n%s\n%s\n%s%s", repo, rev, path, auth ? "" : "-", hex);
}

static size_t slot_of(const char *key)
{
    return hash_fnv1a(key, strlen(key), HASH_FNV_SEED) % META_SLOTS;
}

int mirror_meta_cached(struct mirror *m, const char *repo, const char *rev, const char *path,
                       const char *auth, struct mirror_meta *out)
{
    struct mirror_jobs *js = m->jobs;
    if (m->opt.auth_ttl == 0)
        return 0;
    char *key = meta_key(repo, rev, path, auth);
    struct meta_slot *s = &js->slots[slot_of(key)];
    pthread_mutex_lock(&js->lock);
    int hit = s->key && strcmp(s->key, key) == 0 && s->expires_ns > time_mono_ns();
    if (hit)
        *out = s->meta;
    pthread_mutex_unlock(&js->lock);
    free(key);
    return hit;
}

static void meta_store(struct mirror *m, const char *key, const struct mirror_meta *meta)
{
    struct mirror_jobs *js = m->jobs;
    if (m->opt.auth_ttl == 0)
        return;
    struct meta_slot *s = &js->slots[slot_of(key)];
    char *old;
    pthread_mutex_lock(&js->lock);
    old = s->key;
    s->key = xstrdup(key);
    s->meta = *meta;
    s->expires_ns = time_mono_ns() + (uint64_t)m->opt.auth_ttl * 1000000000ull;
    pthread_mutex_unlock(&js->lock);
    free(old);
}

struct meta_job {
    char *repo, *rev, *path, *auth, *key;
    struct mirror_meta meta;
};

static void meta_job_free(void *p)
{
    struct meta_job *d = p;
    free(d->repo);
    free(d->rev);
    free(d->path);
    free_secret(d->auth);
    free(d->key);
    free(d);
}

static int meta_job_run(struct mirror *m, struct upstream_conn *c, void *data,
                        struct st_error *err)
{
    struct meta_job *d = data;
    struct upstream_answer a;
    int rc = upstream_head_file(c, d->repo, d->rev, d->path, d->auth, &a, err);
    if (rc == 0)
        rc = mirror_meta_from_answer(&a, &d->meta, err);
    /* Only what the upstream confirmed is reused: an error is asked again. */
    if (rc == 0 && d->meta.status == 200)
        meta_store(m, d->key, &d->meta);
    upstream_answer_free(&a);
    return rc;
}

struct mirror_job *mirror_job_meta(struct mirror *m, const char *repo, const char *rev,
                                   const char *path, const char *auth, void (*cb)(void *arg),
                                   void *arg)
{
    struct meta_job *d = xcalloc(1, sizeof(*d));
    d->repo = xstrdup(repo);
    d->rev = xstrdup(rev);
    d->path = xstrdup(path);
    d->auth = auth ? xstrdup(auth) : NULL;
    d->key = meta_key(repo, rev, path, auth);
    return mirror_job_submit(m, meta_job_run, d, meta_job_free, cb, arg);
}

/* ---- documents ------------------------------------------------------------------ */

struct doc_job {
    char *method, *target, *body, *ctype, *auth;
    size_t body_len;
    struct mirror_doc doc;
};

static void doc_job_free(void *p)
{
    struct doc_job *d = p;
    free(d->method);
    free(d->target);
    free(d->body);
    free(d->ctype);
    free_secret(d->auth);
    free(d->doc.body);
    upstream_answer_free(&d->doc.a);
    free(d);
}

/* Whether doc's body is one JSON document (UTF-8, no NUL, an object or
 * an array, nothing after it); else doc->not_json says why. */
static int doc_is_json(struct mirror_doc *doc)
{
    struct json_scan s;
    const char *why = NULL;
    if (doc->len == 0)
        why = "empty";
    else if (memchr(doc->body, '\0', doc->len))
        why = "it holds a NUL byte";
    else if (!utf8_valid(doc->body, doc->len))
        why = "it is not UTF-8";
    if (!why) {
        json_scan_init(&s, doc->body, doc->len);
        if (json_scan_document(&s) < 0)
            why = s.text;
    }
    if (why)
        snprintf(doc->not_json, sizeof(doc->not_json), "%s", why);
    return !why;
}

static int doc_job_run(struct mirror *m, struct upstream_conn *c, void *data,
                       struct st_error *err)
{
    (void)m;
    struct doc_job *d = data;
    int rc = upstream_request(c, d->method, d->target, d->body, d->body_len, d->ctype, d->auth,
                              MIRROR_DOC_MAX, &d->doc.body, &d->doc.len, &d->doc.a, err);
    if (rc == 0) /* here, on a job thread: a large document is no HTTP thread's work */
        d->doc.json = doc_is_json(&d->doc);
    return rc;
}

struct mirror_job *mirror_job_doc(struct mirror *m, const char *method, const char *target,
                                  const char *body, size_t body_len, const char *content_type,
                                  const char *auth, void (*cb)(void *arg), void *arg)
{
    struct doc_job *d = xcalloc(1, sizeof(*d));
    d->method = xstrdup(method);
    d->target = xstrdup(target);
    d->body = body_len ? xstrndup(body, body_len) : NULL;
    d->body_len = body_len;
    d->ctype = content_type ? xstrdup(content_type) : NULL;
    d->auth = auth ? xstrdup(auth) : NULL;
    return mirror_job_submit(m, doc_job_run, d, doc_job_free, cb, arg);
}

int mirror_job_status(struct mirror_job *j, struct st_error *err)
{
    if (j->rc < 0 && err)
        *err = j->err;
    return j->rc;
}

const struct mirror_meta *mirror_job_meta_result(struct mirror_job *j)
{
    return j->run == meta_job_run ? &((struct meta_job *)j->data)->meta : NULL;
}

const struct mirror_doc *mirror_job_doc_result(struct mirror_job *j)
{
    return j->run == doc_job_run ? &((struct doc_job *)j->data)->doc : NULL;
}
