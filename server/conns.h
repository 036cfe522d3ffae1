/* deadline: a cap on how long a client may take to send a whole request, its
 * line, headers and body (slowloris). libmicrohttpd 0.9.75 only has an idle
 * timeout, which a client dribbling one byte every few seconds never trips,
 * and it calls no handler until the request line is complete. So each
 * connection is tracked from when it opens, and again from the first byte of
 * each later request, until its request is complete; a reaper thread shuts
 * down the socket of any that overstays, and libmicrohttpd then sees the
 * connection fail and closes it through its own path.
 *
 * Between requests a kept-alive connection is idle, which connection_timeout
 * governs, not this. The first byte of its next request cannot be seen
 * through libmicrohttpd, so the reaper watches the socket's received-byte
 * count (TCP_INFO) of idle connections and starts the clock when it grows:
 * within a second of the first byte, whatever the client sends after it. */
#ifndef TENSORD_DEADLINE_H
#define TENSORD_DEADLINE_H

#include <stdint.h>

struct deadlines;
struct deadline_conn;

/* Starts the reaper for a timeout of `seconds`; returns NULL (no limit) for 0. */
struct deadlines *deadlines_start(unsigned seconds);
void deadlines_stop(struct deadlines *d);

/* A new connection on socket fd, armed from now. NULL when d is NULL. */
struct deadline_conn *deadlines_add(struct deadlines *d, int fd);
/* Called from libmicrohttpd's close notification, before it closes fd, so
 * the reaper never shuts down a descriptor number that was reused. */
void deadlines_remove(struct deadlines *d, struct deadline_conn *c);

/* A connection's state word: DEADLINE_RECEIVED while its request is being
 * answered, DEADLINE_IDLE between requests, otherwise the monotonic time (ns)
 * its request began, which is larger than both. */
#define DEADLINE_RECEIVED 0
#define DEADLINE_IDLE 1

/* Whether a connection in state `since` is overdue at `now`. A request
 * armed after the reaper read its clock has since > now: not overdue
 * (unsigned now - since would wrap to a huge age and shut down a connection
 * in the middle of a normal request). */
static inline int deadline_overdue(uint64_t since, uint64_t now, uint64_t timeout_ns)
{
    return since > DEADLINE_IDLE && now > since && now - since > timeout_ns;
}

/* A request line arrived: the request is due within the timeout. */
void deadline_arm(struct deadline_conn *c);
/* The whole request (headers and body) has arrived. */
void deadline_disarm(struct deadline_conn *c);
/* The answer went out: the connection waits for its next request. */
void deadline_idle(struct deadline_conn *c);

#endif
