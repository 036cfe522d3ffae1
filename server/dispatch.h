/* dispatch: a complete request to the handler of its endpoint, after the
 * checks every endpoint shares (connection limit, path, method, bearer
 * token, query parameters), with one registry snapshot held for the whole
 * request. Errors on the Hugging Face paths speak the Hub's dialect. */
#ifndef TENSORD_DISPATCH_H
#define TENSORD_DISPATCH_H

#include <microhttpd.h>
#include <stddef.h>

#include "http.h"

/* Answers rq (its headers and body all in). */
enum MHD_Result dispatch_request(struct MHD_Connection *conn, struct request *rq,
                                 const char *url, const char *method);

/* Runs, once a request's headers are in and before its body is read, the
 * checks dispatch_request makes first (connection limit, path, method,
 * bearer token, query parameters). Returns 1 when one refused the request,
 * its answer queued in *ret: a request without the token gets its 401 before
 * any byte of its body is read or buffered. */
int dispatch_refuse_early(struct MHD_Connection *conn, struct request *rq, const char *url,
                          const char *method, enum MHD_Result *ret);

/* The largest request body the endpoint at url accepts: a fetch or a
 * paths-info request may list many names. */
size_t dispatch_upload_limit(const struct server *srv, const char *url);

#endif
