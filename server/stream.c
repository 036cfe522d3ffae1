/* stream: see stream.h. */
#include "stream.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http.h"
#include "metrics.h"
#include "mirror.h"
#include "util.h"

/* Responses own a duplicate of the model file's descriptor, so a reload can
 * free the model while a download is still going. */
static int fcntl_dupfd(int fd)
{
    return fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

/* A piece of the answer: either literal bytes (multipart framing) or a span
 * of the body. */
struct piece {
    const char *mem;   /* literal bytes, or NULL for a body span */
    uint64_t body_off; /* body offset of a span */
    uint64_t len;
    uint64_t out_off;  /* where the piece starts in the answer */
};

struct stream {
    struct body body;       /* fd is a dup owned by the stream */
    struct fileio_stat file_st; /* what the file looked like when it was validated */
    int verify;             /* check file_st after every block read from the file */
    char *prefix_buf;
    struct slice_plan *plan_buf;
    void *pieces_buf;
    void *src_buf;          /* body.src_ctx, owned (freed with body.src->free) */
    const struct reg_model *pin; /* a reference keeping body.prefix (and the pieces' fds) alive,
                                  * or NULL */
    size_t n_pieces;
    struct piece *pieces;
    char *framing;          /* storage of the multipart framing strings */
    size_t cursor;          /* piece of the last read: MHD reads sequentially */
    /* A mirrored file whose bytes may still be arriving (body offsets are
     * its offsets): the stream's own reference, and the waiter that
     * resumes the connection, suspended while the mirror fetches. */
    struct mirror *mirror;
    struct mirror_file *mf;
    struct MHD_Connection *conn;
    struct mirror_waiter waiter;
};

static void stream_free(void *cls)
{
    struct stream *s = cls;
    if (s->mf) {
        mirror_unwait(s->mirror, &s->waiter); /* never resumed once freed */
        mirror_unref(s->mirror, s->mf);
    }
    if (s->body.fd >= 0)
        close(s->body.fd);
    free(s->prefix_buf);
    free(s->plan_buf);
    free(s->pieces_buf);
    if (s->src_buf)
        s->body.src->free(s->src_buf);
    reg_model_unref(s->pin);
    free(s->pieces);
    free(s->framing);
    free(s);
}

static void mirror_resume(void *arg)
{
    struct stream *s = arg;
    MHD_resume_connection(s->conn);
}

/* Nothing of [off, off + len) of the mirrored file is there yet: the
 * connection sleeps until the mirror brings its first bytes (a reader that
 * returns 0 is called again once resumed). */
static ssize_t mirror_sleep(struct stream *s, uint64_t off, uint64_t len)
{
    mirror_want(s->mirror, s->mf, off, len);
    MHD_suspend_connection(s->conn);
    if (mirror_wait(s->mirror, s->mf, off, &s->waiter))
        MHD_resume_connection(s->conn); /* they came meanwhile */
    return 0;
}

/* How many of the n bytes at body offset off of a mirrored file can be
 * read now: n when the body is no mirror's, 0 when none is there, -1
 * when the mirror's download failed. */
static int64_t mirror_avail(struct stream *s, uint64_t off, uint64_t n)
{
    if (!s->mf)
        return (int64_t)n;
    int64_t got = mirror_readable(s->mirror, s->mf, off, n, NULL);
    return got < 0 ? -1 : got;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct stream *s = cls;
    size_t i = s->cursor;
    if (i >= s->n_pieces || pos < s->pieces[i].out_off)
        i = 0;
    while (i < s->n_pieces && pos >= s->pieces[i].out_off + s->pieces[i].len)
        i++;
    if (i == s->n_pieces)
        return MHD_CONTENT_READER_END_OF_STREAM;
    s->cursor = i;
    size_t done = 0;
    while (done < max && i < s->n_pieces) {
        const struct piece *p = &s->pieces[i];
        uint64_t in = pos + done - p->out_off;
        uint64_t n = p->len - in;
        if (n > max - done)
            n = max - done;
        int64_t avail = p->mem ? (int64_t)n : mirror_avail(s, p->body_off + in, n);
        if (avail < 0) /* the upstream failed it: cut, as for a file that changed */
            return done ? (ssize_t)done : MHD_CONTENT_READER_END_WITH_ERROR;
        if (avail == 0)
            return done ? (ssize_t)done : mirror_sleep(s, p->body_off + in, p->len - in);
        n = (uint64_t)avail;
        if (p->mem) {
            memcpy(buf + done, p->mem + in, n);
        } else if (body_read(&s->body, p->body_off + in, buf + done, n) < 0 ||
                   (s->verify && !fileio_unchanged(s->body.fd, &s->file_st))) {
            /* The file shrank or changed in place since it was validated:
             * close the connection short of Content-Length, never send
             * padding or bytes of another version. */
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        done += n;
        if (in + n == p->len)
            i++;
    }
    return (ssize_t)done;
}

/* Moves the representation's owned buffers and a dup of its fd into a new
 * stream (with its own reference to a mirrored file). */
static struct stream *stream_new(struct request *rq, struct representation *rep)
{
    struct stream *s = xcalloc(1, sizeof(*s));
    s->body = rep->body;
    s->prefix_buf = rep->prefix_buf;
    s->plan_buf = rep->plan_buf;
    s->pieces_buf = rep->pieces_buf;
    s->src_buf = rep->src_buf;
    rep->prefix_buf = NULL;
    rep->plan_buf = NULL;
    rep->pieces_buf = NULL;
    rep->src_buf = NULL;
    s->pin = reg_model_ref(rep->pin);
    s->body.fd = rep->body.fd >= 0 ? fcntl_dupfd(rep->body.fd) : -1;
    if (rep->mirror) {
        s->mirror = rq->srv->mirror;
        s->mf = rep->mirror;
        mirror_ref(s->mirror, s->mf);
        s->conn = rq->mhd;
        s->waiter.cb = mirror_resume;
        s->waiter.arg = s;
    }
    if (rep->file_st && s->body.fd >= 0) {
        s->file_st = *rep->file_st;
        s->verify = 1;
    }
    return s;
}

static void unpin(void *cls)
{
    reg_model_unref(cls);
}

const char *stream_pinned_span(const struct representation *rep, uint64_t off, uint64_t len)
{
    if (!rep->pin)
        return NULL;
    if (rep->mem && off + len <= rep->mem_len)
        return rep->mem + off;
    if (!rep->prefix_buf && off + len <= rep->body.prefix_len)
        return rep->body.prefix + off;
    return NULL;
}

/* Answers body bytes [off, off + len) that a source holds in memory (a
 * shared document) straight from there, the source handed to the answer,
 * which frees it once sent: a connection that does not read holds it, not
 * a copy. NULL when they are not in memory. */
static struct MHD_Response *source_memory_response(struct representation *rep, uint64_t off,
                                                   uint64_t len)
{
    const struct body *b = &rep->body;
    const void *p[3];
    size_t n[3];
    unsigned k = b->src->mem && rep->src_buf && len && len <= STREAM_DOC_BLOCK
                     ? b->src->mem(b->src_ctx, off, len, p, n)
                     : 0;
    if (!k)
        return NULL;
    struct MHD_IoVec iov[3];
    for (unsigned i = 0; i < k; i++)
        iov[i] = (struct MHD_IoVec){.iov_base = p[i], .iov_len = n[i]};
    struct MHD_Response *resp = MHD_create_response_from_iovec(iov, k, b->src->free, rep->src_buf);
    if (resp)
        rep->src_buf = NULL; /* the response frees it; http.c counts the bytes sent */
    return resp;
}

/* Answers body bytes [off, off + len) without reading or copying them when
 * they are already in memory: pinned memory (the response holds a reference
 * to the model until it is sent), a source's memory, or the
 * representation's own buffer when it is the whole body (handed over).
 * Returns NULL otherwise. */
static struct MHD_Response *memory_response(struct representation *rep, uint64_t off,
                                            uint64_t len)
{
    const struct body *b = &rep->body;
    if (b->src)
        return source_memory_response(rep, off, len);
    const char *mem = stream_pinned_span(rep, off, len);
    if (mem) {
        struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback_cls(
            (size_t)len, (void *)mem, unpin, reg_model_ref(rep->pin));
        if (!resp)
            reg_model_unref(rep->pin); /* out of memory: the reference was not taken over */
        return resp;
    }
    if (rep->prefix_buf && b->prefix == rep->prefix_buf && off == 0 && len == b->prefix_len &&
        b->data_len == 0) {
        char *buf = rep->prefix_buf;
        rep->prefix_buf = NULL;
        return MHD_create_response_from_buffer((size_t)len, buf, MHD_RESPMEM_MUST_FREE);
    }
    return NULL;
}

/* The reader of a HEAD answer's body, which libmicrohttpd never calls. */
static ssize_t never_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls, (void)pos, (void)buf, (void)max;
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

int stream_file_changed(const struct representation *rep)
{
    return rep->file_st && rep->body.fd >= 0 && !fileio_unchanged(rep->body.fd, rep->file_st);
}

struct MHD_Response *stream_span(struct request *rq, struct representation *rep, uint64_t off,
                                 uint64_t len, unsigned *err_status, int *changed)
{
    uint64_t file_off;
    /* What the body counts under (http.c adds the bytes sent when it ends). */
    rq->body_method = BODY_COPY;
    if (rep->no_read)
        return MHD_create_response_from_callback(len, STREAM_BLOCK, never_read, NULL, NULL);
    struct MHD_Response *resp = rep->mirror ? NULL : memory_response(rep, off, len);
    if (resp)
        return resp;
    if (len <= STREAM_SMALL_BODY_MAX && !rep->mirror) {
        char *buf = xmalloc(len ? len : 1);
        int rc = len ? body_read(&rep->body, off, buf, len) : 0;
        /* Checked after the read: a write(2) bumps mtime before it copies
         * data, so an unchanged stat means the bytes read are the old ones. */
        if (rc == -ENODATA || stream_file_changed(rep)) {
            free(buf);
            *err_status = MHD_HTTP_SERVICE_UNAVAILABLE;
            *changed = 1;
            return NULL;
        }
        if (rc < 0) {
            free(buf);
            *err_status = MHD_HTTP_INTERNAL_SERVER_ERROR;
            return NULL;
        }
        return MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    }
    int span_fd;
    if (rep->mirror) { /* bytes as they arrive: a reader that waits for them */
        mirror_want(rq->srv->mirror, rep->mirror, off, len);
        struct stream *s = stream_new(rq, rep);
        s->n_pieces = 1;
        s->pieces = xcalloc(1, sizeof(struct piece));
        s->pieces[0] = (struct piece){.body_off = off, .len = len, .out_off = 0};
        return MHD_create_response_from_callback(len, STREAM_BLOCK, stream_read, s, stream_free);
    }
    if (rq->srv->cfg->sendfile && body_file_span(&rep->body, off, len, &span_fd, &file_off)) {
        int fd = fcntl_dupfd(span_fd);
        if (fd < 0) {
            *err_status = MHD_HTTP_SERVICE_UNAVAILABLE;
            return NULL;
        }
        rq->body_method = BODY_SENDFILE;
        /* sendfile sends what the file holds as it goes: a write to the file
         * must cut this connection (the watcher does, through conns). */
        http_sending(rq, rep->body.n_pieces || rep->body.src ? body_piece_stat(&rep->body, off)
                                                            : rep->file_st);
        return MHD_create_response_from_fd_at_offset64(len, fd, file_off);
    }
    /* A document in memory goes in smaller blocks: each is a copy, and
     * other connections get their turn sooner (STREAM_DOC_BLOCK). */
    size_t block = rep->body.src && rep->body.src->mem ? STREAM_DOC_BLOCK : STREAM_BLOCK;
    struct stream *s = stream_new(rq, rep);
    http_sending(rq, rep->file_st); /* a write that keeps size and mtime is cut too */
    s->n_pieces = 1;
    s->pieces = xcalloc(1, sizeof(struct piece));
    s->pieces[0] = (struct piece){.body_off = off, .len = len, .out_off = 0};
    return MHD_create_response_from_callback(len, block, stream_read, s, stream_free);
}

static atomic_uint_fast64_t boundary_counter;

struct MHD_Response *stream_multipart(struct request *rq, struct representation *rep,
                                      const struct byte_range *ranges, size_t n,
                                      char *content_type, size_t ct_len, uint64_t *total_out)
{
    char boundary[40];
    snprintf(boundary, sizeof(boundary), "tensord-%016" PRIx64 "%08" PRIx64,
             hash_fnv1a(&rq->start_ns, sizeof(rq->start_ns), HASH_FNV_SEED),
             (uint64_t)atomic_fetch_add(&boundary_counter, 1));
    snprintf(content_type, ct_len, "multipart/byteranges; boundary=%s", boundary);
    uint64_t size = body_size(&rep->body);

    /* Framing strings: one before each part and the closing delimiter. */
    size_t cap = (n + 1) * (sizeof(boundary) + strlen(rep->content_type) + 120);
    char *framing = xmalloc(cap);
    size_t used = 0;
    struct piece *pieces = xcalloc(2 * n + 1, sizeof(*pieces));
    uint64_t out = 0;
    size_t np = 0;
    for (size_t i = 0; i <= n; i++) {
        char *f = framing + used;
        int flen;
        if (i < n)
            flen = snprintf(f, cap - used,
                            "%s--%s\r\nContent-Type: %s\r\nContent-Range: bytes %" PRIu64
                            "-%" PRIu64 "/%" PRIu64 "\r\n\r\n",
                            i ? "\r\n" : "", boundary, rep->content_type, ranges[i].start,
                            ranges[i].start + ranges[i].len - 1, size);
        else
            flen = snprintf(f, cap - used, "\r\n--%s--\r\n", boundary);
        used += (size_t)flen;
        pieces[np++] = (struct piece){.mem = f, .len = (uint64_t)flen, .out_off = out};
        out += (uint64_t)flen;
        if (i < n) {
            pieces[np++] = (struct piece){
                .body_off = ranges[i].start, .len = ranges[i].len, .out_off = out};
            out += ranges[i].len;
        }
    }
    *total_out = out;
    rq->body_method = BODY_COPY;
    for (size_t i = 0; rep->mirror && i < n; i++)
        mirror_want(rq->srv->mirror, rep->mirror, ranges[i].start, ranges[i].len);
    struct stream *s = stream_new(rq, rep);
    http_sending(rq, rep->file_st);
    s->framing = framing;
    s->pieces = pieces;
    s->n_pieces = np;
    return MHD_create_response_from_callback(out, STREAM_BLOCK, stream_read, s, stream_free);
}
