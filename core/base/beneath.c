/* beneath: see beneath.h. */
#include "beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_LINKS 40  /* symlinks expanded per open, as the kernel's MAXSYMLINKS */
#define MAX_DEPTH 256 /* directories open at once during a walk */

/* Set once openat2 turned out to be missing or filtered: every later open
 * walks without trying it again. */
static atomic_int no_openat2;

/* TENSORD_BENEATH_WALK=1 takes the walk always: how the tests run the
 * daemon as it runs on a kernel without openat2. */
static int walk_forced(void)
{
    static atomic_int forced = -1;
    int f = atomic_load_explicit(&forced, memory_order_relaxed);
    if (f < 0) {
        const char *v = getenv("TENSORD_BENEATH_WALK");
        f = v && strcmp(v, "1") == 0;
        atomic_store_explicit(&forced, f, memory_order_relaxed);
    }
    return f;
}

int beneath_open(int rootfd, const char *root, const char *rel, int flags)
{
    if (!atomic_load_explicit(&no_openat2, memory_order_relaxed) && !walk_forced()) {
        struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC),
                               .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
        for (int tries = 0; tries < 4; tries++) {
            long fd = syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
            if (fd >= 0)
                return (int)fd;
            int e = errno;
            if (e == EAGAIN)
                continue; /* a rename raced the lookup */
            if (e == ENOSYS || e == E2BIG) {
                atomic_store_explicit(&no_openat2, 1, memory_order_relaxed);
                break;
            }
            if (e == EPERM) { /* a seccomp filter, or a real EPERM: the walk tells */
                int wfd = beneath_open_walk(rootfd, root, rel, flags);
                if (wfd >= 0)
                    atomic_store_explicit(&no_openat2, 1, memory_order_relaxed);
                return wfd;
            }
            if (e == EXDEV)
                break; /* outside, or an absolute symlink into the root: the walk decides */
            return -e;
        }
    }
    return beneath_open_walk(rootfd, root, rel, flags);
}

/* The path of an absolute symlink target relative to root, or NULL when it
 * points outside. */
static const char *inside_root(const char *root, const char *target)
{
    size_t n = strlen(root);
    if (n == 1 && root[0] == '/')
        return target + 1;
    if (strncmp(target, root, n) != 0 || (target[n] != '/' && target[n] != '\0'))
        return NULL;
    return target + n + (target[n] == '/');
}

/* The walk keeps one descriptor per directory below the root on the way
 * down (dirs[0] is the root's, not owned), so ".." is one step back up and
 * never a lookup the kernel could take outside. */
struct walk {
    int dirs[MAX_DEPTH + 1];
    size_t depth;
};

static void walk_pop_to(struct walk *w, size_t depth)
{
    while (w->depth > depth)
        close(w->dirs[w->depth--]);
}

/* Splits the next component off p (after any '/'): comp gets it, *rest
 * what follows it (its slashes skipped), *last whether it is the final one.
 * Returns 0, 1 when no component is left, or -ENAMETOOLONG. */
static int next_component(const char *p, char comp[NAME_MAX + 1], const char **rest, int *last)
{
    while (*p == '/')
        p++;
    if (!*p)
        return 1;
    const char *slash = strchr(p, '/');
    size_t len = slash ? (size_t)(slash - p) : strlen(p);
    if (len > NAME_MAX)
        return -ENAMETOOLONG;
    memcpy(comp, p, len);
    comp[len] = '\0';
    *rest = p + len;
    while (**rest == '/')
        (*rest)++;
    *last = **rest == '\0';
    return 0;
}

/* The symlink fd (an O_PATH descriptor, closed here) has its target take
 * its place: *path becomes target + "/" + rest (rest points into the old
 * *path, which is freed). An absolute target must lie inside root and
 * restarts the walk at the root. */
static int expand_link(struct walk *w, const char *root, int fd, const char *rest, char *link,
                       int *links, char **path)
{
    ssize_t n = ++*links > MAX_LINKS ? -1 : readlinkat(fd, "", link, PATH_MAX - 1);
    int e = errno;
    close(fd);
    if (n < 0)
        return *links > MAX_LINKS ? -ELOOP : -e;
    link[n] = '\0';
    const char *target = link;
    if (link[0] == '/') {
        target = inside_root(root, link);
        if (!target)
            return -EXDEV;
        walk_pop_to(w, 0);
    }
    size_t tlen = strlen(target), rlen = strlen(rest);
    char *next = malloc(tlen + 1 + rlen + 1);
    if (!next)
        return -ENOMEM;
    memcpy(next, target, tlen);
    next[tlen] = '/';
    memcpy(next + tlen + 1, rest, rlen + 1);
    if (rlen == 0)
        next[tlen] = '\0'; /* the link was the last component: so is its target's */
    free(*path);
    *path = next;
    return 0;
}

int beneath_open_walk(int rootfd, const char *root, const char *rel, int flags)
{
    struct walk w = {.dirs = {rootfd}, .depth = 0};
    size_t cap = strlen(rel) + 1;
    char *path = malloc(cap), *link = malloc(PATH_MAX);
    int links = 0, rc = -ENOMEM;
    if (!path || !link)
        goto out;
    memcpy(path, rel, cap);
    const char *p = path;
    for (;;) {
        char comp[NAME_MAX + 1];
        const char *rest;
        int last;
        rc = next_component(p, comp, &rest, &last);
        if (rc == 1) { /* the path ended on a directory already walked ("a/..", a link to ".") */
            int fd = openat(w.dirs[w.depth], ".", flags | O_CLOEXEC);
            rc = fd >= 0 ? fd : -errno;
            goto out;
        }
        if (rc < 0)
            goto out;
        if (strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0) {
            if (comp[1] == '.') {
                if (w.depth == 0) {
                    rc = -EXDEV; /* above the root */
                    goto out;
                }
                walk_pop_to(&w, w.depth - 1);
            }
            p = rest;
            continue;
        }
        int fd;
        if (last) {
            fd = openat(w.dirs[w.depth], comp, flags | O_NOFOLLOW | O_CLOEXEC);
            if (fd >= 0 || (errno != ELOOP && errno != ENOTDIR)) {
                rc = fd >= 0 ? fd : -errno;
                goto out;
            }
            /* ELOOP: it is a symlink. ENOTDIR with O_DIRECTORY: maybe a
             * symlink to a directory. Look at it without following it. */
        }
        fd = openat(w.dirs[w.depth], comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0) {
            rc = -errno;
            if (fd >= 0)
                close(fd);
            goto out;
        }
        if (S_ISDIR(sb.st_mode) && !last) {
            if (w.depth == MAX_DEPTH) {
                close(fd);
                rc = -ENAMETOOLONG;
                goto out;
            }
            w.dirs[++w.depth] = fd;
            p = rest;
            continue;
        }
        if (!S_ISLNK(sb.st_mode)) { /* a file in the middle, or O_DIRECTORY on a file */
            close(fd);
            rc = -ENOTDIR;
            goto out;
        }
        if ((rc = expand_link(&w, root, fd, rest, link, &links, &path)) != 0)
            goto out;
        p = path;
    }
out:
    walk_pop_to(&w, 0);
    free(path);
    free(link);
    return rc;
}
