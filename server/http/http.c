#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "h_answer.h"
#include "auth.h"
#include "conns.h"
#include "cors.h"
#include "dispatch.h"
#include "log.h"
#include "http_metrics.h"
#include "metrics.h"
#include "respond.h"
#include "stream.h"
#include "util.h"

/* The Content-Security-Policy of every answer but the console's: nothing
 * loads or runs, and no page may frame it. */
#define ANSWER_POLICY "default-src 'none'; frame-ancestors 'none'"

/* Why a request is refused before dispatch (found while it was received). */
enum request_reject { REJECT_NONE, REJECT_TOO_MANY_PARAMS, REJECT_TARGET_TOO_LONG };

struct conn;

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

int http_parse_listen(const char *listen, struct sockaddr_storage *ss, unsigned *len)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    if (!colon || colon[1] == '\0')
        return -1;
    size_t hlen = (size_t)(colon - listen);
    if (hlen >= sizeof(host))
        return -1;
    memcpy(host, listen, hlen);
    host[hlen] = '\0';
    if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
        memmove(host, host + 1, hlen - 2);
        host[hlen - 2] = '\0';
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535)
        return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res;
    if (getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &res) != 0)
        return -1;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = (unsigned)res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* Keep the path as sent: route_parse splits it before decoding, so that an
 * encoded '/' stays part of a name. Query values are decoded by handlers. */
static size_t keep_escaped(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls, (void)c;
    return strlen(s);
}

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

static struct conn *conn_of(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Body bytes of rq's answer that the client got when the answer was cut
 * short: what the client's TCP acknowledged since the answer was queued
 * (what was still queued never reaches it), less the headers (libmicrohttpd
 * sends them whole before the first body byte of an answer this large).
 * An answer of 64 KiB or less is not measured, to keep small answers free
 * of system calls: cut short, it counts nothing. */
static uint64_t body_bytes_cut(const struct request *rq)
{
    if (rq->sock_sent0 == CONN_BYTES_UNKNOWN || !rq->owner)
        return 0;
    uint64_t now = conn_bytes_delivered(rq->owner->entry);
    if (now == CONN_BYTES_UNKNOWN || now < rq->sock_sent0 + rq->head_bytes)
        return 0;
    uint64_t body = now - rq->sock_sent0 - rq->head_bytes;
    return body < rq->body_bytes ? body : rq->body_bytes;
}

/* Records rq's outcome (metrics, access log) and frees it. `delivered` says
 * whether its answer went out whole; when it did not, the bytes the client
 * got are counted, and the answer counts as aborted. */
static void request_end(struct request *rq, const char *range, unsigned status, int delivered)
{
    uint64_t now = time_mono_ns();
    uint64_t ttfb = rq->queued_ns ? rq->queued_ns - rq->start_ns : now - rq->start_ns;
    delivered |= rq->answered_raw;
    uint64_t sent = delivered ? rq->body_bytes : body_bytes_cut(rq);
    if (!delivered && rq->queued_ns && rq->body_bytes)
        metrics_add(MC_RESPONSES_ABORTED, 1);
    if (rq->body_method != STREAM_UNCOUNTED)
        metrics_add(rq->body_method == STREAM_SENDFILE ? MC_SENDFILE_BYTES : MC_COPIED_BYTES, sent);
    http_metrics_request_done((enum metrics_ep)rq->endpoint, status, sent, now - rq->start_ns, ttfb);
    log_access(rq->method[0] ? rq->method : "-", rq->uri, status, sent, now - rq->start_ns, range);
    atomic_fetch_sub(&rq->srv->in_flight, 1);
    if (rq->owner) {
        conn_sending(rq->owner->entry, 0, 0);
        rq->owner->rq = NULL;
    }
    if (rq->wait_release && rq->wait_job) /* its callback can no longer resume this connection */
        rq->wait_release(rq->wait_job);
    answer_free(&rq->answer);
    free(rq->upload);
    free(rq->uri);
    free(rq);
}

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

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *mc)
{
    struct conn *c = conn_of(mc);
    /* libmicrohttpd 0.9.75 can drop a request without the completion
     * notification (a request line it failed to store): end that one now. */
    if (c && c->rq)
        request_end(c->rq, NULL, 0, 0);
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

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
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
     * not deliver all that was queued: request_end counts what it did. */
    request_end(rq, MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE),
                status, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
}

/* A hash of the peer's address without its port (an IPv4 peer on an IPv6
 * socket counts as its IPv4 address), or 0. */
static uint64_t client_of(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return hash_fnv1a(&in->sin_addr, 4, HASH_FNV_SEED);
    }
    if (sa && sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_V4MAPPED(a) ? hash_fnv1a(a->s6_addr + 12, 4, HASH_FNV_SEED)
                                       : hash_fnv1a(a->s6_addr, 16, HASH_FNV_SEED);
    }
    return 0;
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct server *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        atomic_fetch_add(&srv->connections, 1);
        metrics_conn_opened();
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct conn *c = xcalloc(1, sizeof(*c));
        c->fd = ci ? ci->connect_fd : -1;
        c->client = client_of(mc);
        c->tls = (srv->daemon_flags & MHD_USE_TLS) != 0;
        c->entry = c->fd >= 0 ? conns_add(srv->conns, c->fd, c->tls, mc) : NULL;
        *socket_context = c;
    } else {
        struct conn *c = *socket_context;
        atomic_fetch_sub(&srv->connections, 1);
        metrics_conn_closed();
        if (c) {
            /* Received, never completed: the connection ended it. Its
             * headers went with the connection's memory pool. */
            if (c->rq)
                request_end(c->rq, NULL, c->rq->status, 0);
            conns_remove(srv->conns, c->entry);
            free(c);
        }
        *socket_context = NULL;
    }
}

/* Whether the request's header `name` lists token (case-insensitive). */
static int header_has_token(struct MHD_Connection *mc, const char *name, const char *token)
{
    const char *v = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, name);
    size_t n = strlen(token);
    while (v && *v) {
        v += strspn(v, " \t,");
        size_t len = strcspn(v, " \t,");
        if (len == n && strncasecmp(v, token, n) == 0)
            return 1;
        v += len;
    }
    return 0;
}

struct head_size {
    uint64_t bytes;
    int has_connection;         /* the answer sets Connection itself */
};

static enum MHD_Result add_header_size(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    struct head_size *h = cls;
    if (kind == MHD_HEADER_KIND) {
        h->bytes += strlen(key) + 2 + strlen(value) + 2;
        h->has_connection |= strcasecmp(key, MHD_HTTP_HEADER_CONNECTION) == 0;
    }
    return MHD_YES;
}

/* The bytes of the status line and headers libmicrohttpd 0.9.75 writes for
 * resp (connection.c, build_header_response): "HTTP/1.1 CODE REASON", Date
 * (37 bytes), Connection when it must close or keep an HTTP/1.0 connection
 * alive and the answer does not set it, the answer's own headers,
 * Content-Length, the blank line. tests/integration/test_aborted.py checks
 * it against what a client's kernel received. */
static uint64_t answer_head_bytes(struct MHD_Connection *mc, const struct request *rq,
                                  unsigned status, struct MHD_Response *resp, uint64_t body)
{
    struct head_size h = {0};
    char digits[24];
    MHD_get_response_headers(resp, add_header_size, &h);
    h.bytes += 9 + 4 + MHD_get_reason_phrase_len_for(status) + 2 + 37;
    if (!h.has_connection) {
        int keep10 = rq->http10 && header_has_token(mc, MHD_HTTP_HEADER_CONNECTION, "keep-alive");
        if (header_has_token(mc, MHD_HTTP_HEADER_CONNECTION, "close") || (rq->http10 && !keep10))
            h.bytes += sizeof("Connection: close\r\n") - 1;
        else if (keep10)
            h.bytes += sizeof("Connection: Keep-Alive\r\n") - 1;
    }
    h.bytes += sizeof("Content-Length: \r\n") - 1 + (uint64_t)snprintf(digits, sizeof(digits),
                                                                     "%llu", (unsigned long long)body);
    return h.bytes + 2;
}

/* An answer whose body is over this has the connection's sent-byte count
 * taken when it is queued, so that if it is cut short the bytes the client
 * got are known (on_completed). */
#define MEASURED_BODY_MIN (64 * 1024)

/* The answer resp (status, a body of body_bytes) was queued for rq: its
 * headers are all set. */
static void answer_queued(struct MHD_Connection *mc, struct request *rq, unsigned status,
                          struct MHD_Response *resp, uint64_t body_bytes)
{
    rq->status = status;
    rq->body_bytes = body_bytes;
    rq->queued_ns = time_mono_ns();
    if (body_bytes <= MEASURED_BODY_MIN || !rq->owner)
        return;
    rq->sock_sent0 = conn_bytes_written(rq->owner->entry);
    rq->head_bytes = answer_head_bytes(mc, rq, status, resp, body_bytes);
}

/* Asks the daemon's main loop to rescan the models root (a request found a
 * file changed since its snapshot validated it). Never blocks. */
static void request_rescan(struct server *srv)
{
    uint64_t one = 1;
    if (srv->rescan_fd >= 0 && write(srv->rescan_fd, &one, sizeof(one)) < 0) {
        /* EAGAIN: the counter is full, a rescan is asked for already */
    }
}

/* ---- the request's view ------------------------------------------------------------ */

static const char *view_get_header(const struct request_view *v, const char *name)
{
    return MHD_lookup_connection_value(v->ctx, MHD_HEADER_KIND, name);
}

static const char *view_get_query(const struct request_view *v, const char *key)
{
    return MHD_lookup_connection_value(v->ctx, MHD_GET_ARGUMENT_KIND, key);
}

struct each_query {
    int (*fn)(void *arg, const char *key, const char *value);
    void *arg;
};

static enum MHD_Result each_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    (void)kind;
    const struct each_query *e = cls;
    return e->fn(e->arg, key, value) ? MHD_NO : MHD_YES;
}

static void view_each_query(const struct request_view *v,
                            int (*fn)(void *arg, const char *key, const char *value), void *arg)
{
    struct each_query e = {fn, arg};
    MHD_get_connection_values(v->ctx, MHD_GET_ARGUMENT_KIND, each_arg, &e);
}

/* The view of rq (path: libmicrohttpd's url, the target's path). */
static struct request_view view_of(struct MHD_Connection *mc, struct request *rq,
                                   const char *path)
{
    return (struct request_view){
        .srv = rq->srv,
        .method = rq->method,
        .is_head = rq->is_head,
        .path = path,
        .target = rq->uri,
        .body = rq->upload,
        .body_len = rq->upload_len,
        .tls = (rq->srv->daemon_flags & MHD_USE_TLS) != 0,
        .client = rq->owner ? rq->owner->client : 0,
        .start_ns = rq->start_ns,
        .header = view_get_header,
        .query = view_get_query,
        .each_query = view_each_query,
        .ctx = mc,
        .waited = atomic_load(&rq->wait) == WAIT_DONE,
        .wait_result = atomic_load(&rq->wait_result),
        .wait_job = rq->wait_job,
    };
}

/* ---- answers ------------------------------------------------------------------------- */

/* The wait's end (any thread): the request is dispatched again, unless the
 * connection table gave it up first (its client left). */
static void resumed(void *arg, int result)
{
    struct request *rq = arg;
    atomic_store(&rq->wait_result, result);
    atomic_store(&rq->wait, WAIT_RESUMED);
    if (!rq->wait_watched || conn_resume(rq->owner ? rq->owner->entry : NULL))
        MHD_resume_connection(rq->mhd);
}

/* The connection table's callback for a suspension it gives up (its
 * lock held): the request or reader then sees conn_gave_up and ends. */
static void give_up(void *conn)
{
    MHD_resume_connection(conn);
}

/* Suspends rq and starts what its answer waits for. Suspended before the
 * wait starts: its callback may come at once. A wait that can be taken
 * back (a mirror's job: its release does) is watched by the connection
 * table, which gives it up when its client leaves or idles past
 * connection_timeout; the hash and document waits end within their own
 * bounds, and their callbacks cannot be taken back. */
static enum MHD_Result start_wait(struct MHD_Connection *mc, struct request *rq)
{
    struct answer *a = &rq->answer;
    rq->mhd = mc;
    rq->wait_watched = a->wait.release != NULL;
    if (rq->wait_watched && conn_suspend(rq->owner ? rq->owner->entry : NULL) < 0) {
        answer_rendered(a);
        return MHD_NO; /* stopping: closed, unanswered, like a connection made now */
    }
    /* A second wait (a mirrored model's job, then its document's render):
     * the first one's job is done with, its result taken. */
    if (rq->wait_release && rq->wait_job)
        rq->wait_release(rq->wait_job);
    rq->wait_job = NULL;
    atomic_store(&rq->wait, WAIT_SUSPENDED);
    MHD_suspend_connection(mc);
    a->wait.done = resumed;
    a->wait.done_arg = rq;
    rq->wait_release = a->wait.release;
    rq->wait_job = a->wait.start(a);
    answer_rendered(a);
    return MHD_YES; /* answered when dispatched again */
}

/* The libmicrohttpd response for reply r of rq's answer (another reply in
 * r when its body could not be built). */
static struct MHD_Response *build(struct MHD_Connection *mc, struct request *rq,
                                  const struct request_view *v, struct reply *r,
                                  struct stream_out *so)
{
    struct stream_ctx sc = {rq->srv->mirror, mc, rq->owner ? rq->owner->entry : NULL,
                            rq->srv->cfg->sendfile};
    int err;
    struct MHD_Response *resp = stream_response(r, &rq->answer, &sc, so, &err);
    if (!resp && err) {
        respond_failed(v, &rq->answer, r, err);
        resp = stream_response(r, &rq->answer, &sc, so, &err);
    }
    return resp;
}

/* Sends rq's answer, or starts its wait. */
static enum MHD_Result send_answer(struct MHD_Connection *mc, struct request *rq,
                                   const struct request_view *v)
{
    struct answer *a = &rq->answer;
    if (a->kind == ANSWER_WAIT)
        return start_wait(mc, rq);
    struct reply r;
    struct stream_out so;
    respond_reply(v, a, &r);
    struct MHD_Response *resp = build(mc, rq, v, &r, &so);
    if (!resp) {
        answer_rendered(a);
        return MHD_NO;
    }
    int own_policy = 0;
    for (size_t i = 0; i < r.n_headers; i++) {
        MHD_add_response_header(resp, r.headers[2 * i], r.headers[2 * i + 1]);
        own_policy |= strcmp(r.headers[2 * i], "Content-Security-Policy") == 0;
    }
    /* No answer is a page but the console's, which sets its own policy: a
     * browser must not sniff one into another type nor run anything in it
     * (a model's file, an upstream's document). */
    if (!own_policy) {
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "Content-Security-Policy", ANSWER_POLICY);
    }
    if (a->close || atomic_load(&rq->srv->draining))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    rq->body_method = so.method;
    if (so.sending && rq->owner)
        conn_sending(rq->owner->entry, so.sending->dev, so.sending->ino);
    if (a->rescan)
        request_rescan(rq->srv);
    answer_queued(mc, rq, r.status, resp, rq->is_head ? 0 : r.length);
    enum MHD_Result ret = MHD_queue_response(mc, r.status, resp);
    MHD_destroy_response(resp);
    answer_rendered(a);
    /* Nothing reads the body once answered: a connection that does not
     * read its answer holds no more than the answer. */
    free(rq->upload);
    rq->upload = NULL;
    rq->upload_len = 0;
    return ret;
}

/* Dispatches rq (again, after a wait: the previous answer goes). */
static enum MHD_Result answer_request(struct MHD_Connection *mc, struct request *rq,
                                      const char *url)
{
    answer_free(&rq->answer);
    struct request_view v = view_of(mc, rq, url);
    dispatch_request(&v, &rq->answer);
    rq->endpoint = rq->answer.endpoint;
    return send_answer(mc, rq, &v);
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
    struct request_view v = view_of(mc, rq, url);
    return send_answer(mc, rq, &v);
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
                     "X-Content-Type-Options: nosniff\r\nContent-Security-Policy: " ANSWER_POLICY
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

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    log_msg(LOG_DEBUG, "libmicrohttpd: %s", msg);
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
        struct request_view v = view_of(mc, rq, url);
        if (dispatch_refuse_early(&v, &rq->answer)) {
            rq->endpoint = rq->answer.endpoint;
            rq->answer.close = 1;
            return send_answer(mc, rq, &v);
        }
        answer_free(&rq->answer);
    }
    rq->handled = 0;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
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
            return answer_request(mc, rq, url);
        return MHD_YES;
    }
    rq->handled = 1;
    conn_disarm(rq->owner ? rq->owner->entry : NULL); /* the whole request is in */
    if (rq->upload_too_large)
        return refuse(mc, rq, url, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                      "request bodies are limited to %zu bytes here", rq->upload_limit);
    return answer_request(mc, rq, url);
}

/* While draining, connections accepted by the kernel are closed at once.
 * (MHD_quiesce_daemon would take the listen socket out of the workers' epoll
 * sets instead, but in epoll mode with a thread pool it races with the
 * workers doing the same and can abort the process: an open libmicrohttpd
 * defect.) */
static enum MHD_Result accept_policy(void *cls, const struct sockaddr *addr, socklen_t len)
{
    (void)addr, (void)len;
    struct server *srv = cls;
    return atomic_load(&srv->draining) ? MHD_NO : MHD_YES;
}

/* Opens the listening socket ourselves rather than through libmicrohttpd:
 * SO_REUSEADDR only (libmicrohttpd's address-reuse option adds SO_REUSEPORT,
 * which lets a second daemon bind the same address and take half the
 * traffic), and a bind error that names the cause. Returns the socket or -1
 * with errbuf. */
static int listen_socket(const struct sockaddr_storage *ss, socklen_t len, const char *what,
                         char *errbuf, size_t errlen)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int on = 1;
    if (fd < 0) {
        snprintf(errbuf, errlen, "cannot listen on %s: socket: %s", what, strerror(errno));
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
        bind(fd, (const struct sockaddr *)ss, len) != 0 || listen(fd, SOMAXCONN) != 0) {
        int e = errno;
        snprintf(errbuf, errlen, "cannot listen on %s: %s%s", what, strerror(e),
                 e == EADDRINUSE ? " (another process, perhaps another tensord, holds it: "
                                   "choose another port with --listen ADDR:PORT or the listen "
                                   "option; `make run` takes PORT=N)" : "");
        close(fd);
        return -1;
    }
    return fd;
}


/* TLS 1.2 is the oldest version accepted (RFC 8996 deprecates 1.0 and 1.1). */
#define TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

int http_start(struct server *srv, char *errbuf, size_t errlen)
{
    const struct config *cfg = srv->cfg;
    struct sockaddr_storage ss;
    unsigned sslen;
    if (http_parse_listen(cfg->listen, &ss, &sslen) < 0) {
        snprintf(errbuf, errlen, "cannot parse listen address \"%s\" (want HOST:PORT or [V6]:PORT)",
                 cfg->listen);
        return -1;
    }
    if (cors_check_config(cfg, errbuf, errlen) < 0)
        return -1;
    unsigned threads = config_effective_threads(cfg);
    /* Suspend/resume: an answer that waits (content hashes, a document's
     * render, a mirror's upstream) holds no worker thread. */
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG |
                     MHD_USE_TURBO | MHD_ALLOW_SUSPEND_RESUME;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;

    char *tls_key = NULL, *tls_cert = NULL;
    if (cfg->tls_cert && cfg->tls_cert[0]) {
        if (auth_read_pem(cfg->tls_cert, &tls_cert, errbuf, errlen) < 0 ||
            auth_read_pem(cfg->tls_key, &tls_key, errbuf, errlen) < 0) {
            free(tls_cert);
            return -1;
        }
        flags |= MHD_USE_TLS;
    }
    int lfd = listen_socket(&ss, sslen, cfg->listen, errbuf, errlen);
    if (lfd < 0) {
        free(tls_key);
        free(tls_cert);
        return -1;
    }
    /* libmicrohttpd silently drops connections past its own limit; ours is
     * enforced in dispatch with a 503, so leave it headroom to answer. */
    unsigned mhd_limit = cfg->max_connections + 64;
    /* With no certificate the array ends at its first entry. */
    struct MHD_OptionItem tls_opts[] = {
        {tls_key ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, tls_key},
        {MHD_OPTION_HTTPS_MEM_CERT, 0, tls_cert},
        {MHD_OPTION_HTTPS_PRIORITIES, 0, TLS_PRIORITIES},
        {MHD_OPTION_END, 0, NULL},
    };
    srv->conns = conns_start(cfg->header_timeout, cfg->connection_timeout, give_up);
    srv->daemon_flags = flags;
    srv->daemon = MHD_start_daemon(
        flags, 0, accept_policy, srv, on_request, srv,
        MHD_OPTION_LISTEN_SOCKET, lfd,
        MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_connections_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, cfg->connection_timeout,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->max_request_header_bytes,
        MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
        MHD_OPTION_ARRAY, tls_opts,
        MHD_OPTION_END);
    free(tls_key);
    free(tls_cert);
    if (!srv->daemon) {
        /* lfd is not closed: libmicrohttpd closes it on most of its failure
         * paths, and the process exits next. */
        conns_stop(srv->conns);
        srv->conns = NULL;
        snprintf(errbuf, errlen, "cannot serve on %s: libmicrohttpd refused the options%s",
                 cfg->listen, (flags & MHD_USE_TLS) ? " (check tls_cert and tls_key)" : "");
        return -1;
    }
    return 0;
}

void http_stop(struct server *srv, unsigned drain_ms)
{
    if (!srv->daemon)
        return;
    atomic_store(&srv->draining, 1);
    for (unsigned waited = 0; waited < drain_ms && atomic_load(&srv->in_flight) > 0; waited += 10)
        usleep(10000);
    /* What still waits on the mirror's upstream ends now: libmicrohttpd
     * must not be stopped with a suspended connection (it aborts). */
    conns_give_up_all(srv->conns);
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    conns_stop(srv->conns);
    srv->conns = NULL;
}
