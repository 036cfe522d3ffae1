/* http_conn: see http_conn.h. */
#include "http_conn.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "conns.h"
#include "http_metrics.h"
#include "log.h"
#include "metrics.h"
#include "stream.h"
#include "util.h"

struct conn *http_conn_of(struct MHD_Connection *mc)
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

void http_conn_request_end(struct request *rq, const char *range, unsigned status,
                           int delivered)
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

/* A hash of the peer's address without its port (an IPv4 peer on an IPv6
 * socket counts as its IPv4 address), or 0. */
static uint64_t client_of(const struct server *srv, struct MHD_Connection *mc)
{
    uint64_t seed = srv->client_seed;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return hash_fnv1a(&in->sin_addr, 4, seed);
    }
    if (sa && sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_V4MAPPED(a) ? hash_fnv1a(a->s6_addr + 12, 4, seed)
                                       : hash_fnv1a(a->s6_addr, 16, seed);
    }
    return 0;
}

void http_conn_notify(void *cls, struct MHD_Connection *mc, void **socket_context,
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
        c->client = client_of(srv, mc);
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
                http_conn_request_end(c->rq, NULL, c->rq->status, 0);
            conns_remove(srv->conns, c->entry);
            free(c);
        }
        *socket_context = NULL;
    }
}
