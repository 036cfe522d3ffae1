/* tformat: the bytes that precede tensor data in the npy and safetensors
 * output formats (the data itself follows unchanged). */
#ifndef TENSORD_TFORMAT_H
#define TENSORD_TFORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "st_error.h"
#include "st_header.h" /* ST_MAX_NDIM */
#include "strbuf.h"

enum tformat { TFORMAT_RAW, TFORMAT_NPY, TFORMAT_SAFETENSORS };

/* Parses "raw", "npy" or "safetensors"; returns -EINVAL for anything else. */
int tformat_parse(const char *s, enum tformat *out);

/* Builds the .npy header (magic, version, dict padded to a multiple of 64)
 * for a C-order array. Returns 0 with a new buffer in *out (caller frees)
 * and its length, or -EINVAL with err (ST_ERR_DTYPE) when NumPy has no such
 * dtype (then *out is NULL). Version 1.0 unless the dict needs the 4-byte
 * length of 2.0. Both builders NUL-terminate *out after *out_len bytes for
 * convenience. */
int tformat_npy_prefix(enum dtype dt, uint32_t ndim, const uint64_t *shape, char **out,
                       size_t *out_len, struct st_error *err);

/* tformat_npy_prefix, except that a dtype NumPy lacks is stored as its raw
 * bits (npy_dtype=raw): 8-bit types as "|u1" and 16-bit ones as "<u2" with
 * the tensor's shape; the sub-byte F4/F6 types packed as "|u1", the last
 * dimension counting bytes when its elements fill whole bytes, else one
 * dimension of nbytes. The real dtype and shape follow the header dict as a
 * Python comment, "# tensord: dtype=BF16 shape=3,5" (NumPy reads the dict with
 * ast.literal_eval, which skips it). Dtypes NumPy has get the plain header.
 * Returns 0, or -EINVAL for an invalid dtype. */
int tformat_npy_raw_prefix(enum dtype dt, uint32_t ndim, const uint64_t *shape, uint64_t nbytes,
                           char **out, size_t *out_len);

/* The 8-byte length and JSON header of a one-tensor safetensors file
 * holding `name` (padded with spaces to a multiple of 8). Returns 0 with
 * *out (the caller frees), or -ENOMEM. */
int tformat_safetensors_prefix(const char *name, enum dtype dt, uint32_t ndim,
                               const uint64_t *shape, uint64_t nbytes, char **out,
                               size_t *out_len);

/* A safetensors header built one tensor at a time, for an answer holding
 * many: the tensors' data follows in the order they are added, so their
 * data_offsets are consecutive from 0. Written with strbuf's escaper (as
 * serde_json writes, \u00xx in lower case);
 * like a strbuf it fails instead of aborting (a name's size comes from a
 * file): sb.failed says so. */
struct tformat_st {
    struct strbuf sb;      /* the text; sb.buf[0..sb.len) */
    uint64_t data_len;     /* sum of the sizes added so far */
    size_t n;              /* entries written (__metadata__ counts as one) */
};

/* Adds __metadata__ with n key/value pairs, kv[2i] and kv[2i + 1] (UTF-8). */
void tformat_st_metadata(struct tformat_st *w, const char *const *kv, size_t n);
void tformat_st_tensor(struct tformat_st *w, const char *name, size_t name_len, enum dtype dt,
                       uint32_t ndim, const uint64_t *shape, uint64_t nbytes);
/* Empties w's text (keeping its buffer) for the next entry of a header that
 * has `entries` entries so far whose tensors hold data_len bytes: the next
 * tformat_st_metadata or tformat_st_tensor writes just that entry, its ','
 * (or the opening '{') included, into w->sb. For a header written entry by
 * entry and never held whole (a streamed fetch answer). strbuf_release
 * w->sb when done. */
void tformat_st_resume(struct tformat_st *w, size_t entries, uint64_t data_len);

#endif
