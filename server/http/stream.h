/* stream: the libmicrohttpd response for a reply's body (server/http/respond.h),
 * part of the HTTP front (server/http/http_answer.c is its one caller): memory the
 * answer holds sent in place, a shared document's pieces in one write,
 * sendfile from a duplicate of the file's descriptor, or a reader that
 * produces blocks on demand and checks after every block that the file is
 * still the version validated (and, for a mirrored file still arriving,
 * suspends the connection until the mirror brings the bytes). */
#ifndef TENSORD_STREAM_H
#define TENSORD_STREAM_H

#include <microhttpd.h>

#include "h_answer.h"
#include "respond.h"

/* Block size libmicrohttpd asks streamed readers for. libmicrohttpd writes
 * as much of a memory answer as the socket takes (megabytes on loopback)
 * before it looks at another connection, so 200 clients of a 14 MB
 * description kept every other request waiting a tenth of a second: a
 * document in memory goes in RESPOND_DOC_BLOCK blocks instead, so each
 * connection gets its turn after 64 KiB, as files get theirs after a
 * 128 KiB sendfile. */
#define STREAM_BLOCK (256 * 1024)

struct mirror;
struct conns_entry;

/* What the body needs from the front. */
struct stream_ctx {
    struct mirror *mirror;          /* the server's mirror (a body still arriving), or NULL */
    struct MHD_Connection *conn;    /* suspended while the mirror fetches */
    struct conns_entry *entry;      /* its row in the connection table, which watches it while
                                     * suspended (server/http/conns.h); may be NULL */
    int sendfile;                   /* sendfile is allowed (the sendfile option) */
};

/* Which byte counter a body's bytes go to. */
enum stream_method { STREAM_UNCOUNTED, STREAM_COPY, STREAM_SENDFILE };

struct stream_out {
    enum stream_method method;
    const struct fileio_stat *sending; /* the file the body reads as it goes (a write to it must
                                        * cut the connection), or NULL */
};

/* The response for reply r of answer a. NULL when out of memory, or with
 * *err set (-EMFILE: no descriptor left for the body; respond_failed says
 * what to answer instead). */
struct MHD_Response *stream_response(const struct reply *r, const struct answer *a,
                                     const struct stream_ctx *c, struct stream_out *out, int *err);

#endif
