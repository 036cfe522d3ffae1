/* gpu_preload: the GPU manager's load queue and its loader thread.
 *
 * A preload request makes a new instance (core/gpu/gpu_manager_int.h), links it
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

#include <jansson.h>
#include <stddef.h>

struct gpu_manager;
struct gm_model;

/* Starts the loader thread, then requests the config's preloads
 * ("MODEL@DEVICE"; a malformed or refused one is logged and skipped).
 * Returns 0, or -1 with err when the thread cannot start. */
int gpu_preload_start(struct gpu_manager *gm, char *err, size_t errlen);

/* Starts loading model on device, as the HTTP POST does; startup marks a
 * config preload. The model comes from the newest snapshot: the holder's
 * current one, or the one a reload has announced (gpu_manager_on_reload)
 * and not yet swapped in. Returns the HTTP status: 202 a load started, 200
 * already loaded or loading there (a failed instance on the same device is
 * retired and tried again); errors (400, 404, 409, 503) with an error
 * document. *doc is always set, JSON text the caller frees. Takes gm->lock
 * itself. */
int gpu_preload_request(struct gpu_manager *gm, const char *model, const char *device,
                        int startup, char **doc);

/* Links m (new, from do_gm_instance_new) as its model's current instance
 * and queues it; refs become 2: the table's and the loader's. */
void do_gpu_preload_enqueue(struct gpu_manager *gm, struct gm_model *m);

/* Tells the loader to stop, cancels every instance's load (the one running
 * stops at its next chunk), and joins the thread. Queued instances stay in
 * the table for gpu_manager_free to free. */
void gpu_preload_stop(struct gpu_manager *gm);

#endif
