/* answer_int: what the answer readers share beyond answer.h (answer.c,
 * answer_open.c): the tokenizer's walk over one answer, and the values
 * read the same way in every answer. */
#ifndef TENSORD_ANSWER_INT_H
#define TENSORD_ANSWER_INT_H

#include <stdint.h>

#include "answer.h"
#include "json_scan.h"

/* Consumes the value at the current token, whatever it is. */
int answer_skip(struct json_scan *s, unsigned depth);
/* The current token as a non-negative integer: 1 with *v, else 0 (the
 * value is consumed either way, *rc its outcome). */
int answer_read_uint(struct json_scan *s, unsigned depth, uint64_t *v, int *rc);
/* The current token as a checksum, 16 hex digits as the daemon writes
 * them: 0 with *out, else -1. */
int answer_read_checksum(const struct json_scan *s, uint64_t *out);
/* Reads the whole of body[0..len) as one object, each member going to fn:
 * first what json_scan leaves to its callers (valid UTF-8, no NUL byte).
 * Returns 0, or -1 with err. */
int answer_scan(struct json_scan *s, const char *body, size_t len, json_scan_fn fn, void *ctx,
                char *err, size_t errlen);

#endif
