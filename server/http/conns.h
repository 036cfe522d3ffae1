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
 * a complete one that mixes two versions. */
#ifndef TENSORD_CONNS_H
#define TENSORD_CONNS_H

#include <stdint.h>

struct conns;
struct conns_entry;

/* A table whose requests must arrive within `seconds` (0: no deadline). */
struct conns *conns_start(unsigned seconds);
void conns_stop(struct conns *t);

/* A new connection on socket fd (a TLS one when tls), timed from now. */
struct conns_entry *conns_add(struct conns *t, int fd, int tls);
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

#endif
