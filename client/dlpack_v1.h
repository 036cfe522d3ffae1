/* dlpack_v1: the parts of DLPack 1.x that the system's dlpack.h (0.6 on
 * Debian 12) lacks, written from the DLPack specification: the versioned
 * managed tensor with its flags, and the data type codes added after 0.6.
 * DLTensor itself is unchanged since 0.6, so the 0.6 header's is used. */
#ifndef TENSORD_DLPACK_V1_H
#define TENSORD_DLPACK_V1_H

#include <dlpack/dlpack.h>
#include <stdint.h>

#define TDC_DLPACK_MAJOR 1
#define TDC_DLPACK_MINOR 1             /* the float8 codes below are 1.1's */

#define TDC_DLPACK_FLAG_READ_ONLY (1ULL << 0)

/* DLDataTypeCode values beyond 0.6's (kDLInt 0 ... kDLComplex 5). */
enum {
    TDC_DL_BOOL = 6,
    TDC_DL_FLOAT8_E4M3FN = 10,
    TDC_DL_FLOAT8_E4M3FNUZ = 11,
    TDC_DL_FLOAT8_E5M2 = 12,
    TDC_DL_FLOAT8_E5M2FNUZ = 13,
    TDC_DL_FLOAT8_E8M0FNU = 14,
};

struct tdc_dlpack_version {
    uint32_t major, minor;
};

/* Same tag and layout as DLPack 1.x's DLManagedTensorVersioned. */
struct DLManagedTensorVersioned {
    struct tdc_dlpack_version version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
};

#endif
