/* gpu_manager: instances, the loader thread, leases and eviction. */
#include "gpu_manager.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpu.h"
#include "gpu_load.h"
#include "ipc_server.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

enum gm_state { GM_LOADING, GM_READY, GM_FAILED, GM_DRAINING };

static const char *const state_names[] = {"loading", "ready", "failed", "draining"};

struct gm_shard {
    char *file;                /* name within the model */
    uint64_t data_start, size; /* the data buffer in the file */
    struct fileio_stat st;     /* of the file loaded, to notice changes on reload */
    const struct reg_file *rf; /* while loading (the instance holds the snapshot) */
    struct gpu_alloc a;
    uint64_t checksum;         /* ipc_tsum of the bytes */
};

struct gm_tensor {
    char *name;
    enum dtype dtype;
    uint32_t ndim;
    uint64_t *shape;
    uint32_t alloc;            /* shard index */
    uint64_t offset, nbytes;   /* within the allocation */
};

struct gm_model {
    struct gm_model *next;     /* every live instance, newest first */
    struct gm_model *qnext;    /* load queue */
    unsigned refs;             /* guarded by gm->lock: table + loader + one per lease */
    unsigned leases;           /* guarded by gm->lock */
    int current;               /* what new opens get; 0 once evicted or replaced */
    int startup;               /* a config preload: counts toward gpu_manager_ready */
    char *name;
    struct gpu_backend *be;
    int dev;                   /* device ordinal (index into be->devices) */
    char device[24];           /* "host" or "cuda:N" */
    uint64_t generation;
    enum gm_state state;       /* guarded by gm->lock */
    char error[512];           /* why it failed */
    _Atomic uint64_t done;     /* bytes copied */
    uint64_t total;
    uint64_t t_start_ns, t_end_ns;
    char io_mode[32];
    int verified;
    int published;             /* ready was reached: allocations are filled (guarded by gm->lock) */
    atomic_int cancel;         /* evicted or replaced while loading */
    size_t n_shards;
    struct gm_shard *shards;
    size_t n_tensors;
    struct gm_tensor *tensors;
    struct registry *snap;     /* referenced from creation until the load ends */
    const struct reg_model *rm;
};

struct gpu_lease {
    struct gm_model *m;
};

struct gpu_manager {
    const struct config *cfg;
    struct registry_holder *holder;
    struct gpu_backend *host, *cuda;
    char cuda_reason[256];
    char *socket_path;
    pthread_mutex_t lock;
    pthread_cond_t cond;       /* queue changes and load completions */
    struct gm_model *models;
    struct gm_model *qhead, *qtail;
    int loading;               /* the loader is working on an instance */
    pthread_t loader;
    int loader_started, stopping;
    uint64_t next_generation;
    unsigned startup_pending;
    int started;
    double last_bps;           /* bytes per second of the last finished preload */
    struct ipc_server *ipc;
};

/* ---- JSON helpers ------------------------------------------------------ */

static json_t *error_doc(const char *code, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    return json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
}

static json_t *http_error(int *http_status, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static json_t *http_error(int *http_status, int status, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    json_t *doc = error_doc(code, fmt, ap);
    va_end(ap);
    *http_status = status;
    return doc;
}

json_t *gpu_error_answer(const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    json_t *doc = error_doc(code, fmt, ap);
    va_end(ap);
    json_object_set_new(doc, "ok", json_false());
    return doc;
}

static char *base64(const unsigned char *p, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = xmalloc((n + 2) / 3 * 4 + 1), *o = out;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        *o++ = tab[v >> 18 & 63];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

static json_t *tensors_json(const struct gm_model *m)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < m->n_tensors; i++) {
        const struct gm_tensor *t = &m->tensors[i];
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
        json_t *o = json_pack("{s:s,s:s,s:o,s:I,s:I,s:I}", "name", t->name, "dtype",
                              dtype_info(t->dtype)->name, "shape", shape, "alloc",
                              (json_int_t)t->alloc, "offset", (json_int_t)t->offset, "nbytes",
                              (json_int_t)t->nbytes);
        if (o)
            json_array_append_new(arr, o);
    }
    return arr;
}

/* Allocations as GET shows them (full) or as "open" answers carry them. */
static json_t *allocs_json(const struct gm_model *m, int for_open)
{
    json_t *arr = json_array();
    int ready = m->published;
    for (size_t i = 0; i < m->n_shards; i++) {
        const struct gm_shard *s = &m->shards[i];
        json_t *o = json_pack("{s:I,s:s,s:I}", "id", (json_int_t)i, "file", s->file, "byte_size",
                              (json_int_t)s->size);
        if (!o)
            continue;
        if (ready) {
            char sum[32];
            snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)s->checksum);
            json_object_set_new(o, "alloc_size", json_integer((json_int_t)s->a.alloc_size));
            json_object_set_new(o, "checksum", json_string(sum));
        }
        if (for_open) {
            json_object_set_new(o, "handle_type", json_string(m->be->handle_type));
            json_object_set_new(o, "fd_index", json_integer((json_int_t)i));
        } else {
            json_t *types = json_array();
            json_array_append_new(types, json_string(m->be->handle_type));
            if (s->a.legacy_size)
                json_array_append_new(types, json_string("cuda_ipc"));
            json_object_set_new(o, "handle_types", types);
        }
        if (ready && s->a.legacy_size) {
            char *b64 = base64(s->a.legacy_handle, GPU_LEGACY_HANDLE_BYTES);
            json_object_set_new(o, "raw_handle", json_pack("{s:s}", "b64", b64));
            json_object_set_new(o, "device_id", json_integer(m->be->devices[m->dev].index));
            json_object_set_new(o, "legacy_byte_size", json_integer((json_int_t)s->a.legacy_size));
            free(b64);
        }
        json_array_append_new(arr, o);
    }
    return arr;
}

static void add_device(json_t *o, const struct gm_model *m)
{
    const struct gpu_device *d = &m->be->devices[m->dev];
    json_object_set_new(o, "backend", json_string(m->be->name));
    json_object_set_new(o, "device", json_string(m->device));
    json_object_set_new(o, "device_index", json_integer(d->index));
    json_object_set_new(o, "device_uuid", json_string(d->uuid));
    json_object_set_new(o, "generation", json_integer((json_int_t)m->generation));
}

/* Caller holds gm->lock. */
static json_t *do_model_json(const struct gm_model *m)
{
    json_t *o = json_pack("{s:s,s:s}", "model", m->name, "state", state_names[m->state]);
    add_device(o, m);
    uint64_t done = atomic_load(&m->done);
    json_object_set_new(o, "progress",
                        json_pack("{s:I,s:I,s:f}", "bytes_done", (json_int_t)done, "bytes_total",
                                  (json_int_t)m->total, "fraction",
                                  m->total ? (double)done / (double)m->total : 1.0));
    json_object_set_new(o, "leases", json_integer(m->leases));
    if (m->state == GM_FAILED)
        json_object_set_new(o, "reason", json_string(m->error));
    if (m->t_end_ns) {
        double secs = (double)(m->t_end_ns - m->t_start_ns) / 1e9;
        json_object_set_new(o, "preload",
                            json_pack("{s:f,s:f,s:s,s:b}", "seconds", secs, "bytes_per_second",
                                      secs > 0 ? (double)done / secs : 0.0, "io", m->io_mode,
                                      "verified", m->verified));
    }
    json_object_set_new(o, "allocations", allocs_json(m, 0));
    json_object_set_new(o, "tensors", tensors_json(m));
    return o;
}

/* ---- instances --------------------------------------------------------- */

static void instance_free(struct gm_model *m)
{
    for (size_t i = 0; i < m->n_shards; i++) {
        if (m->shards[i].a.priv || m->shards[i].a.fd >= 0)
            m->be->ops->free(m->be, &m->shards[i].a);
        free(m->shards[i].file);
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        free(m->tensors[i].name);
        free(m->tensors[i].shape);
    }
    if (m->snap)
        registry_unref(m->snap);
    free(m->shards);
    free(m->tensors);
    free(m->name);
    free(m);
}

/* Drops one reference; caller holds gm->lock. Returns m when it must be
 * freed (unlinked already) after the lock is released, else NULL. */
static struct gm_model *do_unref(struct gpu_manager *gm, struct gm_model *m)
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

/* Builds an instance of rm (valid) on be/dev; it holds a reference to snap. */
static struct gm_model *instance_new(struct gpu_manager *gm, struct registry *snap,
                                     const struct reg_model *rm, struct gpu_backend *be, int dev)
{
    struct gm_model *m = xcalloc(1, sizeof(*m));
    m->name = xstrdup(rm->name);
    m->be = be;
    m->dev = dev;
    if (be->kind == GPU_KIND_HOST)
        snprintf(m->device, sizeof(m->device), "host");
    else
        snprintf(m->device, sizeof(m->device), "cuda:%d", be->devices[dev].index);
    m->generation = ++gm->next_generation;
    m->state = GM_LOADING;
    m->snap = registry_ref(snap);
    m->rm = rm;
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

static struct gm_model *do_find_current(struct gpu_manager *gm, const char *name)
{
    for (struct gm_model *m = gm->models; m; m = m->next)
        if (m->current && strcmp(m->name, name) == 0)
            return m;
    return NULL;
}

/* Links m as name's current instance and queues its load. Caller holds the
 * lock. refs: the table's and the loader's. */
static void do_enqueue(struct gpu_manager *gm, struct gm_model *m)
{
    m->refs = 2;
    m->current = 1;
    m->next = gm->models;
    gm->models = m;
    if (gm->qtail)
        gm->qtail->qnext = m;
    else
        gm->qhead = m;
    gm->qtail = m;
    pthread_cond_broadcast(&gm->cond);
}

/* Takes m out of the table (evict, replace). Caller holds the lock; returns
 * m when it must be freed after unlocking. */
static struct gm_model *do_retire(struct gpu_manager *gm, struct gm_model *m)
{
    m->current = 0;
    if (m->state == GM_LOADING)
        atomic_store(&m->cancel, 1);
    if (m->state != GM_FAILED)
        m->state = GM_DRAINING;
    return do_unref(gm, m);
}

/* ---- the loader -------------------------------------------------------- */

static uint64_t now_ns(void)
{
    return time_mono_ns();
}

/* O_DIRECT descriptor for the same file as f, or -1 (not supported, or the
 * path now names another file). */
static int open_direct(const struct reg_model *rm, const struct reg_file *f)
{
    int fd = openat(rm->dirfd, f->name, O_RDONLY | O_DIRECT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_ino != f->st.ino || (uint64_t)st.st_dev != f->st.dev) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Fills every allocation of m. Returns 0, -ECANCELED, or -1 with m->error. */
static int load_instance(struct gpu_manager *gm, struct gm_model *m)
{
    const struct config *cfg = gm->cfg;
    struct gpu_loader l;
    char err[512] = "";
    int rc = -1, have_loader = 0;
    int legacy = cfg->legacy_ipc && m->be->kind == GPU_KIND_CUDA;
    int dev = m->be->kind == GPU_KIND_CUDA ? m->be->devices[m->dev].index : 0;
    for (size_t i = 0; i < m->n_shards; i++) {
        char label[160];
        snprintf(label, sizeof(label), "%.80s/%.60s", m->name, m->shards[i].file);
        if (m->be->ops->alloc(m->be, dev, m->shards[i].size, legacy, label, &m->shards[i].a, err,
                              sizeof(err)) < 0) {
            snprintf(m->error, sizeof(m->error), "allocating %llu bytes for %s: %s",
                     (unsigned long long)m->shards[i].size, m->shards[i].file, err);
            goto out;
        }
    }
    if (gpu_loader_init(&l, m->be, dev, cfg->staging_buffers, (size_t)cfg->staging_buffer_bytes,
                        &m->cancel, &m->done, err, sizeof(err)) < 0) {
        snprintf(m->error, sizeof(m->error), "%s", err);
        goto out;
    }
    have_loader = 1;
    for (size_t i = 0; i < m->n_shards; i++) {
        struct gm_shard *s = &m->shards[i];
        int dfd = open_direct(m->rm, s->rf);
        int r = gpu_loader_shard(&l, s->rf->fd, dfd, s->data_start, s->size, &s->a, &s->checksum,
                                 err, sizeof(err));
        if (dfd >= 0)
            close(dfd);
        if (r == -ECANCELED) {
            rc = r;
            goto out;
        }
        if (r < 0 || m->be->ops->finish(m->be, &s->a, err, sizeof(err)) < 0) {
            snprintf(m->error, sizeof(m->error), "%s: %s", s->file, err);
            goto out;
        }
    }
    snprintf(m->io_mode, sizeof(m->io_mode), "%s", l.io_mode);
    if (cfg->verify) {
        for (size_t i = 0; i < m->n_shards; i++) {
            struct gm_shard *s = &m->shards[i];
            int r = gpu_loader_verify(&l, s->rf->fd, s->data_start, s->size, &s->a, err, sizeof(err));
            if (r == -ECANCELED) {
                rc = r;
                goto out;
            }
            if (r < 0) {
                snprintf(m->error, sizeof(m->error), "%s: %s", s->file, err);
                goto out;
            }
        }
        m->verified = 1;
    }
    rc = 0;
out:
    if (have_loader)
        gpu_loader_close(&l);
    return rc;
}

static void *loader_main(void *arg)
{
    struct gpu_manager *gm = arg;
    pthread_mutex_lock(&gm->lock);
    for (;;) {
        while (!gm->qhead && !gm->stopping)
            pthread_cond_wait(&gm->cond, &gm->lock);
        if (gm->stopping)
            break;
        struct gm_model *m = gm->qhead;
        gm->qhead = m->qnext;
        if (!gm->qhead)
            gm->qtail = NULL;
        m->qnext = NULL;
        gm->loading = 1;
        m->t_start_ns = now_ns();
        pthread_mutex_unlock(&gm->lock);

        int rc = atomic_load(&m->cancel) ? -ECANCELED : load_instance(gm, m);
        if (rc != 0) {
            /* A failed or cancelled load keeps no memory. Nobody else looks
             * at the allocations before they are published. */
            for (size_t i = 0; i < m->n_shards; i++)
                if (m->shards[i].a.priv || m->shards[i].a.fd >= 0)
                    m->be->ops->free(m->be, &m->shards[i].a);
        } else {
            metrics_add(MC_GPU_PRELOAD_BYTES, m->total);
        }

        pthread_mutex_lock(&gm->lock);
        m->t_end_ns = now_ns();
        for (size_t i = 0; i < m->n_shards; i++)
            m->shards[i].rf = NULL;
        struct registry *snap = m->snap;
        m->snap = NULL;
        m->rm = NULL;
        double secs = (double)(m->t_end_ns - m->t_start_ns) / 1e9;
        if (rc == 0 && !atomic_load(&m->cancel)) {
            m->state = GM_READY;
            m->published = 1;
            gm->last_bps = secs > 0 ? (double)m->total / secs : 0;
            log_msg(LOG_INFO, "gpu: %s ready on %s (generation %llu): %llu bytes in %.3f s, %s",
                    m->name, m->device, (unsigned long long)m->generation,
                    (unsigned long long)m->total, secs, m->io_mode);
        } else if (rc != 0 && rc != -ECANCELED) {
            m->state = GM_FAILED;
            log_msg(LOG_ERROR, "gpu: preloading %s on %s failed: %s", m->name, m->device, m->error);
        }
        if (m->startup && gm->startup_pending > 0)
            gm->startup_pending--;
        m->startup = 0;
        gm->loading = 0;
        struct gm_model *dead = do_unref(gm, m);
        pthread_cond_broadcast(&gm->cond);
        pthread_mutex_unlock(&gm->lock);
        registry_unref(snap);
        if (dead)
            instance_free(dead);
        pthread_mutex_lock(&gm->lock);
    }
    pthread_mutex_unlock(&gm->lock);
    return NULL;
}

/* ---- device names ------------------------------------------------------ */

/* Resolves a device name to a backend and device ordinal. Returns 0, or an
 * HTTP status (400, 503) with code and message. */
static int resolve_device(struct gpu_manager *gm, const char *name, struct gpu_backend **be,
                          int *dev, const char **code, char *msg, size_t msglen)
{
    enum gpu_kind kind;
    int index;
    const char *uuid;
    if (gpu_parse_device(name, &kind, &index, &uuid) < 0) {
        *code = "bad_device";
        snprintf(msg, msglen, "device \"%.100s\" is not \"host\", \"cuda:N\" or a GPU UUID", name);
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
    *be = gm->cuda;
    return 0;
}

/* Starts loading model on device. Returns the HTTP status: 202 started, 200
 * already there; errors fill *doc. Takes the lock itself. */
static int start_load(struct gpu_manager *gm, const char *model, const char *device, int startup,
                      json_t **doc)
{
    struct gpu_backend *be;
    int dev, status = 0;
    const char *code;
    char msg[512];
    *doc = NULL;
    int rs = resolve_device(gm, device, &be, &dev, &code, msg, sizeof(msg));
    if (rs) {
        *doc = http_error(&status, rs, code, "%s", msg);
        return status;
    }
    struct registry *snap = registry_holder_acquire(gm->holder);
    const struct reg_model *rm = snap ? registry_find_model(snap, model, strlen(model)) : NULL;
    if (!rm) {
        *doc = http_error(&status, 404, "not_found", "no model named \"%.200s\"", model);
        goto out;
    }
    if (rm->state != MODEL_READY) {
        *doc = http_error(&status, 409, "model_invalid", "model %.200s is invalid: %s", model,
                          rm->error.message);
        goto out;
    }
    struct gm_model *dead = NULL;
    pthread_mutex_lock(&gm->lock);
    struct gm_model *cur = do_find_current(gm, model);
    if (cur && (cur->be != be || cur->dev != dev)) {
        *doc = http_error(&status, 409, "loaded_elsewhere",
                          "model %.200s is already on %s: evict it first", model, cur->device);
    } else if (cur && cur->state != GM_FAILED) {
        *doc = do_model_json(cur);
        status = 200;
    } else {
        if (cur) /* a failed attempt on this device: try again */
            dead = do_retire(gm, cur);
        struct gm_model *m = instance_new(gm, snap, rm, be, dev);
        m->startup = startup;
        if (startup)
            gm->startup_pending++;
        do_enqueue(gm, m);
        *doc = do_model_json(m);
        status = 202;
    }
    pthread_mutex_unlock(&gm->lock);
    if (dead)
        instance_free(dead);
out:
    if (snap)
        registry_unref(snap);
    return status;
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
    const struct config *cfg = gm->cfg;
    if (pthread_create(&gm->loader, NULL, loader_main, gm) != 0) {
        snprintf(err, errlen, "cannot start the preload thread");
        return -1;
    }
    gm->loader_started = 1;
    for (unsigned i = 0; i < cfg->n_preload; i++) {
        const char *spec = cfg->preload[i];
        const char *at = strrchr(spec, '@');
        if (!at) {
            log_msg(LOG_ERROR, "gpu: preload \"%s\" is not MODEL@DEVICE", spec);
            continue;
        }
        char *model = xstrndup(spec, (size_t)(at - spec));
        json_t *doc;
        int st = start_load(gm, model, at + 1, 1, &doc);
        if (st >= 400) {
            const char *m = json_string_value(json_object_get(json_object_get(doc, "error"), "message"));
            log_msg(LOG_ERROR, "gpu: preload %s: %s", spec, m ? m : "failed");
        }
        json_decref(doc);
        free(model);
    }
    pthread_mutex_lock(&gm->lock);
    gm->started = 1;
    pthread_mutex_unlock(&gm->lock);
    gm->ipc = ipc_server_start(gm, gm->socket_path, cfg, err, errlen);
    return gm->ipc ? 0 : -1;
}

json_t *gpu_manager_status_json(struct gpu_manager *gm)
{
    json_t *devs = json_array(), *backends = json_array(), *models = json_array();
    json_array_append_new(backends, json_string("host"));
    if (gm->cuda) {
        json_array_append_new(backends, json_string("cuda"));
        for (size_t i = 0; i < gm->cuda->n_devices; i++) {
            const struct gpu_device *d = &gm->cuda->devices[i];
            json_array_append_new(devs, json_pack("{s:i,s:s,s:s,s:I}", "index", d->index, "uuid",
                                                  d->uuid, "name", d->name, "memory_bytes",
                                                  (json_int_t)d->memory_bytes));
        }
    }
    pthread_mutex_lock(&gm->lock);
    for (struct gm_model *m = gm->models; m; m = m->next)
        json_array_append_new(models, json_pack("{s:s,s:s,s:s,s:I,s:i}", "name", m->name, "state",
                                                state_names[m->state], "device", m->device,
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

/* The current instance, else the newest draining one. Caller holds the lock. */
static struct gm_model *do_find_shown(struct gpu_manager *gm, const char *model)
{
    struct gm_model *m = do_find_current(gm, model);
    if (m)
        return m;
    for (m = gm->models; m; m = m->next) /* newest first */
        if (strcmp(m->name, model) == 0)
            return m;
    return NULL;
}

json_t *gpu_manager_model_json(struct gpu_manager *gm, const char *model, int *http_status)
{
    *http_status = 200;
    pthread_mutex_lock(&gm->lock);
    struct gm_model *m = do_find_shown(gm, model);
    json_t *o = m ? do_model_json(m) : json_pack("{s:s,s:s}", "model", model, "state", "none");
    pthread_mutex_unlock(&gm->lock);
    return o;
}

json_t *gpu_manager_model_summary(struct gpu_manager *gm, const char *model)
{
    pthread_mutex_lock(&gm->lock);
    struct gm_model *m = do_find_shown(gm, model);
    json_t *o = json_pack("{s:s}", "state", m ? state_names[m->state] : "none");
    if (m) {
        json_object_set_new(o, "device", json_string(m->device));
        json_object_set_new(o, "generation", json_integer((json_int_t)m->generation));
    }
    pthread_mutex_unlock(&gm->lock);
    return o;
}

json_t *gpu_manager_preload(struct gpu_manager *gm, const char *model, const char *body,
                            size_t body_len, int *http_status)
{
    json_error_t jerr;
    json_t *req = json_loadb(body, body_len, JSON_REJECT_DUPLICATES, &jerr), *doc;
    const char *device = json_string_value(json_object_get(req, "device"));
    if (!req || !json_is_object(req) || !device) {
        doc = http_error(http_status, 400, "bad_request",
                         "the body must be a JSON object with \"device\": \"cuda:N\", a GPU UUID "
                         "or \"host\"");
    } else {
        *http_status = start_load(gm, model, device, 0, &doc);
    }
    json_decref(req);
    return doc;
}

json_t *gpu_manager_evict(struct gpu_manager *gm, const char *model, int *http_status)
{
    json_t *doc;
    pthread_mutex_lock(&gm->lock);
    struct gm_model *m = do_find_current(gm, model);
    if (!m) {
        pthread_mutex_unlock(&gm->lock);
        return http_error(http_status, 404, "not_loaded", "model %.200s is not preloaded", model);
    }
    struct gm_model *dead = do_retire(gm, m);
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
        instance_free(dead);
    return doc;
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

void gpu_manager_on_reload(struct gpu_manager *gm, struct registry *snap)
{
    struct gm_model *dead_list = NULL;
    pthread_mutex_lock(&gm->lock);
    /* New instances go to the list's head: walk a snapshot of the old ones. */
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
        struct gm_model *dead = do_retire(gm, m);
        if (dead) {
            dead->qnext = dead_list;
            dead_list = dead;
        }
        if (valid) {
            struct gm_model *nm = instance_new(gm, snap, rm, be, dev);
            nm->startup = startup;
            do_enqueue(gm, nm);
        } else if (startup && gm->startup_pending > 0) {
            gm->startup_pending--;
        }
    }
    pthread_mutex_unlock(&gm->lock);
    free(cur);
    while (dead_list) {
        struct gm_model *d = dead_list;
        dead_list = d->qnext;
        instance_free(d);
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
    if (gm->ipc)
        ipc_server_stop(gm->ipc); /* releases every lease */
    gm->ipc = NULL;
    pthread_mutex_lock(&gm->lock);
    gm->stopping = 1;
    for (struct gm_model *m = gm->models; m; m = m->next)
        atomic_store(&m->cancel, 1);
    pthread_cond_broadcast(&gm->cond);
    pthread_mutex_unlock(&gm->lock);
    if (gm->loader_started)
        pthread_join(gm->loader, NULL);
    while (gm->models) {
        struct gm_model *m = gm->models;
        gm->models = m->next;
        instance_free(m);
    }
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
                                   json_t **answer, int *fds, size_t max_fds, size_t *n_fds)
{
    struct gpu_backend *be = NULL;
    int dev = -1;
    *n_fds = 0;
    if (device && *device) {
        const char *code;
        char msg[512];
        if (resolve_device(gm, device, &be, &dev, &code, msg, sizeof(msg))) {
            *answer = gpu_error_answer(code, "%s", msg);
            return NULL;
        }
    }
    pthread_mutex_lock(&gm->lock);
    struct gm_model *m = do_find_current(gm, model);
    if (!m) {
        *answer = gpu_error_answer("not_loaded", "model %.200s is not preloaded", model);
        goto fail;
    }
    if (be && (m->be != be || m->dev != dev)) {
        *answer = gpu_error_answer("wrong_device", "model %.200s is on %s, not %.100s", model,
                                   m->device, device);
        goto fail;
    }
    if (m->state != GM_READY) {
        uint64_t done = atomic_load(&m->done);
        if (m->state == GM_LOADING)
            *answer = gpu_error_answer("loading", "model %.200s is still loading (%.0f%%)", model,
                                       m->total ? 100.0 * (double)done / (double)m->total : 0.0);
        else
            *answer = gpu_error_answer("failed", "preloading model %.200s failed: %s", model,
                                       m->error);
        goto fail;
    }
    if (m->n_shards > max_fds) {
        *answer = gpu_error_answer("too_many_shards", "model %.200s has %zu shards; at most %zu "
                                   "can be passed on one connection", model, m->n_shards, max_fds);
        goto fail;
    }
    for (size_t i = 0; i < m->n_shards; i++)
        fds[i] = m->shards[i].a.fd;
    *n_fds = m->n_shards;
    m->refs++;
    m->leases++;
    json_t *o = json_pack("{s:b,s:s}", "ok", 1, "model", m->name);
    add_device(o, m);
    json_object_set_new(o, "allocations", allocs_json(m, 1));
    json_object_set_new(o, "tensors", tensors_json(m));
    *answer = o;
    pthread_mutex_unlock(&gm->lock);
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
    struct gm_model *dead = do_unref(gm, m);
    pthread_mutex_unlock(&gm->lock);
    if (dead) {
        log_msg(LOG_INFO, "gpu: last lease on %s (generation %llu) ended: memory released",
                dead->name, (unsigned long long)dead->generation);
        instance_free(dead);
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
                                                    state_names[m->state], "device", m->device,
                                                    "generation", (json_int_t)m->generation));
    pthread_mutex_unlock(&gm->lock);
    return json_pack("{s:b,s:o}", "ok", 1, "models", models);
}
