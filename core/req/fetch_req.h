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

#include "dtype.h"
#include "slice.h"
#include "split_bounds.h"
#include "st_error.h"

#define FETCH_MAX_RULES 64
/* Steps the split rules may spend matching one request's tensor names (a
 * second or so of CPU at worst; a plain request of 100,000 tensors and ten
 * rules spends well under a tenth). Hostile globs ("*aaaa...ab") cost
 * name x pattern per name; beyond the budget the request is refused. */
#define FETCH_GLOB_BUDGET (1ULL << 30)
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

/* Parses a "split" object alone, text[0..len) ({"world": W, "rank": R,
 * "rules": [...]}, as in a fetch request), into *out (has_split set; no
 * tensors: out->all), with the same checks and messages. with_rank: "rank"
 * is required (1) or must be absent (0: a request that places every rank
 * on a device of its own, as POST .../gpu {"devices": [...]} does). Returns
 * as fetch_req_parse. */
int fetch_req_parse_split(const char *text, size_t len, int with_rank, struct fetch_req *out,
                          struct st_error *err);

/* What a request sends of a tensor: its slice (spec, NULL for the whole
 * tensor), then, when it splits and the first rule whose glob matches the
 * name applies to a result of at least one dimension, that dimension cut
 * into `world` parts as numpy.array_split cuts it, part `rank` kept. The one
 * place these semantics live: the fetch (fetch_plan.c), the GPU preload of
 * a partition (gpu/gpu_part.c) and the client's check of what it maps use
 * it. */
struct fetch_part {
    int split;               /* a rule matched: dim was cut */
    uint32_t dim;            /* the result's dimension cut */
    uint64_t lo, hi;         /* the part kept: [lo, hi) of that dimension */
    uint64_t full;           /* that dimension's length before the cut */
};

/* Plans tensor name[0..name_len) (dtype dt, shape[0..ndim)) as r sends it:
 * *plan (slice.h) and *part. Matching spends from *budget (may be NULL).
 * Returns 0, or -errno with err naming the tensor: ST_ERR_SLICE (the spec),
 * ST_ERR_SPLIT (the rules ran out of budget, a dim out of range, a cut that
 * does not fit the dtype). */
int fetch_req_plan_tensor(const struct fetch_req *r, const char *name, size_t name_len,
                          const char *spec, size_t spec_len, enum dtype dt, uint32_t ndim,
                          const uint64_t *shape, uint64_t *budget, struct slice_plan *plan,
                          struct fetch_part *part, struct st_error *err);

void fetch_req_free(struct fetch_req *r);

#endif
