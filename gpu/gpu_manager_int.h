/* gpu_manager_int: the private half of gpu_manager, shared by the three
 * files that implement it and included by nothing else but tests:
 *
 *   gpu/gpu_instance.c one instance: building, refcounts, retiring,
 *                           views, freeing; the table's lookups
 *   gpu/gpu_preload.c  preload requests, the load queue and the loader
 *                           thread
 *   gpu/gpu_manager.c  the instance table, its lock, views, leases,
 *                           evict and reload
 *
 * They depend on each other in that order only: gpu_instance.c on nothing
 * else of the manager, gpu_preload.c on gpu_instance.c, gpu_manager.c on
 * both.
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
 *     allocations and checksums, error, io, verified, rm and the shards'
 *     rf. Others read the allocations and checksums only once `published`
 *     is set, error only once state is failed, io and verified only once
 *     t_end_ns is set (both set under the lock after the load);
 *   - m->text_lock: the cached texts (gm_view_text).
 *
 * Callers render outside gm->lock: a view (do_gm_view) takes a reference
 * and copies the lock-guarded fields under the lock; the caller renders
 * from the copy and the fields that never change, then releases the view.
 * The big parts of a document (the tensor table, the allocations once
 * published) are rendered once per instance and kept in it. The instance
 * table's few fields are the exception: gpu_manager_rows hands its caller
 * each row under the lock. */
#ifndef TENSORD_GPU_MANAGER_INT_H
#define TENSORD_GPU_MANAGER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fileio.h"
#include "gpu.h"
#include "gpu_manager.h"
#include "registry.h"

/* One instance: one model loaded (or loading) on one device, one
 * generation. Refcounted: the table's reference while it is current, the
 * loader's while it is queued or loading, and one per lease. */
struct gm_instance {
    struct gm_instance *next;  /* every live instance, newest first (gm->lock) */
    struct gm_instance *qnext; /* load queue (gm->lock) */
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
    struct st_error error;     /* why it failed */
    _Atomic uint64_t done;     /* bytes copied */
    uint64_t total;
    uint64_t t_start_ns, t_end_ns; /* written under gm->lock by the loader */
    struct gm_io io;
    int verified;
    int published;             /* ready was reached: allocations are filled (guarded by gm->lock) */
    atomic_int cancel;         /* evicted or replaced while loading */
    size_t n_shards;
    struct gm_shard *shards;
    size_t n_tensors;
    struct gm_tensor *tensors;
    const struct reg_model *rm; /* referenced from creation until the load ends */
    struct gm_source *source;  /* bytes still arriving (a mirror's), owned: released when the
                                * instance is freed; NULL for a model of the registry */
    pthread_mutex_t text_lock; /* guards texts */
    char *texts[GM_TEXT_COUNT]; /* gm_view_text: rendered once, kept */
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

/* A device's staging ring, kept from one preload to the next: pinned
 * memory costs most of a second per GiB to allocate. Made by the loader
 * thread on a device's first preload; only the loader uses the ring, while
 * HTTP threads read the sizes under gm->lock. */
#define GM_MAX_STAGES 16
struct gm_stage {
    struct gpu_backend *be;
    int dev;
    struct gpu_stage *stage;
    unsigned nbuf;             /* buffers of gpu_load_stage_bytes(chunk) bytes */
    size_t buf_bytes;
};

struct gpu_lease {
    struct gm_instance *m;     /* holds one reference and counts in m->leases */
};

struct gpu_manager {
    struct gm_options opt;
    struct registry *registry;
    struct gpu_backend *host, *cuda; /* set by gpu_manager_new, then read-only */
    struct st_error cuda_err;  /* why there is no CUDA backend (cuda NULL) */
    pthread_mutex_t lock;
    pthread_cond_t cond;       /* queue changes and load completions */
    struct gm_instance *models; /* the table (gm->lock) */
    struct gm_instance *qhead, *qtail; /* the load queue (gm->lock) */
    int loading;               /* the loader is working on an instance (gm->lock) */
    pthread_t loader;
    int loader_started;        /* written before other threads run, read by free */
    int stopping;              /* the loader must exit (gm->lock) */
    uint64_t next_generation;  /* gm->lock */
    unsigned startup_pending;  /* config preloads not yet ended (gm->lock) */
    int started;               /* gm->lock */
    double last_bps;           /* bytes per second of the last finished preload (gm->lock) */
    struct reg_snapshot *latest;   /* the newest snapshot on_reload saw (gm->lock): preloads
                                    * never load from an older one */
    struct gm_refused *refused; /* start-up preloads refused before they began (gm->lock) */
    struct gm_stage stages[GM_MAX_STAGES]; /* the devices' staging rings (sizes: gm->lock) */
    size_t n_stages;           /* gm->lock */
};

/* Records (startup) or forgets (a preload of model started) a refused
 * start-up preload. Caller holds the lock. (gpu/gpu_instance.c) */
void do_gm_refused_set(struct gpu_manager *gm, const char *model, const char *device,
                       const char *reason);
void do_gm_refused_clear(struct gpu_manager *gm, const char *model);
const struct gm_refused *do_gm_refused_find(struct gpu_manager *gm, const char *model);

/* ---- instances (gpu/gpu_instance.c) ---- */

/* Builds an instance of rm (which must be valid) on *where, loading, with
 * a new generation and a reference to rm; refs is 0 until it is enqueued.
 * NULL when memory runs out (the sizes come from the model's files). Caller
 * holds the lock (for the generation counter). */
struct gm_instance *do_gm_instance_new(struct gpu_manager *gm, const struct reg_model *rm,
                                       const struct gm_device *where);
/* Whether rm's shards are the files m was loaded from (size, mtime,
 * inode). */
int gm_instance_same_files(const struct gm_instance *m, const struct reg_model *rm);
/* Frees an unlinked instance: its allocations, its model reference. */
void gm_instance_free(struct gm_instance *m);
/* Drops one reference. Returns m, unlinked, when it must be freed after the
 * lock is released, else NULL. */
struct gm_instance *do_gm_instance_unref(struct gpu_manager *gm, struct gm_instance *m);
/* Takes m out of the table (evict, replace): no longer current, cancelled
 * if loading, draining unless it failed; drops the table's reference.
 * Returns m when it must be freed after unlocking. */
struct gm_instance *do_gm_instance_retire(struct gpu_manager *gm, struct gm_instance *m);
/* Fills v from m (m may be NULL: no instance) and takes a reference for
 * it. */
void do_gm_view(struct gm_instance *m, struct gm_view *v);
/* name's current instance, or NULL. */
struct gm_instance *do_gm_find_current(struct gpu_manager *gm, const char *name);

/* ---- the load queue and the loader thread (gpu/gpu_preload.c) ----
 *
 * A preload request (gpu_manager.h) makes a new instance, links it into
 * the table as the model's current one and queues it. The loader
 * thread takes queued instances one at a time and runs the preload state
 * machine:
 *
 *   loading --(every shard copied, finished, and verified if asked)--> ready
 *   loading --(an error)--> failed: the allocations are freed, `error` says why
 *   loading --(cancelled: evicted or replaced meanwhile)--> stays draining
 *
 * The load itself (alloc, copy through the staging ring, finish, verify)
 * runs without gm->lock: until it is published, the loader alone touches
 * the instance's allocations. The outcome is published under the lock,
 * where the loader also drops the instance's snapshot and its own
 * reference, and broadcasts gm->cond (gpu_manager_wait_idle waits on it).
 * Start-up preloads (the config's) are counted in gm->startup_pending until
 * they end, whichever way. */

/* Starts the loader thread. Returns 0, or -errno with err when it cannot
 * start. */
int gpu_preload_start(struct gpu_manager *gm, struct st_error *err);

/* Links m (new, from do_gm_instance_new) as its model's current instance
 * and queues it; refs become 2: the table's and the loader's. */
void do_gm_enqueue(struct gpu_manager *gm, struct gm_instance *m);

/* Tells the loader to stop, cancels every instance's load (the one running
 * stops at its next chunk), and joins the thread. Queued instances stay in
 * the table for gpu_manager_free to free. */
void gpu_preload_stop(struct gpu_manager *gm);

#endif
