/* gpu_doc: the GPU manager's state as JSON, for the HTTP endpoints
 * (GET/POST/DELETE /v1/models/{model}/gpu, the "gpu" parts of the model
 * list) and the lease socket's answers, rendered from the manager's plain
 * views (core/gpu/gpu_manager.h); and the one mapping from the manager's
 * status codes to HTTP statuses and wire error codes.
 *
 * Every function returns a new reference or string the caller owns (NULL
 * only when memory runs out) and runs without the manager's lock: views
 * copy what they show and hold a reference on their instance. An instance's
 * tensor table, and its allocations once published, are rendered once and
 * kept in the instance (gm_view_text). Error documents are
 * {"error": {"code", "message"}}; the lease socket's add "ok": false. */
#ifndef TENSORD_GPU_DOC_H
#define TENSORD_GPU_DOC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "gpu/gpu_manager.h"

/* The manager's options from the daemon's configuration (the preload
 * strings borrowed from cfg). */
void gpu_doc_options(struct gm_options *opt, const struct config *cfg);

/* {"available": bool, "reason": "..." (when not), "devices": [{"index",
 * "uuid", "name", "memory_bytes", "error"?}], "backends": ["host", "cuda"?],
 * "ipc_socket": socket_path, "models": [{"name","state","device",
 * "generation","leases"}]}. */
json_t *gpu_doc_status_json(struct gpu_manager *gm, const char *socket_path);

/* The short form for model listings: {"state": "none"} or {"state",
 * "device", "generation"} ({"state": "failed", "device"} for a start-up
 * preload its device refused). */
json_t *gpu_doc_summary(struct gpu_manager *gm, const char *model);

/* GET /v1/models/{model}/gpu as JSON text: the current instance (or the
 * newest draining one) with state, progress, device, generation,
 * allocations and tensors. A model never preloaded answers {"model": M,
 * "state": "none"}. *http_status is always 200. */
char *gpu_doc_model_text(struct gpu_manager *gm, const char *model, int *http_status);
/* The same document parsed (tests). */
json_t *gpu_doc_model_json(struct gpu_manager *gm, const char *model, int *http_status);

/* POST: body {"device": "cuda:N" | GPU UUID | "host"}, answered as JSON
 * text: 202 with the model document when a load starts, 200 when it is
 * already loaded or loading on that device; errors: 400 bad_request /
 * bad_device, 404 not_found (not in the current snapshot), 409
 * model_invalid / loaded_elsewhere, 503 gpu_unavailable. */
char *gpu_doc_preload_text(struct gpu_manager *gm, const char *model, const char *body,
                           size_t body_len, int *http_status);
/* The same answer parsed (tests). */
json_t *gpu_doc_preload(struct gpu_manager *gm, const char *model, const char *body,
                        size_t body_len, int *http_status);
/* The device of a POST .../gpu body (a new string the caller frees), or
 * -1 with the 400 document (*doc, malloc'd) and *http_status. */
int gpu_doc_preload_device(const char *body, size_t body_len, char **device, char **doc,
                           int *http_status);
/* gpu_doc_preload_text for a model the registry does not hold: rm, whose
 * bytes *src delivers (a mirror's); *src becomes NULL when the new
 * instance took it over, otherwise the caller still owns it. With rm and
 * *src NULL it answers the model's current instance on that device, or
 * 404 not_found when there is none (or it failed). */
char *gpu_doc_preload_model_text(struct gpu_manager *gm, const char *model, const char *device,
                                 const struct reg_model *rm, struct gm_source **src,
                                 int *http_status);

/* DELETE: 200 {"model", "state": "none", "generation"} when the memory was
 * released at once, 202 {..., "state": "draining", "leases": N} while leases
 * remain; 404 not_loaded. */
json_t *gpu_doc_evict(struct gpu_manager *gm, const char *model, int *http_status);

/* The lease socket's "open": opens a lease on model (on device unless it
 * is empty) and renders its answer {"ok": true, "lease": lease_id, "model",
 * device fields, "allocations" (each with its fd_index, and the legacy
 * CUDA IPC handle where there is one), "tensors"} into *answer (text),
 * with fds[0..*n_fds) as gpu_manager_open gives them. On failure returns
 * NULL with *answer an error answer. */
struct gpu_lease *gpu_doc_open(struct gpu_manager *gm, const char *model, const char *device,
                               uint64_t lease_id, char **answer, int *fds, size_t max_fds,
                               size_t *n_fds);

/* {"ok": true, "models": [{"name","state","device","generation"}]}. */
json_t *gpu_doc_list_json(struct gpu_manager *gm);

/* The lease socket's error answer {"error": {"code", "message"}, "ok": false}. */
json_t *gpu_doc_answer_error(const char *code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
