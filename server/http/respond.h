/* respond: the reply to send for an answer (server/handlers/h_answer.h): its status,
 * its headers in order and its body as pieces, with no HTTP library.
 *
 * A representation goes through the filters every one of them gets (as
 * nginx's not-modified and range filters): for a request that only reads,
 * the preconditions (RFC 9110 §13.2.2 order, decided by the pure functions
 * of server/handlers/conditional), then Range with If-Range (§14; ranges merged,
 * several as multipart/byteranges); a small body is read here, so a file
 * found changed still gets its 503 before any header is committed. Errors
 * are written in their dialect, redirects and documents as they are.
 * server/http/http_answer.c sends a reply through libmicrohttpd (the body built by
 * server/http/stream.c); the unit tests' loopback driver reads it as bytes. */
#ifndef TENSORD_RESPOND_H
#define TENSORD_RESPOND_H

#include <stddef.h>
#include <stdint.h>

#include "h_answer.h"

/* Bodies up to this size are read into memory here and sent with the
 * headers in one write; larger spans go out with sendfile or a reader. */
#define RESPOND_SMALL_BODY_MAX (64 * 1024)
/* A document in memory (a shared model document) up to this size goes out
 * in one write straight from its memory; a larger one in blocks of this
 * size (server/http/stream.h says why). */
#define RESPOND_DOC_BLOCK (64 * 1024)

#define REPLY_MAX_HEADERS 32

/* A piece of a reply's body: bytes in memory, or a span of the
 * representation's body. */
struct reply_piece {
    const char *mem;            /* the bytes (held by the answer), or NULL for a body span */
    uint64_t off;               /* a span's first byte in the body */
    uint64_t len;
};

struct reply {
    unsigned status;
    const char *headers[2 * REPLY_MAX_HEADERS + 1]; /* name/value pairs, NULL-ended */
    size_t n_headers;           /* pairs */
    uint64_t length;            /* the body's length (Content-Length) */
    int no_body;                /* length is announced but no byte is read: a 304, a HEAD of a
                                 * body nothing was opened for */
    const struct reply_piece *pieces; /* the body in order (in the answer's arena) */
    size_t n_pieces;
    int counted;                /* a representation's bytes: the copied and sendfile byte
                                 * counters add what is sent */
};

/* The reply for answer a (not ANSWER_WAIT) to request v. Memory: the
 * answer's arena. May set a->rescan (a file found changed). */
void respond_reply(const struct request_view *v, struct answer *a, struct reply *r);

/* Replaces r by the reply for a body that could not be built after all:
 * err -EMFILE or -ENFILE (503 overloaded), else 500. */
void respond_failed(const struct request_view *v, struct answer *a, struct reply *r, int err);

/* The error document {"error": {"code", "message"}} (or, hub, {"error":
 * message}) with its newline, malloc'd; NULL when out of memory. */
char *respond_error_document(const char *code, const char *msg, int hub, size_t *len);

#endif
