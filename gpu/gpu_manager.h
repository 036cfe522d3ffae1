/* gpu_manager: preloads models into a backend (cuda or host), hands their
 * memory to workers as leases, and evicts them.
 *
 * Each preload makes an instance: one allocation per safetensors shard,
 * filled on the manager's loader thread (never on HTTP threads), published
 * `ready` once every copy is synchronised (and verified with verify = 1).
 * An instance is refcounted: the manager's table holds one reference while it
 * is the model's current instance, the loader one while it loads, every
 * lease one, and every view (struct gm_view) one. Evicting or replacing an
 * instance (a reload that changed its files) drops the table's reference;
 * the instance is `draining` until the last lease ends, then its memory is
 * released. Workers that mapped the memory keep their mappings valid either
 * way (the kernel and the CUDA driver refcount the underlying memory);
 * leases are how the daemon knows when its own hold may go.
 *
 * There is no JSON and no HTTP here: callers get plain views of the state
 * and render them (server/lease/gpu_doc.c), and failures are 0 / -errno with a
 * struct st_error (core/base/st_error.h) whose code the caller maps.
 *
 * Locking: every function declared here is thread-safe and takes the
 * manager's one mutex itself. Inside the manager a function named do_gm_*
 * runs with that mutex held (memcached's do_ convention) and never frees an
 * instance (gpu/gpu_manager_int.h has the rules).
 *
 * It is implemented by gpu/gpu_manager.c (the instance table, views,
 * leases, evict, reload), gpu/gpu_instance.c (one instance),
 * gpu/gpu_preload.c (preload requests and the loader thread), and
 * gpu/gpu_manager_int.h (what they share). */
#ifndef TENSORD_GPU_MANAGER_H
#define TENSORD_GPU_MANAGER_H

#include <stddef.h>
#include <stdint.h>

#include "device_name.h"
#include "dtype.h"
#include "fetch_req.h"
#include "fileio.h"
#include "gpu.h"
#include "gpu_plan.h"
#include "registry.h"
#include "st_error.h"

struct gpu_manager;
struct gpu_lease;
struct gm_instance;

/* What the manager needs of the configuration. The strings are borrowed:
 * they must outlive the manager. */
struct gm_options {
    const char *const *preload;    /* start-up preloads, "MODEL@DEVICE" each */
    unsigned n_preload;
    unsigned staging_buffers;      /* disk reads in flight, one staging buffer each */
    uint64_t staging_buffer_bytes; /* size of each staging buffer (a chunk of a shard) */
    unsigned preload_threads;      /* page-cache copy threads; 0: the rule of gm_ring_shape
                                    * (gpu/gpu_stage.c) on the CPUs this process may use */
    uint64_t memory_limit;         /* the most bytes preloads may hold on one device; 0: what
                                    * the device (or the machine) has */
    uint64_t staging_limit;        /* the most the devices' staging rings may hold together;
                                    * 0: a quarter of the memory this process may use */
    int verify;                    /* read every allocation back before ready */
    int legacy_ipc;                /* also export a legacy CUDA IPC handle per allocation */
    /* Another reader of the model files (the daemon's hasher), told while a
     * preload reads them so that one stream, not two, reads each from the
     * disk: hold returns a handle for release (NULL: nothing held) and sets
     * needed[i] when that reader still wants files[i]'s bytes, which the
     * preload then reads through the page cache (not O_DIRECT) for it to
     * find there afterwards. NULL when there is none. */
    void *(*hold)(void *ctx, const struct reg_file *const *files, size_t n, int *needed);
    void (*release)(void *ctx, void *handle);
    void *hold_ctx;
};

enum gm_state { GM_LOADING, GM_READY, GM_FAILED, GM_DRAINING };

static inline const char *gm_state_name(enum gm_state s)
{
    static const char *const names[] = {"loading", "ready", "failed", "draining"};
    return names[s];
}

/* Where a preload's time goes, in order; the phases add up to its seconds.
 * alloc: admission and the device allocations; ring: waiting for the
 * staging ring (pinned ahead of time, so normally nothing); plan: cutting
 * the shards into chunks; copy: the movers; finish: making the memory
 * shareable, and verify when asked. */
enum gm_phase { GM_PHASE_ALLOC, GM_PHASE_RING, GM_PHASE_PLAN, GM_PHASE_COPY, GM_PHASE_FINISH,
                GM_PHASE_COUNT };

static inline const char *gm_phase_name(enum gm_phase p)
{
    static const char *const names[] = {"alloc", "ring", "plan", "copy", "finish"};
    return names[p];
}

/* An instance's allocation checksums: summed after it is ready
 * (gpu/gpu_sums.c). */
enum gm_sums { GM_SUMS_NONE, GM_SUMS_PENDING, GM_SUMS_READY, GM_SUMS_UNAVAILABLE };

static inline const char *gm_sums_name(enum gm_sums s)
{
    static const char *const names[] = {"none", "pending", "ready", "unavailable"};
    return names[s];
}

/* Where a finished preload's bytes came from (gpu/gpu_load.h). */
struct gm_io {
    uint64_t page_cache_bytes; /* copied from the page cache by the copy threads */
    uint64_t disk_bytes;       /* read from the disk by the disk pipeline */
    uint64_t upstream_bytes;   /* waited for while a mirror fetched them, then copied */
    uint64_t handed_over_bytes;/* of the disk bytes, those the copy threads found missing
                                * from the page cache */
    uint64_t missing_runs;     /* runs of missing pages the copy threads met (gpu_load.h) */
    uint64_t copy_cpu_ns;      /* CPU time the copy threads used, together */
    char disk_reads[32];       /* "io_uring+O_DIRECT", "io_uring", "pread"; "" with no disk bytes */
    unsigned threads;          /* copy threads that ran */
    unsigned depth;            /* disk reads in flight at most */
};

/* Where a preload's bytes come from while they are not all in its model's
 * files yet: a mirror still fetching them (server/handlers/h_mirror.c makes one
 * over mirror/mirror_model.h). The gate's `file` is the shard's struct
 * reg_file. An instance loaded from a source owns it from the preload on
 * and releases it when the instance is freed (its last lease gone), so the
 * source may keep its files until then; a reload of the registry leaves
 * such an instance alone (its model is not the registry's). */
struct gm_source {
    struct gpu_gate gate;
    void (*release)(struct gm_source *s);
};

/* The devices the manager may load onto: the host and every GPU a device
 * name can name (each has its own loader and staging ring). */
#define GM_MAX_DEVICES (DEVICE_NAME_MAX_DEVICES + 1)

/* The staging ring a device keeps between preloads. */
struct gm_staging {
    char device[24];           /* "host" or "cuda:N" */
    uint64_t bytes;            /* memory it holds (pinned for cuda) */
};

/* One safetensors shard of an instance: one backend allocation. */
struct gm_shard {
    char *file;                /* name within the model */
    uint64_t data_start, size; /* the data buffer in the file */
    uint64_t bytes;            /* what the allocation holds: size, or a partition's part */
    struct gpu_select *sel;    /* a partition's bytes of the data (gpu/gpu_part.h); NULL: all */
    struct fileio_stat st;     /* of the file loaded, to notice changes on reload */
    const struct reg_file *rf; /* while loading (the instance holds the model) */
    struct gpu_alloc a;        /* read by others only once published */
    uint64_t checksum;         /* ipc_tsum of the bytes, once the sums are ready */
};

struct gm_tensor {
    char *name;
    enum dtype dtype;
    uint32_t ndim;
    uint64_t *shape;
    uint32_t alloc;            /* shard index */
    uint64_t offset, nbytes;   /* within the allocation */
    struct fetch_part part;    /* a partition's cut of it (part.split 0: held whole); shape
                                * is the part's, part.full the cut dimension's whole length */
};

/* A device name resolved to a backend and a device ordinal. */
struct gm_device {
    struct gpu_backend *be;
    int dev;
    const char *name;          /* as the caller named it (borrowed), for messages */
};

/* A reload of the instance a view shows: the new generation being made
 * (loading, or waiting for the current one's leases to end because both do
 * not fit), or the last one that failed (the current one serves on). */
struct gm_reload_view {
    int present;
    uint64_t generation;       /* the new generation's */
    enum gm_state state;       /* GM_LOADING (waiting or not) or GM_FAILED */
    int waiting;               /* parked until the current generation's leases end */
    unsigned leases;           /* ... which are these many */
    uint64_t done, total;      /* its progress */
    uint64_t need, available;  /* bytes it needs; available when it parked */
    char error[512];           /* why it failed */
};

/* One instance as a caller may show it: the fields that never change
 * (valid while the view holds its reference) and a copy of those that do,
 * taken under the lock. Also what a model with no instance shows. */
struct gm_view {
    struct gm_instance *inst;  /* the view's reference; NULL when there is no instance */
    unsigned world, rank;      /* a partition's (rank of world); 1, 0: the whole model */
    const char *split;         /* the split as JSON ({"world","rank","rules"}), or NULL */
    int refused;               /* no instance: a start-up preload its device refused */
    const char *name, *device; /* device: "host", "cuda:N", or the refused preload's */
    const struct gpu_backend *be;
    int dev;                   /* ordinal in be->devices */
    uint64_t generation, total;
    size_t n_shards;
    const struct gm_shard *shards;
    size_t n_tensors;
    const struct gm_tensor *tensors;
    /* copied under the lock */
    enum gm_state state;
    unsigned leases;
    int published;             /* the allocations are filled: sizes and checksums may be read */
    uint64_t done;             /* bytes copied */
    uint64_t t_start_ns, t_end_ns; /* t_end_ns != 0 once the load ended */
    int verified;
    struct gm_io io;           /* valid once t_end_ns is set and the load succeeded */
    double phases[GM_PHASE_COUNT]; /* seconds, valid once t_end_ns is set */
    enum gm_sums sums;
    char sums_error[160];      /* why the checksums are unavailable */
    char error[512];           /* why it failed (or why the device refused it) */
    char refused_device[64];
    struct gm_reload_view reload;
};

/* One row of the instance table (borrowed for the call it is passed to). */
struct gm_row {
    const char *name, *device;
    unsigned world, rank;
    enum gm_state state;
    uint64_t generation;
    unsigned leases;
};

/* Probes the backends (host always; cuda when a driver and a device are
 * there). Never fails because there is no GPU. opt (copied; its strings
 * borrowed) and the registry must outlive the manager. */
struct gpu_manager *gpu_manager_new(const struct gm_options *opt, struct registry *registry);

/* Starts the loader thread and queues the start-up preloads. Returns 0, or
 * -errno with err when the thread cannot start. The lease socket is the
 * daemon's (server/lease/lease_server.c), started after this. */
int gpu_manager_start(struct gpu_manager *gm, struct st_error *err);

/* The CUDA backend (its devices), or NULL and *reason says why there is
 * none. Never changes after gpu_manager_new. */
const struct gpu_backend *gpu_manager_cuda(struct gpu_manager *gm, const char **reason);

/* Calls fn for each row of the instance table, newest first (only current
 * instances with current_only), under the manager's lock: fn must not call
 * the manager. */
void gpu_manager_rows(struct gpu_manager *gm, int current_only,
                      void (*fn)(const struct gm_row *row, void *ctx), void *ctx);

/* The most ranks a preload's split may have: the rank a worker names on the
 * lease socket, and the rank and world GET and DELETE take, are below 2^31
 * (an instance's world and rank are kept in an unsigned). */
#define GM_MAX_WORLD INT32_MAX

/* Which of a model's instances a call is about. */
struct gm_which {
    const struct gm_device *where; /* its device; NULL: any */
    int rank;                  /* its rank; -1: any (an instance of the whole model is rank 0
                                * of 1) */
    unsigned world;            /* its world; 0: any */
    const char *prefer;        /* open: among several, the one on this device (a worker's
                                * current CUDA device, its UUID or cuda:N); NULL: none */
};

/* Whether the instance on be's device dev, rank of world, is one which
 * names. */
static inline int gm_which_holds(const struct gm_which *which, const struct gpu_backend *be,
                                 int dev, unsigned world, unsigned rank)
{
    return (!which->where || (be == which->where->be && dev == which->where->dev)) &&
           (which->rank < 0 || rank == (unsigned)which->rank) &&
           (!which->world || world == which->world);
}

/* model's primary instance as a view: its one current instance, else (none
 * current) its newest draining one; inst = NULL when it has none or several
 * current ones (refused set when a start-up preload of it was refused by
 * its device). Release every view with gpu_manager_view_release. */
void gpu_manager_view(struct gpu_manager *gm, const char *model, struct gm_view *v);
/* Every instance of model, as views into v[0..max): the current ones (by
 * device, then rank), then the draining ones, newest first; a reload's new
 * generation is shown in its old one's view, not here. Returns how many
 * there are (more than max: the rest are left out). */
size_t gpu_manager_views(struct gpu_manager *gm, const char *model, struct gm_view *v,
                         size_t max);
void gpu_manager_view_release(struct gpu_manager *gm, struct gm_view *v);

/* The text cached in an instance for one of the views' big parts, which
 * never change once made: made by make(v, arg) on first use (NULL when it
 * fails, and then made again next time) and kept until the instance is
 * freed. Valid while v holds its reference. */
enum gm_text { GM_TEXT_TENSORS, GM_TEXT_ALLOCATIONS, GM_TEXT_COUNT };
const char *gm_view_text(const struct gm_view *v, enum gm_text slot,
                         char *(*make)(const struct gm_view *v));

/* Resolves "host", "cuda:N" or a GPU-/MIG- UUID. Returns 0, or -errno with
 * ST_ERR_INVALID_ARGUMENT (not a device name, no such device) or
 * ST_ERR_NO_DEVICE (no usable driver, a device that cannot be used). Takes
 * no lock (the backends never change). */
int gm_resolve_device(struct gpu_manager *gm, const char *name, struct gm_device *where,
                      struct st_error *err);

/* ---- preloads (gpu/gpu_preload.c) ---- */

/* Starts loading model on *where, as the HTTP POST does: the whole model,
 * or with split (has_split) rank split->rank of split->world of it, as
 * POST .../fetch cuts it (gpu/gpu_part.h; a world of 1 is the whole
 * model); startup marks a config preload.
 * A model may have an instance on every device, and one per rank on each.
 * The model comes from the newest snapshot: the registry's current one, or
 * the one a reload has announced (gpu_manager_on_reload) and not yet
 * swapped in. Returns 1 when a load started, 0 when that instance is
 * already loaded or loading (a failed one is retired and tried again), *v
 * the instance's view either way (release it with
 * gpu_manager_view_release); or -errno with err: ST_ERR_NOT_FOUND (no such
 * model), ST_ERR_INVALID_ARGUMENT (the model is invalid), ST_ERR_SPLIT (the
 * split does not fit a tensor, or its world is above GM_MAX_WORLD),
 * ST_ERR_CONFLICT (that rank is on the device already with other rules),
 * ST_ERR_DEVICE_MEMORY (it cannot fit: the
 * message gives the bytes needed and available, and nothing was
 * allocated), ST_ERR_NO_MEMORY. Takes gm->lock itself. */
int gpu_preload_request(struct gpu_manager *gm, const char *model, const struct gm_device *where,
                        const struct fetch_req *split, int startup, struct gm_view *v,
                        struct st_error *err);

/* gpu_preload_request for a model the registry does not hold: rm (the
 * instance takes a reference) whose bytes src delivers (a mirror's, struct
 * gm_source above). Returns as gpu_preload_request; when it
 * returns 1 the new instance took src over, otherwise the caller keeps
 * it. With rm NULL it only finds the model's instance (0 with *v), or
 * fails with ST_ERR_NOT_FOUND when there is none or it failed. */
int gpu_preload_request_model(struct gpu_manager *gm, const char *model,
                              const struct reg_model *rm, struct gm_source *src,
                              const struct gm_device *where, struct gm_view *v,
                              struct st_error *err);

/* What an eviction left of one instance. */
struct gm_evicted {
    char device[24];
    unsigned world, rank;
    uint64_t generation;
    int draining;              /* 0: the memory was released at once */
    unsigned leases;           /* leases that remain (draining) */
};

/* Evicts model's current instances that which names (where NULL and rank
 * -1: every one). Returns how many were evicted, each in (*out)[i] (the
 * caller frees *out), or -ENOENT with ST_ERR_NOT_FOUND when none matches
 * (*out NULL). */
int gpu_manager_evict(struct gpu_manager *gm, const char *model, const struct gm_which *which,
                      struct gm_evicted **out, struct st_error *err);

/* A reload built snap (before it is swapped in): every loaded model whose
 * shard files changed (size, mtime, inode) gets a new generation loaded
 * from snap, beside the current one, which serves until the new one is
 * ready and then drains (gpu/gpu_manager_int.h, "reloads"); one whose
 * files are gone or invalid is evicted. */
void gpu_manager_on_reload(struct gpu_manager *gm, struct reg_snapshot *snap);

/* 1 once the start-up preloads have all ended (ready or failed). */
int gpu_manager_ready(struct gpu_manager *gm);

/* The staging rings kept for later preloads, one per device that has
 * preloaded, into out[0..max). Returns how many there are. */
size_t gpu_manager_staging(struct gpu_manager *gm, struct gm_staging *out, size_t max);
/* The bound on the staging rings' memory in force (staging_limit, or what
 * its default came to). */
uint64_t gpu_manager_staging_limit(struct gpu_manager *gm);

/* Publishes resident bytes, active leases and the last preload rate. */
void gpu_manager_update_metrics(struct gpu_manager *gm);

/* Stops the loader (cancelling loads) and frees everything; the lease
 * socket must be stopped first (it holds leases). Workers' mappings stay
 * valid. */
void gpu_manager_free(struct gpu_manager *gm);

/* ---- leases (server/lease/lease_server.c) ---- */

/* Opens a lease on the current instance of model that which names (its
 * device, its rank; with several, the one on which->prefer), which must be
 * ready. On success returns the lease, *v the instance's view (published:
 * render the answer from it, then release it) and fds[0..*n_fds) the
 * allocations' descriptors (borrowed: valid while the lease is held; send,
 * never close). On failure returns NULL with err: ST_ERR_NOT_FOUND (not
 * preloaded), ST_ERR_INVALID_ARGUMENT (not on that device or rank),
 * ST_ERR_AMBIGUOUS (several instances match: name a device or a rank),
 * ST_ERR_CONFLICT (still loading), ST_ERR_RETRY (reloading in place),
 * ST_ERR_DEVICE (its preload failed), ST_ERR_LIMIT (more shards than
 * max_fds). */
struct gpu_lease *gpu_manager_open(struct gpu_manager *gm, const char *model,
                                   const struct gm_which *which, struct gm_view *v, int *fds,
                                   size_t max_fds, size_t *n_fds, struct st_error *err);
/* Ends a lease (released, or its connection closed). */
void gpu_lease_release(struct gpu_manager *gm, struct gpu_lease *l);
/* The view of the instance lease l holds (release it with
 * gpu_manager_view_release): its checksums' state as it is now. */
void gpu_lease_view(struct gpu_manager *gm, struct gpu_lease *l, struct gm_view *v);

/* Tests only: waits until no load is queued or running and no checksum is
 * being summed (or timeout_ms passes). Returns 0, or -ETIMEDOUT. */
int gpu_manager_wait_idle(struct gpu_manager *gm, int timeout_ms);

#endif
