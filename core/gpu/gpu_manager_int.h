/* gpu_manager_int: the private half of gpu_manager, shared by the three
 * files that implement it and included by nothing else:
 *
 *   core/gpu/gpu_manager.c  the instance table, its lock, instance refcounts,
 *                       leases, evict and reload (the public API)
 *   core/gpu/gpu_preload.c  the load queue and the loader thread
 *   core/gpu/gpu_render.c   the JSON documents of one instance, error documents
 *
 * gm_ is the private prefix. Locking follows memcached: a function named
 * do_* must be called with gm->lock held; it never takes the lock and never
 * frees an instance. A do_ function that drops the last reference returns
 * the instance (already unlinked) and the caller calls gm_instance_free on
 * it after unlocking, because freeing releases backend memory and a
 * registry model (closing its files), which must not happen under the lock.
 *
 * What an instance's fields may be read under:
 *   - set by gm_instance_new and never changed: name, be, dev, device,
 *     generation, total, the tensors, and each shard's file, data_start,
 *     size and st;
 *   - gm->lock: the fields marked so below;
 *   - atomics: done, cancel;
 *   - the loader thread alone, while the instance is loading: the shards'
 *     allocations and checksums, error, io_mode, verified, rm and the
 *     shards' rf. Others read the allocations and checksums only once
 *     `published` is set, error only once state is failed, io_mode and
 *     verified only once t_end_ns is set (both set under the lock after the
 *     load);
 *   - m->render_lock: the cached JSON texts.
 *
 * Documents are rendered outside gm->lock: the caller takes a reference
 * and copies the lock-guarded fields (do_gm_dyn) under the lock, releases
 * it, renders from the copy and the fields that never change, then drops
 * the reference. The big parts of a document (the tensor table, the
 * allocations once published) are rendered once per instance and kept. */
#ifndef TENSORD_GPU_MANAGER_INT_H
#define TENSORD_GPU_MANAGER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "fileio.h"
#include "gpu.h"
#include "gpu_manager.h"
#include "registry.h"

enum gm_state { GM_LOADING, GM_READY, GM_FAILED, GM_DRAINING };

static inline const char *gm_state_name(enum gm_state s)
{
    static const char *const names[] = {"loading", "ready", "failed", "draining"};
    return names[s];
}

/* One safetensors shard of an instance: one backend allocation. */
struct gm_shard {
    char *file;                /* name within the model */
    uint64_t data_start, size; /* the data buffer in the file */
    struct fileio_stat st;     /* of the file loaded, to notice changes on reload */
    const struct reg_file *rf; /* while loading (the instance holds the model) */
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

/* One instance: one model loaded (or loading) on one device, one
 * generation. Refcounted: the table's reference while it is current, the
 * loader's while it is queued or loading, and one per lease. */
struct gm_model {
    struct gm_model *next;     /* every live instance, newest first (gm->lock) */
    struct gm_model *qnext;    /* load queue (gm->lock) */
    unsigned refs;             /* guarded by gm->lock: table + loader + one per lease */
    unsigned leases;           /* guarded by gm->lock */
    int current;               /* what new opens get; 0 once evicted or replaced (gm->lock) */
    int startup;               /* a config preload: counts toward gpu_manager_ready (gm->lock) */
    char *name;
    struct gpu_backend *be;
    int dev;                   /* device ordinal (index into be->devices) */
    char device[24];           /* "host" or "cuda:N" */
    uint64_t generation;
    enum gm_state state;       /* guarded by gm->lock */
    char error[512];           /* why it failed */
    _Atomic uint64_t done;     /* bytes copied */
    uint64_t total;
    uint64_t t_start_ns, t_end_ns; /* written under gm->lock by the loader */
    char io_mode[32];
    int verified;
    int published;             /* ready was reached: allocations are filled (guarded by gm->lock) */
    atomic_int cancel;         /* evicted or replaced while loading */
    size_t n_shards;
    struct gm_shard *shards;
    size_t n_tensors;
    struct gm_tensor *tensors;
    const struct reg_model *rm; /* referenced from creation until the load ends */
    pthread_mutex_t render_lock; /* guards the two texts below */
    char *tensors_text;        /* the "tensors" array as JSON, rendered once */
    char *allocs_text;         /* the published "allocations" array as GET shows it */
};

/* The lock-guarded fields a document shows, copied under gm->lock. */
struct gm_dyn {
    enum gm_state state;
    unsigned leases;
    int published;
    uint64_t done;
    uint64_t t_start_ns, t_end_ns;
    int verified;
    char io_mode[32];
    char error[512];
};

/* A start-up preload that could not even start because of its device (no
 * usable driver, no such device, a device that cannot be used): GET shows
 * it as failed with the reason until a preload of that model starts. */
struct gm_refused {
    struct gm_refused *next;
    char *model;
    char device[64];
    char reason[512];
};

struct gpu_lease {
    struct gm_model *m;        /* holds one reference and counts in m->leases */
};

struct gpu_manager {
    const struct config *cfg;
    struct registry_holder *holder;
    struct gpu_backend *host, *cuda; /* set by gpu_manager_new, then read-only */
    char cuda_reason[256];
    char *socket_path;
    pthread_mutex_t lock;
    pthread_cond_t cond;       /* queue changes and load completions */
    struct gm_model *models;   /* the table (gm->lock) */
    struct gm_model *qhead, *qtail; /* the load queue (gm->lock) */
    int loading;               /* the loader is working on an instance (gm->lock) */
    pthread_t loader;
    int loader_started;        /* written before other threads run, read by free */
    int stopping;              /* the loader must exit (gm->lock) */
    uint64_t next_generation;  /* gm->lock */
    unsigned startup_pending;  /* config preloads not yet ended (gm->lock) */
    int started;               /* gm->lock */
    double last_bps;           /* bytes per second of the last finished preload (gm->lock) */
    struct registry *latest;   /* the newest snapshot on_reload saw (gm->lock): preloads
                                * never load from an older one */
    struct gm_refused *refused; /* start-up preloads refused before they began (gm->lock) */
};

/* Records (startup) or forgets (a preload of model started) a refused
 * start-up preload. Caller holds the lock. */
void do_gm_refused_set(struct gpu_manager *gm, const char *model, const char *device,
                       const char *reason);
void do_gm_refused_clear(struct gpu_manager *gm, const char *model);
const struct gm_refused *do_gm_refused_find(struct gpu_manager *gm, const char *model);

/* ---- instances (core/gpu/gpu_manager.c) ---- */

/* Builds an instance of rm (which must be valid) on be/dev, loading, with a
 * new generation and a reference to rm; refs is 0 until it is enqueued.
 * Caller holds the lock (for the generation counter). */
struct gm_model *do_gm_instance_new(struct gpu_manager *gm, const struct reg_model *rm,
                                    struct gpu_backend *be, int dev);
/* Frees an unlinked instance: its allocations, its model reference. */
void gm_instance_free(struct gm_model *m);
/* Drops one reference. Returns m, unlinked, when it must be freed after the
 * lock is released, else NULL. */
struct gm_model *do_gm_unref(struct gpu_manager *gm, struct gm_model *m);
/* Takes m out of the table (evict, replace): no longer current, cancelled
 * if loading, draining unless it failed; drops the table's reference.
 * Returns m when it must be freed after unlocking. */
struct gm_model *do_gm_retire(struct gpu_manager *gm, struct gm_model *m);
/* Copies m's lock-guarded fields that documents show into d. */
void do_gm_dyn(const struct gm_model *m, struct gm_dyn *d);
/* Called with gm->lock held; returns with it released: m's GET document
 * as text (caller frees), rendered outside the lock under a reference. */
char *gm_render_and_unlock(struct gpu_manager *gm, struct gm_model *m);
/* name's current instance, or NULL. */
struct gm_model *do_gm_find_current(struct gpu_manager *gm, const char *name);

/* Resolves a device name to a backend and device ordinal. Returns 0, or an
 * HTTP status (400, 503) with code and message. Takes no lock (the
 * backends never change). */
int gm_resolve_device(struct gpu_manager *gm, const char *name, struct gpu_backend **be, int *dev,
                      const char **code, char *msg, size_t msglen);

#endif
