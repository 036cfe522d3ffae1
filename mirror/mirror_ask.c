/* mirror_ask: see mirror_ask.h. */
#include "mirror_ask.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "json_scan.h"
#include "mirror_health.h"
#include "mirror_int.h"
#include "mirror_names.h"
#include "mirror_repos.h"
#include "util.h"

#define META_SLOTS 1024        /* answers kept about files (the oldest one makes room) */

struct meta_slot {
    char *key;                 /* repo \n rev \n path \n sha256(auth) */
    uint64_t expires_ns;
    struct mirror_meta meta;
};

/* The answers kept about files; its lock is a leaf. */
struct mirror_asks {
    pthread_mutex_t lock;
    uint64_t seed;             /* the slots' (hash_seed): a caller must not aim at another's */
    struct meta_slot slots[META_SLOTS];
};

struct mirror_asks *mirror_asks_new(void)
{
    struct mirror_asks *a = xcalloc(1, sizeof(*a));
    pthread_mutex_init(&a->lock, NULL);
    a->seed = hash_seed(a);
    return a;
}

void mirror_asks_free(struct mirror_asks *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < META_SLOTS; i++)
        free(a->slots[i].key);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

/* ---- what the upstream says about a file -------------------------------------- */

int mirror_meta_from_answer(const struct upstream_answer *a, struct mirror_meta *meta,
                            struct st_error *err)
{
    memset(meta, 0, sizeof(*meta));
    meta->stale = -1;
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

/* ---- the upstream failing --------------------------------------------------- */

int mirror_ask_unreachable(int rc)
{
    return rc == -EHOSTUNREACH;
}

/* Whether the upstream failed a request that returned rc (an answer of
 * that status when 0): no answer or a server error, whose answer the last
 * one kept may stand in for (RFC 5861's stale-if-error). Its health hears
 * of it: down for no answer or a gateway's error, up for any other
 * (mirror_health_answered_unusable included: that request's failure). */
static int upstream_failed(struct mirror *m, int rc, long status, const struct st_error *why)
{
    char text[64];
    if (rc == -ECANCELED) /* the mirror stopping, or nobody waits: nobody's fault */
        return 0;
    if (mirror_health_answered_unusable(rc)) {
        mirror_health_ok(m);
        return 0;
    }
    if (rc == 0 && !mirror_health_status_down(status)) {
        mirror_health_ok(m);
        return status >= 500;
    }
    if (rc == 0)
        snprintf(text, sizeof(text), "it answered %ld", status);
    mirror_health_failed(m, rc == 0 ? text : why->message);
    return 1;
}

/* The error of a question the upstream could not answer, nothing kept. */
static int unreachable(struct mirror *m, const struct st_error *why, const char *what,
                       struct st_error *err)
{
    st_error_fail(err, ST_ERR_IO, "the upstream %s cannot be reached (%s), and the mirror keeps "
                  "no answer about %s%s", upstream_base(m->up), why->message, what,
                  m->opt.serve_stale ? " that it may give this caller"
                                     : " (mirror_offline is strict)");
    return -EHOSTUNREACH;
}

/* repo, rev, path and the SHA-256 of auth ("-" first when there is none),
 * in one string: the cache's key and the queue's. */
static char *meta_key(const char *repo, const char *rev, const char *path, const char *auth)
{
    char hex[65];
    digest_sha256_hex(auth ? auth : "", auth ? strlen(auth) : 0, hex);
    return xasprintf("meta\n%s\n%s\n%s\n%s%s", repo, rev, path, auth ? "" : "-", hex);
}

static size_t slot_of(const struct mirror_asks *as, const char *key)
{
    return hash_fnv1a(key, strlen(key), as->seed) % META_SLOTS;
}

int mirror_meta_cached(struct mirror *m, const char *repo, const char *rev, const char *path,
                       const char *auth, struct mirror_meta *out)
{
    struct mirror_asks *as = m->asks;
    if (m->opt.auth_ttl == 0)
        return 0;
    char *key = meta_key(repo, rev, path, auth);
    struct meta_slot *s = &as->slots[slot_of(as, key)];
    pthread_mutex_lock(&as->lock);
    int hit = s->key && strcmp(s->key, key) == 0 && s->expires_ns > time_mono_ns();
    if (hit)
        *out = s->meta;
    pthread_mutex_unlock(&as->lock);
    free(key);
    return hit;
}

static void meta_store(struct mirror *m, const char *key, const struct mirror_meta *meta)
{
    struct mirror_asks *as = m->asks;
    if (m->opt.auth_ttl == 0)
        return;
    struct meta_slot *s = &as->slots[slot_of(as, key)];
    char *old;
    pthread_mutex_lock(&as->lock);
    old = s->key;
    s->key = xstrdup(key);
    s->meta = *meta;
    s->expires_ns = time_mono_ns() + (uint64_t)m->opt.auth_ttl * 1000000000ull;
    pthread_mutex_unlock(&as->lock);
    free(old);
}

struct meta_job {
    char *repo, *rev, *path, *auth, *key;
    struct mirror_meta meta;
};

/* A found file's metadata as the names store keeps it (text; read back by
 * mirror_kept_meta_parse). */
static char *meta_text(const struct mirror_meta *mt)
{
    char hex[65];
    digest_hex(mt->id.digest, mt->id.kind == MIRROR_SHA256 ? 32 : 20, hex);
    return xasprintf("%s %d %s %" PRIu64 "\n", mt->commit, mt->lfs, hex, mt->id.size);
}

int mirror_kept_meta_parse(const char *text, struct mirror_meta *mt)
{
    char commit[41], hex[65];
    int lfs, end = 0;
    uint64_t size;
    memset(mt, 0, sizeof(*mt));
    if (sscanf(text, "%40[0-9a-f] %d %64[0-9a-f] %" SCNu64 "\n%n", commit, &lfs, hex, &size,
               &end) != 4 || text[end] != '\0' || strlen(commit) != 40)
        return -EINVAL;
    size_t n = strlen(hex);
    if ((n != 64 && n != 40) || digest_unhex(hex, n / 2, mt->id.digest) < 0)
        return -EINVAL;
    mt->status = 200;
    memcpy(mt->commit, commit, 41);
    mt->lfs = lfs != 0;
    mt->id.kind = n == 64 ? MIRROR_SHA256 : MIRROR_GIT_SHA1;
    mt->id.size = size;
    return 0;
}

/* The names store's key of a file's metadata (whom it was given to aside). */
static char *meta_name(const struct meta_job *d)
{
    return xasprintf("meta\n%s\n%s\n%s", d->repo, d->rev, d->path);
}

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
    struct st_error why = {0};
    int rc = -EHOSTUNREACH, asked = !mirror_health_paused(m);
    char *name = meta_name(d), *kept = NULL;
    memset(&a, 0, sizeof(a));
    if (asked)
        rc = upstream_head_file(c, d->repo, d->rev, d->path, d->auth, &a, &why);
    else
        st_error_fail(&why, ST_ERR_IO, "it failed the last request(s)");
    if (!asked || upstream_failed(m, rc, a.status, &why)) {
        size_t len;
        int64_t age;
        if (mirror_names_get(m, name, &(struct mirror_asker){d->auth, 0}, &kept, &len, &age) &&
            mirror_kept_meta_parse(kept, &d->meta) == 0) {
            d->meta.stale = age;
            mirror_health_served_stale(m);
            rc = 0;
        } else if (rc < 0 || !asked) {
            rc = rc == -ECANCELED ? rc : unreachable(m, &why, d->path, err);
        } else { /* the upstream's 5xx, passed on */
            rc = mirror_meta_from_answer(&a, &d->meta, err);
        }
    } else if (rc == 0) {
        rc = mirror_meta_from_answer(&a, &d->meta, err);
        /* Only what the upstream confirmed is reused: an error is asked again. */
        if (rc == 0 && d->meta.status == 200) {
            char *text = meta_text(&d->meta);
            meta_store(m, d->key, &d->meta);
            mirror_names_put(m, name, &(struct mirror_asker){d->auth, 0}, text, strlen(text));
            free(text);
            if (!d->auth) /* what it told a caller with a token, never listed */
                mirror_repos_learn_file(m, d->repo, d->meta.commit, d->path, &d->meta.id,
                                        d->meta.lfs);
        }
    } else {
        st_error_fail(err, why.code, "%s", why.message);
    }
    free(kept);
    free(name);
    upstream_answer_free(&a);
    return rc;
}

struct mirror_job *mirror_job_meta(struct mirror *m, uint64_t client, const char *repo,
                                   const char *rev, const char *path, const char *auth,
                                   void (*cb)(void *arg), void *arg, int *why)
{
    struct meta_job *d = xcalloc(1, sizeof(*d));
    d->repo = xstrdup(repo);
    d->rev = xstrdup(rev);
    d->path = xstrdup(path);
    d->auth = auth ? xstrdup(auth) : NULL;
    d->key = meta_key(repo, rev, path, auth);
    char *key = xstrdup(d->key); /* d may be freed by the submit */
    struct mirror_job_spec spec = {.client = client, .key = key, .run = meta_job_run,
                                   .data = d, .free_data = meta_job_free};
    struct mirror_job *j = mirror_job_submit(m, &spec, cb, arg, why);
    free(key);
    return j;
}

/* ---- documents ------------------------------------------------------------------ */

struct doc_job {
    char *method, *target, *body, *ctype, *auth;
    char *name;                /* the names store's key (whom it was given to aside) */
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
    free(d->name);
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

/* A document as the names store keeps it: its status and the headers
 * passed on, a line each (header values hold no control byte), an empty
 * line, the body. */
static char *doc_text(const struct mirror_doc *doc, size_t *len)
{
    const struct upstream_answer *a = &doc->a;
    char *out = xasprintf("%ld\n%s\n%s\n%s\n%s\n\n", a->status, a->commit, a->etag,
                          a->cache_control, a->link ? a->link : "");
    size_t hl = strlen(out);
    out = xrealloc(out, hl + doc->len + 1);
    memcpy(out + hl, doc->body, doc->len);
    out[hl + doc->len] = '\0';
    *len = hl + doc->len;
    return out;
}

/* Copies line *p (up to '\n') into out (cap bytes); moves *p past it. A
 * line with a control byte is refused: it goes out as a header value. */
static int take_line(const char **p, const char *end, char *out, size_t cap)
{
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    if (!nl || (size_t)(nl - *p) >= cap)
        return -1;
    for (const char *c = *p; c < nl; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            return -1;
    memcpy(out, *p, (size_t)(nl - *p));
    out[nl - *p] = '\0';
    *p = nl + 1;
    return 0;
}

int mirror_kept_doc_parse(const char *text, size_t len, struct mirror_doc *doc)
{
    const char *p = text, *end = text + len;
    char status[16], link[8192], empty[2];
    struct upstream_answer *a = &doc->a;
    if (take_line(&p, end, status, sizeof(status)) < 0 ||
        take_line(&p, end, a->commit, sizeof(a->commit)) < 0 ||
        take_line(&p, end, a->etag, sizeof(a->etag)) < 0 ||
        take_line(&p, end, a->cache_control, sizeof(a->cache_control)) < 0 ||
        take_line(&p, end, link, sizeof(link)) < 0 || take_line(&p, end, empty, 1) < 0)
        return -EINVAL;
    a->status = strtol(status, NULL, 10);
    a->link = link[0] ? xstrdup(link) : NULL;
    doc->len = (size_t)(end - p);
    doc->body = xstrndup(p, doc->len);
    return a->status >= 200 && a->status < 300 ? 0 : -EINVAL;
}

static int doc_job_run(struct mirror *m, struct upstream_conn *c, void *data,
                       struct st_error *err)
{
    struct doc_job *d = data;
    struct st_error why = {0};
    int rc = -EHOSTUNREACH, asked = !mirror_health_paused(m);
    d->doc.stale = -1;
    if (asked)
        rc = upstream_request(c, d->method, d->target, d->body, d->body_len, d->ctype, d->auth,
                              MIRROR_DOC_MAX, &d->doc.body, &d->doc.len, &d->doc.a, &why);
    else
        st_error_fail(&why, ST_ERR_IO, "it failed the last request(s)");
    if (!asked || upstream_failed(m, rc, d->doc.a.status, &why)) {
        char *kept = NULL;
        size_t len;
        int64_t age;
        struct mirror_doc was = {0};
        if (mirror_names_get(m, d->name, &(struct mirror_asker){d->auth, 0}, &kept, &len, &age) &&
            mirror_kept_doc_parse(kept, len, &was) == 0 && doc_is_json(&was)) {
            free(d->doc.body);
            upstream_answer_free(&d->doc.a);
            d->doc = was;
            d->doc.stale = age;
            mirror_health_served_stale(m);
            rc = 0;
        } else {
            free(was.body);
            upstream_answer_free(&was.a);
            if (rc < 0 || !asked) /* else the upstream's 5xx, passed on */
                rc = rc == -ECANCELED ? rc : unreachable(m, &why, d->target, err);
        }
        free(kept);
    } else if (rc < 0) {
        st_error_fail(err, why.code, "%s", why.message);
    }
    if (rc == 0 && d->doc.stale < 0) { /* here, on a job thread: no HTTP thread's work */
        d->doc.json = doc_is_json(&d->doc);
        if (d->doc.json && d->doc.a.status >= 200 && d->doc.a.status < 300) {
            size_t len;
            char *text = doc_text(&d->doc, &len);
            mirror_names_put(m, d->name, &(struct mirror_asker){d->auth, 0}, text, len);
            free(text);
            if (!d->auth && strcmp(d->method, "GET") == 0)
                mirror_repos_learn_doc(m, d->target, d->doc.body, d->doc.len);
        }
    } else if (rc == 0) {
        d->doc.json = 1; /* checked just above */
    }
    return rc;
}

struct mirror_job *mirror_job_doc(struct mirror *m, uint64_t client, const char *method,
                                  const char *target, const char *body, size_t body_len,
                                  const char *content_type, const char *auth,
                                  void (*cb)(void *arg), void *arg, int *why)
{
    struct doc_job *d = xcalloc(1, sizeof(*d));
    d->method = xstrdup(method);
    d->target = xstrdup(target);
    d->body = body_len ? xstrndup(body, body_len) : NULL;
    d->body_len = body_len;
    d->ctype = content_type ? xstrdup(content_type) : NULL;
    d->auth = auth ? xstrdup(auth) : NULL;
    /* The same request: method, target, body and its type, Authorization. */
    char auth_hex[65], body_hex[65];
    digest_sha256_hex(auth ? auth : "", auth ? strlen(auth) : 0, auth_hex);
    digest_sha256_hex(body ? body : "", body_len, body_hex);
    char *key = xasprintf("doc\n%s\n%s\n%s\n%s%s\n%s", method, target,
                          content_type ? content_type : "", auth ? "" : "-", auth_hex, body_hex);
    d->name = xasprintf("doc\n%s\n%s\n%s\n%s", method, target,
                        content_type ? content_type : "", body_hex);
    struct mirror_job_spec spec = {.client = client, .key = key, .run = doc_job_run,
                                   .data = d, .free_data = doc_job_free};
    struct mirror_job *j = mirror_job_submit(m, &spec, cb, arg, why);
    free(key);
    return j;
}

const struct mirror_meta *mirror_job_meta_result(struct mirror_job *j)
{
    return mirror_job_runs(j, meta_job_run) ? &((struct meta_job *)mirror_job_data(j))->meta
                                            : NULL;
}

const struct mirror_doc *mirror_job_doc_result(struct mirror_job *j)
{
    return mirror_job_runs(j, doc_job_run) ? &((struct doc_job *)mirror_job_data(j))->doc
                                           : NULL;
}
