/* conns: the table of open HTTP connections, for what libmicrohttpd cannot
 * do itself: cut a connection that takes too long to send its request, and
 * cut the transfers of a file that changed on disk.
 *
 * Deadlines (header_timeout, slowloris): libmicrohttpd 0.9.75 only has an
 * idle timeout, which a client dribbling one byte every few seconds never
 * trips, and calls no handler until the request line is complete. So each
 * connection is timed from when it opens, and again from the first byte of
 * each later request, until its request (line, headers, body) is complete;
 * a reaper thread shuts down the socket of any that overstays, and
 * libmicrohttpd then sees the connection fail and closes it through its own
 * path. Between requests a kept-alive connection is idle, which
 * connection_timeout governs, not this. The first byte of the next request
 * cannot be seen through libmicrohttpd, so the reaper watches the socket's
 * received-byte count (TCP_INFO) of idle connections and starts the clock
 * when it grows past the bytes of the requests already answered: within a
 * second of the first byte.
 *
 * Transfers: a connection sending a file with sendfile records which file
 * (device and inode); when the watcher learns that a file was written, every
 * connection sending it is shut down, so its client gets a short body, never
 * a complete one that mixes two versions.
 *
 * Suspended answers: libmicrohttpd neither times out a suspended connection
 * nor notices its client leave (its socket is out of the event loop), so an
 * answer that waits on the mirror's upstream (a job, or bytes not fetched
 * yet) could hold its connection, and what it holds in the mirror, forever.
 * Between conn_suspend and conn_resume the reaper watches the socket (an
 * epoll set of its own, EPOLLRDHUP: the peer shut its side down, which is
 * how a client's close looks until something is written to it; HTTP
 * clients do not half-close while they await an answer) and the clock
 * (connection_timeout since the suspension, as for an idle connection);
 * when either says so it gives the answer up: conn_gave_up turns true and
 * the table's resume callback resumes the connection, whose answer then
 * ends and closes it. Stopping gives every suspended answer up
 * (conns_give_up_all), so libmicrohttpd is never stopped with a suspended
 * connection (it aborts the process). Exactly one of the waiter that
 * resumes it and the reaper that gives it up resumes a suspension: the
 * table's lock decides. Only answers whose wait can be taken back suspend
 * this way (a mirror's stream, a mirror's job: the request's end takes
 * their callbacks back); the hash and document waits end by themselves
 * within their own bounds. */
#ifndef TENSORD_CONNS_H
#define TENSORD_CONNS_H

#include <stdint.h>

struct conns;
struct conns_entry;

/* A table whose requests must arrive within `header_seconds` (0: no
 * deadline), and whose suspended answers are given up after `idle_seconds`
 * (0: never for the time alone) or when their client leaves, by calling
 * resume(conn) (with the table's lock held: it must take no lock of the
 * caller's; libmicrohttpd's resume takes only its own). Never NULL. */
struct conns *conns_start(unsigned header_seconds, unsigned idle_seconds,
                          void (*resume)(void *conn));
void conns_stop(struct conns *t);

/* A new connection on socket fd (a TLS one when tls), timed from now; conn
 * is what resume is given for it (libmicrohttpd's connection). */
struct conns_entry *conns_add(struct conns *t, int fd, int tls, void *conn);
/* Called from libmicrohttpd's close notification, before it closes fd, so
 * no socket is ever shut down after its descriptor number was reused. */
void conns_remove(struct conns *t, struct conns_entry *c);

/* A connection's state word: CONN_RECEIVED while its request is being
 * answered, CONN_IDLE between requests, otherwise the monotonic time (ns)
 * its request began, which is larger than both. */
#define CONN_RECEIVED 0
#define CONN_IDLE 1

/* Whether a connection in state `since` is overdue at `now`. A request
 * armed after the reaper read its clock has since > now: not overdue
 * (unsigned now - since would wrap to a huge age and shut down a connection
 * in the middle of a normal request). */
static inline int conn_overdue(uint64_t since, uint64_t now, uint64_t timeout_ns)
{
    return since > CONN_IDLE && now > since && now - since > timeout_ns;
}

/* A request line arrived: the request is due within the timeout. */
void conn_arm(struct conns_entry *c);
/* The whole request (headers and body) has arrived. */
void conn_disarm(struct conns_entry *c);
/* The answer went out: the connection waits for its next request. The
 * request that was answered took request_bytes on the wire (its line,
 * headers and body), or CONN_BYTES_UNKNOWN. */
#define CONN_BYTES_UNKNOWN UINT64_MAX
void conn_idle(struct conns_entry *c, uint64_t request_bytes);
/* The connection's answer streams file (dev, ino) from the file itself
 * (sendfile); (0, 0) when it does not. */
void conn_sending(struct conns_entry *c, uint64_t dev, uint64_t ino);

/* Bytes written to the connection's socket since it opened (acknowledged
 * by the peer, or still queued to it), and of those the bytes the peer
 * acknowledged: what it got. CONN_BYTES_UNKNOWN when not TCP. A system call
 * or two, about a microsecond: for answers large enough that this is noise. */
uint64_t conn_bytes_written(const struct conns_entry *c);
uint64_t conn_bytes_delivered(const struct conns_entry *c);

/* Shuts down every connection sending file (dev, ino). Returns how many. */
unsigned conns_cut_file(struct conns *t, uint64_t dev, uint64_t ino);

/* The connection's answer is about to suspend it (call before
 * libmicrohttpd's suspend; a resume that comes first cancels that suspend
 * there). Returns 0, or -1 when it must not: the table is stopping, or the
 * connection was given up already (the answer ends instead). c may be NULL
 * (then 0: nothing watches it). */
int conn_suspend(struct conns_entry *c);
/* Ends a suspension: 1 when this call did, and the caller resumes the
 * connection; 0 when it was given up or resumed already (c NULL: 1). */
int conn_resume(struct conns_entry *c);
/* Whether the connection's suspended answer was given up: it must end now
 * (a reader returns an error, a request is not answered). Any thread. */
int conn_gave_up(const struct conns_entry *c);
/* Gives up every suspended answer, and any suspended from now on (stop). */
void conns_give_up_all(struct conns *t);

#endif
