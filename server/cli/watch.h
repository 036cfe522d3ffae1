/* watch: what changes under the models root, through inotify.
 *
 * One inotify instance for the daemon's life: events that arrive while a
 * rescan runs wait in it and cause another rescan (closing it after each
 * rescan lost them: a model copied in during a rescan never appeared).
 * Directories are watched before the scan that reads them, so a change is
 * either in the listing or an event afterwards. Each file a snapshot holds
 * open is also watched by its inode (through /proc/self/fd), so a write
 * through any path, a hard link outside the root included, is seen. A
 * write, truncation or attribute change of a file is reported to the caller
 * (which cuts the transfers of that file) as well as scheduling a rescan.
 *
 * Used by the daemon's main thread only. */
#ifndef TENSORD_WATCH_H
#define TENSORD_WATCH_H

#include <stdint.h>

struct reg_snapshot;
struct watch;

/* A watcher for the tree below root (a real path). NULL when inotify is
 * unavailable (logged; the daemon then rescans on SIGHUP only). */
struct watch *watch_new(const char *root);
void watch_free(struct watch *w);
int watch_fd(const struct watch *w);

/* Watches every directory below the root, max_depth levels deep (symlinked
 * directories are watched where they live, if that is inside the root).
 * Call it before each scan. */
void watch_dirs(struct watch *w, unsigned max_depth);

/* Watches the inodes of the files snap holds open, and stops watching the
 * ones it no longer holds. Call it when snap is installed. */
void watch_files(struct watch *w, const struct reg_snapshot *snap);

enum watch_news {
    WATCH_QUIET = 0,        /* nothing that concerns the root */
    WATCH_CHANGED = 1,      /* something under the root changed: rescan */
    WATCH_LOST = 3,         /* the kernel dropped events (queue overflow): rescan */
};

/* Reads every pending event, calling written(dev, ino, arg) for each file
 * that was written or truncated (possibly more than once per file). When
 * the kernel dropped events, every open file is compared with the version
 * its snapshot serves instead, and each that differs is reported. */
enum watch_news watch_read(struct watch *w, void (*written)(uint64_t dev, uint64_t ino, void *arg),
                           void *arg);

#endif
