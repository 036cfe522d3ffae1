/* h_mirror: the HTTP answers of a pull-through mirror (server/handlers/h_mirror.c
 * says what each route does). Called only when the server has a mirror. */
#ifndef TENSORD_H_MIRROR_H
#define TENSORD_H_MIRROR_H

#include "h_answer.h"
#include "server.h"

struct route;

/* Every Hugging Face route of a mirror (but datasets' and spaces'). */
struct answer *handle_mirror_hub(const struct request_view *v, struct answer *a,
                                 const struct route *rt);
/* The routes of a model the models root does not hold, a model of the
 * upstream (server/handlers/h_mirror_v1.c): its description and header,
 * files, tensors, fetches (not its GPU routes: handle_mirror_gpu). */
struct answer *handle_mirror_model(const struct request_view *v, struct answer *a,
                                   const struct route *rt);
struct s3_query;
struct xmlw;
/* The S3 API's routes of a bucket the models root does not hold, a repo
 * of the upstream (server/handlers/h_mirror_s3.c), once its request is
 * authenticated; resource names it in S3's errors. */
struct answer *handle_mirror_s3(const struct request_view *v, struct answer *a,
                                const struct route *rt, const struct s3_query *q,
                                const char *resource);
/* ListBuckets' entries for the repos the mirror knows that reg does not
 * hold. */
void mirror_s3_buckets(const struct request_view *v, struct xmlw *w,
                       const struct reg_snapshot *reg);
/* /v1/models/{model}/gpu for a model the models root does not hold. */
struct answer *handle_mirror_gpu(const struct request_view *v, struct answer *a,
                                 const char *model);
struct jsonw;
struct mirror;
struct mirror_file;
/* The mirror's part of /v1/models (server/handlers/h_mirror_list.c): a row
 * per repo it knows that reg holds no model of, and the "mirror" object
 * (its upstream, its health, its cache). */
void mirror_list_models(struct jsonw *w, struct server *srv, const struct reg_snapshot *reg);
void mirror_status(struct jsonw *w, struct server *srv);
/* The answer holds the caller's reference to mirrored file f until it is
 * freed (the request's end) (server/handlers/h_mirror_job.c). */
void mirror_answer_hold(struct answer *a, struct mirror *m, struct mirror_file *f);

#endif
