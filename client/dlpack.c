/* dlpack: a mapped model's tensors handed out as DLPack tensors (0.x and
 * 1.x), zero-copy, each holding a reference on its model. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client_int.h"
#include "cmem.h"
#include "dlpack_v1.h"
#include "tensord_client.h"

/* One exported tensor: either DLPack form, and the model it keeps. */
struct dl_ctx {
    DLManagedTensor mt;
    struct DLManagedTensorVersioned vt;
    struct tensord_model *m;
    int64_t raw_shape[1];      /* TENSORD_DLPACK_RAW's shape: [nbytes] */
};

static void dl_deleter(DLManagedTensor *mt)
{
    struct dl_ctx *ctx = mt->manager_ctx;
    tdc_model_unref(ctx->m);
    free(ctx);
}

static void dl_deleter_versioned(struct DLManagedTensorVersioned *vt)
{
    struct dl_ctx *ctx = vt->manager_ctx;
    tdc_model_unref(ctx->m);
    free(ctx);
}

static int dl_dtype(const char *name, DLDataType *t)
{
    static const struct {
        const char *name;
        uint8_t code, bits;
    } map[] = {
        {"BOOL", TDC_DL_BOOL, 8},
        {"U8", kDLUInt, 8},
        {"I8", kDLInt, 8},
        {"U16", kDLUInt, 16},
        {"I16", kDLInt, 16},
        {"F16", kDLFloat, 16},
        {"BF16", kDLBfloat, 16},
        {"U32", kDLUInt, 32},
        {"I32", kDLInt, 32},
        {"F32", kDLFloat, 32},
        {"U64", kDLUInt, 64},
        {"I64", kDLInt, 64},
        {"F64", kDLFloat, 64},
        {"C64", kDLComplex, 64},
        {"F8_E4M3", TDC_DL_FLOAT8_E4M3FN, 8},
        {"F8_E5M2", TDC_DL_FLOAT8_E5M2, 8},
        {"F8_E4M3FNUZ", TDC_DL_FLOAT8_E4M3FNUZ, 8},
        {"F8_E5M2FNUZ", TDC_DL_FLOAT8_E5M2FNUZ, 8},
        {"F8_E8M0", TDC_DL_FLOAT8_E8M0FNU, 8},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        if (strcmp(map[i].name, name) == 0) {
            t->code = map[i].code;
            t->bits = map[i].bits;
            t->lanes = 1;
            return 0;
        }
    }
    return -1;
}

/* A context for tensor i with its DLTensor filled in (into *d), holding a
 * model reference; NULL with err. */
static struct dl_ctx *dl_new(struct tensord_model *m, size_t i, unsigned flags, int versioned,
                             char *err, size_t errlen)
{
    if (!m || i >= m->n_tensors) {
        tdc_seterr(err, errlen, "no tensor %zu", i);
        return NULL;
    }
    const struct tensord_tensor *t = &m->tensors[i];
    DLDataType dt = {.code = kDLUInt, .bits = 8, .lanes = 1};
    if (!(flags & TENSORD_DLPACK_RAW) && dl_dtype(t->dtype, &dt) < 0) {
        tdc_seterr(err, errlen,
                   "DLPack has no dtype for %s (tensor %s): ask for its raw bytes "
                   "(TENSORD_DLPACK_RAW, a uint8 tensor of %llu bytes)", t->dtype, t->name,
                   (unsigned long long)t->nbytes);
        return NULL;
    }
    struct dl_ctx *ctx = cmem_calloc(1, sizeof(*ctx));
    if (!ctx) {
        tdc_seterr(err, errlen, "%s", tdc_oom);
        return NULL;
    }
    DLTensor *d = versioned ? &ctx->vt.dl_tensor : &ctx->mt.dl_tensor;
    ctx->m = m;
    atomic_fetch_add(&m->refs, 1);
    if (m->is_cuda)
        d->data = (void *)(uintptr_t)t->device_ptr;
    else /* the private copy-on-write view: consumers may write in place */
        d->data = (char *)m->cow[t->alloc] + t->offset;
    d->device.device_type = m->is_cuda ? kDLCUDA : kDLCPU;
    d->device.device_id = m->is_cuda ? m->dev_index : 0;
    d->dtype = dt;
    if (flags & TENSORD_DLPACK_RAW) {
        ctx->raw_shape[0] = (int64_t)t->nbytes;
        d->ndim = 1;
        d->shape = ctx->raw_shape;
    } else {
        d->ndim = t->ndim;
        d->shape = (int64_t *)t->shape; /* owned by the model, which the tensor keeps */
    }
    d->strides = NULL; /* compact row-major */
    d->byte_offset = 0;
    return ctx;
}

TENSORD_API struct DLManagedTensor *tensord_tensor_dlpack_ex(struct tensord_model *m, size_t i,
                                                             unsigned flags, char *err,
                                                             size_t errlen)
{
    struct dl_ctx *ctx = dl_new(m, i, flags, 0, err, errlen);
    if (!ctx)
        return NULL;
    ctx->mt.manager_ctx = ctx;
    ctx->mt.deleter = dl_deleter;
    return &ctx->mt;
}

TENSORD_API struct DLManagedTensor *tensord_tensor_dlpack(struct tensord_model *m, size_t i)
{
    return tensord_tensor_dlpack_ex(m, i, 0, NULL, 0);
}

TENSORD_API struct DLManagedTensorVersioned *
tensord_tensor_dlpack_versioned(struct tensord_model *m, size_t i, unsigned flags, char *err,
                                size_t errlen)
{
    struct dl_ctx *ctx = dl_new(m, i, flags, 1, err, errlen);
    if (!ctx)
        return NULL;
    ctx->vt.version.major = TDC_DLPACK_MAJOR;
    ctx->vt.version.minor = TDC_DLPACK_MINOR;
    ctx->vt.manager_ctx = ctx;
    ctx->vt.deleter = dl_deleter_versioned;
    ctx->vt.flags = TDC_DLPACK_FLAG_READ_ONLY;
    return &ctx->vt;
}
