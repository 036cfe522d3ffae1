/* fileio: descriptors only, no mappings (see fileio.h for why). */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "st_error.h"
#include "util.h"

void fileio_stat_from(const struct stat *sb, struct fileio_stat *st)
{
    st->size = (uint64_t)sb->st_size;
    st->mtime_ns = (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
    st->ctime_ns = (int64_t)sb->st_ctim.tv_sec * 1000000000 + sb->st_ctim.tv_nsec;
    st->dev = (uint64_t)sb->st_dev;
    st->ino = (uint64_t)sb->st_ino;
    st->nlink = (uint64_t)sb->st_nlink;
}

int fileio_same_version(const struct fileio_stat *a, const struct fileio_stat *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

/* Regular files ignore O_NONBLOCK, but it is cleared anyway so the flag
 * never leaks into later reads. */
int fileio_regular(int fd, struct fileio_stat *st)
{
    struct stat sb;
    int rc;
    if (fstat(fd, &sb) != 0) {
        rc = -errno;
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = -EINVAL;
        goto fail;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        rc = -errno;
        goto fail;
    }
    if (st)
        fileio_stat_from(&sb, st);
    return fd;
fail:
    close(fd);
    return rc;
}

/* All n bytes read (or written) at off, through EINTR and short counts. */
static int full_io(int fd, void *buf, size_t n, uint64_t off, int write)
{
    unsigned char *p = buf;
    if (off > (uint64_t)INT64_MAX || n > (uint64_t)INT64_MAX - off)
        return -EOVERFLOW;
    while (n > 0) {
        ssize_t r = write ? pwrite(fd, p, n, (off_t)off) : pread(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return write ? -ENOSPC : -ENODATA;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int fileio_pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    return full_io(fd, buf, n, off, 0);
}

int fileio_pwrite_full(int fd, const void *buf, size_t n, uint64_t off)
{
    return full_io(fd, (void *)buf, n, off, 1);
}

void fileio_etag(const struct fileio_stat *st, char *buf)
{
    /* Longest form: W/ + 2 quotes + 2 * 16 hex digits + a dash + NUL = 37. */
    snprintf(buf, FILEIO_ETAG_MAX, "W/\"%" PRIx64 "-%" PRIx64 "\"", st->size,
             (uint64_t)st->mtime_ns);
}

int fileio_unchanged(int fd, const struct fileio_stat *st)
{
    struct stat sb;
    struct fileio_stat now;
    if (fstat(fd, &sb) < 0)
        return 0;
    fileio_stat_from(&sb, &now);
    return now.size == st->size && now.mtime_ns == st->mtime_ns &&
           (now.ctime_ns == st->ctime_ns || now.nlink != st->nlink);
}

int fileio_read_small(const char *path, size_t max, char **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    char *buf = malloc(max + 2);
    size_t n = 0;
    int rc = buf ? 0 : -ENOMEM;
    while (rc == 0 && n <= max) {
        ssize_t r = read(fd, buf + n, max + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = -errno;
        else if (r == 0)
            break;
        else
            n += (size_t)r;
    }
    close(fd);
    if (rc == 0 && n > max)
        rc = -EFBIG;
    if (rc != 0) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

int fileio_read_secret(const char *option, const char *path, char **out, size_t *len,
                       struct st_error *err)
{
    char *buf;
    size_t n;
    int rc = fileio_read_small(path, 4096, &buf, &n);
    if (rc < 0)
        return st_error_errno(err, -rc, "%s %s", option, path);
    *len = strcspn(buf, "\r\n");
    if (*len == 0)
        rc = st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "%s %s: the first line is empty",
                           option, path);
    else
        *out = xstrndup(buf, *len);
    explicit_bzero(buf, n);
    free(buf);
    return rc;
}

int fileio_mkdirs(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, mode) != 0 && errno != EEXIST)
            return -errno;
        *p = c;
        if (!c)
            return 0;
    }
}
