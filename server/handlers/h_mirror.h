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
/* /v1/models/{model}/gpu for a model the models root does not hold. */
struct answer *handle_mirror_gpu(const struct request_view *v, struct answer *a,
                                 const char *model);
struct mirror;
struct mirror_file;
/* The answer holds the caller's reference to mirrored file f until it is
 * freed (the request's end). */
void mirror_answer_hold(struct answer *a, struct mirror *m, struct mirror_file *f);

#endif
