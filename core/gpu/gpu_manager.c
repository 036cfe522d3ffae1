/* gpu_manager: the instance table and its lock, instance refcounts, leases,
 * evict and reload. The loader thread is in core/gpu/gpu_preload.c, the JSON
 * documents of one instance in core/gpu/gpu_render.c; the structures all three
 * share, and the locking rules, in core/gpu/gpu_manager_int.h. */
#include "gpu_manager.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu.h"
#include "gpu_manager_int.h"
#include "gpu_preload.h"
#include "gpu_render.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

/* ---- instances --------------------------------------------------------- */

void gm_instance_free(struct gm_model *m)
{
    pthread_mutex_destroy(&m->render_lock);
    free(m->tensors_text);
    free(m->allocs_text);
    for (size_t i = 0; i < m->n_shards; i++) {
        if (m->shards[i].a.priv || m->shards[i].a.fd >= 0)
            m->be->ops->free(m->be, &m->shards[i].a);
        free(m->shards[i].file);
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        free(m->tensors[i].name);
        free(m->tensors[i].shape);
    }
    reg_model_unref(m->rm);
    free(m->shards);
    free(m->tensors);
    free(m->name);
    free(m);
}

struct gm_model *do_gm_unref(struct gpu_manager *gm, struct gm_model *m)
{
    if (--m->refs > 0)
        return NULL;
    for (struct gm_model **pp = &gm->models; *pp; pp = &(*pp)->next) {
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    }
    return m;
}

static int is_shard(const struct reg_file *f)
{
    return f->is_safetensors && f->header && f->fd >= 0 && f->error.code == ST_OK;
}

/* Whether rm's shards are the files m was loaded from. */
static int same_files(const struct gm_model *m, const struct reg_model *rm)
{
    size_t k = 0;
    for (size_t i = 0; i < rm->n_files; i++) {
        const struct reg_file *f = &rm->files[i];
        if (!is_shard(f))
            continue;
        if (k >= m->n_shards)
            return 0;
        const struct gm_shard *s = &m->shards[k++];
        if (strcmp(s->file, f->name) != 0 || s->st.size != f->st.size || s->st.ino != f->st.ino ||
            s->st.dev != f->st.dev || s->st.mtime_ns != f->st.mtime_ns)
            return 0;
    }
    return k == m->n_shards;
}

struct gm_model *do_gm_instance_new(struct gpu_manager *gm, const struct reg_model *rm,
                                    struct gpu_backend *be, int dev)
{
    struct gm_model *m = xcalloc(1, sizeof(*m));
    pthread_mutex_init(&m->render_lock, NULL);
    m->name = xstrdup(rm->name);
    m->be = be;
    m->dev = dev;
    if (be->kind == GPU_KIND_HOST)
        snprintf(m->device, sizeof(m->device), "host");
    else
        snprintf(m->device, sizeof(m->device), "cuda:%d", be->devices[dev].index);
    m->generation = ++gm->next_generation;
    m->state = GM_LOADING;
    m->rm = reg_model_ref(rm);
    size_t *shard_of = xcalloc(rm->n_files ? rm->n_files : 1, sizeof(*shard_of));
    m->shards = xcalloc(rm->n_files ? rm->n_files : 1, sizeof(*m->shards));
    for (size_t i = 0; i < rm->n_files; i++) {
        const struct reg_file *f = &rm->files[i];
        shard_of[i] = SIZE_MAX;
        if (!is_shard(f))
            continue;
        struct gm_shard *s = &m->shards[m->n_shards];
        s->file = xstrdup(f->name);
        s->data_start = f->data_start;
        s->size = f->header->data_len;
        s->st = f->st;
        s->rf = f;
        s->a.fd = -1;
        m->total += s->size;
        shard_of[i] = m->n_shards++;
    }
    m->tensors = xcalloc(rm->n_tensors ? rm->n_tensors : 1, sizeof(*m->tensors));
    for (size_t i = 0; i < rm->n_tensors; i++) {
        const struct reg_tensor *rt = &rm->tensors[i];
        size_t fi = (size_t)(rt->file - rm->files);
        if (fi >= rm->n_files || shard_of[fi] == SIZE_MAX)
            continue;
        struct gm_tensor *t = &m->tensors[m->n_tensors++];
        t->name = xstrndup(rt->t->name, rt->t->name_len);
        t->dtype = rt->t->dtype;
        t->ndim = rt->t->ndim;
        t->shape = xcalloc(t->ndim ? t->ndim : 1, sizeof(*t->shape));
        if (t->ndim)
            memcpy(t->shape, rt->t->shape, t->ndim * sizeof(*t->shape));
        t->alloc = (uint32_t)shard_of[fi];
        t->offset = rt->t->begin;
        t->nbytes = rt->t->end - rt->t->begin;
    }
    free(shard_of);
    return m;
}

struct gm_model *do_gm_find_current(struct gpu_manager *gm, const char *name)
{
    for (struct gm_model *m = gm->models; m; m = m->next)
        if (m->current && strcmp(m->name, name) == 0)
            return m;
    return NULL;
}

void do_gm_dyn(const struct gm_model *m, struct gm_dyn *d)
{
    memset(d, 0, sizeof(*d));
    d->state = m->state;
    d->leases = m->leases;
    d->published = m->published;
    d->done = atomic_load(&m->done);
    d->t_start_ns = m->t_start_ns;
    d->t_end_ns = m->t_end_ns;
    if (m->t_end_ns) {
        d->verified = m->verified;
        memcpy(d->io_mode, m->io_mode, sizeof(d->io_mode));
    }
    if (m->state == GM_FAILED)
        memcpy(d->error, m->error, sizeof(d->error));
}

char *gm_render_and_unlock(struct gpu_manager *gm, struct gm_model *m)
{
    struct gm_dyn d;
    do_gm_dyn(m, &d);
    m->refs++;
    pthread_mutex_unlock(&gm->lock);
    char *text = gpu_render_model_text(m, &d);
    pthread_mutex_lock(&gm->lock);
    struct gm_model *dead = do_gm_unref(gm, m);
    pthread_mutex_unlock(&gm->lock);
    if (dead)
        gm_instance_free(dead);
    return text;
}

void do_gm_refused_clear(struct gpu_manager *gm, const char *model)
{
    for (struct gm_refused **pp = &gm->refused; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->model, model) == 0) {
            struct gm_refused *r = *pp;
            *pp = r->next;
            free(r->model);
            free(r);
            return;
        }
    }
}

void do_gm_refused_set(struct gpu_manager *gm, const char *model, const char *device,
                       const char *reason)
{
    do_gm_refused_clear(gm, model);
    struct gm_refused *r = xcalloc(1, sizeof(*r));
    r->model = xstrdup(model);
    snprintf(r->device, sizeof(r->device), "%s", device);
    snprintf(r->reason, sizeof(r->reason), "%s", reason);
    r->next = gm->refused;
    gm->refused = r;
}

const struct gm_refused *do_gm_refused_find(struct gpu_manager *gm, const char *model)
{
    for (const struct gm_refused *r = gm->refused; r; r = r->next)
        if (strcmp(r->model, model) == 0)
            return r;
    return NULL;
}

/* The current instance, else the newest draining one. Caller holds the lock. */
static struct gm_model *do_find_shown(struct gpu_manager *gm, const char *model)
{
    struct gm_model *m = do_gm_find_current(gm, model);
    if (m)
        return m;
    for (m = gm->models; m; m = m->next) /* newest first */
        if (strcmp(m->name, model) == 0)
            return m;
    return NULL;
}

struct gm_model *do_gm_retire(struct gpu_manager *gm, struct gm_model *m)
{
    m->current = 0;
    if (m->state == GM_LOADING)
        atomic_store(&m->cancel, 1);
    if (m->state != GM_FAILED)
        m->state = GM_DRAINING;
    return do_gm_unref(gm, m);
}

/* ---- device names ------------------------------------------------------ */

int gm_resolve_device(struct gpu_manager *gm, const char *name, struct gpu_backend **be, int *dev,
                      const char **code, char *msg, size_t msglen)
{
    enum gpu_kind kind;
    int index;
    const char *uuid;
    if (gpu_parse_device(name, &kind, &index, &uuid) < 0) {
        *code = "bad_device";
        snprintf(msg, msglen, "device \"%.100s\" is not \"host\", \"cuda:N\", or a GPU-... or "
                 "MIG-... UUID as nvidia-smi -L prints it", name);
        return 400;
    }
    if (kind == GPU_KIND_HOST) {
        *be = gm->host;
        *dev = 0;
        return 0;
    }
    if (!gm->cuda) {
        *code = "gpu_unavailable";
        snprintf(msg, msglen, "no GPU: %s", gm->cuda_reason);
        return 503;
    }
    *dev = gpu_find_device(gm->cuda, index, uuid);
    if (*dev < 0) {
        *code = "bad_device";
        snprintf(msg, msglen, "no CUDA device %.100s (%zu present)", name, gm->cuda->n_devices);
        return 400;
    }
    const struct gpu_device *d = &gm->cuda->devices[*dev];
    if (d->error[0]) {
        *code = "gpu_unavailable";
        snprintf(msg, msglen, "CUDA device %d (%.60s) cannot be used: %s", d->index, d->name,
                 d->error);
        return 503;
    }
    *be = gm->cuda;
    return 0;
}

/* ---- public API -------------------------------------------------------- */

struct gpu_manager *gpu_manager_new(const struct config *cfg, struct registry_holder *holder)
{
    struct gpu_manager *gm = xcalloc(1, sizeof(*gm));
    gm->cfg = cfg;
    gm->holder = holder;
    pthread_mutex_init(&gm->lock, NULL);
    pthread_cond_init(&gm->cond, NULL);
    gm->host = gpu_host_new();
    gm->cuda = gpu_cuda_probe(gm->cuda_reason, sizeof(gm->cuda_reason));
    gm->socket_path = config_ipc_socket_path(cfg);
    if (gm->cuda)
        log_msg(LOG_INFO, "gpu: %zu CUDA device(s)", gm->cuda->n_devices);
    else
        log_msg(LOG_INFO, "gpu: no CUDA (%s); the host backend serves leases", gm->cuda_reason);
    return gm;
}

int gpu_manager_start(struct gpu_manager *gm, char *err, size_t errlen)
{
    if (gpu_preload_start(gm, err, errlen) < 0)
        return -1;
    pthread_mutex_lock(&gm->lock);
    gm->started = 1;
    pthread_mutex_unlock(&gm->lock);
    return 0;
}

json_t *gpu_manager_status_json(struct gpu_manager *gm)
{
    json_t *devs = json_array(), *backends = json_array(), *models = json_array();
    json_array_append_new(backends, json_string("host"));
    if (gm->cuda) {
        json_array_append_new(backends, json_string("cuda"));
        for (size_t i = 0; i < gm->cuda->n_devices; i++) {
            const struct gpu_device *d = &gm->cuda->devices[i];
            json_t *o = json_pack("{s:i,s:s,s:s,s:I}", "index", d->index, "uuid", d->uuid, "name",
                                  d->name, "memory_bytes", (json_int_t)d->memory_bytes);
            if (d->error[0])
                json_object_set_new(o, "error", json_string(d->error));
            json_array_append_new(devs, o);
        }
    }
    pthread_mutex_lock(&gm->lock);
    for (struct gm_model *m = gm->models; m; m = m->next)
        json_array_append_new(models, json_pack("{s:s,s:s,s:s,s:I,s:i}", "name", m->name, "state",
                                                gm_state_name(m->state), "device", m->device,
                                                "generation", (json_int_t)m->generation, "leases",
                                                (int)m->leases));
    pthread_mutex_unlock(&gm->lock);
    json_t *o = json_pack("{s:b,s:o,s:o,s:s,s:o}", "available", gm->cuda != NULL, "devices", devs,
                          "backends", backends, "ipc_socket", gm->socket_path ? gm->socket_path : "",
                          "models", models);
    if (!gm->cuda)
        json_object_set_new(o, "reason", json_string(gm->cuda_reason));
    return o;
}

char *gpu_manager_model_text(struct gpu_manager *gm, const char *model, int *http_status)
{
    *http_status = 200;
    pthread_mutex_lock(&gm->lock);
    struct gm_model *m = do_find_shown(gm, model);
    if (m)
        return gm_render_and_unlock(gm, m);
    const struct gm_refused *r = do_gm_refused_find(gm, model);
    json_t *o = r ? json_pack("{s:s,s:s,s:s,s:s}", "model", model, "state", "failed", "device",
                              r->device, "reason", r->reason)
                  : json_pack("{s:s,s:s}", "model", model, "state", "none");
    pthread_mutex_unlock(&gm->lock);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

json_t *gpu_manager_model_json(struct gpu_manager *gm, const char *model, int *http_status)
{
    char *text = gpu_manager_model_text(gm, model, http_status);
    json_t *o = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return o;
}

json_t *gpu_manager_model_summary(struct gpu_manager *gm, const char *model)
{
    pthread_mutex_lock(&gm->lock);
    struct gm_model *m = do_find_shown(gm, model);
    const struct gm_refused *r = m ? NULL : do_gm_refused_find(gm, model);
    json_t *o = json_pack("{s:s}", "state", m ? gm_state_name(m->state) : r ? "failed" : "none");
    if (r)
        json_object_set_new(o, "device", json_string(r->device));
    if (m) {
        json_object_set_new(o, "device", json_string(m->device));
        json_object_set_new(o, "generation", json_integer((json_int_t)m->generation));
    }
    pthread_mutex_unlock(&gm->lock);
    return o;
}

char *gpu_manager_preload_text(struct gpu_manager *gm, const char *model, const char *body,
                               size_t body_len, int *http_status)
{
    json_error_t jerr;
    json_t *req = json_loadb(body, body_len, JSON_REJECT_DUPLICATES, &jerr);
    const char *device = json_string_value(json_object_get(req, "device"));
    char *doc;
    if (!req || !json_is_object(req) || !device) {
        *http_status = 400;
        doc = gpu_render_error_text("bad_request", "the body must be a JSON object with "
                                    "\"device\": \"cuda:N\", a GPU UUID or \"host\"");
    } else {
        *http_status = gpu_preload_request(gm, model, device, 0, &doc);
    }
    json_decref(req);
    return doc;
}

json_t *gpu_manager_preload(struct gpu_manager *gm, const char *model, const char *body,
                            size_t body_len, int *http_status)
{
    char *text = gpu_manager_preload_text(gm, model, body, body_len, http_status);
    json_t *o = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return o;
}

json_t *gpu_manager_evict(struct gpu_manager *gm, const char *model, int *http_status)
{
    json_t *doc;
    pthread_mutex_lock(&gm->lock);
    struct gm_model *m = do_gm_find_current(gm, model);
    if (!m) {
        pthread_mutex_unlock(&gm->lock);
        return gpu_render_http_error(http_status, 404, "not_loaded",
                                     "model %.200s is not preloaded", model);
    }
    struct gm_model *dead = do_gm_retire(gm, m);
    if (dead) {
        doc = json_pack("{s:s,s:s,s:I}", "model", model, "state", "none", "generation",
                        (json_int_t)m->generation);
        *http_status = 200;
    } else {
        doc = json_pack("{s:s,s:s,s:I,s:i}", "model", model, "state", "draining", "generation",
                        (json_int_t)m->generation, "leases", (int)m->leases);
        *http_status = 202;
    }
    pthread_mutex_unlock(&gm->lock);
    log_msg(LOG_INFO, "gpu: evicted %s%s", model, dead ? "" : " (draining until leases end)");
    if (dead)
        gm_instance_free(dead);
    return doc;
}

void gpu_manager_on_reload(struct gpu_manager *gm, struct registry *snap)
{
    struct gm_model *dead_list = NULL;
    pthread_mutex_lock(&gm->lock);
    /* A preload that took the holder's snapshot before this one is swapped
     * in must not load the old files: it compares with this (see
     * gpu_preload_request). */
    struct registry *old_latest = gm->latest;
    gm->latest = registry_ref(snap);
    size_t n = 0;
    for (struct gm_model *m = gm->models; m; m = m->next)
        n += m->current;
    struct gm_model **cur = xcalloc(n ? n : 1, sizeof(*cur));
    n = 0;
    for (struct gm_model *m = gm->models; m; m = m->next)
        if (m->current)
            cur[n++] = m;
    for (size_t i = 0; i < n; i++) {
        struct gm_model *m = cur[i];
        const struct reg_model *rm = registry_find_model(snap, m->name, strlen(m->name));
        int valid = rm && rm->state == MODEL_READY;
        if (valid && same_files(m, rm))
            continue;
        struct gpu_backend *be = m->be;
        int dev = m->dev, startup = m->startup;
        log_msg(LOG_INFO, "gpu: %s changed on disk: %s", m->name,
                valid ? "reloading it into a new generation" : "evicting it");
        if (startup) { /* the replacement inherits the start-up accounting */
            m->startup = 0;
        }
        struct gm_model *dead = do_gm_retire(gm, m);
        if (dead) {
            dead->qnext = dead_list;
            dead_list = dead;
        }
        if (valid) {
            struct gm_model *nm = do_gm_instance_new(gm, rm, be, dev);
            nm->startup = startup;
            do_gpu_preload_enqueue(gm, nm);
        } else if (startup && gm->startup_pending > 0) {
            gm->startup_pending--;
        }
    }
    pthread_mutex_unlock(&gm->lock);
    if (old_latest)
        registry_unref(old_latest);
    free(cur);
    while (dead_list) {
        struct gm_model *d = dead_list;
        dead_list = d->qnext;
        gm_instance_free(d);
    }
}

int gpu_manager_ready(struct gpu_manager *gm)
{
    pthread_mutex_lock(&gm->lock);
    int ready = gm->started && gm->startup_pending == 0;
    pthread_mutex_unlock(&gm->lock);
    return ready;
}

void gpu_manager_update_metrics(struct gpu_manager *gm)
{
    uint64_t bytes = 0, leases = 0;
    pthread_mutex_lock(&gm->lock);
    for (struct gm_model *m = gm->models; m; m = m->next) {
        leases += m->leases;
        if (m->published)
            for (size_t i = 0; i < m->n_shards; i++)
                bytes += m->shards[i].a.alloc_size;
    }
    double bps = gm->last_bps;
    pthread_mutex_unlock(&gm->lock);
    metrics_set_gpu(bytes, leases, bps);
}

int gpu_manager_wait_idle(struct gpu_manager *gm, int timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    pthread_mutex_lock(&gm->lock);
    while ((gm->qhead || gm->loading) && rc == 0)
        rc = pthread_cond_timedwait(&gm->cond, &gm->lock, &dl);
    pthread_mutex_unlock(&gm->lock);
    return rc == 0 ? 0 : -1;
}

void gpu_manager_free(struct gpu_manager *gm)
{
    if (!gm)
        return;
    gpu_preload_stop(gm);
    while (gm->models) {
        struct gm_model *m = gm->models;
        gm->models = m->next;
        gm_instance_free(m);
    }
    if (gm->latest)
        registry_unref(gm->latest);
    while (gm->refused)
        do_gm_refused_clear(gm, gm->refused->model);
    if (gm->cuda)
        gm->cuda->ops->destroy(gm->cuda);
    gm->host->ops->destroy(gm->host);
    pthread_cond_destroy(&gm->cond);
    pthread_mutex_destroy(&gm->lock);
    free(gm->socket_path);
    free(gm);
}

/* ---- leases ------------------------------------------------------------ */

struct gpu_lease *gpu_manager_open(struct gpu_manager *gm, const char *model, const char *device,
                                   uint64_t lease_id, char **answer, int *fds, size_t max_fds,
                                   size_t *n_fds)
{
    struct gpu_backend *be = NULL;
    int dev = -1;
    *n_fds = 0;
    if (device && *device) {
        const char *code;
        char msg[512];
        if (gm_resolve_device(gm, device, &be, &dev, &code, msg, sizeof(msg))) {
            *answer = gpu_error_answer_text(code, "%s", msg);
            return NULL;
        }
    }
    pthread_mutex_lock(&gm->lock);
    struct gm_model *m = do_gm_find_current(gm, model);
    if (!m) {
        *answer = gpu_error_answer_text("not_loaded", "model %.200s is not preloaded", model);
        goto fail;
    }
    if (be && (m->be != be || m->dev != dev)) {
        *answer = gpu_error_answer_text("wrong_device", "model %.200s is on %s, not %.100s", model,
                                        m->device, device);
        goto fail;
    }
    if (m->state != GM_READY) {
        uint64_t done = atomic_load(&m->done);
        if (m->state == GM_LOADING)
            *answer = gpu_error_answer_text("loading", "model %.200s is still loading (%.0f%%)",
                                            model, m->total ? 100.0 * (double)done /
                                                                  (double)m->total : 0.0);
        else
            *answer = gpu_error_answer_text("failed", "preloading model %.200s failed: %s", model,
                                            m->error);
        goto fail;
    }
    if (m->n_shards > max_fds) {
        *answer = gpu_error_answer_text("too_many_shards", "model %.200s has %zu shards; at most "
                                        "%zu can be passed in one answer", model, m->n_shards,
                                        max_fds);
        goto fail;
    }
    for (size_t i = 0; i < m->n_shards; i++)
        fds[i] = m->shards[i].a.fd;
    *n_fds = m->n_shards;
    m->refs++;
    m->leases++;
    pthread_mutex_unlock(&gm->lock);
    /* The lease's reference keeps m, and its published allocations, as
     * they are: the answer is rendered without the lock. */
    *answer = gpu_render_open_text(m, lease_id);
    metrics_add(MC_LEASES_TOTAL, 1);
    struct gpu_lease *l = xmalloc(sizeof(*l));
    l->m = m;
    return l;
fail:
    pthread_mutex_unlock(&gm->lock);
    return NULL;
}

void gpu_lease_release(struct gpu_manager *gm, struct gpu_lease *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&gm->lock);
    struct gm_model *m = l->m;
    m->leases--;
    struct gm_model *dead = do_gm_unref(gm, m);
    pthread_mutex_unlock(&gm->lock);
    if (dead) {
        log_msg(LOG_INFO, "gpu: last lease on %s (generation %llu) ended: memory released",
                dead->name, (unsigned long long)dead->generation);
        gm_instance_free(dead);
    }
    free(l);
}

json_t *gpu_manager_list_json(struct gpu_manager *gm)
{
    json_t *models = json_array();
    pthread_mutex_lock(&gm->lock);
    for (struct gm_model *m = gm->models; m; m = m->next)
        if (m->current)
            json_array_append_new(models, json_pack("{s:s,s:s,s:s,s:I}", "name", m->name, "state",
                                                    gm_state_name(m->state), "device", m->device,
                                                    "generation", (json_int_t)m->generation));
    pthread_mutex_unlock(&gm->lock);
    return json_pack("{s:b,s:o}", "ok", 1, "models", models);
}
