#include "dtype.h"

#include <string.h>

/* Sizes follow the safetensors crate; NumPy descriptors only where NumPy has
 * the type natively (BF16 and the FP8/FP6/FP4 formats have none). */
static const struct dtype_info table[DT_COUNT] = {
    [DT_BOOL] = {"BOOL", 8, "|b1"},
    [DT_U8] = {"U8", 8, "|u1"},
    [DT_I8] = {"I8", 8, "|i1"},
    [DT_U16] = {"U16", 16, "<u2"},
    [DT_I16] = {"I16", 16, "<i2"},
    [DT_F16] = {"F16", 16, "<f2"},
    [DT_BF16] = {"BF16", 16, NULL},
    [DT_U32] = {"U32", 32, "<u4"},
    [DT_I32] = {"I32", 32, "<i4"},
    [DT_F32] = {"F32", 32, "<f4"},
    [DT_U64] = {"U64", 64, "<u8"},
    [DT_I64] = {"I64", 64, "<i8"},
    [DT_F64] = {"F64", 64, "<f8"},
    [DT_C64] = {"C64", 64, "<c8"},
    [DT_F8_E4M3] = {"F8_E4M3", 8, NULL},
    [DT_F8_E5M2] = {"F8_E5M2", 8, NULL},
    [DT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8, NULL},
    [DT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8, NULL},
    [DT_F8_E8M0] = {"F8_E8M0", 8, NULL},
    [DT_F6_E2M3] = {"F6_E2M3", 6, NULL},
    [DT_F6_E3M2] = {"F6_E3M2", 6, NULL},
    [DT_F4] = {"F4", 4, NULL},
};

const struct dtype_info *dtype_info(enum dtype dt)
{
    if ((int)dt < 0 || dt >= DT_COUNT)
        return NULL;
    return &table[dt];
}

enum dtype dtype_from_name(const char *name, size_t len)
{
    for (int i = 0; i < DT_COUNT; i++) {
        if (strlen(table[i].name) == len && memcmp(table[i].name, name, len) == 0)
            return (enum dtype)i;
    }
    return DT_INVALID;
}
