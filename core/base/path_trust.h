/* path_trust: whether a Unix socket's place can be changed by anyone but
 * the user who serves it.
 *
 * A worker that connects to the lease socket takes GPU memory handles and
 * tensor descriptions from whoever answers. Another user able to write the
 * socket's directory, or rename one of its ancestors, can put their own
 * socket in its place, before the daemon starts or between two restarts,
 * and answer for tensord (OpenSSH's StrictModes makes the same check of
 * its files). So the daemon listens, and the client library connects, only
 * where that cannot happen:
 *   - the socket's directory is owned by root or by one user (the owner),
 *     and is writable by no one else (no group or other write bit);
 *   - each ancestor is owned by root or the owner, and is writable by no
 *     one else unless it has the sticky bit (as /tmp: others cannot rename
 *     or remove what they do not own there).
 * The path is resolved first (symlinks followed), and the caller uses the
 * resolved path, so a symlink changed after the check changes nothing. */
#ifndef TENSORD_PATH_TRUST_H
#define TENSORD_PATH_TRUST_H

#include <sys/types.h>

#include "st_error.h"

/* Checks the place of socket path (the socket itself need not exist; its
 * directory must). On success *real is the resolved path to use (caller
 * frees) and *owner the directory's owner; returns 0. Else -errno with err
 * (ST_ERR_UNTRUSTED naming the directory, its owner and mode, and what to
 * change; ST_ERR_IO when it cannot be resolved). */
int path_trust_socket(const char *path, char **real, uid_t *owner, struct st_error *err);

#endif
