/* Unit tests for server/cli/watch.c over a real inotify instance: a change in
 * a watched directory (a new model, a file removed) asks for a rescan; a
 * write to a file a snapshot holds open is reported with its device and
 * inode, whatever path it was written through (a hard link outside the
 * root included); nothing happened, nothing is reported. */
#include <poll.h>

#include "loopback.h"
#include "watch.h"

static char root[64];

struct seen {
    uint64_t dev, ino;
    int n;
};

static void written(uint64_t dev, uint64_t ino, void *arg)
{
    struct seen *s = arg;
    s->dev = dev;
    s->ino = ino;
    s->n++;
}

/* Waits up to a second for events, then reads them. */
static enum watch_news news(struct watch *w, struct seen *s)
{
    struct pollfd p = {.fd = watch_fd(w), .events = POLLIN};
    poll(&p, 1, 1000);
    return watch_read(w, written, s);
}

TEST(directories_and_files)
{
    char *real = realpath(root, NULL);
    struct watch *w = watch_new(real);
    CHECK(w != NULL && watch_fd(w) >= 0);
    watch_dirs(w, 4);
    struct seen s = {0};
    struct pollfd p = {.fd = watch_fd(w), .events = POLLIN};
    CHECK(poll(&p, 1, 100) == 0); /* quiet */
    CHECK(watch_read(w, written, &s) == WATCH_QUIET && s.n == 0);
    lb_write(root, "new/model.safetensors", "\x02\0\0\0\0\0\0\0{}", 10);
    CHECK(news(w, &s) == WATCH_CHANGED);
    watch_dirs(w, 4); /* the new directory too */
    struct st_error e;
    struct reg_snapshot *snap = reg_snapshot_scan(root, 1, NULL, &e);
    watch_files(w, snap);
    while (news(w, &s) != WATCH_QUIET) /* what the scan itself stirred */
        ;
    s.n = 0;
    char *path = xasprintf("%s/m/model.safetensors", root);
    struct stat st;
    CHECK(stat(path, &st) == 0);
    char *outside = xasprintf("%s.link", root); /* a hard link outside the root */
    CHECK(link(path, outside) == 0);
    int fd = open(outside, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, "\0", 1, 8 + 53) == 1);
    close(fd);
    CHECK(news(w, &s) == WATCH_CHANGED);
    CHECK(s.n >= 1 && s.dev == (uint64_t)st.st_dev && s.ino == (uint64_t)st.st_ino);
    unlink(outside);
    free(outside);
    free(path);
    reg_snapshot_unref(snap);
    watch_free(w);
    free(real);
}

int main(void)
{
    lb_new_root(root, sizeof(root));
    lb_write_st(root, "m/model.safetensors",
                "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", "\1\2\3\4", 4);
    RUN(directories_and_files);
    lb_remove_root(root);
    return TEST_SUMMARY();
}
