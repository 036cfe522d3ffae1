/* st_header: safetensors header parsing and validation.
 *
 * The rules are the reference crate's (checked in its order) plus the
 * stricter ones in API.md: duplicate keys, nesting depth and unknown tensor
 * fields are rejected. Every failure has its own code and a message naming
 * the file, the tensor and the offending value. */
#ifndef TENSORD_ST_HEADER_H
#define TENSORD_ST_HEADER_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "st_error.h"

#define ST_PREFIX_LEN 8
#define ST_MAX_HEADER_LEN 100000000ULL
#define ST_MAX_NDIM 64  /* stricter than the crate: a shape longer than this is rejected */
#define ST_MAX_DEPTH 8  /* JSON nesting cap, checked before the JSON parser runs */
#define ST_NAME_SHOW 64 /* bytes of a name or key quoted in a message */

struct st_tensor {
    const char *name;     /* NUL-terminated, owned by the header */
    size_t name_len;
    enum dtype dtype;
    uint32_t ndim;
    const uint64_t *shape; /* ndim entries, owned by the header */
    uint64_t nelems;
    uint64_t begin, end;   /* relative to the start of the data buffer */
};

struct st_kv {
    const char *key, *value; /* owned by the header */
};

struct st_header {
    uint64_t header_len;         /* N from the prefix */
    uint64_t data_len;           /* bytes after the header */
    size_t n_tensors;
    struct st_tensor *tensors;   /* sorted by (begin, end), then name */
    size_t n_metadata;
    struct st_kv *metadata;      /* __metadata__ in file order; n_metadata == 0 when absent */
    int has_metadata;            /* 1 when __metadata__ was present (possibly empty) */
    void *arena;                 /* backing storage for names and shapes */
    unsigned char *raw;          /* the file's first ST_PREFIX_LEN + header_len bytes as read and
                                  * validated, when st_header_read_fd was asked to keep them;
                                  * else NULL. Owned by the header. */
};

/* Checks the 8-byte prefix against the file size and returns N in
 * *header_len. `file` only labels messages. */
int st_header_check_prefix(const unsigned char prefix[ST_PREFIX_LEN],
                           uint64_t file_size, const char *file,
                           uint64_t *header_len, struct st_error *err);

/* Parses and validates the JSON header json[0..len) of a file whose data
 * buffer holds data_len bytes. On ST_OK *out is a new header the caller frees
 * with st_header_free; on error *out is NULL and err is filled. */
int st_header_parse(const char *json, size_t len, uint64_t data_len,
                    const char *file, struct st_header **out,
                    struct st_error *err);

/* Reads and validates a whole file's header from fd with pread (no mapping).
 * Sets header_len/data_len in the result. When the prefix and JSON together
 * are at most keep_max bytes, the result keeps them in raw, so a server can
 * answer reads of them without touching the file again. */
int st_header_read_fd(int fd, const char *file, size_t keep_max,
                      struct st_header **out, struct st_error *err);


void st_header_free(struct st_header *h);

#endif
