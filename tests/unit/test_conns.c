/* Tests server/http/conns.c with socket pairs: an armed connection past the
 * timeout is shut down (its peer reads EOF), a disarmed or idle one is left
 * alone, and cutting a file shuts down exactly the connections sending it;
 * a suspended answer is given up (resumed, once) when its client closes or
 * half-closes its side, when it idles past connection_timeout, or when the
 * table stops, and never after its waiter resumed it. */
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conns.h"
#include "test.h"

/* The resume callback of tables whose tests suspend nothing. */
static void no_resume(void *conn)
{
    (void)conn;
    abort();
}

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
    struct conns *t = conns_start(0, 0, no_resume);
    CHECK(t != NULL);
    struct conns_entry *e = conns_add(t, p[0], 0, NULL);
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
    struct conns *d = conns_start(1, 0, no_resume);
    struct conns_entry *a = conns_add(d, idle[0], 0, NULL);
    struct conns_entry *b = conns_add(d, busy[0], 0, NULL);
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
    struct conns *d = conns_start(1, 0, no_resume);
    CHECK(d != NULL);
    struct conns_entry *a = conns_add(d, slow[0], 0, NULL);
    struct conns_entry *b = conns_add(d, done[0], 0, NULL);
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
    struct conns *d = conns_start(1, 0, no_resume);
    struct conns_entry *e = conns_add(d, p[0], 1, NULL);
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
    struct conns *t = conns_start(0, 0, no_resume);
    struct conns_entry *ea = conns_add(t, a[0], 0, NULL), *eb = conns_add(t, b[0], 0, NULL), *ec = conns_add(t, c[0], 0, NULL);
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

/* What the tables of the suspension tests resume: which connections, how
 * many times (the reaper's thread writes, the test reads). */
static atomic_int resumed[5];

static void count_resume(void *conn)
{
    atomic_fetch_add(&resumed[(intptr_t)conn], 1);
}

/* Waits up to ms for connection i to have been resumed n times. */
static int resumed_within(int i, int n, int ms)
{
    for (int t = 0; t < ms && atomic_load(&resumed[i]) < n; t += 10)
        usleep(10000);
    return atomic_load(&resumed[i]) == n;
}

/* A client that closes, or half-closes, its side while its answer is
 * suspended: given up at once (the table's epoll set), exactly once; one
 * resumed by its waiter first is not. */
TEST(suspended_answer_given_up_when_its_client_leaves)
{
    int a[2], b[2], c[2], m[2];
    CHECK(tcp_pair(a) == 0 && tcp_pair(b) == 0 && tcp_pair(c) == 0 && tcp_pair(m) == 0);
    for (int i = 0; i < 5; i++)
        atomic_store(&resumed[i], 0);
    struct conns *t = conns_start(0, 0, count_resume);
    struct conns_entry *ea = conns_add(t, a[0], 0, (void *)1);
    struct conns_entry *eb = conns_add(t, b[0], 0, (void *)2);
    struct conns_entry *ec = conns_add(t, c[0], 0, (void *)3);
    struct conns_entry *em = conns_add(t, m[0], 0, (void *)4);
    CHECK(conn_suspend(ea) == 0 && conn_suspend(eb) == 0 && conn_suspend(ec) == 0);
    close(a[1]); /* gone */
    CHECK(shutdown(b[1], SHUT_WR) == 0); /* gone, as libmicrohttpd reads it */
    CHECK(resumed_within(1, 1, TEST_WAIT_MS) && resumed_within(2, 1, TEST_WAIT_MS));
    CHECK(conn_gave_up(ea) && conn_gave_up(eb) && !conn_gave_up(ec));
    CHECK(conn_resume(ea) == 0); /* the waiter's callback, late: not resumed twice */
    CHECK(conn_suspend(ea) == -1); /* given up: it ends, it does not suspend again */
    CHECK(conn_resume(ec) == 1 && conn_resume(ec) == 0); /* the waiter's, once */
    /* c's client leaves while nothing is suspended on it, then the marker
     * m's while m is: the reaper's epoll set reports them in that order, so
     * once m has been given up, c's event has been seen too, and ignored. */
    CHECK(conn_suspend(em) == 0);
    close(c[1]);
    close(m[1]);
    CHECK(resumed_within(4, 1, TEST_WAIT_MS) && conn_gave_up(em));
    CHECK(atomic_load(&resumed[3]) == 0 && !conn_gave_up(ec));
    /* Suspended again after its client left: given up at once. */
    CHECK(conn_suspend(ec) == 0);
    CHECK(resumed_within(3, 1, TEST_WAIT_MS) && conn_gave_up(ec));
    conns_remove(t, ea);
    conns_remove(t, eb);
    conns_remove(t, ec);
    conns_remove(t, em);
    conns_stop(t);
    close(a[0]);
    close(b[0]);
    close(b[1]);
    close(c[0]);
    close(m[0]);
}

/* A suspension that outlasts connection_timeout is given up, as an idle
 * connection would be closed; stopping gives up every suspension and any
 * new one. */
TEST(suspended_answer_given_up_after_its_timeout_and_at_stop)
{
    int a[2], b[2];
    CHECK(tcp_pair(a) == 0 && tcp_pair(b) == 0);
    for (int i = 0; i < 5; i++)
        atomic_store(&resumed[i], 0);
    struct conns *t = conns_start(0, 1, count_resume);
    struct conns_entry *ea = conns_add(t, a[0], 0, (void *)1);
    struct conns_entry *eb = conns_add(t, b[0], 0, (void *)2);
    CHECK(conn_suspend(ea) == 0);
    CHECK(!resumed_within(1, 1, 700));
    CHECK(resumed_within(1, 1, 2500) && conn_gave_up(ea));
    CHECK(conn_suspend(eb) == 0);
    conns_give_up_all(t);
    CHECK(atomic_load(&resumed[2]) == 1 && conn_gave_up(eb));
    CHECK(conn_suspend(conns_add(t, -1, 0, (void *)3)) == -1);
    CHECK(conn_suspend(NULL) == 0 && conn_resume(NULL) == 1 && !conn_gave_up(NULL));
    conns_stop(t); /* frees the entries still listed */
    for (int i = 0; i < 2; i++) {
        close(a[i]);
        close(b[i]);
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
    RUN(suspended_answer_given_up_when_its_client_leaves);
    RUN(suspended_answer_given_up_after_its_timeout_and_at_stop);
    return TEST_SUMMARY();
}
