/* gpu_preload: the GPU manager's load queue and its loader thread.
 *
 * A preload request makes a new instance (gpu/gpu_manager_int.h), links it
 * into the table as the model's current one and queues it. The loader
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
#ifndef TENSORD_GPU_PRELOAD_H
#define TENSORD_GPU_PRELOAD_H

#include "gpu_manager.h"
#include "st_error.h"

struct gm_instance;

/* Starts the loader thread. Returns 0, or -errno with err when it cannot
 * start. */
int gpu_preload_start(struct gpu_manager *gm, struct st_error *err);

/* Starts loading model on *where, as the HTTP POST does; startup marks a
 * config preload. The model comes from the newest snapshot: the registry's
 * current one, or the one a reload has announced (gpu_manager_on_reload)
 * and not yet swapped in. Returns 1 when a load started, 0 when it is
 * already loaded or loading there (a failed instance on the same device is
 * retired and tried again), *v the instance's view either way (release it
 * with gpu_manager_view_release); or -errno with err: ST_ERR_NOT_FOUND (no
 * such model), ST_ERR_INVALID_ARGUMENT (the model is invalid),
 * ST_ERR_CONFLICT (loaded on another device), ST_ERR_NO_MEMORY. Takes
 * gm->lock itself. */
int gpu_preload_request(struct gpu_manager *gm, const char *model, const struct gm_device *where,
                        int startup, struct gm_view *v, struct st_error *err);

/* gpu_preload_request for a model the registry does not hold: rm (the
 * instance takes a reference) whose bytes src delivers (a mirror's,
 * gpu/gpu_manager.h). Returns as gpu_preload_request; when it
 * returns 1 the new instance took src over, otherwise the caller keeps
 * it. With rm NULL it only finds the model's instance (0 with *v), or
 * fails with ST_ERR_NOT_FOUND when there is none or it failed. */
int gpu_preload_request_model(struct gpu_manager *gm, const char *model,
                              const struct reg_model *rm, struct gm_source *src,
                              const struct gm_device *where, struct gm_view *v,
                              struct st_error *err);

/* Links m (new, from do_gm_instance_new) as its model's current instance
 * and queues it; refs become 2: the table's and the loader's. */
void do_gm_enqueue(struct gpu_manager *gm, struct gm_instance *m);

/* Tells the loader to stop, cancels every instance's load (the one running
 * stops at its next chunk), and joins the thread. Queued instances stay in
 * the table for gpu_manager_free to free. */
void gpu_preload_stop(struct gpu_manager *gm);

#endif
