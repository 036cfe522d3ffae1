/* encoding: the content codings of the documents tensord writes (RFC 9110
 * §8.4): which one a request's Accept-Encoding lets it send, and gzip
 * (zlib's deflate) of a document given as pieces of memory.
 *
 * Only documents are compressed (JSON, XML, text the daemon wrote), never
 * byte bodies (files, tensors, slices): those are served as stored, with
 * ranges into their own bytes and the content hash as their ETag. */
#ifndef TENSORD_ENCODING_H
#define TENSORD_ENCODING_H

#include <stddef.h>

/* Documents smaller than this go out as they are: below about a kilobyte
 * the headers cost as much as compression saves. */
#define ENCODING_MIN_BYTES 1024

enum encoding { ENCODING_IDENTITY, ENCODING_GZIP };

/* The zlib level of documents compressed once and kept (a model's cached
 * documents, the console's files), and of those compressed for each answer
 * (docs/PERFORMANCE.md "Compressed documents" has the figures). */
#define ENCODING_LEVEL_KEPT 6
#define ENCODING_LEVEL_ANSWER 1
/* The largest document compressed for one answer, on an HTTP thread (some
 * 4 ms of CPU at ENCODING_LEVEL_ANSWER): a larger one goes out compressed
 * only when its gzip form was made and kept with it (off the HTTP
 * threads), else as it is. */
#define ENCODING_ANSWER_MAX (1u << 20)

/* The coding to send for a request whose Accept-Encoding is header (NULL
 * when absent: identity): gzip when it accepts it ("gzip", "x-gzip" or
 * "*" with a q-value above 0, and not refused by name), else identity.
 * A malformed header is read as far as it parses, never as more. */
enum encoding encoding_choose(const char *header);

/* The Content-Encoding name of e ("gzip"), NULL for identity. */
const char *encoding_name(enum encoding e);

struct encoding_piece {
    const void *p;
    size_t n;
};

/* The gzip member (RFC 1952, no name, no time: equal inputs give equal
 * bytes) of the concatenation of pieces[0..n), at zlib level `level`, in a
 * malloc'd buffer (*out, *out_len), caller frees. Returns 0, -ENOMEM, or
 * -EFBIG past 2 GiB (zlib's counters). */
int encoding_gzip(const struct encoding_piece *pieces, size_t n, int level, char **out,
                  size_t *out_len);

#endif
