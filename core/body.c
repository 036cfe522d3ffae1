#include "body.h"

#include <string.h>

#include "fileio.h"

int body_read(const struct body *b, uint64_t off, void *buf, size_t len)
{
    unsigned char *out = buf;
    if (off < b->prefix_len) {
        size_t n = (size_t)(b->prefix_len - off);
        if (n > len)
            n = len;
        memcpy(out, b->prefix + off, n);
        out += n;
        off += n;
        len -= n;
    }
    if (len == 0)
        return 0;
    uint64_t doff = off - b->prefix_len;
    if (b->plan)
        return slice_read(b->plan, b->fd, b->data_off, doff, out, len);
    return fileio_pread_full(b->fd, out, len, b->data_off + doff);
}

int body_file_span(const struct body *b, uint64_t off, uint64_t len, uint64_t *file_off)
{
    if (b->plan || off < b->prefix_len || len == 0)
        return 0;
    *file_off = b->data_off + (off - b->prefix_len);
    return 1;
}
