/* client: the connection to the daemon's lease socket and its protocol
 * (framing, hello, reconnecting, release). Opening models is model.c's,
 * DLPack dlpack.c's; answers are read by answer.c (an open's tables by
 * answer_open.c). */
#include "tensord_client.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "answer.h"
#include "client_int.h"
#include "cmem.h"
#include "ipc_proto.h"
#include "path_trust.h"

const char tdc_oom[] = "out of memory";

void tdc_client_unref(struct tensord_client *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    if (c->fd >= 0)
        close(c->fd); /* the daemon ends whatever this connection still held */
    pthread_mutex_destroy(&c->lock);
    free(c->path);
    free(c);
}

/* ---- the wire ------------------------------------------------------------ */

static int send_all(int fd, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Receives exactly n bytes, collecting passed descriptors into fds (extra
 * ones beyond max_fds are closed). Returns 0 or -1 (errno; 0 on EOF). */
static int recv_all(int fd, void *p, size_t n, int *fds, size_t max_fds, size_t *n_fds)
{
    char *d = p;
    while (n > 0) {
        union {
            char buf[CMSG_SPACE(sizeof(int) * IPC_MAX_FDS)];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {.iov_base = d, .iov_len = n};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                             .msg_controllen = sizeof(ctl.buf)};
        ssize_t r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == EINTR)
            continue;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); r >= 0 && cm; cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int f;
                memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                if (*n_fds < max_fds)
                    fds[(*n_fds)++] = f;
                else
                    close(f);
            }
        }
        if (r <= 0) {
            if (r == 0)
                errno = 0;
            return -1;
        }
        d += r;
        n -= (size_t)r;
    }
    return 0;
}

void tdc_close_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        close(fds[i]);
}

/* Closes c's connection (c->lock held) after a frame could not be read,
 * appending to err what that cost: the leases the connection held. */
static void lost_connection(struct tensord_client *c, char *err, size_t errlen)
{
    unsigned held = c->leases;
    close(c->fd);
    c->fd = -1;
    c->leases = 0;
    c->epoch++;
    if (!held)
        return;
    char why[160];
    snprintf(why, sizeof(why), "%s", err && errlen ? err : "an answer could not be read");
    snprintf(c->lost, sizeof(c->lost), "%s; the connection to tensord is closed and the %u "
             "lease%s it held ended (the models stay mapped; open them again to hold leases)",
             why, held, held == 1 ? "" : "s");
    tdc_seterr(err, errlen, "%s", c->lost);
}

/* Sends one request on c->fd (c->lock held) and reads the answer. RT_OK
 * with *a (and *raw when asked) when it says ok; RT_REFUSED with err
 * "CODE: message" when the daemon said no (or answered nonsense);
 * RT_TRANSPORT when the connection failed before an answer came. */
static int exchange(struct tensord_client *c, const char *req, int *fds, size_t max_fds,
                    size_t *n_fds, struct answer *a, char **raw, char *err, size_t errlen)
{
    unsigned char hdr[IPC_HEADER_BYTES];
    size_t n = strlen(req);
    char *body = NULL;
    int rc = RT_REFUSED;
    *n_fds = 0;
    memset(a, 0, sizeof(*a));
    if (c->fd < 0) {
        tdc_seterr(err, errlen, "not connected to tensord (%s)", c->path);
        return RT_TRANSPORT;
    }
    ipc_put_header(hdr, (uint32_t)n);
    /* A daemon that refuses this peer answers and closes before reading the
     * request: when sending fails, its answer may still be there to read. */
    int sent = send_all(c->fd, hdr, sizeof(hdr)) == 0 && send_all(c->fd, req, n) == 0;
    int send_errno = errno;
    if (recv_all(c->fd, hdr, sizeof(hdr), fds, max_fds, n_fds) < 0) {
        if (!sent)
            tdc_seterr(err, errlen, "sending to tensord: %s", strerror(send_errno));
        else
            tdc_seterr(err, errlen, "tensord closed the connection%s%s", errno ? ": " : "",
                       errno ? strerror(errno) : "");
        rc = RT_TRANSPORT;
        goto desync;
    }
    uint32_t len = ipc_get_header(hdr);
    if (len > IPC_MAX_ANSWER) {
        tdc_seterr(err, errlen, "tensord answered %u bytes (more than %u)", len, IPC_MAX_ANSWER);
        goto desync;
    }
    body = cmem_malloc((size_t)len + 1);
    if (!body) {
        tdc_seterr(err, errlen, "%s for a %u-byte answer", tdc_oom, len);
        goto desync;
    }
    if (recv_all(c->fd, body, len, fds, max_fds, n_fds) < 0) {
        tdc_seterr(err, errlen, "tensord closed the connection mid-answer");
        goto desync;
    }
    body[len] = '\0';
    if (answer_read(body, len, a, err, errlen) != 0)
        goto out;
    rc = RT_OK;
    if (raw) {
        *raw = body;
        body = NULL;
    }
out:
    free(body);
    if (rc != RT_OK) {
        tdc_close_fds(fds, *n_fds);
        *n_fds = 0;
    }
    return rc;
desync:
    /* An answer that was not read whole leaves the stream out of step:
     * this connection is done, and the daemon ends its leases with it
     * (the mappings this process made stay valid). Never silently: the
     * error says so, and is kept for the next call in case this one's
     * caller cannot report it (a release). */
    lost_connection(c, err, errlen);
    goto out;
}

/* The daemon at fd (connected to real, whose directory belongs to owner)
 * must be who made the socket: root or the directory's owner, and the
 * socket's owner. Another user's process answering there is refused
 * before it can hand over a single handle. */
static int check_peer(int fd, const char *path, const char *real, uid_t owner, char *err,
                      size_t errlen)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    struct stat st;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        tdc_seterr(err, errlen, "socket %s: who answers: %s", path, strerror(errno));
        return -1;
    }
    if (lstat(real, &st) < 0) {
        tdc_seterr(err, errlen, "socket %s: %s", path, strerror(errno));
        return -1;
    }
    if ((cred.uid != 0 && cred.uid != owner) || st.st_uid != cred.uid) {
        tdc_seterr(err, errlen, "socket %s: the process answering runs as uid %u, but the "
                   "socket belongs to uid %u and its directory to uid %u: not the daemon that "
                   "owns this place; refused", path, (unsigned)cred.uid, (unsigned)st.st_uid,
                   (unsigned)owner);
        return -1;
    }
    return 0;
}

/* A new connection to path, once its place is one no other user can
 * change (core/base/path_trust.h) and the daemon answering owns it. Returns the
 * fd, or -1 with err. */
static int dial(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    struct st_error e;
    char *real;
    uid_t owner;
    struct stat st;
    /* A socket that is not there is said so, before whether its place
     * could be trusted: nothing to trust yet. */
    if (lstat(path, &st) < 0) {
        tdc_seterr(err, errlen, "lease socket %s: %s; is tensord running with this ipc_socket? "
                   "(`tensord --print-socket` with its options names its socket)", path,
                   strerror(errno));
        return -1;
    }
    if (path_trust_socket(path, &real, &owner, &e) < 0) {
        tdc_seterr(err, errlen, "%s", e.message);
        return -1;
    }
    int fd = -1;
    if (strlen(real) >= sizeof(a.sun_path)) {
        tdc_seterr(err, errlen, "socket path too long: %s", real);
        goto out;
    }
    memcpy(a.sun_path, real, strlen(real) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
        tdc_seterr(err, errlen, "connect %s: %s", path, strerror(errno));
    else if (check_peer(fd, path, real, owner, err, errlen) == 0)
        goto out;
    if (fd >= 0)
        close(fd);
    fd = -1;
out:
    free(real);
    return fd;
}

/* Agrees on lease protocol 2 (c->lock held). */
static int hello(struct tensord_client *c, char *err, size_t errlen)
{
    struct answer a;
    size_t n_fds;
    char req[64];
    snprintf(req, sizeof(req), "{\"op\":\"hello\",\"protocol\":%d}", IPC_PROTOCOL);
    int rc = exchange(c, req, NULL, 0, &n_fds, &a, NULL, err, errlen);
    if (rc == RT_REFUSED && err && strstr(err, "unknown op"))
        tdc_seterr(err, errlen,
                   "this tensord speaks lease protocol 1 only (no \"hello\"); this client "
                   "needs protocol %d (a lease per open): upgrade the daemon", IPC_PROTOCOL);
    return rc;
}

/* (Re)connects c (c->lock held). */
static int redial(struct tensord_client *c, char *err, size_t errlen)
{
    if (c->fd >= 0)
        close(c->fd);
    c->leases = 0;
    c->epoch++;
    c->fd = dial(c->path, err, errlen);
    if (c->fd < 0)
        return RT_TRANSPORT;
    int rc = hello(c, err, errlen);
    if (rc != RT_OK) {
        close(c->fd);
        c->fd = -1;
    }
    return rc;
}

int tdc_roundtrip(struct tensord_client *c, const char *req, int *fds, size_t max_fds,
                  size_t *n_fds, struct answer *a, char **raw, char *err, size_t errlen)
{
    if (c->lost[0]) {
        /* An earlier call lost the connection and could not say so. */
        *n_fds = 0;
        memset(a, 0, sizeof(*a));
        tdc_seterr(err, errlen, "%s", c->lost);
        c->lost[0] = '\0';
        return RT_TRANSPORT;
    }
    unsigned held = c->leases;
    int rc = exchange(c, req, fds, max_fds, n_fds, a, raw, err, errlen);
    c->lost[0] = '\0'; /* said in err */
    if (rc == RT_TRANSPORT && held == 0 && redial(c, err, errlen) == RT_OK)
        rc = exchange(c, req, fds, max_fds, n_fds, a, raw, err, errlen);
    return rc;
}

/* The socket tensord_connect(NULL) uses: $TENSORD_SOCKET when it names
 * one (only that one: a missing socket someone named is an error, never a
 * reason to talk to another daemon), else the first that exists of
 * $XDG_RUNTIME_DIR/tensord.sock and TENSORD_DEFAULT_SOCKET, the places a
 * daemon without ipc_socket chooses (core/runtime/config.c). NULL, with every path
 * tried in err, when none does. buf holds the XDG path. */
static const char *find_socket(char *buf, size_t buflen, char *err, size_t errlen)
{
    const char *env = getenv("TENSORD_SOCKET"), *xdg = getenv("XDG_RUNTIME_DIR");
    if (env && *env) {
        if (access(env, F_OK) == 0)
            return env;
        tdc_seterr(err, errlen, "$TENSORD_SOCKET names the lease socket %s: %s (no other socket "
                   "is tried); is the daemon running with it?", env, strerror(errno));
        return NULL;
    }
    const char *tried[2];
    size_t n = 0;
    if (xdg && xdg[0] == '/' && (size_t)snprintf(buf, buflen, "%s/tensord.sock", xdg) < buflen)
        tried[n++] = buf;
    tried[n++] = TENSORD_DEFAULT_SOCKET;
    for (size_t i = 0; i < n; i++)
        if (access(tried[i], F_OK) == 0)
            return tried[i];
    tdc_seterr(err, errlen, "no tensord lease socket: none of %s%s%s exists (looked at "
               "$XDG_RUNTIME_DIR/tensord.sock, then the system's: $TENSORD_SOCKET names none); "
               "is the daemon running? Give it the socket's path (ipc_socket)", tried[0],
               n > 1 ? ", " : "", n > 1 ? tried[1] : "");
    return NULL;
}

TENSORD_API struct tensord_client *tensord_connect(const char *path, char *err, size_t errlen)
{
    char xdg[sizeof(((struct sockaddr_un *)0)->sun_path) + 16];
    if ((!path || !*path) && !(path = find_socket(xdg, sizeof(xdg), err, errlen)))
        return NULL;
    struct tensord_client *c = cmem_calloc(1, sizeof(*c));
    if (!c || !(c->path = cmem_strdup(path))) {
        free(c);
        tdc_seterr(err, errlen, "%s", tdc_oom);
        return NULL;
    }
    atomic_init(&c->refs, 1);
    c->fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_lock(&c->lock);
    int rc = redial(c, err, errlen);
    pthread_mutex_unlock(&c->lock);
    if (rc != RT_OK) {
        tdc_client_unref(c);
        return NULL;
    }
    return c;
}

TENSORD_API void tensord_close(struct tensord_client *c)
{
    if (c)
        tdc_client_unref(c);
}


TENSORD_API char *tensord_list(struct tensord_client *c, char *err, size_t errlen)
{
    size_t n_fds;
    char *raw = NULL;
    struct answer a;
    if (!c) {
        tdc_seterr(err, errlen, "no client");
        return NULL;
    }
    pthread_mutex_lock(&c->lock);
    tdc_roundtrip(c, "{\"op\":\"list\"}", NULL, 0, &n_fds, &a, &raw, err, errlen);
    pthread_mutex_unlock(&c->lock);
    return raw;
}

void tdc_release_lease(struct tensord_client *c, uint64_t lease, unsigned epoch)
{
    char req[80], err[256];
    struct answer a;
    size_t n_fds;
    pthread_mutex_lock(&c->lock);
    if (c->fd >= 0 && c->epoch == epoch) {
        snprintf(req, sizeof(req), "{\"op\":\"release\",\"lease\":%llu}",
                 (unsigned long long)lease);
        /* Not counted any more whatever the answer: failing here only
         * means the connection went, taking this lease (and any other, which
         * the next call reports) with it. */
        c->leases -= c->leases > 0;
        exchange(c, req, NULL, 0, &n_fds, &a, NULL, err, sizeof(err));
    }
    pthread_mutex_unlock(&c->lock);
}
