/* gpu_req: requests to the GPU manager as the endpoints receive them: a
 * POST .../gpu body, the device and rank of GET and DELETE, a lease
 * socket's "open"; and the one mapping from the manager's status codes to
 * HTTP statuses and wire error codes. The answers are written with
 * gpu_doc's documents (server/lease/gpu_doc.h).
 *
 * A request the manager refuses returns -errno with a struct
 * gpu_req_error and writes nothing: the HTTP front answers it in its error
 * dialect, the lease socket in its own. */
#ifndef TENSORD_GPU_REQ_H
#define TENSORD_GPU_REQ_H

#include <stddef.h>
#include <stdint.h>

#include "fetch_req.h"
#include "gpu_manager.h"
#include "jsonw.h"

/* A refused GPU request as the endpoints say it. */
struct gpu_req_error {
    const char *code;          /* the wire code: "bad_device", "not_loaded", ... (static) */
    int http_status;           /* what the HTTP endpoints answer (0: the socket's codes) */
    char message[512];         /* the manager's (a struct st_error's), verbatim */
};

#define GPU_REQ_MAX_DEVICES 64 /* entries of "devices": ranks placed by one request */

/* A POST .../gpu body: {"device": D} (the whole model), {"device": D,
 * "split": {"world", "rank", "rules"}} (one rank's partition), or
 * {"devices": [D0, ...], "split": {"world", "rules"}} (rank r on Dr, as many
 * devices as world). */
struct gpu_req_preload {
    char *device;              /* NULL when "devices" */
    char **devices;
    size_t n_devices;
    struct fetch_req split;    /* has_split 0 without "split" */
};

/* Parses body[0..len) into *p (free with gpu_req_preload_free). Returns 0,
 * or -EINVAL with e (400 bad_request: not such an object, both or neither
 * of device and devices, a split without its rank or with one beside
 * devices, a world other than the devices' number; the split's own checks
 * as POST .../fetch makes them). */
int gpu_req_preload_parse(const char *body, size_t len, struct gpu_req_preload *p,
                          struct gpu_req_error *e);
void gpu_req_preload_free(struct gpu_req_preload *p);

/* POST: asks for model's preload as p says: 0 with the answer in w and
 * *http_status 202 when a load started, 200 when everything asked for is
 * loaded or loading already. One instance: its document
 * (gpu_doc_instance); several ("devices"): {"model", "instances": [...]},
 * and a failure on one rank takes back the ranks this request started.
 * -errno with e: 400 bad_device / bad_split, 404 not_found (not in the
 * current snapshot), 409 model_invalid / split_conflict, 503
 * gpu_unavailable, 507 insufficient_memory. */
int gpu_req_preload(struct gpu_manager *gm, const char *model, const struct gpu_req_preload *p,
                    struct jsonw *w, int *http_status, struct gpu_req_error *e);

/* A mirror's POST (server/handlers/h_mirror.c): the whole of rm, which the
 * registry does not hold, whose bytes *src delivers, on device (a body
 * with a split is refused there). *src becomes NULL when the new instance
 * took it over, otherwise the caller still owns it. With rm NULL, only the
 * instance there is answered. Returns as gpu_req_preload. */
int gpu_req_preload_model(struct gpu_manager *gm, const char *model, const char *device,
                          const struct reg_model *rm, struct gm_source **src, struct jsonw *w,
                          int *http_status, struct gpu_req_error *e);

/* The instances GET or DELETE name by their query's "device", "rank" and
 * "world" (each may be NULL: any): *which, its device in *where. Returns 0,
 * or -EINVAL with e (400 bad_device, bad_request for a rank or world that
 * is no plain decimal number, 503 gpu_unavailable). */
int gpu_req_which(struct gpu_manager *gm, const char *device, const char *rank,
                  const char *world, struct gm_which *which, struct gm_device *where,
                  struct gpu_req_error *e);

/* DELETE: evicts the instances which names (every one of the model by
 * default). One: {"model", "state": "none" | "draining", "device",
 * "generation", "leases"?}; several: the same with "instances": [{"device",
 * "world"?, "rank"?, "state", "generation", "leases"?}]. 200 when every
 * memory was released at once, 202 while leases remain; -ENOENT with e (404
 * not_loaded). */
int gpu_req_evict(struct gpu_manager *gm, const char *model, const struct gm_which *which,
                  struct jsonw *w, int *http_status, struct gpu_req_error *e);

/* The lease socket's "open": opens a lease on model's instance on device
 * (NULL or "": any) and of rank (-1: any), the one on prefer among several,
 * and writes its answer {"ok": true, "lease": lease_id, ...} (gpu_doc's
 * instance for_open) into w, with fds[0..*n_fds) as gpu_manager_open gives
 * them. NULL with e when the lease is refused. */
struct gpu_lease *gpu_req_open(struct gpu_manager *gm, const char *model, const char *device,
                               int rank, const char *prefer, uint64_t lease_id, struct jsonw *w,
                               int *fds, size_t max_fds, size_t *n_fds, struct gpu_req_error *e);

#endif
