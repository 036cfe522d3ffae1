/* lease_server: the lease socket, started and stopped by server/cli/daemon.c
 * over the GPU manager it hands leases of. Two threads serve a Unix stream
 * socket:
 *
 *   - the accept thread checks each new connection against the allow-list
 *     (SO_PEERCRED, plus SO_PEERGROUPS for every supplementary group) and
 *     refuses the others itself (server/lease/lease_access.c): one short answer,
 *     close, and a log line per peer uid per LEASE_REFUSAL_LOG_SECONDS with
 *     a count. A flood of refused peers never reaches the connections being
 *     served;
 *   - the serve thread (epoll) reads length-prefixed JSON requests
 *     (gpu/ipc_proto.h) from allowed peers and answers them, "open"
 *     answers with the model's allocation fds in SCM_RIGHTS.
 *
 * Every "open" takes one lease, which ends on "release" or when the
 * connection closes, however it closes (close op, exit, SIGKILL). A
 * connection's input buffer never exceeds one valid request; one that
 * holds no lease and stays silent, or stalls mid-message or mid-answer,
 * for ipc_idle_timeout seconds is closed. A malformed request gets an error
 * answer and never disturbs another connection. */
#ifndef TENSORD_LEASE_SERVER_H
#define TENSORD_LEASE_SERVER_H

#include <stddef.h>

#include "config.h"

struct gpu_manager;
struct lease_server;
struct registry;

/* Binds path (replacing a stale socket file, refusing one a live daemon
 * serves), makes it connectable by any local user (the allow-list decides:
 * the daemon's own uid, cfg->allow_uids, cfg->allow_gids) and starts the
 * thread. registry (borrowed; may be NULL) tells an "open" of a model that
 * does not exist from one that is not preloaded. Returns NULL with err on
 * failure. */
struct lease_server *lease_server_start(struct gpu_manager *gm, struct registry *registry,
                                        const char *path, const struct config *cfg, char *err,
                                        size_t errlen);

/* Stops the threads, ends every lease, removes the socket file. Before
 * gpu_manager_free: the leases it ends belong to the manager. */
void lease_server_stop(struct lease_server *s);

#endif
