/* path_trust: a socket's directory and ancestors, owned and writable by
 * root and one user only (path_trust.h says why). */
#include "path_trust.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* The directory part of path ("." for a bare name, "/" for "/name") into
 * dir[PATH_MAX]; returns the name part, or NULL when there is none. */
static const char *split(const char *path, char *dir)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(dir, ".");
        return path[0] ? path : NULL;
    }
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= PATH_MAX)
        return NULL;
    memcpy(dir, path, n);
    dir[n] = '\0';
    return slash[1] ? slash + 1 : NULL;
}

/* Where a socket can be put safely, for the messages: never a shared
 * directory's permissions to change (the advice for /tmp would break the
 * whole system's). */
static const char *private_dirs(void)
{
    static __thread char buf[PATH_MAX + 96];
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (geteuid() == 0 || !xdg || xdg[0] != '/')
        return "/run/tensord/tensord.sock (root's, the default), or $XDG_RUNTIME_DIR/tensord.sock "
               "for a daemon run by a user";
    snprintf(buf, sizeof(buf), "%s/tensord.sock ($XDG_RUNTIME_DIR, the default for a daemon "
             "run by a user), or /run/tensord/tensord.sock (root's)", xdg);
    return buf;
}

/* One directory of the chain: owned by root or *owner (the first one, the
 * socket's own, sets *owner), written by no one else (unless sticky, when
 * allowed). */
static int check_dir(const char *socket, const char *dir, uid_t *owner, int sticky_ok,
                     struct st_error *err)
{
    struct stat st;
    if (stat(dir, &st) < 0)
        return st_error_errno(err, errno, "socket %s: %s", socket, dir);
    if (!S_ISDIR(st.st_mode))
        return st_error_errno(err, ENOTDIR, "socket %s: %s", socket, dir);
    if (*owner == (uid_t)-1)
        *owner = st.st_uid;
    if (st.st_uid != 0 && st.st_uid != *owner)
        return st_error_fail(err, ST_ERR_UNTRUSTED,
                             "socket %s: the directory %s belongs to uid %u, neither root nor "
                             "the socket directory's owner (uid %u): that user could put "
                             "another socket in its place; use a directory only root and "
                             "tensord's user own", socket, dir, (unsigned)st.st_uid,
                             (unsigned)*owner);
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(sticky_ok && (st.st_mode & S_ISVTX)))
        return st_error_fail(err, ST_ERR_UNTRUSTED,
                             "socket %s: the directory %s is writable by %s (mode %04o): "
                             "another user could put their own socket in its place; put the "
                             "socket in a directory of its own that only its user writes: %s",
                             socket, dir, (st.st_mode & S_IWOTH) ? "every user" : "its group",
                             (unsigned)(st.st_mode & 07777), private_dirs());
    return 0;
}

int path_trust_socket(const char *path, char **real, uid_t *owner, struct st_error *err)
{
    char dir[PATH_MAX], resolved[PATH_MAX], walk[PATH_MAX];
    *real = NULL;
    const char *name = split(path, dir);
    if (!name)
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "socket path \"%s\" names no file",
                             path);
    if (!realpath(dir, resolved))
        return st_error_errno(err, errno, "socket %s: the directory %s", path, dir);
    /* The socket's directory, then its ancestors up to "/", each cut off a
     * copy of the resolved path. */
    *owner = (uid_t)-1;
    strcpy(walk, resolved);
    int rc = check_dir(path, walk, owner, 0, err);
    while (rc == 0 && strcmp(walk, "/") != 0) {
        char *slash = strrchr(walk, '/');
        slash[slash == walk] = '\0';
        rc = check_dir(path, walk, owner, 1, err);
    }
    if (rc < 0)
        return rc;
    size_t dl = strlen(resolved), nl = strlen(name);
    if (!(*real = malloc(dl + 1 + nl + 1)))
        return st_error_errno(err, ENOMEM, "socket %s", path);
    memcpy(*real, resolved, dl);
    (*real)[dl] = '/';
    memcpy(*real + dl + (dl > 1), name, nl + 1); /* "/name", not "//name" */
    return 0;
}
