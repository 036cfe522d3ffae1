/* fetch_req: the request of POST /v1/models/{model}/fetch (its body, or the
 * ?q= of the GET form), parsed and checked with json_scan, bounded.
 *
 *   {"tensors": [NAME | {"name": NAME, "slice": SPEC}, ...],
 *    "split": {"world": W, "rank": R, "rules": [{"match": GLOB, "dim": D}, ...]}}
 *
 * Both keys are optional (no "tensors": every tensor of the model; an empty
 * text counts as {}); any other key, a duplicate key, a value of the wrong
 * type, W < 1, R outside [0, W), more than FETCH_MAX_RULES rules or a GLOB
 * longer than FETCH_MAX_GLOB bytes is an error naming the place. Whether the
 * names exist, the slices parse and the dims fit is fetch_plan's business:
 * it has the model. */
#ifndef TENSORD_FETCH_REQ_H
#define TENSORD_FETCH_REQ_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"

#define FETCH_MAX_RULES 64
#define FETCH_MAX_GLOB 1024

struct globpat;

struct fetch_item {
    const char *name;        /* decoded, NUL-terminated; in the request's arena */
    size_t name_len;
    const char *slice;       /* the SPEC, or NULL when the item has none */
    size_t slice_len;
};

struct fetch_rule {
    const char *match;       /* the GLOB as sent, decoded; in the arena */
    size_t match_len;
    struct globpat *glob;    /* owned */
    int64_t dim;             /* may be negative: counts from the last dimension */
};

struct fetch_req {
    int all;                 /* no "tensors": every tensor of the model */
    size_t n_items;
    struct fetch_item *items;
    int has_split;
    uint64_t world, rank;
    size_t n_rules;
    struct fetch_rule *rules;
    char *arena;             /* the decoded strings */
};

struct fetch_limits {
    size_t max_tensors;      /* entries of "tensors"; more is ST_ERR_LIMIT */
};

/* Parses text[0..len). On 0 *out holds the request (free with
 * fetch_req_free); otherwise a negative errno, *out is empty and err
 * (optional) says what and where: ST_ERR_UTF8 (the text is not UTF-8, or
 * holds a NUL byte), ST_ERR_JSON (not JSON; the message has json_scan's
 * text, line, column), ST_ERR_INVALID_ARGUMENT (JSON, but not a fetch
 * request), ST_ERR_LIMIT (more tensors than lim->max_tensors). */
int fetch_req_parse(const char *text, size_t len, const struct fetch_limits *lim,
                    struct fetch_req *out, struct st_error *err);

/* The first rule whose glob matches name[0..len), or NULL. Matching spends
 * from *budget (globpat_match; budget may be NULL for no bound); when
 * it runs out, *exhausted is set and NULL returned. */
const struct fetch_rule *fetch_req_rule_for(const struct fetch_req *r, const char *name,
                                            size_t len, uint64_t *budget, int *exhausted);

void fetch_req_free(struct fetch_req *r);

#endif
