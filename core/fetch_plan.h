/* fetch_plan: the answer to a fetch request, planned over one model of a
 * registry snapshot without reading any tensor data.
 *
 * The answer is one safetensors file: a header (built here) naming the
 * requested tensors in request order (every tensor of the model, in file
 * order, when the request lists none), each under its own name with the
 * dtype and the shape of what is sent, and the model's merged __metadata__;
 * then each tensor's bytes, described as body pieces (core/body.h) that
 * point into the model's files: a contiguous span (merged with the previous
 * piece when it continues it in the same file, so a run of whole tensors is
 * one sendfile-able span) or a strided selection read through compact slice
 * runs.
 *
 * A tensor's data is its slice (the item's SPEC, default the whole tensor),
 * then, when the request splits and the first rule whose glob matches the
 * name applies, dimension D of that result cut into `world` parts as
 * numpy.array_split cuts it, part `rank` kept. A result of rank 0 is never
 * split; a matching rule whose D is outside [-ndim, ndim) is an error, and
 * so is matching that spends more than FETCH_GLOB_BUDGET steps. */
#ifndef TENSORD_FETCH_PLAN_H
#define TENSORD_FETCH_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "body.h"
#include "fetch_req.h"
#include "registry.h"

struct fetch_plan {
    char *prefix;               /* owned: the 8-byte length and the JSON header */
    size_t prefix_len;
    void *pieces_buf;           /* owned: one allocation holding pieces and their slice runs */
    const struct body_piece *pieces; /* in pieces_buf; fds and stats borrowed from the snapshot */
    size_t n_pieces;
    uint64_t data_len;          /* bytes after the prefix */
    size_t n_tensors;           /* in the answer */
    int64_t mtime_ns;           /* the newest mtime of the model's files */
    int weak;                   /* a file's ETag is weak: so is the answer's */
    uint64_t hash[2];           /* identifies the answer's bytes: the files' ETags, every
                                 * tensor's name and the selection sent */
};

/* Steps the split rules may spend matching one request's tensor names (a
 * second or so of CPU at worst; a plain request of 100,000 tensors and ten
 * rules spends well under a tenth). Hostile globs ("*aaaa...ab") cost
 * name x pattern per name; beyond the budget the request is refused. */
#define FETCH_GLOB_BUDGET (1ULL << 30)

struct fetch_plan_limits {
    uint64_t max_bytes;         /* largest answer (header included); 0 = no limit */
};

enum fetch_plan_status {
    FETCH_PLAN_OK,
    FETCH_PLAN_NO_TENSOR,       /* a name the model lacks */
    FETCH_PLAN_DUPLICATE,       /* a name asked for twice: a file cannot hold it twice */
    FETCH_PLAN_BAD_SLICE,       /* a SPEC that does not parse or fit the tensor */
    FETCH_PLAN_BAD_SPLIT,       /* a rule's dim out of range, or a cut off a byte boundary */
    FETCH_PLAN_TOO_LARGE,       /* over max_bytes, or a header over safetensors' 100 MB */
    FETCH_PLAN_IO,              /* a file of the model could not be opened at scan time */
};

/* Plans the answer to req over model m (which must be MODEL_READY). On
 * FETCH_PLAN_OK fills *out (free with fetch_plan_free; it borrows from the
 * snapshot, which must outlive it); otherwise err names the tensor and the
 * reason. */
enum fetch_plan_status fetch_plan_build(const struct reg_model *m, const struct fetch_req *req,
                                        const struct fetch_plan_limits *lim,
                                        struct fetch_plan *out, char *err, size_t errlen);

void fetch_plan_free(struct fetch_plan *p);

/* Part `rank` of `world` of n elements, as numpy.array_split cuts them: the
 * first n % world parts hold one element more. Sets [*lo, *hi). */
void fetch_split_bounds(uint64_t n, uint64_t world, uint64_t rank, uint64_t *lo, uint64_t *hi);

#endif
