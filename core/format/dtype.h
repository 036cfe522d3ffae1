/* dtype: the safetensors dtype table (names, bit widths, NumPy descriptors). */
#ifndef TENSORD_DTYPE_H
#define TENSORD_DTYPE_H

#include <stddef.h>

enum dtype {
    DT_BOOL,
    DT_U8,
    DT_I8,
    DT_U16,
    DT_I16,
    DT_F16,
    DT_BF16,
    DT_U32,
    DT_I32,
    DT_F32,
    DT_U64,
    DT_I64,
    DT_F64,
    DT_C64,
    DT_F8_E4M3,
    DT_F8_E5M2,
    DT_F8_E4M3FNUZ,
    DT_F8_E5M2FNUZ,
    DT_F8_E8M0,
    DT_F6_E2M3,
    DT_F6_E3M2,
    DT_F4,
    DT_COUNT,
    DT_INVALID = -1
};

struct dtype_info {
    const char *name;      /* safetensors spelling, e.g. "BF16" */
    unsigned bits;         /* bits per element: 4, 6, 8, 16, 32 or 64 */
    const char *npy_descr; /* NumPy .npy descr ("<f4"), NULL when NumPy has no such dtype */
};

/* Returns the entry for a valid dtype; never NULL for 0 <= dt < DT_COUNT. */
const struct dtype_info *dtype_info(enum dtype dt);
/* Returns DT_INVALID for an unknown name; the match is exact and case-sensitive. */
enum dtype dtype_from_name(const char *name, size_t len);

#endif
