/* fetch_plan: the answer to a fetch request, planned over one model of a
 * registry snapshot without reading any tensor data, and produced on
 * demand.
 *
 * The answer is one safetensors file: a header naming the requested tensors
 * in request order (every tensor of the model, in file order, when the
 * request lists none), each under its own name with the dtype and the shape
 * of what is sent, and the model's merged __metadata__; then each tensor's
 * bytes, read from the model's files: a contiguous span (read together with
 * the next when it continues it in the same file, and sent with sendfile
 * when a range lies in one) or a strided selection read through its slice
 * plan.
 *
 * A tensor's data is its slice (the item's SPEC, default the whole tensor),
 * then, when the request splits and the first rule whose glob matches the
 * name applies, dimension D of that result cut into `world` parts as
 * numpy.array_split cuts it, part `rank` kept. A result of rank 0 is never
 * split; a matching rule whose D is outside [-ndim, ndim) is an error, and
 * so is matching that spends more than FETCH_GLOB_BUDGET steps.
 *
 * Planning walks the request once: it checks every tensor (the errors
 * below), sizes the header and the data, and computes the identity hash,
 * but keeps neither the header nor a list of pieces. The plan holds the
 * request, where every FETCH_MARK_EVERY-th tensor starts, and the reader's
 * place; reading any byte range regenerates the header entries and tensor
 * plans from the nearest mark. So an answer that is not being read holds a
 * few kilobytes besides its request, whatever it sends: a fetch of every
 * tensor of a 100,000-tensor model no longer keeps a 10 MB header per
 * connection. */
#ifndef TENSORD_FETCH_PLAN_H
#define TENSORD_FETCH_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "body.h"
#include "fetch_req.h"
#include "registry.h"

/* Tensors between two places the reader can start from. */
#define FETCH_MARK_EVERY 256

struct fetch_mark;
struct fetch_cursor;

struct fetch_plan {
    const struct reg_model *m;  /* borrowed: must outlive the plan (the answer pins it) */
    struct fetch_req req;       /* owned: the request it answers */
    size_t prefix_len;          /* the 8-byte length and the JSON header (padded) */
    uint64_t data_len;          /* bytes after the prefix */
    size_t n_tensors;           /* in the answer */
    int64_t mtime_ns;           /* the newest mtime of the model's files */
    int weak;                   /* a file's ETag is weak: so is the answer's */
    uint64_t hash[2];           /* identifies the answer's bytes: the files' ETags, every
                                 * tensor's name and the selection sent */
    /* private to fetch_plan.c */
    int has_meta;               /* the header starts with __metadata__ */
    size_t meta_len;            /* its entry's bytes */
    uint64_t json_len;          /* the header's JSON before its closing '}' and padding */
    unsigned char *used;        /* bit per model file: the answer reads from it */
    int elsewhere;              /* the files are read through `fds` (fetch_plan_read_through) */
    const int *fds;             /* borrowed: by index in m->files */
    struct fetch_mark *marks;
    size_t n_marks;
    struct fetch_cursor *cur;
};


struct fetch_plan_limits {
    uint64_t max_bytes;         /* largest answer (header included); 0 = no limit */
    /* The model's files are not read through its own descriptors but
     * through ones the caller gives once the plan says which files it reads
     * (fetch_plan_uses, fetch_plan_read_through): a mirrored model's, whose
     * bytes are a mirror cache's files, opened per answer, their content
     * fixed by its hash (so no file is checked against a stat: a cache file
     * still arriving changes its mtime as it fills). */
    int elsewhere;
};

/* Plans the answer to req over model m (which must be MODEL_READY), taking
 * req over in every case. Returns 0 with *out the plan (free with
 * fetch_plan_free; it borrows from m, which must outlive it), or -errno with
 * *out NULL and err naming the tensor and the reason: ST_ERR_NOT_FOUND (a
 * name the model lacks), ST_ERR_DUPLICATE_TENSOR (a name asked for twice: a
 * file cannot hold it twice), ST_ERR_SLICE (a SPEC that does not parse or
 * fit the tensor), ST_ERR_SPLIT (a rule's dim out of range, or a cut off a
 * byte boundary), ST_ERR_LIMIT (over max_bytes, or a header over
 * safetensors' 100 MB), ST_ERR_IO (a file of the model could not be opened
 * at scan time), ST_ERR_NO_MEMORY. */
int fetch_plan_build(const struct reg_model *m, struct fetch_req *req,
                     const struct fetch_plan_limits *lim, struct fetch_plan **out,
                     struct st_error *err);

/* The answer's size: prefix_len + data_len. */
uint64_t fetch_plan_size(const struct fetch_plan *p);

/* Whether the answer reads from file m->files[file]. */
int fetch_plan_uses(const struct fetch_plan *p, size_t file);
/* For a plan built with `elsewhere`: the descriptors to read the model's
 * files through, by index in m->files (borrowed: they must outlive the
 * plan; only the files it uses are read). */
void fetch_plan_read_through(struct fetch_plan *p, const int *fds);

/* Whether every file the answer reads from is still the version validated
 * (one fstat each; always, for a plan that reads elsewhere). */
int fetch_plan_files_unchanged(const struct fetch_plan *p);

/* A body (core/body/body.h) over a plan: ctx is the plan, which must outlive the
 * body. Its read and file_span move the plan's reader: one thread at a time
 * per plan. */
extern const struct body_source fetch_plan_source;

void fetch_plan_free(struct fetch_plan *p);

#endif
