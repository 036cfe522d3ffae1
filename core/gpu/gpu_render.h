/* gpu_render: the JSON documents the GPU manager answers with, built from
 * one instance (core/gpu/gpu_manager_int.h), and its error documents.
 *
 * Every function returns a new reference or string the caller owns. The
 * document functions run without gm->lock: the caller holds a reference
 * on the instance and passes its lock-guarded fields as a struct gm_dyn
 * (core/gpu/gpu_manager_int.h). gpu_error_answer, the lease socket's error
 * answer, is declared in gpu_manager.h and defined here. */
#ifndef TENSORD_GPU_RENDER_H
#define TENSORD_GPU_RENDER_H

#include <jansson.h>
#include <stdint.h>

struct gm_model;
struct gm_dyn;

/* {"error": {"code": code, "message": ...}}, and *http_status = status. */
json_t *gpu_render_http_error(int *http_status, int status, const char *code, const char *fmt,
                              ...) __attribute__((format(printf, 4, 5)));

/* {"error": {"code", "message"}} as text. */
char *gpu_render_error_text(const char *code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* GET /v1/models/{model}/gpu of m in state d, as JSON text: state, device,
 * progress, leases, reason (failed), preload timing (once ended),
 * allocations as GET shows them (every handle type; never a legacy CUDA
 * IPC handle itself, which only the lease socket hands out) and tensors. */
char *gpu_render_model_text(struct gm_model *m, const struct gm_dyn *d);

/* The lease socket's "open" answer for m (published) as JSON text:
 * {"ok": true, "lease": lease, "model", device fields, "allocations" (each
 * with its fd_index, and the legacy CUDA IPC handle where there is one),
 * "tensors"}. */
char *gpu_render_open_text(struct gm_model *m, uint64_t lease);

#endif
