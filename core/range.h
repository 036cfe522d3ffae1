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
    RANGE_NONE,          /* no Range, a malformed one, another unit, or too many parts: serve 200 */
    RANGE_OK,            /* *n satisfiable ranges, clamped to the body, in request order */
    RANGE_UNSATISFIABLE, /* well-formed but no range overlaps the body: 416 */
};

/* Parses `header` (may be NULL) against a body of `size` bytes. Unsatisfiable
 * parts of a set are dropped; max_ranges bounds the number of parts accepted,
 * satisfiable or not (a header with more is ignored as RANGE_NONE). out must
 * hold max_ranges entries; *n is 0 unless RANGE_OK. Overlapping ranges are
 * returned as asked, not merged. No allocation. */
enum range_result range_parse(const char *header, uint64_t size, size_t max_ranges,
                              struct byte_range *out, size_t *n);

#endif
