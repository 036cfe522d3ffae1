#include "body.h"

#include <errno.h>
#include <string.h>

#include "fileio.h"

/* The piece holding data byte doff (< data_len): pieces are adjacent and in
 * order, so a binary search over their starts. */
static size_t piece_at(const struct body *b, uint64_t doff)
{
    size_t lo = 0, hi = b->n_pieces;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (b->pieces[mid].at <= doff)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Reads data bytes [doff, doff + len) from the pieces. A file is checked
 * against its validated state once its last piece in this call has been read
 * (consecutive pieces usually share one file), so the bytes copied predate
 * any change to it. */
static int pieces_read(const struct body *b, uint64_t doff, unsigned char *out, size_t len)
{
    size_t i = piece_at(b, doff);
    while (len) {
        const struct body_piece *p = &b->pieces[i];
        uint64_t in = doff - p->at;
        size_t n = p->len - in < len ? (size_t)(p->len - in) : len;
        int rc = p->runs ? slice_runs_read(p->runs, p->fd, p->file_off, in, out, n)
                         : fileio_pread_full(p->fd, out, n, p->file_off + in);
        if (rc < 0)
            return rc;
        out += n;
        doff += n;
        len -= n;
        i++;
        int last_of_file = len == 0 || i == b->n_pieces || b->pieces[i].fd != p->fd;
        if (p->st && last_of_file && !fileio_unchanged(p->fd, p->st))
            return -ENODATA;
    }
    return 0;
}

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
    if (b->n_pieces)
        return pieces_read(b, doff, out, len);
    if (b->plan)
        return slice_read(b->plan, b->fd, b->data_off, doff, out, len);
    return fileio_pread_full(b->fd, out, len, b->data_off + doff);
}

const struct fileio_stat *body_piece_stat(const struct body *b, uint64_t off)
{
    if (b->src) {
        int fd;
        uint64_t file_off;
        const struct fileio_stat *st = NULL;
        return b->src->file_span && b->src->file_span(b->src_ctx, off, 1, &fd, &file_off, &st)
                   ? st : NULL;
    }
    if (!b->n_pieces || off < b->prefix_len || off - b->prefix_len >= b->data_len)
        return NULL;
    return b->pieces[piece_at(b, off - b->prefix_len)].st;
}

int body_file_span(const struct body *b, uint64_t off, uint64_t len, int *fd, uint64_t *file_off)
{
    if (b->src) {
        const struct fileio_stat *st;
        return b->src->file_span && len &&
               b->src->file_span(b->src_ctx, off, len, fd, file_off, &st);
    }
    if (off < b->prefix_len || len == 0)
        return 0;
    uint64_t doff = off - b->prefix_len;
    if (b->n_pieces) {
        const struct body_piece *p = &b->pieces[piece_at(b, doff)];
        if (p->runs || doff - p->at + len > p->len)
            return 0;
        *fd = p->fd;
        *file_off = p->file_off + (doff - p->at);
        return 1;
    }
    if (b->plan)
        return 0;
    *fd = b->fd;
    *file_off = b->data_off + doff;
    return 1;
}
