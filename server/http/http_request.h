/* http_request: a request's life as libmicrohttpd drives it, from its
 * line to its completion: the limits a request is held to and the front's
 * own refusals (before dispatch, some before its body is read), its body,
 * its dispatch (http_answer.h), and after a wait its dispatch again.
 * Private to server/http, but http_request_limit (its tests). */
#ifndef TENSORD_HTTP_REQUEST_H
#define TENSORD_HTTP_REQUEST_H

#include <microhttpd.h>
#include <stddef.h>

#include "config.h"

/* The largest request line and headers accepted: max_request_header_bytes
 * (each connection's memory) less the room kept for the answer. */
size_t http_request_limit(const struct config *cfg);

/* libmicrohttpd's callbacks (cls: the server): MHD_OPTION_URI_LOG_CALLBACK
 * makes the request's record, the access handler answers it,
 * MHD_OPTION_NOTIFY_COMPLETED ends it. */
void *http_request_begin(void *cls, const char *uri, struct MHD_Connection *mc);
enum MHD_Result http_request_handle(void *cls, struct MHD_Connection *mc, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_data_size,
                                    void **con_cls);
void http_request_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                            enum MHD_RequestTerminationCode toe);

#endif
