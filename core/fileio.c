/* fileio: descriptors only, no mappings (see fileio.h for why). */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* O_NONBLOCK makes open() of a FIFO with no writer return at once instead of
 * waiting forever; fstat then tells us what we opened and anything but a
 * regular file is closed again. Regular files ignore O_NONBLOCK, but it is
 * cleared anyway so the flag never leaks into later reads. */
int fileio_open_regular(int dirfd, const char *name, struct fileio_stat *st)
{
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return -errno;
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
    if (st) {
        st->size = (uint64_t)sb.st_size;
        st->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
        st->ctime_ns = (int64_t)sb.st_ctim.tv_sec * 1000000000 + sb.st_ctim.tv_nsec;
        st->dev = (uint64_t)sb.st_dev;
        st->ino = (uint64_t)sb.st_ino;
    }
    return fd;
fail:
    close(fd);
    return rc;
}

int fileio_pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    unsigned char *p = buf;
    if (off > (uint64_t)INT64_MAX || n > (uint64_t)INT64_MAX - off)
        return -EOVERFLOW;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -ENODATA;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

void fileio_etag(const struct fileio_stat *st, char *buf)
{
    /* Longest form: 2 quotes + 3 * 16 hex digits + 2 dashes + NUL = 53. */
    snprintf(buf, FILEIO_ETAG_MAX, "\"%" PRIx64 "-%" PRIx64 "-%" PRIx64 "\"", st->ino, st->size,
             (uint64_t)st->mtime_ns);
}

int fileio_unchanged(int fd, const struct fileio_stat *st)
{
    struct stat now;
    if (fstat(fd, &now) < 0)
        return 0;
    int64_t mtime = (int64_t)now.st_mtim.tv_sec * 1000000000 + now.st_mtim.tv_nsec;
    return (uint64_t)now.st_size == st->size && mtime == st->mtime_ns;
}
