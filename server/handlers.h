/* handlers: one function per endpoint. Each runs on an HTTP worker thread
 * with a registry reference held by the caller for the call's duration;
 * whatever an answer needs after the call is duplicated into the response
 * (file descriptors), copied, or kept alive by a reference to the snapshot
 * that the response drops when it is sent (cached documents and headers). */
#ifndef TENSORD_HANDLERS_H
#define TENSORD_HANDLERS_H

#include <microhttpd.h>

#include "http.h"
#include "registry.h"

struct gpu_doc_error;
struct jsonw;

/* The decoded value of query parameter key (libmicrohttpd leaves values
 * escaped: http.c), as a form value ('+' a space) when form is set; NULL
 * when absent. *bad is set when it is malformed; *len (may be NULL) gets
 * its length. Caller frees. */
char *handler_query(struct MHD_Connection *conn, const char *key, int form, size_t *len,
                    int *bad);

enum MHD_Result handle_models(struct MHD_Connection *conn, struct request *rq,
                              const struct reg_snapshot *reg);
enum MHD_Result handle_model(struct MHD_Connection *conn, struct request *rq,
                             const struct reg_model *m);
enum MHD_Result handle_model_header(struct MHD_Connection *conn, struct request *rq,
                                    const struct reg_model *m);
enum MHD_Result handle_file(struct MHD_Connection *conn, struct request *rq,
                            const struct reg_model *m, const struct reg_file *f, int header_only);
enum MHD_Result handle_tensor(struct MHD_Connection *conn, struct request *rq,
                              const struct reg_model *m, const struct reg_tensor *t);
/* GET, POST, DELETE /v1/models/{model}/gpu (the model by name: the
 * manager's instances are). */
enum MHD_Result handle_gpu(struct MHD_Connection *conn, struct request *rq, const char *model,
                           const char *method);
/* Answers a gpu_doc call: rc < 0, e in the error dialect; else status with
 * the document w holds (taken). */
enum MHD_Result handle_gpu_answer(struct MHD_Connection *conn, struct request *rq, int rc,
                                  int status, struct jsonw *w, const struct gpu_doc_error *e);
enum MHD_Result handle_fetch(struct MHD_Connection *conn, struct request *rq,
                             const struct reg_model *m);
struct route;
/* The Hugging Face endpoint (server/h_hub.c): every ROUTE_HUB_* route. */
enum MHD_Result handle_hub(struct MHD_Connection *conn, struct request *rq,
                           const struct reg_snapshot *reg, const struct route *rt);
/* Content by digest (server/h_blob.c): ROUTE_BLOB. */
enum MHD_Result handle_blob(struct MHD_Connection *conn, struct request *rq,
                            const struct reg_snapshot *reg, const struct route *rt);
/* The S3 API (server/h_s3.c): ROUTE_S3, every method (it answers 405 itself). */
enum MHD_Result handle_s3(struct MHD_Connection *conn, struct request *rq,
                          const struct reg_snapshot *reg, const struct route *rt,
                          const char *method);
enum MHD_Result handle_healthz(struct MHD_Connection *conn, struct request *rq);
enum MHD_Result handle_readyz(struct MHD_Connection *conn, struct request *rq);
/* The web console (server/ui.c): asset `name` ("" for the page); `bare`
 * for "/ui", which is redirected to "/ui/". */
enum MHD_Result handle_ui(struct MHD_Connection *conn, struct request *rq, const char *name,
                          int bare);
enum MHD_Result handle_metrics(struct MHD_Connection *conn, struct request *rq, int text);

#endif
