/* body: a response body as a virtual byte string, so Range and multipart
 * work the same for every representation.
 *
 * A body is an in-memory prefix (an npy or safetensors header, or a whole
 * JSON document) followed by data that lives in a file: either one
 * contiguous span, which can go out with sendfile, or a slice plan whose
 * runs are gathered with pread. Nothing is materialised: any byte range of
 * the body is produced on demand. */
#ifndef TENSORD_BODY_H
#define TENSORD_BODY_H

#include <stddef.h>
#include <stdint.h>

#include "slice.h"

struct body {
    const char *prefix;             /* borrowed; may be NULL when prefix_len == 0 */
    size_t prefix_len;
    int fd;                         /* file holding the data; -1 when data_len == 0 */
    uint64_t data_off;              /* file offset of the data (the tensor's first byte) */
    uint64_t data_len;              /* data bytes after the prefix */
    const struct slice_plan *plan;  /* borrowed; NULL when the data is contiguous */
};

static inline uint64_t body_size(const struct body *b)
{
    return b->prefix_len + b->data_len;
}

/* Copies body bytes [off, off + len) into buf. The range must lie inside the
 * body. Returns 0 or a negative errno (-ENODATA when the file shrank). */
int body_read(const struct body *b, uint64_t off, void *buf, size_t len);

/* Returns 1 and the file offset of body byte `off` when [off, off + len) is
 * one contiguous span of the file (so it can be sent with sendfile). */
int body_file_span(const struct body *b, uint64_t off, uint64_t len, uint64_t *file_off);

#endif
