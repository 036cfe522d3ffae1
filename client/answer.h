/* answer: reading the daemon's answers on the lease socket (docs/GPU.md,
 * "Framing"). They are untrusted input for the worker that links this
 * library, so they go through the daemon's own strict, bounded tokenizer
 * (core/base/json_scan) after a UTF-8 and NUL check: one JSON object, no
 * duplicate keys, nesting at most ANSWER_MAX_DEPTH deep, integers within
 * int64. Nothing here aborts: running out of memory is an error return, and
 * no tree is built (an answer is read in place, twice for an open: once
 * whole, once for its tables). */
#ifndef TENSORD_ANSWER_H
#define TENSORD_ANSWER_H

#include <stddef.h>
#include <stdint.h>

struct tensord_model;

#define ANSWER_MAX_DEPTH 32 /* the open answer needs 4 (object, tensors, tensor, shape) */

/* What every answer carries. */
struct answer {
    int ok;                    /* "ok": true */
    char code[32];             /* a refusal's error code ("reloading", ...), cut to fit */
    int has_lease;             /* "lease" is there, a non-negative integer ... */
    uint64_t lease;            /* ... this one */
};

/* Reads the whole of body[0..len) and fills *a. Returns 0 when the answer
 * says ok; -1 with err when it is not valid (err says where and why, as
 * "bad answer from tensord: ...") or when it does not say ok (err is the
 * daemon's "CODE: message"; a->ok is 0). */
int answer_read(const char *body, size_t len, struct answer *a, char *err, size_t errlen);

/* Reads a "checksums" answer (answer_read accepted it) into m's
 * allocations. Returns 0 when they are there (has_checksum set), 1 while
 * the daemon is still summing, or -1 with err (none will come, or a
 * malformed answer). */
int answer_checksums(const char *body, size_t len, struct tensord_model *m, char *err,
                     size_t errlen);

#endif
