/* stream: see stream.h. */
#include "stream.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conns.h"
#include "gate.h"
#include "util.h"

/* A piece of the answer: literal bytes (multipart framing) or a span of the
 * body, placed at out_off in the answer. */
struct piece {
    const char *mem;   /* literal bytes, or NULL for a body span */
    uint64_t body_off; /* body offset of a span */
    uint64_t len;
    uint64_t out_off;
    uint64_t wanted;   /* mirrored bytes: the body offset asked of the mirror up to */
};

/* A reader's state: the body's memory is the answer's (which lives until
 * the request ends, after the last read); the descriptor is its own
 * duplicate, so a reload may close the model's meanwhile. */
struct stream {
    struct body body;           /* fd is a dup owned by the stream */
    struct fileio_stat file_st; /* what the file looked like when it was validated */
    int verify;                 /* check file_st after every block read from the file */
    size_t n_pieces;
    struct piece *pieces;
    size_t cursor;              /* piece of the last read: MHD reads sequentially */
    /* Mirrored files whose bytes may still be arriving: the gate says what
     * can be read, and the connection is suspended while the mirror fetches
     * the rest. */
    struct gate *gate;
    struct mirror *mirror;
    struct MHD_Connection *conn;
    struct conns_entry *entry;  /* gives the wait up when the client leaves or idles */
};

static void stream_free(void *cls)
{
    struct stream *s = cls;
    gate_free(s->gate); /* never resumed once freed */
    if (s->body.fd >= 0)
        close(s->body.fd);
    free(s->pieces);
    free(s);
}

static void mirror_resume(void *arg)
{
    struct stream *s = arg;
    if (conn_resume(s->entry)) /* else the connection table gave it up first */
        MHD_resume_connection(s->conn);
}

/* Nothing of the body at off is there yet: the connection sleeps until the
 * mirror brings the first missing byte (a reader that returns 0 is called
 * again once resumed), or the connection table gives it up (its client
 * left, connection_timeout, the daemon stopping). */
static ssize_t mirror_sleep(struct stream *s)
{
    if (conn_suspend(s->entry) < 0)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    MHD_suspend_connection(s->conn);
    if (gate_wait(s->gate, mirror_resume, s) && conn_resume(s->entry))
        MHD_resume_connection(s->conn); /* they came meanwhile */
    return 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct stream *s = cls;
    if (s->gate && conn_gave_up(s->entry)) /* resumed to end: its client left or idled */
        return MHD_CONTENT_READER_END_WITH_ERROR;
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
        struct piece *p = &s->pieces[i];
        uint64_t in = pos + done - p->out_off;
        uint64_t n = p->len - in;
        if (n > max - done)
            n = max - done;
        /* A body of very many spans is asked of the mirror as it is read. */
        if (s->gate && !p->mem && p->wanted < p->body_off + p->len &&
            p->body_off + in + n + GATE_AHEAD > p->wanted)
            p->wanted = gate_want(s->mirror, s->gate, &s->body, p->wanted,
                                  p->body_off + p->len - p->wanted);
        int64_t avail = p->mem ? (int64_t)n : gate_avail(s->gate, &s->body, p->body_off + in, n);
        if (avail < 0) /* the upstream failed it: cut, as for a file that changed */
            return done ? (ssize_t)done : MHD_CONTENT_READER_END_WITH_ERROR;
        if (avail == 0)
            return done ? (ssize_t)done : mirror_sleep(s);
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

/* A reader over the reply's pieces, with a duplicate of the body's
 * descriptor (and a gate over the mirrored files still arriving, which
 * holds its own references to them). */
static struct MHD_Response *reader(const struct reply *r, const struct representation *rep,
                                   const struct stream_ctx *c, size_t block)
{
    struct stream *s = xcalloc(1, sizeof(*s));
    s->body = rep->body;
    s->body.fd = rep->body.fd >= 0 ? fcntl(rep->body.fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (rep->arriving) {
        s->mirror = c->mirror;
        s->gate = gate_new(c->mirror, rep->mirror, rep->n_mirror, rep->body.fd, s->body.fd);
        s->conn = c->conn;
        s->entry = c->entry;
    }
    if (rep->file_st && s->body.fd >= 0) {
        s->file_st = *rep->file_st;
        s->verify = 1;
    }
    s->pieces = xcalloc(r->n_pieces, sizeof(*s->pieces));
    uint64_t out = 0;
    for (size_t i = 0; i < r->n_pieces; i++) {
        const struct reply_piece *p = &r->pieces[i];
        s->pieces[i] = (struct piece){.mem = p->mem, .body_off = p->off, .len = p->len,
                                      .out_off = out};
        out += p->len;
        if (rep->n_mirror && !p->mem) /* the blocks the answer sends, asked for at once */
            s->pieces[i].wanted = gate_want(c->mirror, s->gate, &s->body, p->off, p->len);
    }
    s->n_pieces = r->n_pieces;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(r->length, block, stream_read, s, stream_free);
    if (!resp)
        stream_free(s);
    return resp;
}

/* The reader of a body never read (a 304, a HEAD of nothing opened). */
static ssize_t never_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls, (void)pos, (void)buf, (void)max;
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* A body all in memory: in place (the answer holds it until the request
 * ends, after libmicrohttpd's last write). */
static struct MHD_Response *in_memory(const struct reply *r)
{
    if (r->n_pieces <= 1)
        return MHD_create_response_from_buffer(r->n_pieces ? r->pieces[0].len : 0,
                                               r->n_pieces ? (void *)r->pieces[0].mem : (void *)"",
                                               MHD_RESPMEM_PERSISTENT);
    struct MHD_IoVec iov[3];
    for (size_t i = 0; i < r->n_pieces && i < 3; i++)
        iov[i] = (struct MHD_IoVec){.iov_base = r->pieces[i].mem, .iov_len = r->pieces[i].len};
    return MHD_create_response_from_iovec(iov, (unsigned)(r->n_pieces < 3 ? r->n_pieces : 3),
                                          NULL, NULL);
}

struct MHD_Response *stream_response(const struct reply *r, const struct answer *a,
                                     const struct stream_ctx *c, struct stream_out *out, int *err)
{
    const struct representation *rep = &a->rep;
    *out = (struct stream_out){.method = r->counted ? STREAM_COPY : STREAM_UNCOUNTED};
    *err = 0;
    if (r->no_body)
        return MHD_create_response_from_callback(r->length, STREAM_BLOCK, never_read, NULL, NULL);
    int spans = 0;
    for (size_t i = 0; i < r->n_pieces; i++)
        spans += !r->pieces[i].mem;
    if (!spans)
        return in_memory(r);
    if (r->n_pieces > 1 || rep->arriving) { /* multipart, or bytes that may still be arriving */
        if (!rep->arriving)
            out->sending = rep->file_st;
        return reader(r, rep, c, STREAM_BLOCK);
    }

    int span_fd;
    uint64_t file_off, off = r->pieces[0].off, len = r->pieces[0].len;
    if (c->sendfile && body_file_span(&rep->body, off, len, &span_fd, &file_off)) {
        int fd = fcntl(span_fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0) {
            *err = -EMFILE;
            return NULL;
        }
        out->method = STREAM_SENDFILE;
        if (rep->n_mirror) /* from a mirror's cache, complete: counted as hits */
            gate_want(c->mirror, NULL, &rep->body, off, len);
        /* sendfile sends what the file holds as it goes: a write to the file
         * must cut this connection (the watcher does, through conns). */
        out->sending = rep->body.src ? body_piece_stat(&rep->body, off) : rep->file_st;
        struct MHD_Response *resp = MHD_create_response_from_fd_at_offset64(len, fd, file_off);
        if (!resp)
            close(fd);
        return resp;
    }
    /* A document in memory goes in smaller blocks: each is a copy, and
     * other connections get their turn sooner (RESPOND_DOC_BLOCK). */
    out->sending = rep->file_st; /* a write that keeps size and mtime is cut too */
    return reader(r, rep, c,
                  rep->body.src && rep->body.src->mem ? RESPOND_DOC_BLOCK : STREAM_BLOCK);
}
