#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "deadline.h"
#include "handlers.h"
#include "log.h"
#include "metrics.h"
#include "respond.h"
#include "route.h"
#include "util.h"

/* Largest request body accepted, but for a fetch (max_fetch_body_bytes). */
#define MAX_UPLOAD 65536

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

/* The header deadline tracked for conn (its libmicrohttpd socket context). */
static struct deadline_conn *conn_deadline(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    deadline_arm(conn_deadline(conn)); /* a request line: its headers are now due */
    struct request *rq = xcalloc(1, sizeof(*rq));
    rq->srv = cls;
    rq->start_ns = time_mono_ns();
    rq->uri = xstrdup(uri);
    rq->endpoint = MEP_OTHER;
    metrics_request_start();
    atomic_fetch_add(&rq->srv->in_flight, 1);
    return rq;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct server *srv = cls;
    struct request *rq = *con_cls;
    if (!rq)
        return;
    uint64_t now = time_mono_ns();
    const union MHD_ConnectionInfo *mi =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
    unsigned status = rq->status ? rq->status : (mi ? mi->http_status : 0);
    /* A body cut short (client gone, file shrank) did not deliver what was queued. */
    uint64_t sent = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? rq->body_bytes : 0;
    uint64_t ttfb = rq->queued_ns ? rq->queued_ns - rq->start_ns : now - rq->start_ns;
    metrics_request_done((enum metrics_ep)rq->endpoint, status, sent, now - rq->start_ns, ttfb);
    log_access(rq->method[0] ? rq->method : "-", rq->uri, status, sent, now - rq->start_ns,
               MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE));
    atomic_fetch_sub(&srv->in_flight, 1);
    free(rq->upload);
    free(rq->uri);
    free(rq);
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct server *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        atomic_fetch_add(&srv->connections, 1);
        metrics_conn_opened();
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? deadlines_add(srv->deadlines, ci->connect_fd) : NULL;
    } else {
        atomic_fetch_sub(&srv->connections, 1);
        metrics_conn_closed();
        deadlines_remove(srv->deadlines, *socket_context);
        *socket_context = NULL;
    }
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

/* ---- dispatch ----------------------------------------------------------- */

struct query_check {
    const char *const *allowed;
    const char *bad;
};

static enum MHD_Result check_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    (void)kind, (void)value;
    struct query_check *qc = cls;
    for (const char *const *a = qc->allowed; *a; a++)
        if (strcmp(*a, key) == 0)
            return MHD_YES;
    qc->bad = key;
    return MHD_NO;
}

/* The body bound of the endpoint at url: a fetch request may list many tensors. */
static size_t upload_limit(const struct server *srv, const char *url)
{
    char err[256];
    struct route rt;
    enum route_kind kind = route_parse(url, &rt, err, sizeof(err));
    route_free(&rt);
    return kind == ROUTE_FETCH ? srv->cfg->max_fetch_body_bytes : MAX_UPLOAD;
}

static const int endpoint_of_route[] = {
    [ROUTE_NOT_FOUND] = MEP_OTHER,     [ROUTE_BAD_PATH] = MEP_OTHER,
    [ROUTE_HEALTHZ] = MEP_HEALTH,      [ROUTE_READYZ] = MEP_HEALTH,
    [ROUTE_METRICS_TEXT] = MEP_METRICS, [ROUTE_METRICS] = MEP_METRICS,
    [ROUTE_MODELS] = MEP_MODELS,       [ROUTE_MODEL] = MEP_MODEL,
    [ROUTE_MODEL_HEADER] = MEP_HEADER, [ROUTE_FILE] = MEP_FILE,
    [ROUTE_FILE_HEADER] = MEP_FILE_HEADER, [ROUTE_TENSOR] = MEP_TENSOR,
    [ROUTE_GPU] = MEP_GPU,             [ROUTE_FETCH] = MEP_FETCH,
};

static enum MHD_Result dispatch_model(struct MHD_Connection *conn, struct request *rq,
                                      const struct route *rt, const char *method)
{
    struct server *srv = rq->srv;
    struct registry *reg = registry_holder_acquire(&srv->registry);
    enum MHD_Result ret;
    if (!reg) {
        ret = respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                            "the models root has not been scanned yet");
        return ret;
    }
    if (rt->kind == ROUTE_MODELS) {
        ret = handle_models(conn, rq, reg);
        goto out;
    }
    const struct reg_model *m = registry_find_model(reg, rt->model, rt->model_len);
    if (!m) {
        ret = respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "model_not_found",
                            "no model named \"%.300s\"", rt->model);
        goto out;
    }
    if (rt->kind == ROUTE_MODEL) {
        ret = handle_model(conn, rq, reg, m);
        goto out;
    }
    if (rt->kind == ROUTE_GPU) {
        ret = handle_gpu(conn, rq, m, method);
        goto out;
    }
    if (m->state != MODEL_READY) {
        ret = respond_error(conn, rq, MHD_HTTP_CONFLICT, "model_invalid",
                            "model \"%.300s\" is invalid: %s", m->name, m->error.message);
        goto out;
    }
    switch (rt->kind) {
    case ROUTE_MODEL_HEADER:
        ret = handle_model_header(conn, rq, reg, m);
        break;
    case ROUTE_FILE:
    case ROUTE_FILE_HEADER: {
        const struct reg_file *f = registry_find_file(m, rt->name, rt->name_len);
        if (!f)
            ret = respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "file_not_found",
                                "model \"%.300s\" has no file \"%.300s\"", m->name, rt->name);
        else
            ret = handle_file(conn, rq, reg, f, rt->kind == ROUTE_FILE_HEADER);
        break;
    }
    case ROUTE_FETCH:
        ret = handle_fetch(conn, rq, reg, m);
        break;
    case ROUTE_TENSOR: {
        const struct reg_tensor *t = registry_find_tensor(m, rt->name, rt->name_len);
        if (!t)
            ret = respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "tensor_not_found",
                                "model \"%.300s\" has no tensor \"%.300s\"", m->name, rt->name);
        else
            ret = handle_tensor(conn, rq, m, t);
        break;
    }
    default:
        ret = respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "not_found", "no such endpoint");
    }
out:
    registry_unref(reg);
    return ret;
}

static enum MHD_Result dispatch(struct MHD_Connection *conn, struct request *rq, const char *url,
                                const char *method)
{
    struct server *srv = rq->srv;
    static const char *const no_args[] = {NULL};
    static const char *const tensor_args[] = {"slice", "format", "npy_dtype", NULL};
    static const char *const metrics_args[] = {"format", NULL};
    static const char *const fetch_args[] = {"q", NULL};
    char err[256];
    struct route rt;
    enum MHD_Result ret;

    enum route_kind kind = route_parse(url, &rt, err, sizeof(err));
    rq->endpoint = endpoint_of_route[kind];
    if (kind == ROUTE_TENSOR && MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "slice"))
        rq->endpoint = MEP_SLICE;

    if (atomic_load(&srv->connections) > srv->cfg->max_connections) {
        metrics_add(MC_CONNECTIONS_REJECTED, 1);
        rq->close_after = 1;
        ret = respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "overloaded",
                            "more than %u connections are open", srv->cfg->max_connections);
        goto out;
    }
    if (kind == ROUTE_BAD_PATH) {
        ret = respond_error(conn, rq, MHD_HTTP_BAD_REQUEST, "bad_path", "%s", err);
        goto out;
    }
    if (kind == ROUTE_NOT_FOUND) {
        ret = respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "not_found",
                            "no endpoint at this path; see /v1/models");
        goto out;
    }
    int is_get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || rq->is_head;
    int is_admin = kind == ROUTE_GPU && (strcmp(method, MHD_HTTP_METHOD_POST) == 0 ||
                                         strcmp(method, MHD_HTTP_METHOD_DELETE) == 0);
    /* A fetch POST only reads: it needs the read token, as its GET form does. */
    int is_fetch_post = kind == ROUTE_FETCH && strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    if (!is_get && !is_admin && !is_fetch_post) {
        rq->allow = route_allowed_methods(kind);
        ret = respond_error(conn, rq, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                            "%s is not allowed here; allowed: %s", method, rq->allow);
        goto out;
    }
    if (kind != ROUTE_HEALTHZ && !auth_check(srv, conn, is_admin)) {
        ret = respond_error(conn, rq, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                            is_admin ? "this endpoint needs the admin bearer token"
                                     : "a bearer token is required");
        goto out;
    }
    struct query_check qc = {
        .allowed = kind == ROUTE_TENSOR ? tensor_args
                   : kind == ROUTE_FETCH    ? fetch_args
                   : (kind == ROUTE_METRICS || kind == ROUTE_METRICS_TEXT) ? metrics_args
                                                                           : no_args};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, check_arg, &qc);
    if (qc.bad) {
        ret = respond_error(conn, rq, MHD_HTTP_BAD_REQUEST, "bad_parameter",
                            "unknown query parameter \"%.100s\"", qc.bad);
        goto out;
    }

    switch (kind) {
    case ROUTE_HEALTHZ:
        ret = handle_healthz(conn, rq);
        break;
    case ROUTE_READYZ:
        ret = handle_readyz(conn, rq);
        break;
    case ROUTE_METRICS:
    case ROUTE_METRICS_TEXT:
        ret = handle_metrics(conn, rq, kind == ROUTE_METRICS_TEXT);
        break;
    default:
        ret = dispatch_model(conn, rq, &rt, method);
    }
out:
    route_free(&rt);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)cls, (void)version;
    struct request *rq = *con_cls;
    if (!rq->method[0]) {
        /* The first call only announces the request. libmicrohttpd answers
         * "Connection: close" to a response queued here (it cannot yet know
         * the request is complete), so the answer waits for the next call:
         * that keeps HTTP/1.1 connections alive (measured: 5x the requests/s). */
        snprintf(rq->method, sizeof(rq->method), "%s", method);
        rq->is_head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        deadline_disarm(conn_deadline(conn)); /* the headers are complete */
        return MHD_YES;
    }
    if (*upload_data_size) {
        /* Accumulate a bounded body; the answer is queued once it is complete. */
        if (!rq->upload_limit)
            rq->upload_limit = upload_limit(rq->srv, url);
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
    if (rq->handled)
        return MHD_YES;
    rq->handled = 1;
    if (rq->upload_too_large)
        return respond_error(conn, rq, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                             "request bodies are limited to %zu bytes here", rq->upload_limit);
    return dispatch(conn, rq, url, method);
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
    unsigned threads = config_effective_threads(cfg);
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG |
                     MHD_USE_TURBO;
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
    /* libmicrohttpd silently drops connections past its own limit; ours is
     * enforced in dispatch with a 503, so leave it headroom to answer. */
    unsigned mhd_limit = cfg->max_connections + 64;
    /* With no certificate the array ends at its first entry. */
    struct MHD_OptionItem tls_opts[] = {
        {tls_key ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, tls_key},
        {MHD_OPTION_HTTPS_MEM_CERT, 0, tls_cert},
        {MHD_OPTION_END, 0, NULL},
    };
    srv->deadlines = deadlines_start(cfg->header_timeout);
    srv->daemon = MHD_start_daemon(
        flags, 0, accept_policy, srv, on_request, srv,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_connections_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, cfg->connection_timeout,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)cfg->max_request_header_bytes,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1,
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
        deadlines_stop(srv->deadlines);
        srv->deadlines = NULL;
        snprintf(errbuf, errlen, "cannot listen on %s: %s", cfg->listen,
                 errno ? strerror(errno) : "libmicrohttpd refused the options");
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
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    deadlines_stop(srv->deadlines);
    srv->deadlines = NULL;
}
