/* gpu_doc: the GPU manager's state as JSON, for the HTTP endpoints
 * (GET/POST/DELETE /v1/models/{model}/gpu, the "gpu" parts of the model
 * list) and the lease socket's answers, rendered from the manager's plain
 * views (gpu/gpu_manager.h) with core/base/jsonw. The requests that lead to
 * them, and the mapping of the manager's refusals to statuses and wire
 * codes, are gpu_req's (server/lease/gpu_req.h).
 *
 * Every document is written as one JSON value into the caller's writer,
 * so the model list embeds the GPU parts in its own document; a writer
 * that ran out of memory answers NULL at jsonw_take. Everything runs without the manager's lock: views copy what they
 * show and hold a reference on their instance. An instance's tensor table,
 * and its allocations once published, are rendered once and kept in the
 * instance (gm_view_text). */
#ifndef TENSORD_GPU_DOC_H
#define TENSORD_GPU_DOC_H

#include <stdint.h>

#include "config.h"
#include "gpu_manager.h"
#include "jsonw.h"

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
 * preload its device refused). gm may be NULL: {"state": "none"}. */
void gpu_doc_summary(struct gpu_manager *gm, const char *model, struct jsonw *w);

/* GET /v1/models/{model}/gpu: with which NULL, the model's one current
 * instance (or, with none current, its newest draining one) in full
 * (state, progress, device, world and rank, generation, allocations,
 * tensors) and "instances": every instance's short form; with several
 * current instances, {"model", "state", "instances"} only. With which (the
 * query's device and rank), the first instance it names in full. A model
 * never preloaded is {"model": M, "state": "none"}. */
void gpu_doc_model(struct gpu_manager *gm, const char *model, const struct gm_which *which,
                   struct jsonw *w);

/* The instance of v, as GET shows it (for_open 0) or as the lease socket's
 * "open" answer carries it (published allocations with their descriptors'
 * indexes and legacy handles, the lease, for a partition its split and each
 * tensor's part). The cached parts that fail to render make the writer
 * fail. */
void gpu_doc_instance(struct jsonw *w, const struct gm_view *v, int for_open, uint64_t lease);

/* {"ok": true, "models": [{"name","state","device","generation"}]}. */
void gpu_doc_list(struct gpu_manager *gm, struct jsonw *w);

/* The lease socket's "checksums" for lease l: {"ok": true, "state":
 * "pending" | "ready" | "unavailable", "reason"?, "checksums": [16 hex
 * digits per allocation, when ready]}. */
void gpu_doc_checksums(struct gpu_manager *gm, struct gpu_lease *l, struct jsonw *w);

#endif
