/* lease_access: who can reach the lease socket: its file (bound once, a
 * stale one replaced, one a live daemon serves refused), who may use it,
 * and how the others are turned away.
 *
 * A peer is allowed when its uid (SO_PEERCRED) is the daemon's own or on
 * allow_uids, or its primary group or one of its supplementary groups
 * (SO_PEERGROUPS) is on allow_gids. A refused peer gets one short answer
 * and is closed without the daemon ever waiting on it; its refusals are
 * logged one line per peer uid per LEASE_REFUSAL_LOG_SECONDS, with a count
 * of those not logged. Everything here runs on the accept thread. */
#ifndef TENSORD_LEASE_ACCESS_H
#define TENSORD_LEASE_ACCESS_H

#include <stdint.h>
#include <sys/socket.h>

#include "config.h"

#define LEASE_REFUSAL_LOG_SECONDS 10
#define LEASE_REFUSAL_UIDS 64      /* peer uids whose refusals are counted at once */

struct lease_allow {
    uint32_t uids[CONFIG_MAX_IDS], gids[CONFIG_MAX_IDS];
    unsigned n_uids, n_gids;
};

/* Refusals of one peer uid in the current log interval. */
struct lease_refusal {
    unsigned uid;
    int used;
    uint64_t since_ns;             /* the interval began (with a logged line) */
    uint64_t unlogged;             /* refusals since, not yet in the log */
};

struct lease_refusals {
    struct lease_refusal r[LEASE_REFUSAL_UIDS];
};

/* Binds and listens on the Unix socket path (replacing a stale socket
 * file, refusing a path that is not a socket or that a live daemon
 * serves), connectable by any local user: the allow-list decides. Returns
 * the listening descriptor, or -1 with err. */
int lease_access_listen(const char *path, char *err, size_t errlen);

/* The allow-list of cfg (allow_uids, allow_gids). */
void lease_access_init(struct lease_allow *a, const struct config *cfg);

/* Fills *cr with fd's peer credentials; 1 when that peer may use the
 * socket, 0 otherwise (also when its credentials cannot be read). */
int lease_access_allowed(const struct lease_allow *a, int fd, struct ucred *cr);

/* Answers "forbidden", closes fd and notes the refusal in the log. */
void lease_access_refuse(struct lease_refusals *rs, int fd, const struct ucred *cr);

/* Logs the counts of refusals whose interval has ended (called about once
 * a second). */
void lease_access_flush(struct lease_refusals *rs);

#endif
