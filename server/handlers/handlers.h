/* handlers: one function per endpoint. Each takes the request's view and
 * fills its answer (server/handlers/h_answer.h), which it returns; none touches the
 * HTTP library or calls back into the front. The dispatcher holds a
 * registry snapshot for the request until the answer is rendered, so an
 * answer may point into it (a model's files and their validated stats);
 * whatever must live longer (a model's memory, a shared document) is held
 * by the answer's arena. */
#ifndef TENSORD_HANDLERS_H
#define TENSORD_HANDLERS_H

#include "h_answer.h"
#include "registry.h"

struct gpu_req_error;
struct jsonw;
struct route;

/* Where a model's file bytes are read from: NULL for a model of the models
 * root (its files' own descriptors), else a mirror's cache (a mirrored
 * model, server/handlers/h_mirror_v1.c): open gives the descriptor answer
 * a reads file rf through (a held by it until the request ends) and fills
 * *rd, what the front reads it as (its bytes may still be arriving); or
 * answers a and returns -1 when it cannot be had. */
struct model_files {
    int (*open)(const struct model_files *mf, const struct request_view *v, struct answer *a,
                const struct reg_file *rf, int parts, struct mirror_read *rd);
    void *arg;
};

struct answer *handle_models(const struct request_view *v, struct answer *a,
                             const struct reg_snapshot *reg);
/* A model's routes once it is found (server/handlers/h_model.c): ROUTE_MODEL,
 * ROUTE_MODEL_HEADER, ROUTE_FILE, ROUTE_FILE_HEADER, ROUTE_TENSOR,
 * ROUTE_FETCH; mf as for handle_file. */
struct answer *handle_model_route(const struct request_view *v, struct answer *a,
                                  const struct route *rt, const struct reg_model *m,
                                  const struct model_files *mf);
/* The model's description, or its merged header. */
struct answer *handle_model(const struct request_view *v, struct answer *a,
                            const struct reg_model *m, int merged_header);
struct answer *handle_file(const struct request_view *v, struct answer *a,
                           const struct reg_model *m, const struct reg_file *f, int header_only,
                           const struct model_files *mf);
struct answer *handle_tensor(const struct request_view *v, struct answer *a,
                             const struct reg_model *m, const struct reg_tensor *t,
                             const struct model_files *mf);
/* GET, POST, DELETE /v1/models/{model}/gpu (the model by name: the
 * manager's instances are); GET and DELETE take ?device= and &rank=. */
struct answer *handle_gpu(const struct request_view *v, struct answer *a, const char *model);
/* Answers a gpu_req call: rc < 0, e in the error dialect; else status with
 * the document w holds (taken). */
struct answer *handle_gpu_answer(struct answer *a, int rc, int status, struct jsonw *w,
                                 const struct gpu_req_error *e);
struct answer *handle_fetch(const struct request_view *v, struct answer *a,
                            const struct reg_model *m, const struct model_files *mf);
/* The Hugging Face endpoint (server/handlers/h_hub.c): every ROUTE_HUB_* route. */
struct answer *handle_hub(const struct request_view *v, struct answer *a,
                          const struct reg_snapshot *reg, const struct route *rt);
/* What a bearer token may do (server/http/auth.c decides). */
enum auth_role { AUTH_NONE, AUTH_READ, AUTH_ADMIN };
/* GET /api/whoami-v2 (server/handlers/h_whoami.c): who the request's token
 * is, as the Hub answers it; sent tells whether it carried an
 * Authorization header. */
struct answer *handle_hub_whoami(const struct request_view *v, struct answer *a, int sent,
                                 enum auth_role role);
/* Content by digest (server/handlers/h_blob.c): ROUTE_BLOB. */
struct answer *handle_blob(const struct request_view *v, struct answer *a,
                           const struct reg_snapshot *reg, const struct route *rt);
/* The S3 API (server/handlers/h_s3.c): ROUTE_S3, every method (it answers 405 itself). */
struct answer *handle_s3(const struct request_view *v, struct answer *a,
                         const struct reg_snapshot *reg, const struct route *rt);
struct answer *handle_healthz(const struct request_view *v, struct answer *a);
struct answer *handle_readyz(const struct request_view *v, struct answer *a);
/* The web console (server/handlers/ui.c): asset `name` ("" for the page); `bare`
 * for "/ui", which is redirected to "/ui/". */
struct answer *handle_ui(const struct request_view *v, struct answer *a, const char *name,
                         int bare);
/* "/": a browser (Accept: text/html) is sent to the console, anything
 * else told where the API is (server/handlers/ui.c). */
struct answer *handle_root(const struct request_view *v, struct answer *a);
/* GET /v1/openapi.json: the OpenAPI description, compiled in (ui.c). */
struct answer *handle_openapi(const struct request_view *v, struct answer *a);
struct answer *handle_metrics(const struct request_view *v, struct answer *a, int text);

#endif
