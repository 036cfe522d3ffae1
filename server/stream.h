/* stream: the libmicrohttpd response for a span of a representation's body,
 * or for several spans as multipart/byteranges: sent from memory a model
 * keeps alive, a small copied buffer, sendfile, or a reader that checks
 * after every block that the file is still the version validated. Part of
 * respond (respond.c decides what to answer, this builds the body). */
#ifndef TENSORD_STREAM_H
#define TENSORD_STREAM_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "range.h"
#include "respond.h"

/* Bodies up to this size are read into a buffer and sent with the headers in
 * one write; larger contiguous spans go out with sendfile. */
#define STREAM_SMALL_BODY_MAX (64 * 1024)
/* Block size libmicrohttpd asks streamed readers for. */
#define STREAM_BLOCK (256 * 1024)
/* A document in memory (a shared model document) up to this size goes out
 * in one write straight from its memory; a larger one is streamed in
 * blocks of this size. libmicrohttpd writes as much of a memory answer as
 * the socket takes (megabytes on loopback) before it looks at another
 * connection, so 200 clients of a 14 MB description kept every other
 * request waiting a tenth of a second; in blocks, each connection gets its
 * turn after 64 KiB, as files get theirs after a 128 KiB sendfile. */
#define STREAM_DOC_BLOCK (64 * 1024)

/* Where body bytes [off, off + len) are held in memory that a model keeps
 * alive (a file's validated header, a cached document), or NULL. */
const char *stream_pinned_span(const struct representation *rep, uint64_t off, uint64_t len);

/* Whether the body's file no longer has the size and mtime it had when it
 * was validated (it was truncated or written in place). */
int stream_file_changed(const struct representation *rep);

/* The answer for body span [off, off + len); may take over rep's owned
 * buffers. On failure NULL, with *err_status 500 (read error), 503 and
 * *changed set (the file changed) or 503 (no file descriptor left). */
struct MHD_Response *stream_span(struct request *rq, struct representation *rep, uint64_t off,
                                 uint64_t len, unsigned *err_status, int *changed);

/* The multipart/byteranges answer for ranges[0..n); takes over rep's owned
 * buffers. Writes its Content-Type (with the boundary) into content_type and
 * the body's length to *total. NULL when out of memory. */
struct MHD_Response *stream_multipart(struct request *rq, struct representation *rep,
                                      const struct byte_range *ranges, size_t n,
                                      char *content_type, size_t ct_len, uint64_t *total);

#endif
