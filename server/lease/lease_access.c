/* lease_access: the lease socket's file, its allow-list check and its
 * refusals. */
#include "lease_access.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc_proto.h"
#include "log.h"
#include "metrics.h"
#include "path_trust.h"
#include "util.h"

void lease_access_init(struct lease_allow *a, const struct config *cfg)
{
    a->n_uids = cfg->n_allow_uids;
    a->n_gids = cfg->n_allow_gids;
    memcpy(a->uids, cfg->allow_uids, sizeof(a->uids));
    memcpy(a->gids, cfg->allow_gids, sizeof(a->gids));
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

/* The socket's directory, one level (its parent must exist), 0755 so that
 * workers of other users can reach the socket: the daemon started by hand
 * as root makes /run/tensord itself. Returns 0 or -1 (errno). */
static int make_socket_dir(const char *path)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) {
        errno = ENOENT;
        return -1;
    }
    *slash = '\0';
    if (mkdir(dir, 0755) < 0)
        return -1;
    chmod(dir, 0755); /* whatever the umask */
    log_msg(LOG_INFO, "created the ipc socket directory %s", dir);
    return 0;
}

/* "ipc socket PATH: reason", naming the owner of a directory the daemon
 * may not write (a root-owned bind mount in a container, typically). */
static void socket_error(const char *path, int e, char *err, size_t errlen)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct stat st;
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0'; /* a socket in / */
    else if (slash)
        *slash = '\0';
    if ((e == EACCES || e == EPERM || e == EROFS) && slash && stat(dir, &st) == 0)
        snprintf(err, errlen,
                 "ipc socket %s: %s (the directory %s belongs to uid %u and has mode %03o; "
                 "tensord runs as uid %u: give it the directory, or set ipc_socket)",
                 path, strerror(e), dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777),
                 (unsigned)geteuid());
    else
        snprintf(err, errlen, "ipc socket %s: %s", path, strerror(e));
}

/* Binds and listens at path (a, its address), a stale socket there
 * removed. Returns the fd, or -1 with err. */
static int listen_at(const char *path, const struct sockaddr_un *a, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errlen, "ipc socket %s exists and is not a socket", path);
            return -1;
        }
        if (socket_alive(path)) {
            snprintf(err, errlen, "ipc socket %s is in use by another process", path);
            return -1;
        }
        unlink(path); /* stale, from a daemon that did not exit cleanly */
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int bound = fd >= 0 && bind(fd, (struct sockaddr *)a, sizeof(*a)) == 0;
    if (!bound) {
        socket_error(path, errno, err, errlen);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    /* Filesystem permissions would only duplicate the allow-list, badly
     * (one group); SO_PEERCRED is the check. */
    chmod(path, 0666);
    if (listen(fd, 512) < 0) {
        snprintf(err, errlen, "listen on %s: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    return fd;
}

/* The socket's directory made when missing, then its place checked
 * (path_trust.h): it must be root's or the daemon's user's, and no one
 * else's to write. Returns the resolved path to bind (caller frees), or
 * NULL with err. */
static char *trusted_place(const char *path, char *err, size_t errlen)
{
    struct st_error e;
    char *real;
    uid_t owner, self = geteuid();
    int rc = path_trust_socket(path, &real, &owner, &e);
    if (rc == -ENOENT && make_socket_dir(path) == 0)
        rc = path_trust_socket(path, &real, &owner, &e);
    if (rc == -ENOENT || rc == -ENOTDIR) {
        snprintf(err, errlen, "ipc socket %s: %s", path, strerror(-rc));
        return NULL;
    }
    if (rc < 0) {
        snprintf(err, errlen, "ipc %s", e.message);
        return NULL;
    }
    if (owner != 0 && owner != self) {
        snprintf(err, errlen, "ipc socket %s: the directory belongs to uid %u and tensord runs "
                 "as uid %u: that user could put another socket in its place; give tensord "
                 "the directory, or set ipc_socket", path, (unsigned)owner, (unsigned)self);
        free(real);
        return NULL;
    }
    return real;
}

int lease_access_listen(const char *where, char *err, size_t errlen)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (!where || strlen(where) >= sizeof(a.sun_path)) {
        snprintf(err, errlen, "ipc socket path \"%s\" is longer than %zu bytes",
                 where ? where : "", sizeof(a.sun_path) - 1);
        return -1;
    }
    char *path = trusted_place(where, err, errlen);
    if (!path)
        return -1;
    if (strlen(path) >= sizeof(a.sun_path)) {
        snprintf(err, errlen, "ipc socket %s: its resolved path %s is longer than %zu bytes",
                 where, path, sizeof(a.sun_path) - 1);
        free(path);
        return -1;
    }
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = listen_at(path, &a, err, errlen);
    free(path);
    return fd;
}

/* The peer's supplementary groups into *groups (caller frees), sized from
 * what the kernel reports: a buffer that is too small gets ERANGE and the
 * size needed, and the groups may change between two calls. Returns the
 * count, 0 when the kernel has no SO_PEERGROUPS, or -1. */
static int peer_groups(int fd, gid_t **groups)
{
    *groups = NULL;
#ifdef SO_PEERGROUPS
    socklen_t len = 64 * sizeof(gid_t);
    for (int tries = 0; tries < 8; tries++) {
        gid_t *g = malloc(len ? len : sizeof(gid_t));
        if (!g)
            return -1;
        socklen_t got = len;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &got) == 0) {
            *groups = g;
            return (int)(got / sizeof(gid_t));
        }
        free(g);
        if (errno != ERANGE)
            return errno == ENOPROTOOPT ? 0 : -1;
        /* got is the size the kernel needs now. */
        len = got > len ? got : len * 2;
    }
    return -1;
#else
    (void)fd;
    return 0;
#endif
}

int lease_access_allowed(const struct lease_allow *s, int fd, struct ucred *cr)
{
    socklen_t len = sizeof(*cr);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &len) < 0)
        return 0;
    if (cr->uid == geteuid())
        return 1;
    for (unsigned i = 0; i < s->n_uids; i++)
        if (cr->uid == s->uids[i])
            return 1;
    if (!s->n_gids)
        return 0;
    for (unsigned i = 0; i < s->n_gids; i++)
        if (cr->gid == s->gids[i])
            return 1;
    gid_t *groups;
    int ng = peer_groups(fd, &groups), ok = 0;
    for (int g = 0; g < ng && !ok; g++)
        for (unsigned i = 0; i < s->n_gids; i++)
            if (groups[g] == s->gids[i])
                ok = 1;
    free(groups);
    return ok;
}

/* Logs r's count of refusals not yet logged, and starts its next interval. */
static void log_suppressed(struct lease_refusal *r, uint64_t now)
{
    log_msg(LOG_WARN, "ipc: refused uid %u %llu more time(s) in the last %.0f s", r->uid,
            (unsigned long long)r->unlogged, (double)(now - r->since_ns) / 1e9);
    r->since_ns = now;
    r->unlogged = 0;
}

/* One log line per peer uid per interval; the others are counted and
 * summed up in the next line. */
static void note_refusal(struct lease_refusals *s, const struct ucred *cr)
{
    const uint64_t interval = LEASE_REFUSAL_LOG_SECONDS * 1000000000ULL;
    uint64_t now = time_mono_ns();
    struct lease_refusal *r = NULL, *oldest = &s->r[0];
    metrics_add(MC_IPC_REFUSED, 1);
    for (int i = 0; i < LEASE_REFUSAL_UIDS && !r; i++) {
        struct lease_refusal *e = &s->r[i];
        if (e->used && e->uid == cr->uid)
            r = e;
        else if (!e->used || (oldest->used && e->since_ns < oldest->since_ns))
            oldest = e;
    }
    if (r && now - r->since_ns < interval) {
        r->unlogged++;
        return;
    }
    if (!r) {
        r = oldest;
        if (r->used && r->unlogged)
            log_suppressed(r, now);
        r->uid = cr->uid;
        r->used = 1;
    } else if (r->unlogged) {
        log_suppressed(r, now);
    }
    r->since_ns = now;
    r->unlogged = 0;
    log_msg(LOG_WARN, "ipc: refused pid %u uid %u gid %u (not on the allow-list; further "
            "refusals of uid %u are counted, one line per %d s)", (unsigned)cr->pid, cr->uid,
            cr->gid, cr->uid, LEASE_REFUSAL_LOG_SECONDS);
}

void lease_access_flush(struct lease_refusals *s)
{
    uint64_t now = time_mono_ns();
    for (int i = 0; i < LEASE_REFUSAL_UIDS; i++) {
        struct lease_refusal *r = &s->r[i];
        if (r->used && r->unlogged &&
            now - r->since_ns >= LEASE_REFUSAL_LOG_SECONDS * 1000000000ULL)
            log_suppressed(r, now);
    }
}

/* Answers forbidden and closes, without ever waiting on the peer. */
void lease_access_refuse(struct lease_refusals *s, int fd, const struct ucred *cr)
{
    char msg[256];
    unsigned char frame[IPC_HEADER_BYTES + sizeof(msg)];
    int n = snprintf(msg, sizeof(msg),
                     "{\"ok\":false,\"error\":{\"code\":\"forbidden\",\"message\":"
                     "\"uid %u gid %u may not use this socket (allow_uids / allow_gids)\"}}",
                     cr->uid, cr->gid);
    ipc_put_header(frame, (uint32_t)n);
    memcpy(frame + IPC_HEADER_BYTES, msg, (size_t)n);
    if (send(fd, frame, IPC_HEADER_BYTES + (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        (void)0; /* the peer is gone or not reading: nothing more is owed */
    char sink[4096]; /* see conn_flush in lease_server.c: unread input would reset the peer */
    if (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) < 0)
        (void)0;
    shutdown(fd, SHUT_WR);
    close(fd);
    note_refusal(s, cr);
}
