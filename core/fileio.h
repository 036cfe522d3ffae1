/* fileio: file access by descriptor. Bytes are read with pread and sent with
 * sendfile, never through a mapping, so a file truncated or replaced under
 * the daemon produces an error, not a SIGBUS. */
#ifndef TENSORD_FILEIO_H
#define TENSORD_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct fileio_stat {
    uint64_t size;
    int64_t mtime_ns;
    int64_t ctime_ns;  /* status change: with the rest, the identity content hashes are kept under */
    uint64_t dev, ino;
};

/* Opens dirfd/name read-only for serving (O_CLOEXEC, O_NOCTTY, never blocks on
 * a FIFO) and fills *st. Refuses anything but a regular file with -EINVAL.
 * Returns the fd or a negative errno. */
int fileio_open_regular(int dirfd, const char *name, struct fileio_stat *st);

/* Reads exactly n bytes at off. Returns 0, a negative errno, or -ENODATA when
 * the file ended first (it was truncated). Retries EINTR and short reads. */
int fileio_pread_full(int fd, void *buf, size_t n, uint64_t off);

/* Returns 1 when fd still has the size and mtime recorded in *st. A write(2)
 * updates mtime before it copies data, so bytes read before a call that
 * returns 1 predate any in-place change. */
int fileio_unchanged(int fd, const struct fileio_stat *st);

/* Writes the strong ETag of a file ("\"<ino>-<size>-<mtime>\"", hex, with
 * the quotes) into buf; buf must hold FILEIO_ETAG_MAX bytes. */
#define FILEIO_ETAG_MAX 64
void fileio_etag(const struct fileio_stat *st, char *buf);

#endif
