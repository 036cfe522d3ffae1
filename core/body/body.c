#include "body.h"

#include <string.h>

#include "fileio.h"

int body_read(const struct body *b, uint64_t off, void *buf, size_t len)
{
    unsigned char *out = buf;
    if (b->src)
        return b->src->read(b->src_ctx, off, buf, len);
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

const struct fileio_stat *body_piece_stat(const struct body *b, uint64_t off)
{
    int fd;
    uint64_t file_off;
    const struct fileio_stat *st = NULL;
    return b->src && b->src->file_span &&
                   b->src->file_span(b->src_ctx, off, 1, &fd, &file_off, &st)
               ? st
               : NULL;
}

int body_file_span(const struct body *b, uint64_t off, uint64_t len, int *fd, uint64_t *file_off)
{
    if (b->src) {
        const struct fileio_stat *st;
        return b->src->file_span && len &&
               b->src->file_span(b->src_ctx, off, len, fd, file_off, &st);
    }
    if (off < b->prefix_len || len == 0 || b->plan)
        return 0;
    *fd = b->fd;
    *file_off = b->data_off + (off - b->prefix_len);
    return 1;
}

struct plan_walk {
    const struct body *b;
    body_span_fn fn;
    void *arg;
};

static int plan_span(void *arg, uint64_t src, uint64_t n, uint64_t out)
{
    const struct plan_walk *w = arg;
    return w->fn(w->arg, w->b->fd, w->b->data_off + src, n, w->b->prefix_len + out);
}

int body_each_span(const struct body *b, uint64_t off, uint64_t len, body_span_fn fn, void *arg)
{
    if (b->src)
        return b->src->each_span ? b->src->each_span(b->src_ctx, off, len, fn, arg) : 0;
    uint64_t end = off + len;
    if (end <= b->prefix_len || b->data_len == 0)
        return 0;
    uint64_t doff = off > b->prefix_len ? off - b->prefix_len : 0;
    uint64_t dlen = end - b->prefix_len - doff;
    if (b->plan) {
        struct plan_walk w = {b, fn, arg};
        return slice_each_span(b->plan, doff, dlen, plan_span, &w);
    }
    return fn(arg, b->fd, b->data_off + doff, dlen, b->prefix_len + doff);
}
