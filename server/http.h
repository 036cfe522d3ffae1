/* http: the libmicrohttpd daemon, the request lifecycle and dispatch.
 *
 * Threading: libmicrohttpd runs a pool of worker threads, each with its own
 * epoll set; a request is handled start to finish on one of them. Handlers
 * take a reference to the current registry snapshot for the request's
 * duration and never block on anything but pread of page-cached data. The
 * main thread only waits for signals and inotify events and swaps snapshots. */
#ifndef TENSORD_HTTP_H
#define TENSORD_HTTP_H

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdint.h>

#include "config.h"
#include "registry.h"
#include "server.h"

/* Why a request is refused before dispatch (found while it was received). */
enum request_reject { REJECT_NONE, REJECT_TOO_MANY_PARAMS, REJECT_TARGET_TOO_LONG };

struct conn;
struct mirror_job;
struct mirror_file;

/* An answer that waits on another thread, its connection suspended until
 * that thread calls back: a Hugging Face answer waiting for content hashes
 * (server/h_hub.c, the hasher's callback), a model document waiting for
 * its render (server/h_meta.c, doc_cache's), or a mirror's answer waiting
 * for its upstream (server/h_mirror.c, the mirror's job's). */
enum request_wait {
    WAIT_NONE,
    WAIT_SUSPENDED,             /* suspended; the callback resumes it */
    WAIT_RESUMED,               /* resumed: the next handler call dispatches again */
    WAIT_DONE,                  /* dispatched again: answer with what there is (a Hub answer
                                 * never waits twice) */
};

/* How an answer's body goes out, for the sendfile and copy byte counters
 * (stream.c sets it; error documents and redirects count in neither). */
enum http_body_method { BODY_UNCOUNTED, BODY_COPY, BODY_SENDFILE };

/* Per-request state, created when the request line arrives. */
struct request {
    struct server *srv;
    struct conn *owner;         /* the connection; it frees this record if libmicrohttpd never
                                 * reports the request complete */
    uint64_t start_ns;
    uint64_t queued_ns;         /* when the response was queued (time to first byte, near enough) */
    unsigned status;
    uint64_t body_bytes;        /* body bytes queued (0 for HEAD) */
    int body_method;            /* enum http_body_method: which sent-bytes counter it adds to */
    uint64_t sock_sent0;        /* the socket's bytes sent when the answer was queued, or
                                 * CONN_BYTES_UNKNOWN when not measured (small answers) */
    uint64_t head_bytes;        /* the size of the answer's status line and headers */
    int http10;                 /* an HTTP/1.0 request */
    int answered_raw;           /* written to the socket directly (respond_refusal_raw), whole
                                 * or not at all: body_bytes says which */
    int is_head;
    int reads_only;             /* GET, HEAD, or a POST that only reads (a fetch): preconditions and
                                 * Range apply to its answer; any other method acts, and its
                                 * preconditions were evaluated before it did */
    int endpoint;               /* enum metrics_ep */
    int close_after;            /* answer with Connection: close (overload) */
    int handled;                /* the answer has been queued */
    char method[16];            /* request method, copied for the access log */
    const char *allow;          /* Allow header for 405 */
    const char *cors_methods;   /* a CORS preflight's answer: its Allow-Methods (server/cors.h) */
    const char *error_code;     /* set by respond_error, for the log */
    const char *content_range;  /* extra Content-Range for a 416 */
    char *upload;               /* request body (POST), bounded */
    size_t upload_len;
    size_t upload_limit;        /* the bound for this endpoint; 0 until the body starts */
    int upload_too_large;
    char *uri;                  /* raw request target, for the access log */
    const char *target;         /* libmicrohttpd's copy of the target (in its line buffer) */
    size_t target_len;          /* its length up to the first NUL, as first seen */
    enum request_reject reject;
    uint64_t wire_bytes;        /* its line, headers and body as received, for the connection
                                 * table (CONN_BYTES_UNKNOWN when the framing hides it) */
    struct MHD_Connection *mhd; /* the connection, for resuming it from another thread */
    atomic_int wait;            /* enum request_wait */
    atomic_int wait_result;     /* enum hasher_result or enum doc_result, once resumed */
    struct mirror_job *mjob;    /* the mirror's job it waited for (released when it ends) */
    struct mirror_file *mirror_pin; /* a complete mirrored file it sends (released likewise) */
};

/* The largest request line and headers accepted: max_request_header_bytes
 * (each connection's memory) less the room kept for the answer. */
size_t http_request_limit(const struct config *cfg);

/* The answer resp (status, a body of body_bytes) was queued for rq: its
 * headers are all set. An answer whose body is over 64 KiB has the
 * connection's sent-byte count taken now, so that if it is cut short the
 * bytes the client got are known (http.c, on_completed). */
#define HTTP_MEASURED_BODY_MIN (64 * 1024)
void http_answer_queued(struct MHD_Connection *mc, struct request *rq, unsigned status,
                        struct MHD_Response *resp, uint64_t body_bytes);

/* Records that rq's answer sends file st with sendfile, so that a write to
 * that file cuts the connection (conns_cut_file). */
void http_sending(struct request *rq, const struct fileio_stat *st);

/* Asks the daemon's main loop to rescan the models root (a request found a
 * file changed since its snapshot validated it). Async-signal and thread
 * safe; never blocks. */
void http_request_rescan(struct server *srv);

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
