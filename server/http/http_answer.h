/* http_answer: a request's answer, from its view to libmicrohttpd. The
 * dispatcher answers the request's view (server/http/dispatch.h); the
 * answer is rendered (respond.h, the body by stream.h), given the headers
 * every answer carries, and queued, or its wait starts with the connection
 * suspended until the wait's callback resumes it (http_request.c then
 * dispatches it again). Private to server/http. */
#ifndef TENSORD_HTTP_ANSWER_H
#define TENSORD_HTTP_ANSWER_H

#include <microhttpd.h>

#include "http_conn.h"

/* The Content-Security-Policy of every answer but the console's: nothing
 * loads or runs, and no page may frame it. */
#define HTTP_ANSWER_POLICY "default-src 'none'; frame-ancestors 'none'"

/* The view of rq (path: libmicrohttpd's url, the target's path). */
struct request_view http_answer_view(struct MHD_Connection *mc, struct request *rq,
                                     const char *path);

/* Sends rq's answer, or starts its wait. */
enum MHD_Result http_answer_send(struct MHD_Connection *mc, struct request *rq,
                                 const struct request_view *v);

/* Dispatches rq (again, after a wait: the previous answer goes) and sends
 * its answer. */
enum MHD_Result http_answer_dispatch(struct MHD_Connection *mc, struct request *rq,
                                     const char *url);

#endif
