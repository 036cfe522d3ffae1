/* body: a response body as a virtual byte string, so Range and multipart
 * work the same for every representation.
 *
 * A body is an in-memory prefix (an npy or safetensors header, or a whole
 * JSON document) followed by data that lives in a file: either one
 * contiguous span, which can go out with sendfile, or a slice plan whose
 * runs are gathered with pread; or a source (struct body_source) that
 * produces all its bytes.
 * Nothing is materialised: any byte range of the body is produced on
 * demand. */
#ifndef TENSORD_BODY_H
#define TENSORD_BODY_H

#include <stddef.h>
#include <stdint.h>

#include "fileio.h"
#include "slice.h"

/* Called for a span of a body's bytes that a file holds: body bytes
 * [body_off, body_off + n) are bytes [file_off, file_off + n) of fd.
 * Returns 0 to go on, anything else to stop (the walk returns it). */
typedef int (*body_span_fn)(void *arg, int fd, uint64_t file_off, uint64_t n, uint64_t body_off);

/* The producer of a body made on demand (a shared document's segments, a
 * streamed fetch answer), whatever holds its bytes. */
struct body_source {
    /* Copies body bytes [off, off + len) into buf: 0 or a negative errno
     * (-ENODATA when a file no longer is the version validated). */
    int (*read)(void *ctx, uint64_t off, void *buf, size_t len);
    /* Optional: 1 with the file, the offset in it and its validated version
     * (may be NULL) when [off, off + len) is one contiguous span of one file
     * (so it can go out with sendfile), else 0. */
    int (*file_span)(void *ctx, uint64_t off, uint64_t len, int *fd, uint64_t *file_off,
                     const struct fileio_stat **st);
    /* Optional: the pieces of memory, valid as long as ctx, that hold
     * [off, off + len) in order (at most 3); returns how many, 0 when the
     * bytes are not in memory. */
    unsigned (*mem)(void *ctx, uint64_t off, uint64_t len, const void *p[3], size_t n[3]);
    /* Optional: calls fn for each span of [off, off + len) that a file
     * holds, in body order (bytes made in memory are skipped), as
     * body_each_span; NULL for a source whose bytes are all in memory. */
    int (*each_span)(void *ctx, uint64_t off, uint64_t len, body_span_fn fn, void *arg);
};

struct body {
    const char *prefix;             /* borrowed; may be NULL when prefix_len == 0 */
    size_t prefix_len;
    int fd;                         /* file holding the data; -1 when data_len == 0 */
    uint64_t data_off;              /* file offset of the data (the tensor's first byte) */
    uint64_t data_len;              /* data bytes after the prefix */
    const struct slice_plan *plan;  /* borrowed; NULL when the data is contiguous */
    const struct body_source *src;  /* when set, every byte comes from src (data_len bytes; no
                                     * prefix, fd or plan) */
    void *src_ctx;                  /* borrowed: its argument */
};

static inline uint64_t body_size(const struct body *b)
{
    return b->prefix_len + b->data_len;
}

/* Copies body bytes [off, off + len) into buf. The range must lie inside the
 * body. Returns 0 or a negative errno (-ENODATA when a file shrank, or, for
 * a source, no longer matches its validated size and mtime). */
int body_read(const struct body *b, uint64_t off, void *buf, size_t len);

/* Returns 1, the file and the file offset of body byte `off` when
 * [off, off + len) is one contiguous span of one file (so it can be sent
 * with sendfile). */
int body_file_span(const struct body *b, uint64_t off, uint64_t len, int *fd, uint64_t *file_off);

/* Calls fn for each span of body bytes [off, off + len) that a file holds,
 * in body order: the data (a contiguous span, a slice plan's runs, a
 * source's spans); the prefix, in memory, is skipped. Returns the first
 * non-zero fn returned, else 0. Which bytes of which file an answer reads:
 * what a reader of bytes still arriving must wait for (a mirror's). */
int body_each_span(const struct body *b, uint64_t off, uint64_t len, body_span_fn fn, void *arg);

/* The validated version of the file that holds body byte `off` of a
 * source's body, or NULL when not recorded. */
const struct fileio_stat *body_piece_stat(const struct body *b, uint64_t off);

#endif
