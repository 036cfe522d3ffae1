#include "http.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "conns.h"
#include "cors.h"
#include "http_conn.h"
#include "http_request.h"
#include "log.h"
#include "util.h"

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

/* The connection table's callback for a suspension it gives up (its
 * lock held): the request or reader then sees conn_gave_up and ends. */
static void give_up(void *conn)
{
    MHD_resume_connection(conn);
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
    srv->client_seed = hash_seed(srv);
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
        flags, 0, accept_policy, srv, http_request_handle, srv,
        MHD_OPTION_LISTEN_SOCKET, lfd,
        MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_connections_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, cfg->connection_timeout,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->max_request_header_bytes,
        MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL,
        MHD_OPTION_URI_LOG_CALLBACK, http_request_begin, srv,
        MHD_OPTION_NOTIFY_COMPLETED, http_request_completed, srv,
        MHD_OPTION_NOTIFY_CONNECTION, http_conn_notify, srv,
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
