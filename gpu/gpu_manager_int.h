/* gpu_manager_int: the private half of gpu_manager, shared by the files
 * that implement it and included by nothing else but tests. Each builds
 * only on those listed before it:
 *
 *   gpu/gpu_stage.c    the devices' staging rings: pinned ahead of the
 *                           first preload, kept between preloads
 *   gpu/gpu_instance.c one instance: building, refcounts, retiring,
 *                           views, freeing; the table's lookups
 *   gpu/gpu_queue.c    the load queues, one per device, and starting their
 *                           loaders' threads
 *   gpu/gpu_sums.c     the checksum thread: each ready instance's
 *                           allocation checksums, summed off the preload's
 *                           critical path
 *   gpu/gpu_reload.c   reloads: a new generation made beside the current
 *                           one, which serves until the new one is ready
 *   gpu/gpu_preload.c  preload requests, admission, and what a loader's
 *                           thread does: fill an instance, publish it
 *   gpu/gpu_manager.c  the public API: views, evict, start, free, metrics
 *   gpu/gpu_lease.c    leases: which instance an open names, granting and
 *                           ending them
 *
 * gm_ is the private prefix. Locking follows memcached: a function named
 * do_* must be called with gm->lock held; it never takes the lock and never
 * frees an instance. A do_ function that drops the last reference returns
 * the instance (already unlinked) and the caller calls gm_dispose on it
 * after unlocking, because freeing releases backend memory and a registry
 * model (closing its files), which must not happen under the lock. Until
 * gm_dispose has released the memory, gm->freeing counts the instance, so
 * that a reload that must reuse the memory waits for it rather than racing
 * the release.
 *
 * What an instance's fields may be read under:
 *   - set by gm_instance_new (the generation by do_gm_enqueue, before
 *     anyone else sees it) and never changed: name, be, dev, device,
 *     generation, total, need, the tensors, and each shard's file,
 *     data_start, size and st;
 *   - gm->lock: the fields marked so below;
 *   - atomics: done, cancel, retired;
 *   - the loader thread alone, while the instance is loading: the shards'
 *     allocations, error, io, verified, phase_ns, rm and the shards' rf.
 *     Others read the allocations only once `published` is set, error only
 *     once state is failed, io, verified and phase_ns only once t_end_ns is
 *     set (all set under the lock after the load);
 *   - the checksum thread alone, until `sums` leaves GM_SUMS_PENDING (under
 *     the lock): the shards' checksums;
 *   - m->text_lock: the cached texts (gm_view_text).
 *
 * Callers render outside gm->lock: a view (do_gm_view) takes a reference
 * and copies the lock-guarded fields under the lock; the caller renders
 * from the copy and the fields that never change, then releases the view.
 * The big parts of a document (the tensor table, the allocations once
 * their checksums are final) are rendered once per instance and kept in
 * it. The instance table's few fields are the exception: gpu_manager_rows
 * hands its caller each row under the lock. */
#ifndef TENSORD_GPU_MANAGER_INT_H
#define TENSORD_GPU_MANAGER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu.h"
#include "gpu_manager.h"
#include "registry.h"

/* One instance: one model loaded (or loading) on one device, one
 * generation. Refcounted: the table's reference while it is linked (current
 * or a reload's new generation), the loader's while it is queued, loading
 * or parked, the checksum thread's while it sums it, a newer generation's
 * while that replaces it, and one per lease and per view. */
struct gm_instance {
    struct gm_instance *next;  /* every live instance, newest first (gm->lock) */
    struct gm_instance *qnext; /* load queue, or the checksum queue (gm->lock) */
    unsigned refs;             /* guarded by gm->lock */
    unsigned leases;           /* guarded by gm->lock */
    int current;               /* what new opens get; 0 once evicted or replaced, and for a
                                * reload's new generation until it is ready (gm->lock) */
    int startup;               /* a config preload: counts toward gpu_manager_ready (gm->lock) */
    char *name;
    struct gpu_backend *be;
    int dev;                   /* device ordinal (index into be->devices) */
    char device[24];           /* "host" or "cuda:N" */
    unsigned world, rank;      /* a partition: rank of world (gpu/gpu_part.h); 1, 0: whole */
    char *split;               /* the partition's split as JSON {"world","rank","rules"}, or
                                * NULL: what a reload loads again, and what documents show */
    uint64_t generation;
    enum gm_state state;       /* guarded by gm->lock */
    struct st_error error;     /* why it failed */
    _Atomic uint64_t done;     /* bytes copied */
    uint64_t total;
    uint64_t need;             /* bytes its allocations take on the device (admission) */
    int allocated;             /* its memory is allocated or released, no longer only
                                * promised (gm->lock) */
    uint64_t t_start_ns, t_end_ns; /* written under gm->lock by the loader */
    uint64_t phase_ns[GM_PHASE_COUNT]; /* where the preload's time went */
    struct gm_io io;
    int verified;
    int published;             /* ready was reached: allocations are filled (guarded by gm->lock) */
    atomic_int cancel;         /* evicted or replaced while loading */
    atomic_int retired;        /* no longer current: the checksum thread leaves it */
    enum gm_sums sums;         /* the checksums' state (gm->lock) */
    char sums_error[160];      /* why they are unavailable (gm->lock) */
    /* Reloads (gpu/gpu_reload.c), all under gm->lock. */
    struct gm_instance *next_gen; /* current: the generation a reload is making, until ready */
    struct gm_instance *prev_gen; /* that new generation: the current one it replaces (holds a
                                   * reference, until it is ready or gives up) */
    int waiting;               /* the new generation is parked until prev_gen's leases end */
    int reloaded;              /* it took its old generation's place before it was ready
                                * (both did not fit): opens are told to retry */
    uint64_t avail_seen;       /* ... the device's bytes available when it parked */
    uint64_t reload_failed_gen;/* current: the generation whose reload failed, or 0 */
    struct st_error reload_error; /* ... and why */
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

/* A device's loader: its own thread and queue, so that preloads to
 * different devices run at the same time and two to one device queue. Made
 * when a preload for the device is first queued. */
#define GM_MAX_LOADERS GM_MAX_DEVICES
struct gm_loader {
    struct gpu_manager *gm;
    struct gpu_backend *be;
    int dev;
    struct gm_instance *qhead, *qtail; /* its queue (gm->lock) */
    int loading;               /* its thread is loading an instance (gm->lock) */
    pthread_t thread;
};

/* A device's staging ring, kept from one preload to the next: pinned
 * memory costs most of a second per GiB to allocate, so it is pinned ahead
 * of the first preload (gpu/gpu_stage.c) by a thread of its own. Only the
 * loader copies through the ring; the fields are guarded by gm->lock. */
#define GM_MAX_STAGES GM_MAX_LOADERS /* one ring per device that loads */
struct gm_stage {
    struct gpu_backend *be;
    int dev;
    struct gpu_stage *stage;   /* NULL while none is made (or being made) */
    unsigned nbuf;             /* buffers of buf_bytes bytes */
    size_t buf_bytes;
    int pinning;               /* a thread is making it (pinner) ... */
    uint64_t pin_bytes;        /* ... of this size */
    int in_use;                /* a loader copies through it (gm_stage_acquire to _release) */
    int joinable;              /* pinner has not been joined */
    pthread_t pinner;
    struct st_error pin_err;   /* why the pinner failed (stage NULL) */
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
    pthread_cond_t cond;       /* queue changes, load completions, memory released, rings
                                * made, checksums summed */
    struct gm_instance *models; /* the table (gm->lock) */
    struct gm_loader loaders[GM_MAX_LOADERS]; /* one per device that has preloaded (gm->lock) */
    size_t n_loaders;          /* gm->lock */
    unsigned loading;          /* loaders loading an instance now (gm->lock) */
    void *(*loader_main)(void *); /* gm_loader_main: what a loader's thread runs */
    int stopping;              /* the loaders and the checksum thread must exit (gm->lock) */
    unsigned freeing;          /* unlinked instances whose memory is being released (gm->lock) */
    uint64_t next_generation;  /* gm->lock */
    unsigned startup_pending;  /* config preloads not yet ended (gm->lock) */
    int started;               /* gm->lock */
    double last_bps;           /* bytes per second of the last finished preload (gm->lock) */
    struct reg_snapshot *latest;   /* the newest snapshot on_reload saw (gm->lock): preloads
                                    * never load from an older one */
    struct gm_refused *refused; /* start-up preloads refused before they began (gm->lock) */
    struct gm_stage stages[GM_MAX_STAGES]; /* the devices' staging rings (gm->lock) */
    size_t n_stages;           /* gm->lock */
    uint64_t stage_changes;    /* rings released or pinned so far: a loader waiting for room
                                * tries again when it moves (gm->lock) */
    struct gm_instance *shead, *stail; /* the checksum queue (gm->lock) */
    struct gm_instance *summing; /* the one the checksum thread sums (gm->lock) */
    pthread_t summer;
    int summer_started;
};

/* ---- staging rings (gpu/gpu_stage.c) ---- */

/* The ring a preload on be's device dev uses: copy threads (the option, or
 * the rule on the CPUs this process may use), disk reads in flight, and
 * buffers of buf_bytes bytes (a chunk and O_DIRECT slack), nbuf of them. */
struct gm_ring_shape {
    unsigned threads, depth, nbuf;
    size_t chunk, buf_bytes;
};
void gm_ring_shape(const struct gm_options *opt, const struct gpu_backend *be,
                   struct gm_ring_shape *shape);

/* Starts pinning dev's ring of that shape on a thread of its own unless one
 * big enough is there or being made. Caller holds the lock. */
void do_gm_stage_prepare(struct gpu_manager *gm, struct gpu_backend *be, int dev,
                         const struct gm_ring_shape *shape);

/* The loader's ring for a preload on dev: waits for the pinner, and makes
 * (or makes again, bigger) the ring itself when there is none big enough.
 * The rings together stay within staging_limit: idle devices' rings are
 * freed first, then the ring is made for fewer copy threads (at least
 * share, the load's share of them, where that fits), and where not even
 * one thread's fits beside the rings other loads use, it waits for one of
 * them to be released (or *cancel, or the stop). shape->threads comes back
 * as the copy threads the ring serves. NULL with err (naming device) when
 * it cannot be had. Loader thread only; takes the lock itself;
 * gm_stage_release when the load is done with it. */
struct gm_stage *gm_stage_acquire(struct gpu_manager *gm, struct gpu_backend *be, int dev,
                                  const char *device, struct gm_ring_shape *shape,
                                  unsigned share, const atomic_int *cancel,
                                  struct st_error *err);
void gm_stage_release(struct gpu_manager *gm, struct gm_stage *st);

/* Closes a ring after a failed load that left it suspect (a device error),
 * or leaks it when reads may still land in it (leak). Loader thread only. */
void gm_stage_drop(struct gpu_manager *gm, struct gm_stage *st, int leak);

/* Joins the pinners and closes every ring (gpu_manager_free: the loader
 * has stopped). */
void gm_stages_free(struct gpu_manager *gm);

/* ---- instances (gpu/gpu_instance.c) ---- */

/* Builds an instance of rm (which must be valid) on *where, loading, with
 * a reference to rm; refs is 0 and its generation unset until it is linked
 * (do_gm_enqueue): the whole model, or (split, has_split) its partition,
 * each shard's selection and each tensor's part planned (gpu/gpu_part.h).
 * NULL with err when a tensor cannot be cut as split says, or its world is
 * above GM_MAX_WORLD (ST_ERR_SPLIT), or memory runs out. Takes no lock, and
 * a request calls it without gm->lock: matching a split's rules against
 * every tensor name may take seconds (FETCH_GLOB_BUDGET). */
struct gm_instance *gm_instance_new(const struct gpu_manager *gm, const struct reg_model *rm,
                                    const struct gm_device *where, const struct fetch_req *split,
                                    struct st_error *err);
/* The split of m as a request again (for a reload); 0, or -errno with err.
 * *out is empty (no split) for a whole instance. */
int gm_instance_split(const struct gm_instance *m, struct fetch_req *out, struct st_error *err);
/* Whether rm's shards are the files m was loaded from (size, mtime,
 * inode). */
int gm_instance_same_files(const struct gm_instance *m, const struct reg_model *rm);
/* Frees an unlinked instance: its allocations, its model reference. */
void gm_instance_free(struct gm_instance *m);
/* Frees dead (from a do_ function, after unlocking) and tells those waiting
 * for memory that it is released. Takes the lock itself. NULL: nothing. */
void gm_dispose(struct gpu_manager *gm, struct gm_instance *dead);
/* Queues dead on *list (through qnext) when it is not NULL, for the caller
 * to dispose of after unlocking. */
static inline void gm_keep_dead(struct gm_instance **list, struct gm_instance *dead)
{
    if (dead) {
        dead->qnext = *list;
        *list = dead;
    }
}
/* Drops one reference. Returns m, unlinked, when it must be disposed of
 * after the lock is released, else NULL. */
struct gm_instance *do_gm_instance_unref(struct gpu_manager *gm, struct gm_instance *m);
/* ---- the load queues (gpu/gpu_queue.c) ---- */

/* Links m (new) into the table with a new generation, as its model's
 * current instance or not (a reload's new generation), and queues it for
 * its device's loader (made on the device's first preload): refs become 2,
 * the table's and the loader's. Starts pinning its device's ring. Returns 0, or -errno with err
 * when the loader's thread cannot start (m is then not linked). */
int do_gm_enqueue(struct gpu_manager *gm, struct gm_instance *m, int current,
                  struct st_error *err);
/* Queues m (linked, parked, the loader's reference kept) again on its
 * device's loader, which exists. */
void do_gm_requeue(struct gpu_manager *gm, struct gm_instance *m);

/* ---- instances (gpu/gpu_instance.c), continued ---- */
/* Takes m out of the table's service (evict, replace): no longer current,
 * cancelled if loading, draining unless it failed, a parked load's and a
 * queued checksum's references dropped; drops the table's reference.
 * Returns m when it must be disposed of after unlocking. */
struct gm_instance *do_gm_instance_retire(struct gpu_manager *gm, struct gm_instance *m);
/* Fills v from m (m may be NULL: no instance) and takes a reference for
 * it. */
void do_gm_view(struct gm_instance *m, struct gm_view *v);
/* name's current instance on be's device dev, rank of world, or NULL. */
struct gm_instance *do_gm_find_current(struct gpu_manager *gm, const char *name,
                                       const struct gpu_backend *be, int dev, unsigned world,
                                       unsigned rank);
/* Whether m is one that which names. */
int gm_instance_is(const struct gm_instance *m, const struct gm_which *which);
/* Bytes promised on be's device dev: the need of every instance there that
 * is queued or loading and has not allocated yet, but skip. A parked
 * reload promises nothing: it will take its old generation's memory. */
uint64_t do_gm_promised(struct gpu_manager *gm, const struct gpu_backend *be, int dev,
                        const struct gm_instance *skip);
/* Bytes preloads other than skip hold on be's device dev (allocated, and
 * unless allocated_only also promised), for preload_memory_limit. */
uint64_t do_gm_held(struct gpu_manager *gm, const struct gpu_backend *be, int dev,
                    int allocated_only, const struct gm_instance *skip);

/* Records (startup) or forgets (a preload of model started) a refused
 * start-up preload. Caller holds the lock. */
void do_gm_refused_set(struct gpu_manager *gm, const char *model, const char *device,
                       const char *reason);
void do_gm_refused_clear(struct gpu_manager *gm, const char *model);
const struct gm_refused *do_gm_refused_find(struct gpu_manager *gm, const char *model);

/* ---- checksums (gpu/gpu_sums.c) ----
 *
 * An instance's allocation checksums (ipc_tsum) are not summed while it
 * loads: the copy threads only copy. Once it is ready, the loader queues it
 * here, and a thread of lowered priority reads each allocation back from
 * the device (nothing of the disk, nor of the host-to-device direction a
 * preload uses) and sums it, only while no preload runs. Opens answered
 * before that carry no checksum. */
int gm_sums_start(struct gpu_manager *gm, struct st_error *err);
/* Queues m (ready, published) and takes a reference for the thread. */
void do_gm_sums_queue(struct gpu_manager *gm, struct gm_instance *m);
/* Stops the thread (gm->stopping is set) and drops what is queued. */
void gm_sums_stop(struct gpu_manager *gm);

/* ---- reloads (gpu/gpu_reload.c) ----
 *
 * A reload (the registry saw a model's files change) of a ready instance
 * makes the new generation beside it: the new one is linked but not
 * current, and the old one keeps serving opens until the new one is ready.
 * When both do not fit on the device, the new one is parked until the old
 * one's leases end (GET says so), then the old one is retired, its memory
 * released, and the new one loads in its place. A reload that fails leaves
 * the old generation serving, with the reason kept for GET. */

/* What the loader does with a reload's new generation m that does not fit
 * beside its old one (avail bytes available): 1 when m was parked (the
 * loader leaves it), 0 when the old one was retired because no lease holds
 * it (the loader waits for its memory, then loads m as the model's current
 * instance). */
int do_gm_reload_no_room(struct gpu_manager *gm, struct gm_instance *m, uint64_t avail,
                         struct gm_instance **dead);
/* m's load ended (published ready, or failed): the old generation is
 * retired (ready) or keeps serving with the reason (failed). *dead gets an
 * instance to dispose of. */
void do_gm_reload_ended(struct gpu_manager *gm, struct gm_instance *m, int ready,
                        struct gm_instance **dead);
/* m's last lease ended: a new generation parked for it is queued again. */
void do_gm_reload_lease_ended(struct gpu_manager *gm, struct gm_instance *m);
/* m is evicted: its pending reload is abandoned (retired; *dead to dispose
 * of). */
void do_gm_reload_abandon(struct gpu_manager *gm, struct gm_instance *m,
                          struct gm_instance **dead);

/* ---- preload requests and the loaders' work (gpu/gpu_preload.c) ----
 *
 * A preload request (gpu_manager.h) makes its new instance without the
 * lock (a split's plan may take seconds), is admitted under it when the
 * device has room for it (beside what other queued preloads were
 * promised), then links it into the table as the model's current one and
 * queues it. The loader thread takes queued instances one at a time and
 * runs the preload state machine:
 *
 *   loading --(every shard copied, finished, and verified if asked)--> ready
 *   loading --(an error)--> failed: the allocations are freed, `error` says why
 *   loading --(cancelled: evicted or replaced meanwhile)--> stays draining
 *   loading --(a reload that does not fit beside the old generation)--> parked
 *
 * The load itself (admission again, alloc, ring, plan, copy, finish,
 * verify) runs without gm->lock: until it is published, the loader alone
 * touches the instance's allocations. The outcome is published under the
 * lock, where the loader also drops the instance's snapshot and its own
 * reference, queues a ready one for its checksums, and broadcasts gm->cond
 * (gpu_manager_wait_idle waits on it). Start-up preloads (the config's) are
 * counted in gm->startup_pending until they end, whichever way. */

/* A loader's thread (its argument: the struct gm_loader). gpu_manager_new
 * sets gm->loader_main to it, and the queue code that makes a loader
 * (gpu_queue.c) starts it through that pointer, never calling up by name. */
void *gm_loader_main(void *arg);

/* Tells the loaders to stop, cancels every instance's load (those running
 * stop at their next chunk), and joins their threads. Queued instances stay
 * in the table for gpu_manager_free to free. */
void gpu_preload_stop(struct gpu_manager *gm);

#endif
