/* gpu_manager: preloads models into a backend (cuda or host), hands their
 * memory to workers as leases, and evicts them.
 *
 * Each preload makes an instance: one allocation per safetensors shard,
 * filled on the manager's loader thread (never on HTTP threads), published
 * `ready` once every copy is synchronised (and verified with verify = true).
 * An instance is refcounted: the manager's table holds one reference while it
 * is the model's current instance, the loader one while it loads, and every
 * lease one. Evicting or replacing an instance (a reload that changed its
 * files) drops the table's reference; the instance is `draining` until the
 * last lease ends, then its memory is released. Workers that mapped the
 * memory keep their mappings valid either way (the kernel and the CUDA
 * driver refcount the underlying memory); leases are how the daemon knows
 * when its own hold may go.
 *
 * Every call is thread-safe. JSON answers are new references the caller
 * owns.
 *
 * Three files implement it: core/gpu/gpu_manager.c (the instance table, leases,
 * evict, reload), core/gpu/gpu_preload.c (the loader thread) and
 * core/gpu/gpu_render.c (the JSON documents); core/gpu/gpu_manager_int.h holds what
 * they share and the locking rules. */
#ifndef TENSORD_GPU_MANAGER_H
#define TENSORD_GPU_MANAGER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "registry.h"

struct gpu_manager;
struct gpu_lease;

/* Probes the backends (host always; cuda when a driver and a device are
 * there). Never fails because there is no GPU. The config and the holder
 * must outlive the manager. */
struct gpu_manager *gpu_manager_new(const struct config *cfg, struct registry_holder *holder);

/* Starts the loader thread and queues the config's preloads. Returns 0, or
 * -1 with err when the thread cannot start. The lease socket is the
 * daemon's (server/lease_server.c), started after this. */
int gpu_manager_start(struct gpu_manager *gm, char *err, size_t errlen);

/* {"available": bool, "reason": "..." (when not), "devices": [{"index",
 * "uuid", "name", "memory_bytes"}], "backends": ["host", "cuda"?],
 * "ipc_socket": path, "models": [{"name","state","device","generation",
 * "leases"}]}. */
json_t *gpu_manager_status_json(struct gpu_manager *gm);

/* GET /v1/models/{model}/gpu as JSON text (caller frees): the current
 * instance (or the newest draining one) with state, progress, device,
 * generation, allocations and tensors. A model never preloaded answers 200
 * {"model": M, "state": "none"}. *http_status is always 200. Rendered
 * without the manager's lock; the big parts are rendered once per instance. */
char *gpu_manager_model_text(struct gpu_manager *gm, const char *model, int *http_status);
/* The same document parsed (tests, and callers that want a tree). */
json_t *gpu_manager_model_json(struct gpu_manager *gm, const char *model, int *http_status);

/* The short form for model listings: {"state": "none"} or {"state",
 * "device", "generation"}. */
json_t *gpu_manager_model_summary(struct gpu_manager *gm, const char *model);

/* POST: body {"device": "cuda:N" | GPU UUID | "host"}, answered as JSON
 * text (caller frees). 202 with the model JSON when a load starts, 200 when it is already loaded or loading on that
 * device; errors ({"error": {"code", "message"}}): 400 bad_request /
 * bad_device, 404 not_found (not in the current snapshot), 409
 * model_invalid / loaded_elsewhere, 503 gpu_unavailable. */
char *gpu_manager_preload_text(struct gpu_manager *gm, const char *model, const char *body,
                               size_t body_len, int *http_status);
/* The same answer parsed. */
json_t *gpu_manager_preload(struct gpu_manager *gm, const char *model, const char *body,
                            size_t body_len, int *http_status);

/* DELETE: 200 {"state": "none"} when the memory was released at once, 202
 * {"state": "draining", "leases": N} while leases remain; 404 not_loaded. */
json_t *gpu_manager_evict(struct gpu_manager *gm, const char *model, int *http_status);

/* A reload built snap (before it is swapped in): every loaded model whose
 * shard files changed (size, mtime, inode) or disappeared is replaced by a
 * new instance with a new generation, loaded from snap; the old one drains. */
void gpu_manager_on_reload(struct gpu_manager *gm, struct registry *snap);

/* 1 once the start-up preloads have all ended (ready or failed). */
int gpu_manager_ready(struct gpu_manager *gm);

/* Publishes resident bytes, active leases and the last preload rate. */
void gpu_manager_update_metrics(struct gpu_manager *gm);

/* Stops the loader (cancelling loads) and frees everything; the lease
 * socket must be stopped first (it holds leases). Workers' mappings stay
 * valid. */
void gpu_manager_free(struct gpu_manager *gm);

/* ---- for the lease socket (server/lease_server.c) ---- */

/* Opens a lease on model's current instance, which must be ready (and on
 * `device` when that is not empty). On success returns the lease, *answer
 * is the "open" answer as JSON text ({"ok": true, "lease": lease_id, ...};
 * caller frees) and fds[0..*n_fds) the allocations' descriptors (borrowed:
 * valid while the lease is held; send, never close). On failure returns
 * NULL with *answer an error answer's text. The answer is rendered without
 * the manager's lock. */
struct gpu_lease *gpu_manager_open(struct gpu_manager *gm, const char *model, const char *device,
                                   uint64_t lease_id, char **answer, int *fds, size_t max_fds,
                                   size_t *n_fds);
/* Ends a lease (released, or its connection closed). */
void gpu_lease_release(struct gpu_manager *gm, struct gpu_lease *l);
/* {"ok": true, "models": [{"name","state","device","generation"}]}. */
json_t *gpu_manager_list_json(struct gpu_manager *gm);

/* {"ok": false, "error": {"code": code, "message": ...}}. */
json_t *gpu_error_answer(const char *code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The same as JSON text; caller frees. */
char *gpu_error_answer_text(const char *code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Tests: waits until no load is queued or running (or timeout_ms passes).
 * Returns 0, or -1 on timeout. */
int gpu_manager_wait_idle(struct gpu_manager *gm, int timeout_ms);

#endif
