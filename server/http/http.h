/* http: the HTTP front, the one part of the daemon that touches
 * libmicrohttpd; this module starts and stops its daemon. A request is
 * received (its limits and early refusals, its body: http_request.h), its
 * view made and answered by the dispatcher (dispatch.h), the answer
 * rendered (respond.h, the body by stream.h) and sent (http_answer.h); an
 * answer that waits suspends the connection until its wait ends, and the
 * request is dispatched again. The records of a connection and of its
 * request are http_conn.h's.
 *
 * Threading: libmicrohttpd runs a pool of worker threads, each with its own
 * epoll set; a request is handled start to finish on one of them. Handlers
 * take a reference to the current registry snapshot for the request's
 * duration and never block on anything but pread of page-cached data. The
 * main thread only waits for signals and inotify events and swaps snapshots. */
#ifndef TENSORD_HTTP_H
#define TENSORD_HTTP_H

#include <stddef.h>

#include "server.h"

/* Starts the daemon on cfg->listen. Returns 0 or -1 with errbuf. */
int http_start(struct server *srv, char *errbuf, size_t errlen);
/* Stops accepting (new connections are closed at once; answers carry
 * Connection: close), waits up to drain_ms for in-flight requests, then stops. */
void http_stop(struct server *srv, unsigned drain_ms);

/* Parses "host:port", "[v6]:port" or ":port" into a socket address.
 * Returns 0 or -1. */
struct sockaddr_storage;
int http_parse_listen(const char *listen, struct sockaddr_storage *ss, unsigned *len);

#endif
