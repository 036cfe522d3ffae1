/* upstream_answer: what an upstream's answer said, from its header lines
 * as libcurl hands them over (mirror/upstream.c), and for the tests and the
 * fuzzer (tests/fuzz/fuzz_mirror.c). Bounded: every value is checked and
 * copied into a fixed field or refused; only Link is kept whole. */
#ifndef TENSORD_UPSTREAM_ANSWER_H
#define TENSORD_UPSTREAM_ANSWER_H

#include <stddef.h>
#include <stdint.h>

/* What an answer said: the headers the mirror reads. Strings are
 * NUL-terminated, "" when absent or unusable (a value that holds a control
 * byte, or one that does not fit: a commit, an ETag or a Cache-Control
 * cut short would say something else). Content-Type is not read: what the
 * mirror passes on is typed by tensord (server/handlers/h_mirror.c). X-Error-Message, a
 * message for people, is cut instead (at a character's start); Link is
 * kept whole however long (libcurl bounds a header line at 100 KiB), so
 * the Hub's pagination always goes through. ETags have their quotes and W/
 * removed. An answer starts zeroed; upstream_answer_free frees its Link. */
struct upstream_answer {
    long status;
    char commit[48];           /* X-Repo-Commit */
    char etag[96];             /* ETag */
    char linked_etag[96];      /* X-Linked-Etag */
    char error_code[48];       /* X-Error-Code */
    char error_message[256];   /* X-Error-Message */
    char cache_control[128];
    char *link;                /* Link (the Hub's pagination): malloc'd, or NULL when absent */
    uint64_t linked_size;      /* X-Linked-Size, when has_linked_size */
    uint64_t length;           /* Content-Length, when has_length */
    uint64_t range_start, range_end, range_total; /* Content-Range, when has_range */
    unsigned retry_after;      /* Retry-After seconds, 0 when absent */
    int has_linked_size, has_length, has_range;
    int redirected_away;       /* the HEAD stopped at a redirect to another origin */
};

/* Parses one header line ("Name: value\r\n") into a: a status line
 * resets it. a starts zeroed. */
void upstream_answer_header(struct upstream_answer *a, const char *line, size_t len);
/* Frees what a holds (its Link) and zeroes it. */
void upstream_answer_free(struct upstream_answer *a);

#endif
