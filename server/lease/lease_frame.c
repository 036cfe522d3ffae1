/* lease_frame: a lease connection's answers, framed (see lease_int.h) and
 * sent with their descriptors. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "lease_int.h"
#include "util.h"

/* Queues text[0..n) (taken) as c's answer. Returns 0, or -1 when there was
 * no text or no memory for its frame: a short error went instead. */
static int queue(struct conn *c, char *text, size_t n, const int *fds, size_t n_fds)
{
    static const char fallback[] =
        "{\"ok\":false,\"error\":{\"code\":\"internal\",\"message\":\"encoding\"}}";
    unsigned char *out = text ? malloc(IPC_HEADER_BYTES + n) : NULL;
    int rc = out ? 0 : -1;
    if (!out) {
        free(text);
        text = NULL;
        n = sizeof(fallback) - 1;
        out = xmalloc(IPC_HEADER_BYTES + n);
        n_fds = 0;
    }
    ipc_put_header(out, (uint32_t)n);
    memcpy(out + IPC_HEADER_BYTES, text ? text : fallback, n);
    free(text);
    c->out = out;
    c->out_len = IPC_HEADER_BYTES + n;
    c->out_off = 0;
    if (n_fds)
        memcpy(c->fds, fds, n_fds * sizeof(int));
    c->n_fds = n_fds;
    return rc;
}

void lease_frame_error(struct conn *c, const char *code, const char *fmt, ...)
{
    struct jsonw w = JSONW_INIT;
    char msg[1024];
    size_t n;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    jsonw_obj(&w);
    jsonw_kobj(&w, "error");
    jsonw_kstr(&w, "code", code);
    jsonw_kstr(&w, "message", msg);
    jsonw_obj_end(&w);
    jsonw_kbool(&w, "ok", 0);
    jsonw_obj_end(&w);
    char *text = jsonw_take(&w, &n);
    queue(c, text, n, NULL, 0);
}

void lease_frame_ok(struct conn *c)
{
    queue(c, xstrdup("{\"ok\":true}"), 11, NULL, 0);
}

int lease_frame_json(struct conn *c, struct jsonw *w, const int *fds, size_t n_fds)
{
    size_t n;
    char *text = jsonw_take(w, &n);
    if (text && n > IPC_MAX_ANSWER) {
        /* A client reads no frame longer than this: sent, it would cost the
         * connection and every lease on it. */
        free(text);
        lease_frame_error(c, "answer_too_large", "this answer would be %zu bytes, more than "
                          "the %u a client reads (a model's tensor table that large cannot be "
                          "shared)", n, IPC_MAX_ANSWER);
        return -1;
    }
    return queue(c, text, n, fds, n_fds);
}

int lease_frame_flush(struct conn *c)
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
        c->active_ns = time_mono_ns();
    }
    if (c->out) {
        free(c->out);
        c->out = NULL;
        c->out_len = c->out_off = 0;
    }
    if (c->close_after) {
        /* Closing with unread input makes the kernel reset the peer, which
         * can then miss the answer: read (a bounded amount of) what is
         * already here first. */
        char sink[4096];
        for (int i = 0; i < 16 && recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
            ;
        shutdown(c->fd, SHUT_WR);
        return -1;
    }
    return 0;
}
