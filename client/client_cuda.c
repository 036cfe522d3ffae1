/* client_cuda: imports a model's CUDA allocations into this process.
 *
 * Each allocation's POSIX fd becomes a generic allocation handle
 * (cuMemImportFromShareableHandle), mapped at a fresh reserved address and
 * made accessible read-only where the driver supports that (else
 * read-write). The driver is loaded at run time like the daemon does, so the
 * library also works on hosts without one (host models only). The device's
 * primary context is used, the one PyTorch and the runtime API use.
 *
 * Every entry point pushes that context onto the calling thread's context
 * stack and pops it before returning (cuCtxPushCurrent/cuCtxPopCurrent), so
 * the caller's current context, and with it PyTorch's current device in a
 * multi-GPU process, is the one it had before. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <strings.h>

#include "client_int.h"
#include "cmem.h"
#include "cuda_api.h"

struct cuda_map {
    CUmemGenericAllocationHandle handle;
    int imported;
    CUdeviceptr va;
    int reserved, mapped;
};

struct cuda_model {
    CUdevice dev;
    CUcontext ctx;
    struct cuda_map *maps;
};

static struct cuda_api api;
static int api_state;          /* 0 not tried, 1 loaded, -1 failed */
static char api_err[256];
static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER;

static int load_api(char *err, size_t errlen)
{
    pthread_mutex_lock(&api_lock);
    if (api_state == 0)
        api_state = cuda_api_load(&api, api_err, sizeof(api_err)) == 0 ? 1 : -1;
    int ok = api_state == 1;
    pthread_mutex_unlock(&api_lock);
    if (!ok)
        snprintf(err, errlen, "%s", api_err);
    return ok ? 0 : -1;
}

static int cerr(CUresult r, const char *what, char *err, size_t errlen)
{
    char d[160];
    snprintf(err, errlen, "%s: %s", what, cuda_api_describe(&api, r, d, sizeof(d)));
    return -1;
}

/* The local ordinal of the device with the model's UUID ("GPU-..." or
 * "MIG-...", formatted as the daemon does; CUDA_VISIBLE_DEVICES may renumber
 * devices in this process), or -1. */
static int find_device(const struct tensord_model *m, CUdevice *dev)
{
    int count = 0;
    if (api.DeviceGetCount(&count) != CUDA_SUCCESS)
        return -1;
    for (int i = 0; i < count; i++) {
        CUdevice d;
        char s[64];
        if (api.DeviceGet(&d, i) != CUDA_SUCCESS ||
            cuda_api_device_uuid(&api, d, s, sizeof(s)) != CUDA_SUCCESS)
            continue;
        if (strcasecmp(s, m->uuid) == 0) {
            *dev = d;
            return i;
        }
    }
    return -1;
}

/* Makes cm's context current for this thread on top of whatever was
 * current (pop_ctx puts that back). */
static int push_ctx(const struct cuda_model *cm, char *err, size_t errlen)
{
    CUresult r = api.CtxPushCurrent(cm->ctx);
    return r == CUDA_SUCCESS ? 0 : cerr(r, "cuCtxPushCurrent", err, errlen);
}

static void pop_ctx(void)
{
    CUcontext popped;
    api.CtxPopCurrent(&popped);
}

/* Imports and maps every allocation (cm's context current). */
static int map_allocs(struct tensord_model *m, struct cuda_model *cm, int ordinal, const int *fds,
                      char *err, size_t errlen)
{
    CUresult r;
    CUmemAllocationProp prop;
    size_t gran = 0;
    cuda_api_posix_prop(&prop, ordinal);
    if ((r = api.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) !=
        CUDA_SUCCESS)
        return cerr(r, "cuMemGetAllocationGranularity", err, errlen);
    for (size_t i = 0; i < m->n_allocs; i++) {
        struct tensord_alloc *a = &m->allocs[i];
        struct cuda_map *mp = &cm->maps[i];
        r = api.MemImportFromShareableHandle(&mp->handle, (void *)(uintptr_t)fds[i],
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r != CUDA_SUCCESS)
            return cerr(r, "cuMemImportFromShareableHandle", err, errlen);
        mp->imported = 1;
        if ((r = api.MemAddressReserve(&mp->va, a->alloc_size, gran, 0, 0)) != CUDA_SUCCESS)
            return cerr(r, "cuMemAddressReserve", err, errlen);
        mp->reserved = 1;
        if ((r = api.MemMap(mp->va, a->alloc_size, 0, mp->handle, 0)) != CUDA_SUCCESS)
            return cerr(r, "cuMemMap", err, errlen);
        mp->mapped = 1;
        CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READ};
        r = api.MemSetAccess(mp->va, a->alloc_size, &acc, 1);
        if (r != CUDA_SUCCESS) { /* read-only device mappings are not supported everywhere */
            acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            r = api.MemSetAccess(mp->va, a->alloc_size, &acc, 1);
        }
        if (r != CUDA_SUCCESS)
            return cerr(r, "cuMemSetAccess", err, errlen);
        a->device_ptr = (uint64_t)mp->va;
    }
    return 0;
}

int tdc_cuda_map(struct tensord_model *m, const int *fds, char *err, size_t errlen)
{
    if (load_api(err, errlen) < 0)
        return -1;
    struct cuda_model *cm = cmem_calloc(1, sizeof(*cm));
    if (cm)
        cm->maps = cmem_calloc(m->n_allocs, sizeof(*cm->maps));
    if (!cm || !cm->maps) {
        free(cm);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    m->cuda = cm;
    int ordinal = find_device(m, &cm->dev);
    if (ordinal < 0) {
        snprintf(err, errlen, "device %s (%s) is not visible in this process", m->uuid, m->device);
        return -1;
    }
    m->dev_index = ordinal; /* DLPack device ids are local ordinals */
    CUresult r = api.DevicePrimaryCtxRetain(&cm->ctx, cm->dev);
    if (r != CUDA_SUCCESS) {
        cm->ctx = NULL;
        return cerr(r, "cuDevicePrimaryCtxRetain", err, errlen);
    }
    if (push_ctx(cm, err, errlen) < 0)
        return -1;
    int rc = map_allocs(m, cm, ordinal, fds, err, errlen);
    pop_ctx();
    return rc;
}

void tdc_cuda_unmap(struct tensord_model *m)
{
    struct cuda_model *cm = m->cuda;
    if (!cm)
        return;
    /* Each release is tried even if the context cannot be pushed (its own
     * error then comes back, ignored): a skipped release would leak. */
    char err[256];
    int pushed = cm->ctx && push_ctx(cm, err, sizeof(err)) == 0;
    for (size_t i = 0; i < m->n_allocs; i++) {
        struct cuda_map *mp = &cm->maps[i];
        if (mp->mapped)
            api.MemUnmap(mp->va, m->allocs[i].alloc_size);
        if (mp->reserved)
            api.MemAddressFree(mp->va, m->allocs[i].alloc_size);
        if (mp->imported)
            api.MemRelease(mp->handle);
    }
    if (pushed)
        pop_ctx();
    if (cm->ctx)
        api.DevicePrimaryCtxRelease(cm->dev);
    free(cm->maps);
    free(cm);
    m->cuda = NULL;
}

int tdc_cuda_read(struct tensord_model *m, void *dst, uint64_t src, size_t n, char *err,
                  size_t errlen)
{
    struct cuda_model *cm = m->cuda;
    if (!cm || push_ctx(cm, err, errlen) < 0)
        return -1;
    CUresult r = api.MemcpyDtoH(dst, (CUdeviceptr)src, n);
    pop_ctx();
    return r == CUDA_SUCCESS ? 0 : cerr(r, "cuMemcpyDtoH", err, errlen);
}

int tdc_cuda_current_uuid(char *uuid, size_t len)
{
    /* Only a process that loaded the driver itself has a current device. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!lib)
        return -1;
    dlclose(lib);
    char err[256];
    CUcontext ctx = NULL;
    CUdevice dev;
    if (load_api(err, sizeof(err)) < 0 || api.CtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx ||
        api.CtxGetDevice(&dev) != CUDA_SUCCESS)
        return -1;
    return cuda_api_device_uuid(&api, dev, uuid, len) == CUDA_SUCCESS ? 0 : -1;
}
