/* dispatch: a complete request to the handler of its endpoint, after the
 * checks every endpoint shares (connection limit, path, method, bearer
 * token, query parameters), with one registry snapshot held for the whole
 * request (by the answer, until it is rendered). Errors on the Hugging
 * Face paths speak the Hub's dialect. */
#ifndef TENSORD_DISPATCH_H
#define TENSORD_DISPATCH_H

#include <stddef.h>

#include "h_answer.h"
#include "server.h"

/* Answers v (its headers and body all in) into a. */
struct answer *dispatch_request(const struct request_view *v, struct answer *a);

/* Runs, once a request's headers are in and before its body is read, the
 * checks dispatch_request makes first (connection limit, path, method,
 * bearer token, query parameters). Returns 1 when one refused the request,
 * its answer in a: a request without the token gets its 401 before any
 * byte of its body is read or buffered. */
int dispatch_refuse_early(const struct request_view *v, struct answer *a);

/* The largest request body the endpoint at url accepts: a fetch or a
 * paths-info request may list many names. */
size_t dispatch_upload_limit(const struct server *srv, const char *url);

#endif
