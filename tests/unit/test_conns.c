/* Tests server/http/conns.c with socket pairs: an armed connection past the
 * timeout is shut down (its peer reads EOF), a disarmed or idle one is left
 * alone, and cutting a file shuts down exactly the connections sending it. */
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conns.h"
#include "test.h"

/* Returns 1 when fd reads EOF within ms milliseconds. */
static int peer_sees_eof(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char c;
    return poll(&p, 1, ms) == 1 && read(fd, &c, 1) == 0;
}

TEST(off_when_zero)
{
    /* No deadline: connections are tracked, never timed out. */
    int p[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, p) == 0);
    struct conns *t = conns_start(0);
    CHECK(t != NULL);
    struct conns_entry *e = conns_add(t, p[0], 0);
    conn_arm(e);
    CHECK(!peer_sees_eof(p[1], 1500));
    conns_remove(t, e);
    conns_stop(t);
    close(p[0]);
    close(p[1]);
    conn_arm(NULL);
    conn_disarm(NULL);
    conn_sending(NULL, 1, 2);
    CHECK(conns_cut_file(NULL, 1, 2) == 0);
    conns_stop(NULL);
}

/* The reaper reads its clock once per pass; a request armed after that has
 * since > now and must not count as overdue (it once did, through unsigned
 * wrap-around: the soak test saw about one connection a minute shut down). */
TEST(overdue_arithmetic)
{
    const uint64_t s = 1000000000ULL;
    CHECK(!conn_overdue(0, 100 * s, 10 * s));          /* nothing pending */
    CHECK(!conn_overdue(95 * s, 100 * s, 10 * s));     /* 5 s old */
    CHECK(conn_overdue(89 * s, 100 * s, 10 * s));      /* 11 s old */
    CHECK(!conn_overdue(100 * s + 1, 100 * s, 10 * s)); /* armed after the clock read */
    CHECK(!conn_overdue(100 * s, 100 * s, 10 * s));
    CHECK(!conn_overdue(CONN_IDLE, 100 * s, 10 * s)); /* between requests */
}

/* A connected pair of loopback TCP sockets: fd[0] the server side. */
static int tcp_pair(int fd[2])
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, len) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &len) != 0)
        return -1;
    fd[1] = socket(AF_INET, SOCK_STREAM, 0);
    if (fd[1] < 0 || connect(fd[1], (struct sockaddr *)&a, len) != 0)
        return -1;
    fd[0] = accept(l, NULL, NULL);
    close(l);
    return fd[0] < 0 ? -1 : 0;
}

/* A kept-alive connection waiting for its next request is left alone however
 * long it idles; the first byte of a new request starts the clock, so a
 * request line dribbled after the first answer is cut like the first. */
TEST(idle_connection_is_timed_from_its_next_request)
{
    int idle[2], busy[2];
    CHECK(tcp_pair(idle) == 0);
    CHECK(tcp_pair(busy) == 0);
    struct conns *d = conns_start(1);
    struct conns_entry *a = conns_add(d, idle[0], 0);
    struct conns_entry *b = conns_add(d, busy[0], 0);
    char c = 'G';
    CHECK(write(idle[1], "GET / HTTP/1.1\r\n\r\n", 18) == 18); /* the first request */
    CHECK(write(busy[1], "GET / HTTP/1.1\r\n\r\n", 18) == 18);
    CHECK(read(idle[0], (char[64]){0}, 64) == 18);
    CHECK(read(busy[0], (char[64]){0}, 64) == 18);
    conn_idle(a, 18); /* both answered: 18 bytes each */
    conn_idle(b, 18);
    CHECK(!peer_sees_eof(idle[1], 2500));
    CHECK(write(busy[1], &c, 1) == 1); /* the next request begins, and stalls */
    CHECK(peer_sees_eof(busy[1], 3500));
    CHECK(!peer_sees_eof(idle[1], 200));
    conns_remove(d, a);
    conns_remove(d, b);
    conns_stop(d);
    for (int i = 0; i < 2; i++) {
        close(idle[i]);
        close(busy[i]);
    }
}

TEST(armed_is_shut_down_disarmed_is_not)
{
    int slow[2], done[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, slow) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, done) == 0);
    struct conns *d = conns_start(1);
    CHECK(d != NULL);
    struct conns_entry *a = conns_add(d, slow[0], 0);
    struct conns_entry *b = conns_add(d, done[0], 0);
    conn_disarm(b); /* its headers arrived */
    CHECK(peer_sees_eof(slow[1], 3500));
    CHECK(!peer_sees_eof(done[1], 200));
    /* Re-armed by a new request line, it is due again. */
    conn_arm(b);
    CHECK(peer_sees_eof(done[1], 3500));
    conns_remove(d, a);
    conns_remove(d, b);
    conns_stop(d);
    for (int i = 0; i < 2; i++) {
        close(slow[i]);
        close(done[i]);
    }
}

/* A request whose size on the wire is unknown (TLS records, a chunked
 * body): the kernel's count is the baseline, and a partial next request
 * sent right after the answer is still timed. */
TEST(idle_after_a_request_of_unknown_size)
{
    int p[2];
    CHECK(tcp_pair(p) == 0);
    struct conns *d = conns_start(1);
    struct conns_entry *e = conns_add(d, p[0], 1);
    CHECK(write(p[1], "POST / HTTP/1.1\r\n\r\n", 19) == 19);
    CHECK(read(p[0], (char[64]){0}, 64) == 19);
    conn_idle(e, CONN_BYTES_UNKNOWN);
    CHECK(!peer_sees_eof(p[1], 2500)); /* idle: left alone */
    CHECK(write(p[1], "GE", 2) == 2); /* a partial next request, then nothing */
    CHECK(peer_sees_eof(p[1], 3500));
    conns_remove(d, e);
    conns_stop(d);
    close(p[0]);
    close(p[1]);
}

/* Only the connections sending the changed file are cut. */
TEST(cut_file)
{
    int a[2], b[2], c[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, a) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, b) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, c) == 0);
    struct conns *t = conns_start(0);
    struct conns_entry *ea = conns_add(t, a[0], 0), *eb = conns_add(t, b[0], 0), *ec = conns_add(t, c[0], 0);
    conn_sending(ea, 7, 100);
    conn_sending(eb, 7, 101);
    conn_sending(ec, 8, 100); /* same inode number, another device */
    CHECK(conns_cut_file(t, 7, 100) == 1);
    CHECK(peer_sees_eof(a[1], 500));
    CHECK(!peer_sees_eof(b[1], 100) && !peer_sees_eof(c[1], 100));
    conn_sending(eb, 0, 0); /* its answer ended */
    CHECK(conns_cut_file(t, 7, 101) == 0);
    CHECK(conns_cut_file(t, 0, 0) == 0);
    CHECK(!peer_sees_eof(b[1], 100));
    conns_remove(t, ea);
    conns_remove(t, eb);
    conns_remove(t, ec);
    conns_stop(t);
    for (int i = 0; i < 2; i++) {
        close(a[i]);
        close(b[i]);
        close(c[i]);
    }
}

int main(void)
{
    RUN(off_when_zero);
    RUN(overdue_arithmetic);
    RUN(armed_is_shut_down_disarmed_is_not);
    RUN(idle_connection_is_timed_from_its_next_request);
    RUN(idle_after_a_request_of_unknown_size);
    RUN(cut_file);
    return TEST_SUMMARY();
}
