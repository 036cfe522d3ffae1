/* Tests server/deadline.c with socketpairs: an armed connection past the
 * timeout is shut down (its peer reads EOF); a disarmed one is left alone. */
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "deadline.h"
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
    CHECK(deadlines_start(0) == NULL);
    CHECK(deadlines_add(NULL, 3) == NULL);
    deadline_arm(NULL);
    deadline_disarm(NULL);
    deadlines_remove(NULL, NULL);
    deadlines_stop(NULL);
}

/* The reaper reads its clock once per pass; a request armed after that has
 * since > now and must not count as overdue (it once did, through unsigned
 * wrap-around: the soak test saw about one connection a minute shut down). */
TEST(overdue_arithmetic)
{
    const uint64_t s = 1000000000ULL;
    CHECK(!deadline_overdue(0, 100 * s, 10 * s));          /* nothing pending */
    CHECK(!deadline_overdue(95 * s, 100 * s, 10 * s));     /* 5 s old */
    CHECK(deadline_overdue(89 * s, 100 * s, 10 * s));      /* 11 s old */
    CHECK(!deadline_overdue(100 * s + 1, 100 * s, 10 * s)); /* armed after the clock read */
    CHECK(!deadline_overdue(100 * s, 100 * s, 10 * s));
}

TEST(armed_is_shut_down_disarmed_is_not)
{
    int slow[2], done[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, slow) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, done) == 0);
    struct deadlines *d = deadlines_start(1);
    CHECK(d != NULL);
    struct deadline_conn *a = deadlines_add(d, slow[0]);
    struct deadline_conn *b = deadlines_add(d, done[0]);
    deadline_disarm(b); /* its headers arrived */
    CHECK(peer_sees_eof(slow[1], 3500));
    CHECK(!peer_sees_eof(done[1], 200));
    /* Re-armed by a new request line, it is due again. */
    deadline_arm(b);
    CHECK(peer_sees_eof(done[1], 3500));
    deadlines_remove(d, a);
    deadlines_remove(d, b);
    deadlines_stop(d);
    for (int i = 0; i < 2; i++) {
        close(slow[i]);
        close(done[i]);
    }
}

int main(void)
{
    RUN(off_when_zero);
    RUN(overdue_arithmetic);
    RUN(armed_is_shut_down_disarmed_is_not);
    return TEST_SUMMARY();
}
