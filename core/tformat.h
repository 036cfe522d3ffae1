/* tformat: the bytes that precede tensor data in the npy and safetensors
 * output formats (the data itself follows unchanged). */
#ifndef TENSORD_TFORMAT_H
#define TENSORD_TFORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

enum tformat { TFORMAT_RAW, TFORMAT_NPY, TFORMAT_SAFETENSORS };

/* Parses "raw", "npy" or "safetensors"; returns -1 for anything else. */
int tformat_parse(const char *s, enum tformat *out);

/* Builds the .npy header (magic, version, dict padded to a multiple of 64)
 * for a C-order array. Returns a new buffer in *out (caller frees) and its
 * length, or -1 with a reason in errbuf when NumPy has no such dtype (then
 * *out is NULL). Version 1.0 unless the dict needs the 4-byte length of 2.0.
 * Both builders NUL-terminate *out after *out_len bytes for convenience. */
int tformat_npy_prefix(enum dtype dt, uint32_t ndim, const uint64_t *shape, char **out,
                       size_t *out_len, char *errbuf, size_t errlen);

/* Builds the 8-byte length and JSON header of a one-tensor safetensors file
 * holding `name` (padded with spaces to a multiple of 8). Caller frees *out. */
void tformat_safetensors_prefix(const char *name, enum dtype dt, uint32_t ndim,
                                const uint64_t *shape, uint64_t nbytes, char **out,
                                size_t *out_len);

#endif
