/* h_mirror: the HTTP answers of a pull-through mirror (server/h_mirror.c
 * says what each route does). Called only when the server has a mirror. */
#ifndef TENSORD_H_MIRROR_H
#define TENSORD_H_MIRROR_H

#include <microhttpd.h>
#include <stdint.h>

#include "http.h"

struct route;

/* Every Hugging Face route of a mirror (but datasets' and spaces'). */
enum MHD_Result handle_mirror_hub(struct MHD_Connection *conn, struct request *rq,
                                  const struct route *rt);
/* /v1/models/{model}/gpu for a model the models root does not hold. */
enum MHD_Result handle_mirror_gpu(struct MHD_Connection *conn, struct request *rq,
                                  const char *model, const char *method);
/* A complete mirrored file with this SHA-256 that the upstream gave out
 * without a token (mirror_find_complete), with a reference (release with
 * mirror_unref), or NULL (also without a mirror). */
struct mirror_file *mirror_blob_find(struct server *srv, const uint8_t sha256[32]);

#endif
