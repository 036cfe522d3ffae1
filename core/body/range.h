/* range: RFC 9110 byte-range parsing ("Range: bytes=..."). */
#ifndef TENSORD_RANGE_H
#define TENSORD_RANGE_H

#include <stddef.h>
#include <stdint.h>

struct byte_range {
    uint64_t start;
    uint64_t len;   /* > 0 */
};

enum range_result {
    RANGE_NONE,          /* no Range, a malformed one, another unit, too many parts, or parts
                          * asking for more bytes than the body has: serve 200 */
    RANGE_OK,            /* *n satisfiable ranges, clamped to the body */
    RANGE_UNSATISFIABLE, /* well-formed but no range overlaps the body: 416 */
};

/* Ranges closer than this are merged into one part: a multipart part's own
 * header costs about as much. */
#define RANGE_MERGE_GAP 80

/* Parses `header` (may be NULL) against a body of `size` bytes. Unsatisfiable
 * parts of a set are dropped; max_ranges bounds the number of parts accepted,
 * satisfiable or not (a header with more is ignored as RANGE_NONE). Several
 * satisfiable parts whose lengths add up to more than `size` are ignored as
 * RANGE_NONE; otherwise they come back sorted by start, with parts that
 * overlap or are less than RANGE_MERGE_GAP bytes apart merged. out must hold
 * max_ranges entries; *n is 0 unless RANGE_OK. No allocation. */
enum range_result range_parse(const char *header, uint64_t size, size_t max_ranges,
                              struct byte_range *out, size_t *n);

#endif
