/* http_conn (private to server/http): the records of a connection and of
 * the request it carries. The request's is made when its line arrives
 * (http_request.c) and ended here: metrics, the access log, its memory. */
#ifndef TENSORD_HTTP_CONN_H
#define TENSORD_HTTP_CONN_H

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdint.h>

#include "h_answer.h"
#include "server.h"

/* Why a request is refused before dispatch (found while it was received). */
enum request_reject { REJECT_NONE, REJECT_TOO_MANY_PARAMS, REJECT_TARGET_TOO_LONG };

/* Where a request whose answer waits is: its connection suspended until
 * the wait's callback resumes it, then dispatched again. */
enum request_wait {
    WAIT_NONE,
    WAIT_SUSPENDED,             /* suspended; the callback resumes it */
    WAIT_RESUMED,               /* resumed: the next handler call dispatches again */
    WAIT_DONE,                  /* dispatched again: answer with what there is (a Hub answer
                                 * never waits twice) */
};

/* Per-request state, created when the request line arrives. */
struct request {
    struct server *srv;
    struct conn *owner;         /* the connection; it frees this record if libmicrohttpd never
                                 * reports the request complete */
    uint64_t start_ns;
    uint64_t queued_ns;         /* when the response was queued (time to first byte, near enough) */
    unsigned status;
    uint64_t body_bytes;        /* body bytes queued (0 for HEAD) */
    int body_method;            /* enum stream_method: which sent-bytes counter it adds to */
    uint64_t sock_sent0;        /* the socket's bytes sent when the answer was queued, or
                                 * CONN_BYTES_UNKNOWN when not measured (small answers) */
    uint64_t head_bytes;        /* the size of the answer's status line and headers */
    int http10;                 /* an HTTP/1.0 request */
    int answered_raw;           /* written to the socket directly (refuse_raw), whole or not at
                                 * all: body_bytes says which */
    int is_head;
    int endpoint;               /* enum metrics_ep */
    int handled;                /* the answer has been queued */
    char method[16];            /* request method, copied for the access log */
    char *upload;               /* request body (POST), bounded; freed once answered */
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
    atomic_int wait_result;     /* what the wait ended with, once resumed */
    void *wait_job;             /* what the wait's start returned (a mirror's job), or NULL */
    void (*wait_release)(void *job); /* gives it back when the request ends */
    int wait_watched;           /* the connection table watches the suspension (conns.h): a
                                 * wait that can be taken back, so it may be given up */
    struct answer answer;       /* the current answer: its memory lives until the request ends */
};

/* Per-connection state, libmicrohttpd's socket context: created when a
 * connection is accepted and freed by the close notification, which
 * libmicrohttpd always sends. A request record therefore always has an owner
 * that outlives it, whatever libmicrohttpd does with the request itself. */
struct conn {
    int fd;                         /* the socket */
    uint64_t client;                /* a hash of the peer's address (request_view.client) */
    int tls;                        /* TLS connection: nothing may be written around libmicrohttpd */
    struct conns_entry *entry;    /* its row in the connection table */
    struct request *rq;             /* the request being received or answered, or NULL */
};

/* The record of the connection mc (its socket context), or NULL. */
struct conn *http_conn_of(struct MHD_Connection *mc);

/* Records rq's outcome (metrics, access log) and frees it. `delivered` says
 * whether its answer went out whole; when it did not, the bytes the client
 * got are counted, and the answer counts as aborted. */
void http_conn_request_end(struct request *rq, const char *range, unsigned status,
                           int delivered);

/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION (cls: the server): makes
 * and frees the connection's record, and ends a request it still carries. */
void http_conn_notify(void *cls, struct MHD_Connection *mc, void **socket_context,
                      enum MHD_ConnectionNotificationCode code);

#endif
