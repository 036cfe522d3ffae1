/* deadline: a cap on how long a client may take to send a request's line and
 * headers (slowloris). libmicrohttpd 0.9.75 only has an idle timeout, which a
 * client dribbling one byte every few seconds never trips, and it calls no
 * handler until the headers are complete. So each connection is tracked from
 * when it opens (and from each request line) until its headers are in, and a
 * reaper thread shuts down the socket of any that overstays: libmicrohttpd
 * then sees the connection fail and closes it through its own path. */
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
/* Whether a request pending since `since` (0: none) is overdue at `now`.
 * A request armed after the reaper read its clock has since > now: not
 * overdue (unsigned now - since would wrap to a huge age and shut down a
 * connection in the middle of a normal request). */
static inline int deadline_overdue(uint64_t since, uint64_t now, uint64_t timeout_ns)
{
    return since != 0 && now > since && now - since > timeout_ns;
}

/* A request line arrived: its headers are due within the timeout. */
void deadline_arm(struct deadline_conn *c);
/* The headers are complete. */
void deadline_disarm(struct deadline_conn *c);

#endif
