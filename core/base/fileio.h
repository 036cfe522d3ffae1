/* fileio: file access by descriptor. Bytes are read with pread and sent with
 * sendfile, never through a mapping, so a file truncated or replaced under
 * the daemon produces an error, not a SIGBUS. */
#ifndef TENSORD_FILEIO_H
#define TENSORD_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A version of a file: which file (dev, ino) and which content (size, and
 * the times a write changes; ctime cannot be set back by a writer). */
struct fileio_stat {
    uint64_t size;
    int64_t mtime_ns;
    int64_t ctime_ns;          /* status change: with the rest, the identity content hashes
                                * are kept under */
    uint64_t dev, ino;
    uint64_t nlink;            /* links to it: an unlink or rename also changes ctime */
};

struct stat;
struct st_error;
void fileio_stat_from(const struct stat *sb, struct fileio_stat *st);

/* Whether a and b are the same version of the same file. */
int fileio_same_version(const struct fileio_stat *a, const struct fileio_stat *b);

/* Makes fd, opened read-only with O_NONBLOCK (so opening a FIFO did not
 * block), a descriptor to serve from: refuses anything but a regular file
 * with -EINVAL, clears O_NONBLOCK and fills *st. Returns fd, or a negative
 * errno after closing fd. */
int fileio_regular(int fd, struct fileio_stat *st);

/* Reads exactly n bytes at off. Returns 0, a negative errno, or -ENODATA when
 * the file ended first (it was truncated). Retries EINTR and short reads. */
int fileio_pread_full(int fd, void *buf, size_t n, uint64_t off);
/* Writes exactly n bytes at off. Returns 0 or a negative errno (-ENOSPC
 * for a write that stopped short). Retries EINTR and short writes. */
int fileio_pwrite_full(int fd, const void *buf, size_t n, uint64_t off);

/* Returns 1 when fd still holds the version recorded in *st: the same size
 * and mtime, and the same ctime unless its link count changed (the file was
 * unlinked or renamed over, which leaves its content as it was). A write(2)
 * updates both times before it copies data, so bytes read before a call that
 * returns 1 predate any in-place change, even one whose writer set mtime
 * back afterwards (ctime cannot be set back). */
int fileio_unchanged(int fd, const struct fileio_stat *st);

/* Writes the ETag a file has before its content hash is known into buf
 * (FILEIO_ETAG_MAX bytes): W/"<size>-<mtime ns>", hex. Size and mtime tell
 * versions apart across replicas (no inode or device number, which differ
 * between copies), but a rewrite can keep both, so the tag is weak: it
 * answers If-None-Match, and never satisfies If-Range or If-Match. */
#define FILEIO_ETAG_MAX 64
void fileio_etag(const struct fileio_stat *st, char *buf);

/* Reads the whole of a small file (a token file, a certificate, a config)
 * into a new NUL-terminated buffer the caller frees: *out and *len. Returns
 * 0, -EFBIG when it holds more than max bytes, or another negative errno
 * (open or read failed, -ENOMEM). Never more than max + 1 bytes are read. */
int fileio_read_small(const char *path, size_t max, char **out, size_t *len);

/* The first line of the small file at path (a token, a key; up to a NUL
 * byte, if one comes first) into *out, a new string the caller frees (and
 * clears), and *len; the file's text is cleared before it is freed. Returns
 * 0, or a negative errno with err saying "OPTION PATH: why": ST_ERR_IO (or
 * ST_ERR_NO_MEMORY) when it cannot be read, ST_ERR_INVALID_ARGUMENT when
 * its first line is empty. */
int fileio_read_secret(const char *option, const char *path, char **out, size_t *len,
                       struct st_error *err);

/* mkdir -p of path, mode for what it creates. Returns 0 or -errno. */
int fileio_mkdirs(const char *path, mode_t mode);

#endif
