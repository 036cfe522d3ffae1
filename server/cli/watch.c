/* watch: see watch.h. */
#include "watch.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "registry.h"
#include "util.h"

/* A directory: anything that can change what a scan finds. IN_MODIFY also
 * reports truncate(2) and in-place writes, which send no IN_CLOSE_WRITE. */
#define DIR_MASK                                                                               \
    (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_MODIFY |       \
     IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)
/* An open file: its content or its size and times. */
#define FILE_MASK (IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB)

struct wentry {
    int wd;
    int dead;                  /* the kernel dropped the watch (IN_IGNORED) */
    int fd;                    /* files: the snapshot's descriptor (valid while it is installed) */
    struct fileio_stat st;     /* files: the version the snapshot serves */
    char *path;                /* directories: the absolute path */
};

/* Watches sorted by descriptor, for binary search on every event. */
struct wlist {
    struct wentry *e;
    size_t n, cap;
};

struct watch {
    int ifd;
    char *root;
    struct wlist dirs, files;
    int warned;                /* the watch limit was reported */
};

static void wlist_push(struct wlist *l, struct wentry e)
{
    l->e = xgrow(l->e, &l->cap, l->n, sizeof(*l->e), 64);
    l->e[l->n++] = e;
}

static int cmp_wd(const void *a, const void *b)
{
    int x = ((const struct wentry *)a)->wd, y = ((const struct wentry *)b)->wd;
    return (x > y) - (x < y);
}

static struct wentry *wlist_find(const struct wlist *l, int wd)
{
    struct wentry key = {.wd = wd};
    return l->n ? bsearch(&key, l->e, l->n, sizeof(*l->e), cmp_wd) : NULL;
}

static void wlist_clear(struct wlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->e[i].path);
    free(l->e);
    *l = (struct wlist){0};
}

/* Sorts next, drops repeats (the same inode reached twice), removes the
 * watches of old that next does not have, and makes next the list. */
static void wlist_replace(struct watch *w, struct wlist *old, struct wlist *next)
{
    if (next->n > 1)
        qsort(next->e, next->n, sizeof(*next->e), cmp_wd);
    size_t out = 0;
    for (size_t i = 0; i < next->n; i++) {
        if (out > 0 && next->e[out - 1].wd == next->e[i].wd) {
            free(next->e[i].path);
            continue;
        }
        next->e[out++] = next->e[i];
    }
    next->n = out;
    for (size_t i = 0; i < old->n; i++)
        if (!old->e[i].dead && !wlist_find(next, old->e[i].wd))
            inotify_rm_watch(w->ifd, old->e[i].wd);
    wlist_clear(old);
    *old = *next;
}

static int add_watch(struct watch *w, const char *path, uint32_t mask)
{
    int wd = inotify_add_watch(w->ifd, path, mask);
    if (wd < 0 && errno == ENOSPC && !w->warned) {
        w->warned = 1;
        log_msg(LOG_WARN, "inotify: out of watches (fs.inotify.max_user_watches): changes below "
                          "%s may be seen only on SIGHUP or the next scan", w->root);
    }
    return wd;
}

struct watch *watch_new(const char *root)
{
    int ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ifd < 0) {
        log_msg(LOG_WARN, "inotify unavailable (%s); reload with SIGHUP", strerror(errno));
        return NULL;
    }
    struct watch *w = xcalloc(1, sizeof(*w));
    w->ifd = ifd;
    w->root = xstrdup(root);
    return w;
}

void watch_free(struct watch *w)
{
    if (!w)
        return;
    close(w->ifd);
    wlist_clear(&w->dirs);
    wlist_clear(&w->files);
    free(w->root);
    free(w);
}

int watch_fd(const struct watch *w)
{
    return w ? w->ifd : -1;
}

/* Watches dir and the directories below it (not following symlinks). */
static void watch_tree(struct watch *w, struct wlist *l, const char *dir, unsigned depth,
                       unsigned max_depth)
{
    int wd = add_watch(w, dir, DIR_MASK);
    if (wd < 0)
        return;
    wlist_push(l, (struct wentry){.wd = wd, .path = xstrdup(dir)});
    if (depth >= max_depth)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue; /* hidden, as the scan skips them */
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= sizeof(path))
            continue;
        struct stat sb;
        if (e->d_type == DT_DIR ||
            (e->d_type == DT_UNKNOWN && lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)))
            watch_tree(w, l, path, depth + 1, max_depth);
    }
    closedir(d);
}

void watch_dirs(struct watch *w, unsigned max_depth)
{
    if (!w)
        return;
    struct wlist next = {0};
    watch_tree(w, &next, w->root, 0, max_depth);
    wlist_replace(w, &w->dirs, &next);
}

void watch_files(struct watch *w, const struct reg_snapshot *snap)
{
    if (!w || !snap)
        return;
    struct wlist next = {0};
    for (size_t i = 0; i < snap->n_models; i++) {
        const struct reg_model *m = snap->models[i];
        for (size_t k = 0; k < m->n_files; k++) {
            const struct reg_file *f = &m->files[k];
            if (f->fd < 0)
                continue;
            char proc[64];
            snprintf(proc, sizeof(proc), "/proc/self/fd/%d", f->fd);
            int wd = add_watch(w, proc, FILE_MASK);
            if (wd >= 0)
                wlist_push(&next, (struct wentry){.wd = wd, .fd = f->fd, .st = f->st});
        }
    }
    wlist_replace(w, &w->files, &next);
}

/* A directory's child `name` was written: report its identity. */
static void child_written(const struct wentry *d, const char *name,
                          void (*written)(uint64_t, uint64_t, void *), void *arg)
{
    char path[PATH_MAX];
    struct stat sb;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", d->path, name) < sizeof(path) &&
        lstat(path, &sb) == 0 && S_ISREG(sb.st_mode))
        written((uint64_t)sb.st_dev, (uint64_t)sb.st_ino, arg);
}

enum watch_news watch_read(struct watch *w, void (*written)(uint64_t dev, uint64_t ino, void *arg),
                           void *arg)
{
    enum watch_news news = WATCH_QUIET;
    if (!w)
        return news;
    char buf[65536] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t n = read(w->ifd, buf, sizeof(buf));
        if (n <= 0)
            break; /* EAGAIN: drained */
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            p += sizeof(*ev) + ev->len;
            if (ev->mask & IN_Q_OVERFLOW) {
                news = WATCH_LOST;
                continue;
            }
            struct wentry *f = wlist_find(&w->files, ev->wd);
            struct wentry *d = f ? NULL : wlist_find(&w->dirs, ev->wd);
            if (ev->mask & IN_IGNORED) {
                if (f || d)
                    (f ? f : d)->dead = 1;
                continue;
            }
            if (d && ev->len && ev->name[0] == '.')
                continue; /* hidden entries are not scanned: their churn is not news */
            news |= WATCH_CHANGED;
            /* A modification is a write. An open file's own watch also
             * reports chmod, links and unlinks (the old file of a rename-over
             * update) as attribute changes: those are writes only when the
             * version changed (a truncation, mtime set back). */
            if (f && ((ev->mask & IN_MODIFY) ||
                      ((ev->mask & FILE_MASK) && !fileio_unchanged(f->fd, &f->st))))
                written(f->st.dev, f->st.ino, arg);
            else if (d && ev->len && (ev->mask & IN_MODIFY))
                child_written(d, ev->name, written, arg);
        }
    }
    if (news == WATCH_LOST) /* writes may have gone unreported: look at every open file */
        for (size_t i = 0; i < w->files.n; i++)
            if (!fileio_unchanged(w->files.e[i].fd, &w->files.e[i].st))
                written(w->files.e[i].st.dev, w->files.e[i].st.ino, arg);
    return news;
}
