/* gpu_render: the JSON documents the GPU manager answers with, built from
 * one instance (core/gpu_manager_int.h), and its error documents.
 *
 * Every function returns a new reference the caller owns. The do_ ones read
 * an instance's lock-guarded fields (state, leases, published), so the
 * caller holds gm->lock. gpu_error_answer, the lease socket's error answer,
 * is declared in gpu_manager.h and defined here. */
#ifndef TENSORD_GPU_RENDER_H
#define TENSORD_GPU_RENDER_H

#include <jansson.h>

struct gm_model;

/* {"error": {"code": code, "message": ...}}, and *http_status = status. */
json_t *gpu_render_http_error(int *http_status, int status, const char *code, const char *fmt,
                              ...) __attribute__((format(printf, 4, 5)));

/* GET /v1/models/{model}/gpu of m: state, device, progress, leases, reason
 * (failed), preload timing (once ended), allocations as GET shows them
 * (with every handle type, and the legacy CUDA IPC handle where there is
 * one) and tensors. */
json_t *do_gpu_render_model(const struct gm_model *m);

/* The lease socket's "open" answer for m (ready): {"ok": true, "model",
 * device fields, "allocations" (each with its fd_index), "tensors"}. */
json_t *do_gpu_render_open(const struct gm_model *m);

#endif
