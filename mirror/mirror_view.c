/* mirror_view: see mirror_view.h. */
#include "mirror_view.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "mirror_int.h"
#include "mirror_job.h"
#include "mirror_repos.h"
#include "util.h"

struct mirror_snap {
    atomic_uint refs;
    char *repo;
    struct mirror_repo doc;
    uint64_t bytes;                /* the memory its document takes, about */
    uint64_t resolved_ns;          /* monotonic: when it was asked for */
    int64_t age;                   /* -1: the upstream's answer then; else its age then */
    uint64_t used;                 /* the maps' clock when last found */
};

struct mirror_view {
    atomic_uint refs;
    uint64_t bytes;                /* the memory its model takes, about (its headers' text) */
    char *name;
    const char *dir;               /* in name */
    struct mirror_snap *snap;      /* a reference */
    struct mirror_model *mm;
    uint64_t used;
};

struct mirror_views {
    pthread_mutex_t lock;
    struct mirror_snap *snaps[MIRROR_SNAPS_MAX];
    struct mirror_view *views[MIRROR_VIEWS_MAX];
    uint64_t snap_bytes, view_bytes; /* of the maps' snaps and views */
    uint64_t clock;
};

/* ---- snaps ----------------------------------------------------------------------- */

void mirror_snap_unref(struct mirror_snap *s)
{
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    mirror_repo_clear(&s->doc);
    free(s->repo);
    free(s);
}

static struct mirror_snap *snap_ref(struct mirror_snap *s)
{
    atomic_fetch_add(&s->refs, 1);
    return s;
}

const char *mirror_snap_repo(const struct mirror_snap *s)
{
    return s->repo;
}

const struct mirror_repo *mirror_snap_doc(const struct mirror_snap *s)
{
    return &s->doc;
}

int64_t mirror_snap_age(const struct mirror_snap *s)
{
    if (s->age < 0)
        return -1;
    return s->age + (int64_t)((time_mono_ns() - s->resolved_ns) / 1000000000ull);
}

static int fresh(const struct mirror *m, const struct mirror_snap *s)
{
    return time_mono_ns() - s->resolved_ns < (uint64_t)m->opt.auth_ttl * 1000000000ull;
}

/* ---- the maps -------------------------------------------------------------------- */

struct mirror_views *mirror_views_new(void)
{
    struct mirror_views *vs = xcalloc(1, sizeof(*vs));
    pthread_mutex_init(&vs->lock, NULL);
    return vs;
}

void mirror_views_free(struct mirror_views *vs)
{
    if (!vs)
        return;
    for (size_t i = 0; i < MIRROR_VIEWS_MAX; i++)
        mirror_view_unref(vs->views[i]);
    for (size_t i = 0; i < MIRROR_SNAPS_MAX; i++)
        mirror_snap_unref(vs->snaps[i]);
    pthread_mutex_destroy(&vs->lock);
    free(vs);
}

/* The slot of repo's snap, or of the one to replace (empty, else least
 * recently used). */
static size_t do_snap_slot(struct mirror_views *vs, const char *repo, int *found)
{
    size_t victim = 0;
    for (size_t i = 0; i < MIRROR_SNAPS_MAX; i++) {
        struct mirror_snap *s = vs->snaps[i];
        if (s && strcmp(s->repo, repo) == 0) {
            *found = 1;
            return i;
        }
        if (!s || (vs->snaps[victim] && s->used < vs->snaps[victim]->used))
            victim = i;
    }
    *found = 0;
    return victim;
}

static size_t do_view_slot(struct mirror_views *vs, const char *name, int *found)
{
    size_t victim = 0;
    for (size_t i = 0; i < MIRROR_VIEWS_MAX; i++) {
        struct mirror_view *v = vs->views[i];
        if (v && strcmp(v->name, name) == 0) {
            *found = 1;
            return i;
        }
        if (!v || (vs->views[victim] && v->used < vs->views[victim]->used))
            victim = i;
    }
    *found = 0;
    return victim;
}

struct mirror_snap *mirror_snap_find(struct mirror *m, const char *repo)
{
    struct mirror_views *vs = m->views;
    int found;
    pthread_mutex_lock(&vs->lock);
    struct mirror_snap *s = vs->snaps[do_snap_slot(vs, repo, &found)];
    if (found && fresh(m, s)) {
        s->used = ++vs->clock;
        snap_ref(s);
    } else {
        s = NULL;
    }
    pthread_mutex_unlock(&vs->lock);
    return s;
}

/* Makes s repo's snap (the map takes a reference), unless one asked for
 * later is there; returns the one the map keeps, with a reference. */
static struct mirror_snap *snap_put(struct mirror *m, struct mirror_snap *s)
{
    struct mirror_views *vs = m->views;
    struct mirror_snap *old = NULL, *drop[MIRROR_SNAPS_MAX];
    size_t n_drop = 0;
    int found;
    pthread_mutex_lock(&vs->lock);
    size_t i = do_snap_slot(vs, s->repo, &found);
    if (found && vs->snaps[i]->resolved_ns > s->resolved_ns) {
        old = s;
        s = vs->snaps[i];
    } else {
        old = vs->snaps[i];
        vs->snap_bytes -= old ? old->bytes : 0;
        vs->snaps[i] = snap_ref(s);
        vs->snap_bytes += s->bytes;
    }
    s->used = ++vs->clock;
    snap_ref(s);
    /* Within MIRROR_SNAPS_BYTES: the least recently used go (an answer
     * that holds one keeps it until it ends). */
    while (vs->snap_bytes > MIRROR_SNAPS_BYTES) {
        size_t v = MIRROR_SNAPS_MAX;
        for (size_t k = 0; k < MIRROR_SNAPS_MAX; k++)
            if (vs->snaps[k] && vs->snaps[k] != s &&
                (v == MIRROR_SNAPS_MAX || vs->snaps[k]->used < vs->snaps[v]->used))
                v = k;
        if (v == MIRROR_SNAPS_MAX)
            break;
        vs->snap_bytes -= vs->snaps[v]->bytes;
        drop[n_drop++] = vs->snaps[v];
        vs->snaps[v] = NULL;
    }
    pthread_mutex_unlock(&vs->lock);
    mirror_snap_unref(old);
    for (size_t k = 0; k < n_drop; k++)
        mirror_snap_unref(drop[k]);
    return s;
}

/* Asks the upstream what repo's main is now: a new snap (the map's too),
 * or -errno with err. */
static int snap_ask(struct mirror *m, struct upstream_conn *c, const char *repo,
                    struct mirror_snap **out, struct st_error *err)
{
    struct mirror_snap *s = xcalloc(1, sizeof(*s));
    atomic_init(&s->refs, 1);
    s->repo = xstrdup(repo);
    s->resolved_ns = time_mono_ns();
    int rc = mirror_repo_fetch(m, c, repo, "main", &s->doc, &s->age, err);
    if (rc < 0) {
        mirror_snap_unref(s);
        return rc;
    }
    s->bytes = sizeof(*s) + s->doc.n * sizeof(*s->doc.files);
    for (size_t i = 0; i < s->doc.n; i++)
        s->bytes += strlen(s->doc.files[i].name) + 1;
    mirror_repos_learn(m, repo, &s->doc, (int64_t)time(NULL) - (s->age > 0 ? s->age : 0));
    *out = snap_put(m, s);
    mirror_snap_unref(s);
    return 0;
}

/* ---- views -------------------------------------------------------------------- */

/* The length of a model's name's repo ("org/name" or "name"): the rest,
 * after a '/', is its directory in the repo (none: the top). */
static size_t repo_len(const char *name)
{
    const char *slash = strchr(name, '/');
    const char *second = slash ? strchr(slash + 1, '/') : NULL;
    return second ? (size_t)(second - name) : strlen(name);
}

static struct mirror_view *view_ref(struct mirror_view *v)
{
    atomic_fetch_add(&v->refs, 1);
    return v;
}

void mirror_view_unref(struct mirror_view *v)
{
    if (!v || atomic_fetch_sub(&v->refs, 1) != 1)
        return;
    mirror_model_free(v->mm);
    mirror_snap_unref(v->snap);
    free(v->name);
    free(v);
}

struct mirror_model *mirror_view_model(const struct mirror_view *v)
{
    return v->mm;
}

struct mirror_file *mirror_view_open(struct mirror *m, const struct mirror_view *v,
                                     const struct reg_file *rf, struct st_error *err)
{
    return mirror_model_open(v->mm, rf, m->opt.own_auth, err);
}

struct mirror_file *mirror_view_open_other(struct mirror *m, const struct mirror_view *v,
                                           const char *name, struct st_error *err)
{
    char *path = v->dir[0] ? xasprintf("%s/%s", v->dir, name) : xstrdup(name);
    const struct mirror_repo_file *f = mirror_repo_find(&v->snap->doc, path);
    struct mirror_file *mf = NULL;
    if (!f || !f->has_id)
        st_error_fail(err, ST_ERR_NOT_FOUND, "%s has no file %s%s", v->snap->repo, path,
                      f ? " with a hash the mirror can check" : "");
    else
        mf = mirror_open(m, &f->id, &(struct mirror_src){v->snap->repo, v->snap->doc.commit,
                                                         path, m->opt.own_auth},
                         err);
    free(path);
    return mf;
}

struct mirror_view *mirror_view_find(struct mirror *m, const char *name, int64_t *age)
{
    struct mirror_views *vs = m->views;
    int found, snap_found = 0;
    pthread_mutex_lock(&vs->lock);
    struct mirror_view *v = vs->views[do_view_slot(vs, name, &found)];
    struct mirror_snap *s = found ? vs->snaps[do_snap_slot(vs, v->snap->repo, &snap_found)]
                                  : NULL;
    /* Current while the repo's fresh snap names the commit it was built at. */
    if (found && snap_found && fresh(m, s) &&
        strcmp(s->doc.commit, mirror_model_commit(v->mm)) == 0 && mirror_model_current(v->mm)) {
        v->used = s->used = ++vs->clock;
        *age = mirror_snap_age(s);
        view_ref(v);
    } else {
        v = NULL;
    }
    pthread_mutex_unlock(&vs->lock);
    return v;
}

/* The view of name at snap s's commit: the map's when it was built at it
 * (a view never changes: the answer's age is the snap's), else a new one,
 * whose build stops once *cancel is set. */
static int view_of(struct mirror *m, const char *name, struct mirror_snap *s,
                   const atomic_int *cancel, struct mirror_view **out, struct st_error *err)
{
    struct mirror_views *vs = m->views;
    int found;
    struct mirror_view *v = NULL;
    pthread_mutex_lock(&vs->lock);
    size_t i = do_view_slot(vs, name, &found);
    if (found && strcmp(mirror_model_commit(vs->views[i]->mm), s->doc.commit) == 0 &&
        mirror_model_current(vs->views[i]->mm)) {
        v = view_ref(vs->views[i]);
        v->used = ++vs->clock;
    }
    pthread_mutex_unlock(&vs->lock);
    if (v) {
        *out = v;
        return 0;
    }
    v = xcalloc(1, sizeof(*v));
    atomic_init(&v->refs, 1);
    v->name = xstrdup(name);
    size_t rl = repo_len(v->name);
    v->dir = v->name[rl] ? v->name + rl + 1 : "";
    v->snap = snap_ref(s);
    int rc = mirror_model_build(m, name, s->repo, &s->doc, v->dir, 0, cancel, &v->mm, err);
    if (rc < 0) {
        mirror_view_unref(v);
        return rc;
    }
    const struct reg_model *rm = mirror_model_reg(v->mm);
    log_msg(LOG_INFO, "mirror: model %s at %s: %zu tensors in %zu files", name, s->doc.commit,
            rm->n_tensors, rm->n_files);
    v->bytes = sizeof(*v) + rm->n_tensors * sizeof(*rm->tensors);
    for (size_t k = 0; k < rm->n_files; k++)
        v->bytes += rm->files[k].header ? rm->files[k].header->header_len : 0;
    struct mirror_view *drop[MIRROR_VIEWS_MAX];
    size_t n_drop = 0;
    pthread_mutex_lock(&vs->lock);
    i = do_view_slot(vs, name, &found);
    if (vs->views[i]) {
        vs->view_bytes -= vs->views[i]->bytes;
        drop[n_drop++] = vs->views[i];
    }
    vs->views[i] = view_ref(v);
    vs->view_bytes += v->bytes;
    v->used = ++vs->clock;
    /* Within MIRROR_VIEWS_BYTES: the least recently used go. */
    while (vs->view_bytes > MIRROR_VIEWS_BYTES) {
        size_t o = MIRROR_VIEWS_MAX;
        for (size_t k = 0; k < MIRROR_VIEWS_MAX; k++)
            if (vs->views[k] && vs->views[k] != v &&
                (o == MIRROR_VIEWS_MAX || vs->views[k]->used < vs->views[o]->used))
                o = k;
        if (o == MIRROR_VIEWS_MAX)
            break;
        vs->view_bytes -= vs->views[o]->bytes;
        drop[n_drop++] = vs->views[o];
        vs->views[o] = NULL;
    }
    pthread_mutex_unlock(&vs->lock);
    for (size_t k = 0; k < n_drop; k++)
        mirror_view_unref(drop[k]);
    *out = v;
    return 0;
}

/* ---- jobs ----------------------------------------------------------------------- */

struct view_job {
    char *name;                    /* a model's (view), or a repo's (snap) */
    int snap_only;
    struct mirror_snap *snap;
    struct mirror_view *view;
};

static void view_job_free(void *p)
{
    struct view_job *d = p;
    mirror_view_unref(d->view);
    mirror_snap_unref(d->snap);
    free(d->name);
    free(d);
}

static int view_job_run(struct mirror *m, struct upstream_conn *c, void *data,
                        struct st_error *err)
{
    struct view_job *d = data;
    char *repo = d->snap_only ? xstrdup(d->name) : xstrndup(d->name, repo_len(d->name));
    int rc = 0;
    /* Another job may have asked meanwhile. */
    if (!(d->snap = mirror_snap_find(m, repo)))
        rc = snap_ask(m, c, repo, &d->snap, err);
    if (rc == 0 && !d->snap_only)
        rc = view_of(m, d->name, d->snap, upstream_conn_abort(c), &d->view, err);
    free(repo);
    return rc;
}

static struct mirror_job *submit(struct mirror *m, uint64_t client, const char *name,
                                 int snap_only, void (*cb)(void *arg), void *arg, int *why)
{
    struct view_job *d = xcalloc(1, sizeof(*d));
    d->name = xstrdup(name);
    d->snap_only = snap_only;
    /* Identical questions share one answer: each taker takes a reference. */
    char *key = xasprintf("%s\n%s", snap_only ? "snap" : "view", name);
    struct mirror_job_spec spec = {.client = client, .key = key, .build = !snap_only,
                                   .run = view_job_run, .data = d,
                                   .free_data = view_job_free};
    struct mirror_job *j = mirror_job_submit(m, &spec, cb, arg, why);
    free(key);
    return j;
}

struct mirror_job *mirror_job_snap(struct mirror *m, uint64_t client, const char *repo,
                                   void (*cb)(void *arg), void *arg, int *why)
{
    return submit(m, client, repo, 1, cb, arg, why);
}

struct mirror_job *mirror_job_view(struct mirror *m, uint64_t client, const char *name,
                                   void (*cb)(void *arg), void *arg, int *why)
{
    return submit(m, client, name, 0, cb, arg, why);
}

int mirror_job_runs_view(const struct mirror_job *j, int snap)
{
    return mirror_job_runs(j, view_job_run) &&
           ((const struct view_job *)mirror_job_data((struct mirror_job *)j))->snap_only == snap;
}

int mirror_job_snap_take(struct mirror_job *j, struct mirror_snap **out, struct st_error *err)
{
    struct view_job *d = mirror_job_data(j);
    int rc = mirror_job_status(j, err);
    *out = rc == 0 ? snap_ref(d->snap) : NULL;
    return rc;
}

int mirror_job_view_take(struct mirror_job *j, struct mirror_view **out, int64_t *age,
                         struct st_error *err)
{
    struct view_job *d = mirror_job_data(j);
    int rc = mirror_job_status(j, err);
    *out = rc == 0 ? view_ref(d->view) : NULL;
    *age = rc == 0 ? mirror_snap_age(d->snap) : -1;
    return rc;
}
