/* ipc_server: the lease socket. A thread serves a Unix stream socket with epoll:
 * each connection is checked against the allow-list (SO_PEERCRED, plus
 * SO_PEERGROUPS for supplementary groups) when it is accepted, then sends
 * length-prefixed JSON requests (core/ipc_proto.h) and gets answers, "open"
 * answers with the model's allocation fds in SCM_RIGHTS. The connection is
 * the lease: every model it opened stays held until it closes, however it
 * closes (close op, exit, SIGKILL). A malformed request gets an error answer
 * and never disturbs another connection. */
#ifndef TENSORD_IPC_SERVER_H
#define TENSORD_IPC_SERVER_H

#include <stddef.h>

#include "config.h"

struct gpu_manager;
struct ipc_server;

/* Binds path (replacing a stale socket file, refusing one a live daemon
 * serves), makes it connectable by any local user (the allow-list decides:
 * the daemon's own uid, cfg->allow_uids, cfg->allow_gids) and starts the
 * thread. Returns NULL with err on failure. */
struct ipc_server *ipc_server_start(struct gpu_manager *gm, const char *path,
                                    const struct config *cfg, char *err, size_t errlen);

/* Stops the thread, ends every lease, removes the socket file. */
void ipc_server_stop(struct ipc_server *s);

#endif
