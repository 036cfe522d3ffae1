/* conditional: HTTP validators and preconditions (RFC 9110 §13), as pure
 * functions of header values: HTTP-dates, entity-tag lists, the order in
 * which If-Match, If-Unmodified-Since, If-None-Match and If-Modified-Since
 * decide, and If-Range. respond.c reads the headers and acts on the answer. */
#ifndef TENSORD_CONDITIONAL_H
#define TENSORD_CONDITIONAL_H

#include <stddef.h>
#include <stdint.h>

#define HTTP_DATE_LEN 30 /* "Sun, 06 Nov 1994 08:49:37 GMT" and its NUL */

/* Formats t as an IMF-fixdate into buf (at least HTTP_DATE_LEN bytes); a
 * time outside years 0-9999 gives the epoch. */
void http_date_format(int64_t t, char *buf, size_t len);
/* Parses an HTTP-date (IMF-fixdate, RFC 850 or asctime). Returns 0 or -1. */
int http_date_parse(const char *s, int64_t *out);
/* Returns 1 when the If-None-Match/If-Match style list matches etag (weak
 * comparison when weak != 0, strong otherwise; "*" matches any). */
int http_etag_match(const char *list, const char *etag, int weak);

/* A request's precondition headers; NULL for each one absent. */
struct cond_headers {
    const char *if_match;
    const char *if_unmodified_since;
    const char *if_none_match;
    const char *if_modified_since;
};

enum cond { COND_PROCEED, COND_NOT_MODIFIED, COND_PRECONDITION_FAILED };

/* RFC 9110 §13.2.2: the preconditions in their evaluation order, for a
 * representation that exists, with validators etag ("" for none) and mtime
 * (-1 for none). `safe` is GET or HEAD: only those answer 304 and consider
 * If-Modified-Since; for a method that acts, a failed If-None-Match is 412. */
enum cond cond_evaluate(const struct cond_headers *h, const char *etag, int64_t mtime, int safe);

/* If-Range (RFC 9110 §13.1.5): whether a Range applies to the representation
 * with validator etag, given the If-Range value (NULL when absent). */
int cond_if_range_allows(const char *if_range, const char *etag);

#endif
