/* http_request: see http_request.h. */
#include "http_request.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "conns.h"
#include "dispatch.h"
#include "http_answer.h"
#include "http_conn.h"
#include "http_metrics.h"
#include "metrics.h"
#include "respond.h"
#include "util.h"

/* Query parameters beyond this many make a request 414 before libmicrohttpd
 * stores them: no endpoint takes more than a few, and each stored one costs
 * the connection's fixed memory pool 64 bytes. */
#define QUERY_MAX_PARAMS 32
/* Header fields beyond this many make a request 431 (Apache's default
 * LimitRequestFields): each also costs the pool 64 bytes, and 100 of them
 * fit in POOL_RESERVE. */
#define REQUEST_MAX_FIELDS 100

/* Each connection's libmicrohttpd memory pool (max_request_header_bytes)
 * holds the request line and headers, one 64-byte record per header field
 * and query parameter, and the answer's header. A request may use all but
 * this much of it (a quarter of small pools), so one just under the limit
 * still leaves room for its answer; one over it is refused by
 * refuse_malformed, or by libmicrohttpd itself (431/414) past the pool. The
 * pool is not made larger instead: libmicrohttpd zeroes all of it between
 * the requests of a kept-alive connection, which every request pays for. */
#define POOL_RESERVE (8 * 1024)

size_t http_request_limit(const struct config *cfg)
{
    size_t pool = cfg->max_request_header_bytes;
    return pool - (pool / 4 < POOL_RESERVE ? pool / 4 : POOL_RESERVE);
}

/* Counts the query parameters of a request target. */
static size_t query_params(const char *q)
{
    size_t n = 0;
    for (; q && *q; n++) {
        size_t len = strcspn(q, "&;");
        q += len + (q[len] != '\0');
    }
    return n;
}

void *http_request_begin(void *cls, const char *uri, struct MHD_Connection *mc)
{
    struct conn *c = http_conn_of(mc);
    /* libmicrohttpd 0.9.75 can drop a request without the completion
     * notification (a request line it failed to store): end that one now. */
    if (c && c->rq)
        http_conn_request_end(c->rq, NULL, 0, 0);
    conn_arm(c ? c->entry : NULL); /* the request is now due */
    struct request *rq = xcalloc(1, sizeof(*rq));
    answer_init(&rq->answer);
    rq->srv = cls;
    rq->owner = c;
    rq->start_ns = time_mono_ns();
    rq->uri = xstrdup(uri);
    rq->target = uri;
    rq->target_len = strlen(uri);
    rq->endpoint = MEP_OTHER;
    rq->sock_sent0 = CONN_BYTES_UNKNOWN;
    /* This callback sees the request target before libmicrohttpd splits its
     * query into the connection's memory pool (0.9.75 calls it first, so a
     * logger sees the raw line). A query of hundreds of parameters, or one
     * parameter after a target that filled the pool, exhausts that pool, and
     * libmicrohttpd then neither answers nor completes the request. The query
     * of a request that will be refused anyway is cut here, in the line
     * buffer libmicrohttpd owns and parses next; refuse_malformed answers it. */
    char *query = strchr(uri, '?');
    if (rq->target_len > http_request_limit(rq->srv->cfg))
        rq->reject = REJECT_TARGET_TOO_LONG; /* its one parameter may not fit either */
    else if (query && query_params(query + 1) > QUERY_MAX_PARAMS)
        rq->reject = REJECT_TOO_MANY_PARAMS;
    if (query && rq->reject != REJECT_NONE)
        query[1] = '\0';
    metrics_request_start();
    atomic_fetch_add(&rq->srv->in_flight, 1);
    if (c)
        c->rq = rq;
    return rq;
}

void http_request_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                            enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    struct request *rq = *con_cls;
    *con_cls = NULL;
    if (!rq)
        return;
    const union MHD_ConnectionInfo *mi =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_HTTP_STATUS);
    unsigned status = rq->status ? rq->status : (mi ? mi->http_status : 0);
    /* Idle until its next request begins (connection_timeout governs that). */
    conn_idle(rq->owner ? rq->owner->entry : NULL, rq->wire_bytes);
    /* A body cut short (client gone, timeout, file written or shrunk) did
     * not deliver all that was queued: what it did is counted. */
    const char *range = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE);
    http_conn_request_end(rq, range, status, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
}

/* Answers rq with an error (the front's own refusals), closing the
 * connection after it. */
static enum MHD_Result refuse(struct MHD_Connection *mc, struct request *rq, const char *url,
                              unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static enum MHD_Result refuse(struct MHD_Connection *mc, struct request *rq, const char *url,
                              unsigned status, const char *code, const char *fmt, ...)
{
    struct answer *a = &rq->answer;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    answer_free(a);
    answer_error(a, status, code, "%s", msg);
    a->close = 1;
    struct request_view v = http_answer_view(mc, rq, url);
    return http_answer_send(mc, rq, &v);
}

/* Writes an error answer straight to socket fd and returns MHD_NO, so
 * libmicrohttpd closes the connection. Only for refusing, on a plain-HTTP
 * connection, a request that reached the edge of libmicrohttpd's
 * per-connection memory: building the answer there needs room the request
 * has used up, and libmicrohttpd would close the connection without a word. */
static enum MHD_Result refuse_raw(struct request *rq, int fd, unsigned status, const char *code,
                                  const char *msg)
{
    char head[256];
    size_t len;
    char *text = respond_error_document(code, msg, 0, &len);
    if (!text)
        return MHD_NO;
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\n"
                     "X-Content-Type-Options: nosniff\r\nContent-Security-Policy: " HTTP_ANSWER_POLICY
                     "\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     status, MHD_get_reason_phrase_for(status), len);
    struct iovec iov[2] = {{head, (size_t)n}, {text, len}};
    /* The socket has sent nothing on this request and its buffer is empty:
     * a few hundred bytes go out in one call, or not at all. */
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    free(text);
    rq->status = status;
    rq->queued_ns = time_mono_ns();
    rq->body_bytes = w == n + (ssize_t)len ? len : 0;
    rq->answered_raw = 1;
    return MHD_NO; /* libmicrohttpd closes the connection */
}

/* The message-framing headers of a request (RFC 9112 §6). */
struct framing {
    unsigned n_length;          /* Content-Length fields */
    const char *length;         /* the first one's value */
    int length_conflict;        /* two Content-Lengths differ */
    unsigned n_encoding;        /* Transfer-Encoding fields */
    const char *encoding;       /* the first one's value */
};

static enum MHD_Result collect_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    (void)kind;
    struct framing *f = cls;
    value = value ? value : "";
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (f->n_length++ == 0)
            f->length = value;
        else if (strcmp(f->length, value) != 0)
            f->length_conflict = 1;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        if (f->n_encoding++ == 0)
            f->encoding = value;
    }
    return MHD_YES;
}

static int all_digits(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

/* Refuses, once its headers are in, a request that could not be answered
 * safely: one whose target libmicrohttpd cut short, that is larger than the
 * configured limit, or whose body framing is ambiguous (a request smuggling
 * vector when a proxy reads the framing differently). Each refusal closes the
 * connection: where the next request would start is in doubt. Returns
 * MHD_YES with nothing queued when the request may go on. */
static enum MHD_Result refuse_malformed(struct MHD_Connection *mc, struct request *rq,
                                        const char *url, const char *version)
{
    const struct config *cfg = rq->srv->cfg;
    rq->handled = 1;
    if (rq->reject == REJECT_TOO_MANY_PARAMS)
        return refuse(mc, rq, url, MHD_HTTP_URI_TOO_LONG, "uri_too_long",
                      "the query has more than %d parameters", QUERY_MAX_PARAMS);
    /* libmicrohttpd ends the target at its first NUL byte: the version
     * string starts right after the target's end only when there was none. */
    if (url == rq->target && version != rq->target + rq->target_len + 1)
        return refuse(mc, rq, url, MHD_HTTP_BAD_REQUEST, "bad_request",
                      "the request target contains a NUL byte");
    /* A request over the limit may have filled libmicrohttpd's memory pool
     * so that no answer can be built there: on plain HTTP it is answered by
     * writing to the socket directly. */
    const union MHD_ConnectionInfo *hs =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    rq->wire_bytes = hs ? hs->header_size : CONN_BYTES_UNKNOWN;
    int raw = rq->owner && !rq->owner->tls && rq->owner->fd >= 0;
    size_t limit = http_request_limit(cfg);
    char msg[160];
    unsigned status = 0;
    unsigned fields = (unsigned)MHD_get_connection_values(mc, MHD_HEADER_KIND, NULL, NULL);
    if (rq->reject == REJECT_TARGET_TOO_LONG) {
        status = MHD_HTTP_URI_TOO_LONG;
        snprintf(msg, sizeof(msg), "the request target is longer than %zu bytes", limit);
    } else if (fields > REQUEST_MAX_FIELDS) {
        status = MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE;
        snprintf(msg, sizeof(msg), "the request has %u header fields, more than %d", fields,
                 REQUEST_MAX_FIELDS);
    } else if (hs && hs->header_size > limit) {
        status = MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE;
        snprintf(msg, sizeof(msg), "the request line and headers are %zu bytes, more than %zu",
                 hs->header_size, limit);
    }
    if (status) {
        const char *code =
            status == MHD_HTTP_URI_TOO_LONG ? "uri_too_long" : "headers_too_large";
        if (raw)
            return refuse_raw(rq, rq->owner->fd, status, code, msg);
        return refuse(mc, rq, url, status, code, "%s", msg);
    }
    struct framing f = {0};
    MHD_get_connection_values(mc, MHD_HEADER_KIND, collect_framing, &f);
    if (f.n_encoding && f.n_length)
        return refuse(mc, rq, url, MHD_HTTP_BAD_REQUEST, "bad_request",
                      "a request must not carry both Content-Length and Transfer-Encoding");
    if (f.n_encoding && (f.n_encoding > 1 || strcasecmp(f.encoding, "chunked") != 0))
        return refuse(mc, rq, url, MHD_HTTP_NOT_IMPLEMENTED, "not_implemented",
                      "the only transfer coding accepted is a single \"chunked\"");
    if (f.n_encoding && strcmp(version, MHD_HTTP_VERSION_1_0) == 0)
        return refuse(mc, rq, url, MHD_HTTP_BAD_REQUEST, "bad_request",
                      "Transfer-Encoding is not allowed in an HTTP/1.0 request");
    if (f.n_length && (f.length_conflict || !all_digits(f.length)))
        return refuse(mc, rq, url, MHD_HTTP_BAD_REQUEST, "bad_request",
                      "Content-Length must be one decimal number");
    if (f.n_length || f.n_encoding)
        rq->upload_limit = dispatch_upload_limit(rq->srv, url);
    if (f.n_encoding)
        rq->wire_bytes = CONN_BYTES_UNKNOWN; /* the chunks' framing is not counted below */
    if (f.n_length && (strlen(f.length) > 19 || strtoull(f.length, NULL, 10) > rq->upload_limit))
        return refuse(mc, rq, url, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                      "request bodies are limited to %zu bytes here", rq->upload_limit);
    /* A request that announces a body is checked now (token, method, path),
     * so one that will be refused never has its body read or buffered: a
     * client without the token cannot make the daemon hold a megabyte per
     * connection. The refusal closes the connection, the body unread. One
     * without a body is checked when dispatched, keeping its connection. */
    if (f.n_encoding || (f.n_length && strcmp(f.length, "0") != 0)) {
        struct request_view v = http_answer_view(mc, rq, url);
        if (dispatch_refuse_early(&v, &rq->answer)) {
            rq->endpoint = rq->answer.endpoint;
            rq->answer.close = 1;
            return http_answer_send(mc, rq, &v);
        }
        answer_free(&rq->answer);
    }
    rq->handled = 0;
    return MHD_YES;
}

enum MHD_Result http_request_handle(void *cls, struct MHD_Connection *mc, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_data_size,
                                    void **con_cls)
{
    (void)cls;
    struct request *rq = *con_cls;
    if (!rq->method[0]) {
        /* The first call only announces the request. libmicrohttpd answers
         * "Connection: close" to a response queued here (it cannot yet know
         * the request is complete), so the answer waits for the next call:
         * that keeps HTTP/1.1 connections alive (measured: 5x the requests/s).
         * Only refusals, which close the connection anyway, go out now. */
        snprintf(rq->method, sizeof(rq->method), "%s", method);
        rq->is_head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        rq->http10 = strcmp(version, MHD_HTTP_VERSION_1_0) == 0;
        return refuse_malformed(mc, rq, url, version);
    }
    if (*upload_data_size) {
        /* Accumulate a bounded body (a chunked one can only be found too
         * large as it arrives; header_timeout bounds how long that takes). */
        if (!rq->upload_limit)
            rq->upload_limit = dispatch_upload_limit(rq->srv, url);
        if (rq->wire_bytes != CONN_BYTES_UNKNOWN)
            rq->wire_bytes += *upload_data_size;
        if (rq->upload_len + *upload_data_size > rq->upload_limit) {
            rq->upload_too_large = 1;
        } else {
            rq->upload = xrealloc(rq->upload, rq->upload_len + *upload_data_size + 1);
            memcpy(rq->upload + rq->upload_len, upload_data, *upload_data_size);
            rq->upload_len += *upload_data_size;
            rq->upload[rq->upload_len] = '\0';
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (rq->handled) {
        /* An answer that waited (for content hashes, a document's render,
         * the mirror's upstream) was resumed: it is dispatched again, and
         * answers with what it finds this time; given up (its client left,
         * connection_timeout, stopping), it is closed unanswered. */
        if (rq->wait_watched && conn_gave_up(rq->owner ? rq->owner->entry : NULL))
            return MHD_NO;
        int resumed = WAIT_RESUMED;
        if (atomic_compare_exchange_strong(&rq->wait, &resumed, WAIT_DONE))
            return http_answer_dispatch(mc, rq, url);
        return MHD_YES;
    }
    rq->handled = 1;
    conn_disarm(rq->owner ? rq->owner->entry : NULL); /* the whole request is in */
    if (rq->upload_too_large)
        return refuse(mc, rq, url, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                      "request bodies are limited to %zu bytes here", rq->upload_limit);
    return http_answer_dispatch(mc, rq, url);
}
