/* range: RFC 9110 §14 byte ranges.
 *
 * One pass, no allocation. The header is first parsed as a whole (so that a
 * syntax error anywhere, or a "a-b" with a > b, makes the entire header be
 * ignored as the RFC asks), and satisfiable parts are written to out as they
 * are met; on any failure *n is reset to 0. */
#include "range.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "util.h"

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Parses 1*DIGIT at *p; returns -1 when there is no digit or on overflow. */
static int parse_digits(const char **p, uint64_t *out)
{
    size_t used;
    if (decimal_u64(*p, SIZE_MAX, out, &used) != 0 || used == 0)
        return -1;
    *p += used;
    return 0;
}

/* Several ranges: refused (0) when together they ask for more bytes than
 * the body has, which only an amplification attempt does (16 ranges of
 * "0-" made a 16x answer; the servers fixed after CVE-2011-3192 answer such
 * a request with the whole body). Otherwise sorted by start, and ranges that
 * overlap, touch or lie closer than RANGE_MERGE_GAP are merged (RFC 9110
 * §14.6 allows this whatever the order asked), so no byte is sent twice. */
static int coalesce(struct byte_range *r, size_t *n, uint64_t size)
{
    uint64_t asked = 0;
    for (size_t i = 0; i < *n; i++)
        if (__builtin_add_overflow(asked, r[i].len, &asked) || asked > size)
            return 0;
    for (size_t i = 1; i < *n; i++) { /* insertion sort: at most max_ranges parts, usually in order */
        struct byte_range x = r[i];
        size_t j = i;
        for (; j > 0 && r[j - 1].start > x.start; j--)
            r[j] = r[j - 1];
        r[j] = x;
    }
    size_t out = 0;
    for (size_t i = 1; i < *n; i++) {
        uint64_t end = r[out].start + r[out].len; /* exclusive */
        if (r[i].start <= end || r[i].start - end < RANGE_MERGE_GAP) {
            uint64_t iend = r[i].start + r[i].len;
            if (iend > end)
                r[out].len = iend - r[out].start;
        } else {
            r[++out] = r[i];
        }
    }
    *n = out + 1;
    return 1;
}

enum range_result range_parse(const char *header, uint64_t size, size_t max_ranges,
                              struct byte_range *out, size_t *n)
{
    *n = 0;
    if (!header)
        return RANGE_NONE;
    const char *p = header;
    while (is_ows(*p))
        p++;
    const char *eq = strchr(p, '=');
    if (!eq || eq - p != 5 || strncasecmp(p, "bytes", 5) != 0) /* the unit is case-insensitive */
        return RANGE_NONE;
    p = eq + 1;

    size_t parts = 0, nsat = 0;
    for (;;) {
        /* list rule: OWS and empty elements between commas are tolerated */
        while (is_ows(*p) || *p == ',')
            p++;
        if (*p == '\0')
            break;
        if (parts == max_ranges)
            goto none; /* too many parts: serve the whole representation */
        parts++;
        uint64_t first = 0, last = 0;
        int has_first = 0, has_last = 0;
        if (is_digit(*p)) {
            if (parse_digits(&p, &first) < 0)
                goto none;
            has_first = 1;
        }
        if (*p != '-')
            goto none;
        p++;
        if (is_digit(*p)) {
            if (parse_digits(&p, &last) < 0)
                goto none;
            has_last = 1;
        }
        if (!has_first && !has_last)
            goto none;
        while (is_ows(*p))
            p++;
        if (*p != ',' && *p != '\0')
            goto none;

        uint64_t start, end; /* inclusive end */
        if (has_first) {
            if (has_last && first > last)
                goto none; /* syntactically invalid: the whole header is ignored */
            if (first >= size)
                continue;
            start = first;
            end = (has_last && last < size - 1) ? last : size - 1;
        } else {
            if (last == 0 || size == 0)
                continue; /* "-0" selects nothing */
            start = last >= size ? 0 : size - last;
            end = size - 1;
        }
        out[nsat].start = start;
        out[nsat].len = end - start + 1;
        nsat++;
    }
    if (parts == 0)
        goto none; /* "bytes=" or "bytes=,,": the list needs one element */
    if (nsat == 0)
        return RANGE_UNSATISFIABLE;
    if (nsat > 1 && !coalesce(out, &nsat, size))
        goto none;
    *n = nsat;
    return RANGE_OK;
none:
    *n = 0;
    return RANGE_NONE;
}
