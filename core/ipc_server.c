/* ipc: the lease socket server (one epoll thread). */
#include "ipc_server.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
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
#include "ipc_proto.h"
#include "log.h"
#include "util.h"

#define MAX_CONNS 4096

struct conn {
    struct conn *prev, *next;  /* every open connection */
    int fd;
    unsigned uid, gid, pid;
    unsigned char *in;         /* received bytes not yet consumed */
    size_t in_len, in_cap;
    unsigned char *out;        /* the answer being sent */
    size_t out_len, out_off;
    int fds[IPC_MAX_FDS];      /* borrowed descriptors to attach to out's first byte */
    size_t n_fds;
    int close_after;           /* close once out is flushed */
    struct gpu_lease **leases;
    size_t n_leases;
};

struct ipc_server {
    struct gpu_manager *gm;
    char *path;
    int lfd, efd, stopfd;
    pthread_t thread;
    uint32_t uids[CONFIG_MAX_IDS], gids[CONFIG_MAX_IDS];
    unsigned n_uids, n_gids;
    size_t n_conns;
    struct conn *conns;
};

static void conn_free(struct ipc_server *s, struct conn *c)
{
    for (size_t i = 0; i < c->n_leases; i++)
        gpu_lease_release(s->gm, c->leases[i]);
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
    s->n_conns--;
}

static void conn_watch(struct ipc_server *s, struct conn *c)
{
    struct epoll_event ev = {.events = c->out ? EPOLLOUT : EPOLLIN, .data.ptr = c};
    epoll_ctl(s->efd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Queues doc (taking it over) as the next answer, with fds attached. */
static void conn_answer(struct conn *c, json_t *doc, const int *fds, size_t n_fds)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (!text)
        text = xstrdup("{\"ok\":false,\"error\":{\"code\":\"internal\",\"message\":\"encoding\"}}");
    size_t n = strlen(text);
    c->out = xmalloc(IPC_HEADER_BYTES + n);
    ipc_put_header(c->out, (uint32_t)n);
    memcpy(c->out + IPC_HEADER_BYTES, text, n);
    free(text);
    c->out_len = IPC_HEADER_BYTES + n;
    c->out_off = 0;
    if (n_fds)
        memcpy(c->fds, fds, n_fds * sizeof(int));
    c->n_fds = n_fds;
}

/* Sends what it can. Returns 0, or -1 when the connection is gone. */
static int conn_flush(struct conn *c)
{
    while (c->out && c->out_off < c->out_len) {
        struct iovec iov = {.iov_base = c->out + c->out_off, .iov_len = c->out_len - c->out_off};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        union {
            char buf[CMSG_SPACE(sizeof(int) * IPC_MAX_FDS)];
            struct cmsghdr align;
        } ctl;
        if (c->n_fds) {
            memset(&ctl, 0, sizeof(ctl));
            msg.msg_control = ctl.buf;
            msg.msg_controllen = CMSG_SPACE(sizeof(int) * c->n_fds);
            struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int) * c->n_fds);
            memcpy(CMSG_DATA(cm), c->fds, sizeof(int) * c->n_fds);
        }
        ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        }
        c->n_fds = 0; /* the descriptors travel with the first byte sent */
        c->out_off += (size_t)n;
    }
    if (c->out) {
        free(c->out);
        c->out = NULL;
        c->out_len = c->out_off = 0;
    }
    if (c->close_after) {
        /* Closing with unread input makes the kernel reset the peer, which
         * can then miss the answer: read what is already here first. */
        char sink[4096];
        for (int i = 0; i < 512 && recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
            ;
        shutdown(c->fd, SHUT_WR);
        return -1;
    }
    return 0;
}

static void handle_request(struct ipc_server *s, struct conn *c, const unsigned char *p, size_t n)
{
    struct ipc_request *req = xmalloc(sizeof(*req));
    char err[512];
    if (ipc_request_parse((const char *)p, n, req, err, sizeof(err)) < 0) {
        conn_answer(c, gpu_error_answer("bad_request", "%s", err), NULL, 0);
        goto out;
    }
    switch (req->op) {
    case IPC_OP_LIST:
        conn_answer(c, gpu_manager_list_json(s->gm), NULL, 0);
        break;
    case IPC_OP_CLOSE:
        conn_answer(c, json_pack("{s:b}", "ok", 1), NULL, 0);
        c->close_after = 1;
        break;
    case IPC_OP_OPEN: {
        json_t *answer = NULL;
        int fds[IPC_MAX_FDS];
        size_t n_fds = 0;
        struct gpu_lease *l =
            gpu_manager_open(s->gm, req->model, req->device, &answer, fds, IPC_MAX_FDS, &n_fds);
        if (l) {
            c->leases = xrealloc(c->leases, (c->n_leases + 1) * sizeof(*c->leases));
            c->leases[c->n_leases++] = l;
            log_msg(LOG_INFO, "ipc: pid %u (uid %u) leased %s", c->pid, c->uid, req->model);
        }
        conn_answer(c, answer, fds, n_fds);
        break;
    }
    }
out:
    free(req);
}

/* Reads and answers whole frames until an answer is pending. Returns -1 when
 * the connection must go. */
static int conn_read(struct ipc_server *s, struct conn *c)
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
                conn_answer(c, gpu_error_answer("too_large", "a request is at most %u bytes; "
                                                "this one announces %u", IPC_MAX_REQUEST,
                                                ipc_get_header(c->in)), NULL, 0);
                c->close_after = 1;
                c->in_len = 0;
                break;
            }
            handle_request(s, c, p, plen);
            memmove(c->in, c->in + used, c->in_len - used);
            c->in_len -= used;
        }
        if (c->out)
            return 0;
        if (c->in_len == c->in_cap) {
            c->in_cap = c->in_cap ? c->in_cap * 2 : 4096;
            if (c->in_cap > IPC_HEADER_BYTES + IPC_MAX_REQUEST)
                c->in_cap = IPC_HEADER_BYTES + IPC_MAX_REQUEST;
            c->in = xrealloc(c->in, c->in_cap);
        }
        /* recv, not recvmsg: descriptors a client sends are discarded. */
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        if (n == 0)
            return -1; /* closed (maybe mid-frame): the leases end */
        c->in_len += (size_t)n;
    }
}

static int peer_allowed(const struct ipc_server *s, int fd, struct ucred *cr)
{
    socklen_t len = sizeof(*cr);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &len) < 0)
        return 0;
    if (cr->uid == geteuid())
        return 1;
    for (unsigned i = 0; i < s->n_uids; i++)
        if (cr->uid == s->uids[i])
            return 1;
    gid_t groups[256];
    socklen_t glen = sizeof(groups);
    int ng = 0;
    groups[ng++] = cr->gid;
#ifdef SO_PEERGROUPS
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups + 1, &glen) == 0)
        ng += (int)(glen / sizeof(gid_t));
#endif
    for (int g = 0; g < ng; g++)
        for (unsigned i = 0; i < s->n_gids; i++)
            if (groups[g] == s->gids[i])
                return 1;
    return 0;
}

static void accept_all(struct ipc_server *s)
{
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (s->n_conns >= MAX_CONNS) {
            close(fd);
            continue;
        }
        struct conn *c = xcalloc(1, sizeof(*c));
        struct ucred cr = {0};
        c->fd = fd;
        c->next = s->conns;
        if (s->conns)
            s->conns->prev = c;
        s->conns = c;
        s->n_conns++;
        int ok = peer_allowed(s, fd, &cr);
        c->uid = cr.uid;
        c->gid = cr.gid;
        c->pid = (unsigned)cr.pid;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(s->efd, EPOLL_CTL_ADD, fd, &ev);
        if (!ok) {
            log_msg(LOG_WARN, "ipc: refused pid %u uid %u gid %u (not on the allow-list)", c->pid,
                    c->uid, c->gid);
            conn_answer(c, gpu_error_answer("forbidden", "uid %u gid %u may not use this socket "
                                            "(allow_uids / allow_gids)", c->uid, c->gid), NULL, 0);
            c->close_after = 1;
            if (conn_flush(c) < 0)
                conn_free(s, c);
            else
                conn_watch(s, c);
        }
    }
}

static void *ipc_main(void *arg)
{
    struct ipc_server *s = arg;
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(s->efd, evs, 64, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == s)
                accept_all(s);
            else if (evs[i].data.ptr == &s->stopfd)
                return NULL;
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (evs[i].data.ptr == s || evs[i].data.ptr == &s->stopfd)
                continue;
            int rc = 0;
            if (c->out)
                rc = conn_flush(c);
            else if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                rc = conn_read(s, c);
            /* An answer just queued is sent at once; then more requests. */
            while (rc == 0 && c->out) {
                rc = conn_flush(c);
                if (rc == 0 && c->out)
                    break; /* the socket is full: wait for EPOLLOUT */
                if (rc == 0)
                    rc = conn_read(s, c);
            }
            if (rc < 0)
                conn_free(s, c);
            else
                conn_watch(s, c);
        }
    }
    return NULL;
}

/* 1 when a live server answers at path. */
static int socket_alive(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    int alive = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    return alive;
}

struct ipc_server *ipc_server_start(struct gpu_manager *gm, const char *path,
                                    const struct config *cfg, char *err, size_t errlen)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    struct stat st;
    if (!path || strlen(path) >= sizeof(a.sun_path)) {
        snprintf(err, errlen, "ipc socket path \"%s\" is longer than %zu bytes", path ? path : "",
                 sizeof(a.sun_path) - 1);
        return NULL;
    }
    memcpy(a.sun_path, path, strlen(path) + 1);
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errlen, "ipc socket %s exists and is not a socket", path);
            return NULL;
        }
        if (socket_alive(path)) {
            snprintf(err, errlen, "ipc socket %s is in use by another process", path);
            return NULL;
        }
        unlink(path); /* stale, from a daemon that did not exit cleanly */
    }
    struct ipc_server *s = xcalloc(1, sizeof(*s));
    s->gm = gm;
    s->path = xstrdup(path);
    s->efd = s->stopfd = -1;
    s->n_uids = cfg->n_allow_uids;
    s->n_gids = cfg->n_allow_gids;
    memcpy(s->uids, cfg->allow_uids, sizeof(s->uids));
    memcpy(s->gids, cfg->allow_gids, sizeof(s->gids));
    s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        snprintf(err, errlen, "ipc socket %s: %s", path, strerror(errno));
        goto fail;
    }
    /* Filesystem permissions would only duplicate the allow-list, badly
     * (one group); SO_PEERCRED is the check. */
    chmod(path, 0666);
    if (listen(s->lfd, 128) < 0) {
        snprintf(err, errlen, "listen on %s: %s", path, strerror(errno));
        goto fail_unlink;
    }
    s->efd = epoll_create1(EPOLL_CLOEXEC);
    s->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &s->stopfd};
    if (s->efd < 0 || s->stopfd < 0 || epoll_ctl(s->efd, EPOLL_CTL_ADD, s->lfd, &ev) < 0 ||
        epoll_ctl(s->efd, EPOLL_CTL_ADD, s->stopfd, &sev) < 0 ||
        pthread_create(&s->thread, NULL, ipc_main, s) != 0) {
        snprintf(err, errlen, "ipc socket %s: cannot start its thread", path);
        goto fail_unlink;
    }
    log_msg(LOG_INFO, "ipc: leases on %s", path);
    return s;
fail_unlink:
    unlink(path);
fail:
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->efd >= 0)
        close(s->efd);
    if (s->stopfd >= 0)
        close(s->stopfd);
    free(s->path);
    free(s);
    return NULL;
}

void ipc_server_stop(struct ipc_server *s)
{
    if (!s)
        return;
    uint64_t one = 1;
    if (write(s->stopfd, &one, sizeof(one)) < 0)
        log_msg(LOG_WARN, "ipc: stop signal: %s", strerror(errno));
    pthread_join(s->thread, NULL);
    close(s->lfd);
    while (s->conns)
        conn_free(s, s->conns);
    unlink(s->path);
    close(s->efd);
    close(s->stopfd);
    free(s->path);
    free(s);
}
