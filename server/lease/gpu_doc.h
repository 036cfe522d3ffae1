/* gpu_doc: the GPU manager's state as JSON, for the HTTP endpoints
 * (GET/POST/DELETE /v1/models/{model}/gpu, the "gpu" parts of the model
 * list) and the lease socket's answers, rendered from the manager's plain
 * views (gpu/gpu_manager.h) with core/jsonw; and the one mapping from
 * the manager's status codes to HTTP statuses and wire error codes.
 *
 * Every document is written as one JSON value into the caller's writer,
 * so the model list embeds the GPU parts in its own document; a writer
 * that ran out of memory answers NULL at jsonw_take. A request the manager
 * refuses returns -errno with a struct gpu_doc_error and writes nothing:
 * the HTTP front answers it in its error dialect, the lease socket in its
 * own. Everything runs without the manager's lock: views copy what they
 * show and hold a reference on their instance. An instance's tensor table,
 * and its allocations once published, are rendered once and kept in the
 * instance (gm_view_text). */
#ifndef TENSORD_GPU_DOC_H
#define TENSORD_GPU_DOC_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "gpu_manager.h"
#include "jsonw.h"

/* A refused GPU request as the endpoints say it. */
struct gpu_doc_error {
    const char *code;          /* the wire code: "bad_device", "not_loaded", ... (static) */
    int http_status;           /* what the HTTP endpoints answer (0: the socket's codes) */
    char message[512];         /* the manager's (a struct st_error's), verbatim */
};

/* The manager's options from the daemon's configuration (the preload
 * strings borrowed from cfg). */
void gpu_doc_options(struct gm_options *opt, const struct config *cfg);

/* {"available": bool, "devices": [{"index", "uuid", "name",
 * "memory_bytes", "error"?}], "backends": ["host", "cuda"?], "ipc_socket":
 * socket_path, "staging_bytes": {device: bytes}, "models": [{"name",
 * "state", "device", "generation", "leases"}], "reason" (when not
 * available)}. */
void gpu_doc_status(struct gpu_manager *gm, const char *socket_path, struct jsonw *w);

/* The short form for model listings: {"state": "none"} or {"state",
 * "device", "generation"} ({"state": "failed", "device"} for a start-up
 * preload its device refused). */
void gpu_doc_summary(struct gpu_manager *gm, const char *model, struct jsonw *w);

/* GET /v1/models/{model}/gpu: the current instance (or the newest draining
 * one) with state, progress, device, generation, allocations and tensors.
 * A model never preloaded is {"model": M, "state": "none"}. */
void gpu_doc_model(struct gpu_manager *gm, const char *model, struct jsonw *w);

/* The device a POST body names ({"device": "cuda:N" | GPU UUID | "host"}):
 * 0 with *device (the caller frees), or -EINVAL with e (400 bad_request). */
int gpu_doc_preload_device(const char *body, size_t len, char **device, struct gpu_doc_error *e);

/* POST: asks for model's preload on device. 0 with the model document in w
 * and *http_status 202 when a load starts, 200 when it is already loaded or
 * loading there; -errno with e: 400 bad_device, 404 not_found (not in the
 * current snapshot), 409 model_invalid / loaded_elsewhere, 503
 * gpu_unavailable. With src NULL (and rm) the model is the registry's;
 * else it is rm, which the registry does not hold, whose bytes *src
 * delivers (a mirror's): *src becomes NULL when the new instance took it
 * over, otherwise the caller still owns it. */
int gpu_doc_preload_model(struct gpu_manager *gm, const char *model, const char *device,
                          const struct reg_model *rm, struct gm_source **src, struct jsonw *w,
                          int *http_status, struct gpu_doc_error *e);

/* DELETE: 0 with {"model", "state": "none", "generation"} and 200 when the
 * memory was released at once, {..., "state": "draining", "leases": N} and
 * 202 while leases remain; -ENOENT with e (404 not_loaded). */
int gpu_doc_evict(struct gpu_manager *gm, const char *model, struct jsonw *w, int *http_status,
                  struct gpu_doc_error *e);

/* The lease socket's "open": opens a lease on model (on device unless it
 * is empty) and writes its answer {"ok": true, "lease": lease_id, "model",
 * device fields, "allocations" (each with its fd_index, and the legacy CUDA
 * IPC handle where there is one), "tensors"} into w, with fds[0..*n_fds) as
 * gpu_manager_open gives them. NULL with e when the lease is refused. */
struct gpu_lease *gpu_doc_open(struct gpu_manager *gm, const char *model, const char *device,
                               uint64_t lease_id, struct jsonw *w, int *fds, size_t max_fds,
                               size_t *n_fds, struct gpu_doc_error *e);

/* {"ok": true, "models": [{"name","state","device","generation"}]}. */
void gpu_doc_list(struct gpu_manager *gm, struct jsonw *w);

/* The lease socket's "checksums" for lease l: {"ok": true, "state":
 * "pending" | "ready" | "unavailable", "reason"?, "checksums": [16 hex
 * digits per allocation, when ready]}. */
void gpu_doc_checksums(struct gpu_manager *gm, struct gpu_lease *l, struct jsonw *w);

#endif
