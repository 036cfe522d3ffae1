/* Unit tests for server/lease/lease_frame.c: an answer framed as the lease
 * protocol says (a 4-byte little-endian length, then the JSON), sent with
 * its descriptors on the first byte (SCM_RIGHTS) over a socketpair, in
 * pieces when the socket is full, and the short error that replaces an
 * answer too long for a client or missing. */
#include <sys/socket.h>
#include <sys/uio.h>

#include "lease_int.h"
#include "test.h"
#include "util.h"

/* Receives one frame from fd: its text, and the descriptors it carried. */
static char *receive(int fd, int *fds, size_t *n_fds)
{
    unsigned char hdr[4];
    struct iovec iov = {hdr, 4};
    union {
        char buf[CMSG_SPACE(sizeof(int) * 8)];
        struct cmsghdr align;
    } ctl;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                       .msg_controllen = sizeof(ctl.buf)};
    *n_fds = 0;
    if (recvmsg(fd, &m, MSG_WAITALL) != 4)
        return NULL;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            *n_fds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            memcpy(fds, CMSG_DATA(c), *n_fds * sizeof(int));
        }
    uint32_t n = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
                 (uint32_t)hdr[3] << 24;
    char *text = xmalloc(n + 1);
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, text + got, n - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    text[got] = '\0';
    return text;
}

TEST(frame_with_descriptors)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    struct conn c = {.fd = sv[0]};
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    jsonw_kbool(&w, "ok", 1);
    jsonw_obj_end(&w);
    CHECK(lease_frame_json(&c, &w, &nul, 1) == 0);
    CHECK_EQ_U64(c.out_len, 4 + 11);
    CHECK(lease_frame_flush(&c) == 0);
    CHECK(c.out == NULL); /* all sent */
    int fds[8];
    size_t n;
    char *text = receive(sv[1], fds, &n);
    CHECK_STR(text, "{\"ok\":true}");
    CHECK_EQ_U64(n, 1);
    struct stat a, b;
    CHECK(n == 1 && fstat(fds[0], &a) == 0 && fstat(nul, &b) == 0 && a.st_ino == b.st_ino);
    if (n == 1)
        close(fds[0]);
    free(text);
    close(nul);
    close(sv[0]);
    close(sv[1]);
}

TEST(a_full_socket_sends_in_pieces)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    int small = 4096;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    struct conn c = {.fd = sv[0]};
    size_t len = 1 << 20;
    char *big = xmalloc(len - 2);
    memset(big, 'x', len - 2);
    struct jsonw w = JSONW_INIT;
    jsonw_strn(&w, big, len - 2); /* "xx...x": len bytes */
    free(big);
    CHECK(lease_frame_json(&c, &w, NULL, 0) == 0);
    CHECK(lease_frame_flush(&c) == 0);
    CHECK(c.out != NULL && c.out_off > 0 && c.out_off < c.out_len); /* waits for room */
    size_t total = 0;
    char buf[65536];
    while (c.out) {
        ssize_t r = recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT);
        if (r > 0)
            total += (size_t)r;
        CHECK(lease_frame_flush(&c) == 0);
    }
    ssize_t r;
    while ((r = recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT)) > 0)
        total += (size_t)r;
    CHECK_EQ_U64(total, 4 + len);
    close(sv[0]);
    close(sv[1]);
}

TEST(no_answer_and_closing)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    struct conn c = {.fd = sv[0]};
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    jsonw_fail(&w); /* the writer ran out of memory */
    CHECK(lease_frame_json(&c, &w, &nul, 1) == -1); /* no text: the fallback, no fds */
    c.close_after = 1;
    CHECK(lease_frame_flush(&c) == -1); /* its answer sent, the connection is to close */
    int fds[8];
    size_t n;
    char *text = receive(sv[1], fds, &n);
    CHECK_STR(text, "{\"ok\":false,\"error\":{\"code\":\"internal\",\"message\":\"encoding\"}}");
    CHECK_EQ_U64(n, 0);
    free(text);
    close(nul);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    RUN(frame_with_descriptors);
    RUN(a_full_socket_sends_in_pieces);
    RUN(no_answer_and_closing);
    return TEST_SUMMARY();
}
