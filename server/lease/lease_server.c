/* lease_server: the lease socket's two threads: accepting (and refusing,
 * server/lease/lease_access.c) and serving allowed connections.
 *
 * The limits of the protocol are the daemon's to keep, not its clients':
 * an answer never exceeds what a client reads (IPC_MAX_ANSWER; a client
 * that meets a longer frame must drop the connection and every lease on
 * it), a connection holds at most IPC_MAX_LEASES leases, and the
 * connections of one peer uid at most ipc_max_connections_per_uid
 * connections and ipc_max_leases_per_uid leases together. */
#include "lease_server.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "gpu_manager.h"
#include "gpu_doc.h"
#include "gpu_req.h"
#include "ipc_proto.h"
#include "lease_access.h"
#include "lease_int.h"
#include "log.h"
#include "registry.h"
#include "util.h"

#define MAX_CONNS 4096
#define ACCEPT_BATCH 256           /* accepts between two looks at the stop signal */

/* What the connections of one peer uid hold (serve thread). */
struct uid_use {
    unsigned uid;
    unsigned conns, leases;
};

struct lease_server {
    struct gpu_manager *gm;
    struct registry *registry;     /* the daemon's models (borrowed), or NULL */
    char *path;
    int lfd, efd, stopfd, qfd;     /* listener, epoll, stop eventfd, hand-off eventfd */
    pthread_t serve_thread, accept_thread;
    int have_serve, have_accept;
    struct lease_allow allow;
    uint64_t idle_ns;              /* ipc_idle_timeout; 0 = none */
    unsigned max_conns_per_uid;    /* ipc_max_connections_per_uid; 0 = none */
    unsigned max_leases_per_uid;   /* ipc_max_leases_per_uid; 0 = none */
    struct uid_use *uses;          /* per peer uid with a connection (serve thread) */
    size_t n_uses, cap_uses;
    atomic_size_t n_conns;         /* allowed connections being served or queued */
    struct conn *conns;            /* serve thread */
    pthread_mutex_t qlock;
    struct conn *qhead;            /* accepted, not yet picked up by the serve thread */
    struct lease_refusals refusals; /* accept thread */
};

/* ---- serving allowed peers (serve thread) -------------------------------- */

/* The use of uid, created (zero) when missing. Peers are the allowed uids,
 * few: a linear search. */
static struct uid_use *uid_use(struct lease_server *s, unsigned uid)
{
    for (size_t i = 0; i < s->n_uses; i++)
        if (s->uses[i].uid == uid)
            return &s->uses[i];
    if (s->n_uses == s->cap_uses) {
        s->cap_uses = s->cap_uses ? 2 * s->cap_uses : 8;
        s->uses = xrealloc(s->uses, s->cap_uses * sizeof(*s->uses));
    }
    s->uses[s->n_uses] = (struct uid_use){.uid = uid};
    return &s->uses[s->n_uses++];
}

/* Forgets uid's use once it holds nothing. */
static void uid_use_drop_empty(struct lease_server *s, struct uid_use *u)
{
    if (u->conns == 0 && u->leases == 0)
        *u = s->uses[--s->n_uses];
}

static void conn_free(struct lease_server *s, struct conn *c)
{
    for (size_t i = 0; i < c->n_leases; i++)
        gpu_lease_release(s->gm, c->leases[i].l);
    if (c->counted) {
        struct uid_use *u = uid_use(s, c->uid);
        u->conns--;
        u->leases -= (unsigned)c->n_leases;
        uid_use_drop_empty(s, u);
    }
    epoll_ctl(s->efd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->leases);
    free(c->in);
    free(c->out);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
    atomic_fetch_sub(&s->n_conns, 1);
}

static int conn_watch(struct lease_server *s, struct conn *c, int op)
{
    struct epoll_event ev = {.events = c->out ? EPOLLOUT : EPOLLIN, .data.ptr = c};
    return epoll_ctl(s->efd, op, c->fd, &ev);
}

static void do_open(struct lease_server *s, struct conn *c, const struct ipc_request *req)
{
    struct gpu_req_error e;
    struct jsonw w = JSONW_INIT;
    int fds[IPC_MAX_FDS];
    size_t n_fds = 0;
    if (c->n_leases >= IPC_MAX_LEASES) {
        lease_frame_error(c, "too_many_leases", "this connection holds %d leases, "
                          "the most one may: release some first", IPC_MAX_LEASES);
        return;
    }
    struct uid_use *u = uid_use(s, c->uid);
    if (s->max_leases_per_uid && u->leases >= s->max_leases_per_uid) {
        lease_frame_error(c, "too_many_leases", "uid %u holds %u leases on its "
                          "connections, the most ipc_max_leases_per_uid allows: "
                          "release some first", c->uid, u->leases);
        return;
    }
    uint64_t id = c->next_lease + 1;
    struct gpu_lease *l = gpu_req_open(s->gm, req->model, req->device, (int)req->rank,
                                       req->prefer, id, &w, fds, IPC_MAX_FDS, &n_fds, &e);
    if (!l && strcmp(e.code, "not_loaded") == 0 && s->registry) {
        /* Not preloaded, or no such model at all: the two call for
         * different fixes. */
        struct reg_snapshot *reg = registry_acquire(s->registry);
        int known = reg && reg_snapshot_find_model(reg, req->model, strlen(req->model));
        reg_snapshot_unref(reg);
        if (!known) {
            lease_frame_error(c, "model_not_found", "no model named \"%.200s\": GET "
                              "/v1/models lists the daemon's models", req->model);
            return;
        }
        lease_frame_error(c, e.code, "%s: preload it first (POST /v1/models/%.200s/gpu, or "
                          "preload = %.200s@DEVICE in the configuration)", e.message,
                          req->model, req->model);
        return;
    }
    if (!l) {
        lease_frame_error(c, e.code, "%s", e.message);
        return;
    }
    c->next_lease = id;
    if (lease_frame_json(c, &w, fds, n_fds) < 0) {
        gpu_lease_release(s->gm, l); /* the client never learns of it: no lease held by nobody */
        return;
    }
    if (c->n_leases == c->cap_leases) {
        c->cap_leases = c->cap_leases ? 2 * c->cap_leases : 4;
        c->leases = xrealloc(c->leases, c->cap_leases * sizeof(*c->leases));
    }
    c->leases[c->n_leases++] = (struct conn_lease){.id = id, .l = l};
    u->leases++;
    log_msg(LOG_DEBUG, "ipc: pid %u (uid %u) leased %s (lease %llu)", c->pid, c->uid, req->model,
            (unsigned long long)id);
}

/* "release" and "checksums": both act on a lease this connection holds. */
static void do_lease_op(struct lease_server *s, struct conn *c, const struct ipc_request *req)
{
    size_t i = 0;
    while (i < c->n_leases && c->leases[i].id != req->lease)
        i++;
    if (i == c->n_leases) {
        lease_frame_error(c, "no_such_lease", "this connection holds no lease %llu",
                          (unsigned long long)req->lease);
        return;
    }
    struct gpu_lease *l = c->leases[i].l;
    if (req->op == IPC_OP_CHECKSUMS) {
        struct jsonw w = JSONW_INIT;
        gpu_doc_checksums(s->gm, l, &w);
        lease_frame_json(c, &w, NULL, 0);
        return;
    }
    c->leases[i] = c->leases[--c->n_leases];
    gpu_lease_release(s->gm, l);
    uid_use(s, c->uid)->leases--;
    lease_frame_ok(c);
}

static void hello(struct conn *c)
{
    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    jsonw_kbool(&w, "ok", 1);
    jsonw_ku64(&w, "protocol", IPC_PROTOCOL);
    jsonw_karr(&w, "protocols");
    jsonw_u64(&w, 1);
    jsonw_u64(&w, IPC_PROTOCOL);
    jsonw_arr_end(&w);
    jsonw_kstr(&w, "server", "tensord " TENSORD_VERSION);
    jsonw_obj_end(&w);
    lease_frame_json(c, &w, NULL, 0);
}

static void handle_request(struct lease_server *s, struct conn *c, const unsigned char *p, size_t n)
{
    struct ipc_request *req = xmalloc(sizeof(*req));
    struct st_error err;
    struct jsonw w = JSONW_INIT;
    if (ipc_request_parse((const char *)p, n, req, &err) < 0) {
        lease_frame_error(c, "bad_request", "%s", err.message);
        goto out;
    }
    switch (req->op) {
    case IPC_OP_HELLO:
        if (req->protocol < 1 || req->protocol > IPC_PROTOCOL)
            lease_frame_error(c, "unsupported_protocol", "this daemon speaks lease "
                              "protocols 1 to %d, not %llu", IPC_PROTOCOL,
                              (unsigned long long)req->protocol);
        else
            hello(c);
        break;
    case IPC_OP_LIST:
        gpu_doc_list(s->gm, &w);
        lease_frame_json(c, &w, NULL, 0);
        break;
    case IPC_OP_CLOSE:
        lease_frame_ok(c);
        c->close_after = 1;
        break;
    case IPC_OP_OPEN:
        do_open(s, c, req);
        break;
    case IPC_OP_RELEASE:
    case IPC_OP_CHECKSUMS:
        do_lease_op(s, c, req);
        break;
    }
out:
    free(req);
}

/* Reads and answers whole frames until an answer is pending. Returns -1 when
 * the connection must go. */
static int conn_read(struct lease_server *s, struct conn *c)
{
    for (;;) {
        /* Answer the frames already here, one at a time. */
        while (!c->out) {
            const unsigned char *p;
            size_t plen, used;
            enum ipc_frame_status st = ipc_frame_next(c->in, c->in_len, IPC_MAX_REQUEST, &p, &plen,
                                                      &used);
            if (st == IPC_FRAME_NEED_MORE)
                break;
            if (st == IPC_FRAME_TOO_LARGE) {
                lease_frame_error(c, "too_large", "a request is at most %u bytes; "
                                  "this one announces %u", IPC_MAX_REQUEST,
                                  ipc_get_header(c->in));
                c->close_after = 1;
                c->in_len = 0;
                break;
            }
            handle_request(s, c, p, plen);
            memmove(c->in, c->in + used, c->in_len - used);
            c->in_len -= used;
            c->active_ns = time_mono_ns();
            c->partial_ns = c->in_len ? c->active_ns : 0;
        }
        if (c->out)
            return 0;
        /* Grow to what the frame being received needs, never past one
         * valid request: an idle half-sent message pins little. */
        size_t want = c->in_len < IPC_HEADER_BYTES ? 4096
                                                   : IPC_HEADER_BYTES + ipc_get_header(c->in);
        if (want < 4096)
            want = 4096;
        if (want > IPC_HEADER_BYTES + IPC_MAX_REQUEST)
            want = IPC_HEADER_BYTES + IPC_MAX_REQUEST;
        if (c->in_cap < want) {
            c->in = xrealloc(c->in, want);
            c->in_cap = want;
        }
        /* recv, not recvmsg: descriptors a client sends are discarded. */
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        if (n == 0)
            return -1; /* closed (maybe mid-frame): the leases end */
        if (c->in_len == 0)
            c->partial_ns = time_mono_ns();
        c->in_len += (size_t)n;
    }
}

/* Moves the connections the accept thread queued into the served set. */
static void adopt_queued(struct lease_server *s)
{
    uint64_t v;
    if (read(s->qfd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        log_msg(LOG_WARN, "ipc: hand-off eventfd: %s", strerror(errno));
    pthread_mutex_lock(&s->qlock);
    struct conn *q = s->qhead;
    s->qhead = NULL;
    pthread_mutex_unlock(&s->qlock);
    while (q) {
        struct conn *c = q;
        q = q->qnext;
        c->prev = NULL;
        c->next = s->conns;
        if (s->conns)
            s->conns->prev = c;
        s->conns = c;
        c->active_ns = time_mono_ns();
        struct uid_use *u = uid_use(s, c->uid);
        if (s->max_conns_per_uid && u->conns >= s->max_conns_per_uid) {
            /* Answered (whatever it asks first) and closed once that is sent. */
            lease_frame_error(c, "too_many_connections", "uid %u has %u "
                              "connections open, the most "
                              "ipc_max_connections_per_uid allows", c->uid,
                              u->conns);
            c->close_after = 1;
            uid_use_drop_empty(s, u);
            log_msg(LOG_WARN, "ipc: pid %u (uid %u): more than %u connections of its uid: "
                    "refused", c->pid, c->uid, s->max_conns_per_uid);
        } else {
            u->conns++;
            c->counted = 1;
        }
        if (conn_watch(s, c, EPOLL_CTL_ADD) < 0) {
            log_msg(LOG_WARN, "ipc: cannot watch a connection: %s", strerror(errno));
            conn_free(s, c);
        }
    }
}

/* Closes connections that idled or stalled past ipc_idle_timeout. A
 * connection holding leases and sending nothing is a worker using them:
 * it stays. */
static void sweep_idle(struct lease_server *s)
{
    uint64_t now = time_mono_ns();
    struct conn *next;
    for (struct conn *c = s->conns; c; c = next) {
        next = c->next;
        const char *why = NULL;
        if (c->out && now - c->active_ns > s->idle_ns)
            why = "does not read its answer";
        else if (!c->out && c->in_len && now - c->partial_ns > s->idle_ns)
            why = "stalled in the middle of a request";
        else if (!c->out && !c->in_len && !c->n_leases && now - c->active_ns > s->idle_ns)
            why = "holds no lease and was idle";
        if (!why)
            continue;
        log_msg(LOG_INFO, "ipc: closing the connection of pid %u (uid %u): it %s for %llu s%s",
                c->pid, c->uid, why, (unsigned long long)(s->idle_ns / 1000000000ULL),
                c->n_leases ? "; its leases end" : "");
        conn_free(s, c);
    }
}

static void *serve_main(void *arg)
{
    struct lease_server *s = arg;
    struct epoll_event evs[64];
    uint64_t last_sweep = time_mono_ns();
    for (;;) {
        int n = epoll_wait(s->efd, evs, 64, s->idle_ns ? 1000 : -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &s->stopfd)
                return NULL;
            if (evs[i].data.ptr == &s->qfd)
                adopt_queued(s);
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (evs[i].data.ptr == &s->qfd)
                continue;
            int rc = 0;
            if (c->out)
                rc = lease_frame_flush(c);
            else if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                rc = conn_read(s, c);
            /* An answer just queued is sent at once; then more requests. */
            while (rc == 0 && c->out) {
                rc = lease_frame_flush(c);
                if (rc == 0 && c->out)
                    break; /* the socket is full: wait for EPOLLOUT */
                if (rc == 0)
                    rc = conn_read(s, c);
            }
            if (rc < 0) {
                /* A later event of this batch may name c: forget them. */
                for (int j = i + 1; j < n; j++)
                    if (evs[j].data.ptr == c)
                        evs[j].data.ptr = &s->qfd;
                conn_free(s, c);
            } else {
                conn_watch(s, c, EPOLL_CTL_MOD);
            }
        }
        uint64_t now = time_mono_ns();
        if (s->idle_ns && now - last_sweep >= 1000000000ULL) {
            sweep_idle(s);
            last_sweep = now;
        }
    }
    return NULL;
}

/* ---- accepting and refusing (accept thread) ------------------------------ */

static void accept_some(struct lease_server *s)
{
    for (int k = 0; k < ACCEPT_BATCH; k++) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct ucred cr = {0};
        if (!lease_access_allowed(&s->allow, fd, &cr)) {
            lease_access_refuse(&s->refusals, fd, &cr);
            continue;
        }
        if (atomic_load(&s->n_conns) >= MAX_CONNS) {
            log_msg(LOG_WARN, "ipc: %d connections open: closing a new one from pid %u",
                    MAX_CONNS, (unsigned)cr.pid);
            close(fd);
            continue;
        }
        struct conn *c = xcalloc(1, sizeof(*c));
        c->fd = fd;
        c->uid = cr.uid;
        c->pid = (unsigned)cr.pid;
        atomic_fetch_add(&s->n_conns, 1);
        pthread_mutex_lock(&s->qlock);
        c->qnext = s->qhead;
        s->qhead = c;
        pthread_mutex_unlock(&s->qlock);
        uint64_t one = 1;
        if (write(s->qfd, &one, sizeof(one)) < 0)
            log_msg(LOG_WARN, "ipc: hand-off eventfd: %s", strerror(errno));
    }
}

static void *accept_main(void *arg)
{
    struct lease_server *s = arg;
    struct pollfd pfd[2] = {{.fd = s->lfd, .events = POLLIN}, {.fd = s->stopfd, .events = POLLIN}};
    for (;;) {
        int n = poll(pfd, 2, 1000);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && pfd[1].revents)
            break;
        if (n > 0 && pfd[0].revents)
            accept_some(s);
        lease_access_flush(&s->refusals);
    }
    return NULL;
}

/* ---- start and stop ------------------------------------------------------ */

/* Stops the threads that started, removes the socket file and frees s. */
static void server_free(struct lease_server *s)
{
    uint64_t one = 1;
    if (s->have_serve && write(s->stopfd, &one, sizeof(one)) < 0)
        log_msg(LOG_WARN, "ipc: stop signal: %s", strerror(errno));
    if (s->have_accept)
        pthread_join(s->accept_thread, NULL);
    if (s->have_serve)
        pthread_join(s->serve_thread, NULL);
    unlink(s->path);
    while (s->conns)
        conn_free(s, s->conns);
    while (s->qhead) {
        struct conn *c = s->qhead;
        s->qhead = c->qnext;
        close(c->fd);
        free(c);
    }
    int fds[] = {s->lfd, s->efd, s->stopfd, s->qfd};
    for (size_t i = 0; i < ARRAY_LEN(fds); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    pthread_mutex_destroy(&s->qlock);
    free(s->uses);
    free(s->path);
    free(s);
}

struct lease_server *lease_server_start(struct gpu_manager *gm, struct registry *registry,
                                        const char *path, const struct config *cfg, char *err,
                                        size_t errlen)
{
    int lfd = lease_access_listen(path, err, errlen);
    if (lfd < 0)
        return NULL;
    struct lease_server *s = xcalloc(1, sizeof(*s));
    s->gm = gm;
    s->registry = registry;
    s->path = xstrdup(path);
    s->efd = s->stopfd = s->qfd = -1;
    pthread_mutex_init(&s->qlock, NULL);
    lease_access_init(&s->allow, cfg);
    s->idle_ns = (uint64_t)cfg->ipc_idle_timeout * 1000000000ULL;
    s->max_conns_per_uid = cfg->ipc_max_connections_per_uid;
    s->max_leases_per_uid = cfg->ipc_max_leases_per_uid;
    s->lfd = lfd;
    s->efd = epoll_create1(EPOLL_CLOEXEC);
    s->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    s->qfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &s->stopfd};
    struct epoll_event qev = {.events = EPOLLIN, .data.ptr = &s->qfd};
    if (s->efd < 0 || s->stopfd < 0 || s->qfd < 0 ||
        epoll_ctl(s->efd, EPOLL_CTL_ADD, s->stopfd, &sev) < 0 ||
        epoll_ctl(s->efd, EPOLL_CTL_ADD, s->qfd, &qev) < 0) {
        snprintf(err, errlen, "ipc socket %s: %s", path, strerror(errno));
        goto fail;
    }
    s->have_serve = pthread_create(&s->serve_thread, NULL, serve_main, s) == 0;
    s->have_accept = s->have_serve && pthread_create(&s->accept_thread, NULL, accept_main, s) == 0;
    if (!s->have_accept) {
        snprintf(err, errlen, "ipc socket %s: cannot start its threads", path);
        goto fail;
    }
    log_msg(LOG_INFO, "ipc: leases on %s", path);
    return s;
fail:
    server_free(s);
    return NULL;
}

void lease_server_stop(struct lease_server *s)
{
    if (s)
        server_free(s);
}
