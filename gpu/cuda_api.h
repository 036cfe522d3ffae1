/* cuda_api: the CUDA driver entry points tensord uses, resolved at run time.
 *
 * libcuda.so.1 is dlopen'ed and every entry point is fetched with
 * cuGetProcAddress for the CUDA 12.0 ABI (the one these prototypes
 * describe), so binaries built against newer headers (CUDA 13 renamed and
 * re-versioned several symbols) keep calling the functions they were written
 * for, and hosts without a driver only see an error. Member names drop the
 * "cu" prefix because cuda.h #defines many cu* names to their _v2 symbols.
 *
 * Tests load the CUDA driver test double (tests/cuda_double/) in place of
 * the driver through this same path, by putting its directory first on
 * LD_LIBRARY_PATH; there is no other way in, and none is needed.
 *
 * Included by *_cuda.c files only (the daemon's backend and the client
 * library, which links nothing of core but util), hence the inline loader. */
#ifndef TENSORD_CUDA_API_H
#define TENSORD_CUDA_API_H

#include <cuda.h>
#include <dlfcn.h>

/* The prototypes below are the CUDA 12.0 ABI: older headers lack some of
 * the types (CUdriverProcAddressQueryResult) and symbols they name. */
#if !defined(CUDA_VERSION) || CUDA_VERSION < 12000
#error "tensord's CUDA backend needs the CUDA 12.0 headers (cuda.h with CUDA_VERSION >= 12000) or newer"
#endif
#include <stdio.h>
#include <string.h>

#define CUDA_API_ABI_VERSION 12000

/* X(member, symbol, parameter list); every function returns CUresult. */
#define CUDA_API_FUNCS(X)                                                                      \
    X(Init, "cuInit", (unsigned int flags))                                                    \
    X(DeviceGetCount, "cuDeviceGetCount", (int *count))                                        \
    X(DeviceGet, "cuDeviceGet", (CUdevice *dev, int ordinal))                                  \
    X(DeviceGetName, "cuDeviceGetName", (char *name, int len, CUdevice dev))                   \
    X(DeviceGetUuid, "cuDeviceGetUuid", (CUuuid *uuid, CUdevice dev))                          \
    X(DeviceTotalMem, "cuDeviceTotalMem", (size_t *bytes, CUdevice dev))                       \
    X(DeviceGetPCIBusId, "cuDeviceGetPCIBusId", (char *bus, int len, CUdevice dev))          \
    X(DeviceGetAttribute, "cuDeviceGetAttribute", (int *v, CUdevice_attribute a, CUdevice dev)) \
    X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext *ctx, CUdevice dev))      \
    X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", (CUdevice dev))                    \
    X(CtxSetCurrent, "cuCtxSetCurrent", (CUcontext ctx))                                       \
    X(CtxPushCurrent, "cuCtxPushCurrent", (CUcontext ctx))                                     \
    X(CtxPopCurrent, "cuCtxPopCurrent", (CUcontext *ctx))                                      \
    X(CtxGetCurrent, "cuCtxGetCurrent", (CUcontext *ctx))                                      \
    X(CtxGetDevice, "cuCtxGetDevice", (CUdevice *dev))                                         \
    X(CtxSynchronize, "cuCtxSynchronize", (void))                                              \
    X(GetErrorString, "cuGetErrorString", (CUresult e, const char **s))                        \
    X(GetErrorName, "cuGetErrorName", (CUresult e, const char **s))                            \
    X(MemGetAllocationGranularity, "cuMemGetAllocationGranularity",                            \
      (size_t *g, const CUmemAllocationProp *p, CUmemAllocationGranularity_flags f))           \
    X(MemCreate, "cuMemCreate",                                                                \
      (CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *p,             \
       unsigned long long flags))                                                              \
    X(MemRelease, "cuMemRelease", (CUmemGenericAllocationHandle h))                            \
    X(MemAddressReserve, "cuMemAddressReserve",                                                \
      (CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags)) \
    X(MemAddressFree, "cuMemAddressFree", (CUdeviceptr p, size_t size))                        \
    X(MemMap, "cuMemMap",                                                                      \
      (CUdeviceptr p, size_t size, size_t off, CUmemGenericAllocationHandle h,                 \
       unsigned long long flags))                                                              \
    X(MemUnmap, "cuMemUnmap", (CUdeviceptr p, size_t size))                                    \
    X(MemSetAccess, "cuMemSetAccess",                                                          \
      (CUdeviceptr p, size_t size, const CUmemAccessDesc *desc, size_t count))                 \
    X(MemExportToShareableHandle, "cuMemExportToShareableHandle",                              \
      (void *out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType t,                 \
       unsigned long long flags))                                                              \
    X(MemImportFromShareableHandle, "cuMemImportFromShareableHandle",                          \
      (CUmemGenericAllocationHandle * h, void *handle, CUmemAllocationHandleType t))           \
    X(MemAlloc, "cuMemAlloc", (CUdeviceptr *p, size_t size))                                   \
    X(MemGetInfo, "cuMemGetInfo", (size_t *free_bytes, size_t *total_bytes))                   \
    X(MemFree, "cuMemFree", (CUdeviceptr p))                                                   \
    X(IpcGetMemHandle, "cuIpcGetMemHandle", (CUipcMemHandle *h, CUdeviceptr p))                \
    X(MemHostAlloc, "cuMemHostAlloc", (void **p, size_t size, unsigned int flags))             \
    X(MemFreeHost, "cuMemFreeHost", (void *p))                                                 \
    X(StreamCreate, "cuStreamCreate", (CUstream *s, unsigned int flags))                       \
    X(StreamDestroy, "cuStreamDestroy", (CUstream s))                                          \
    X(StreamSynchronize, "cuStreamSynchronize", (CUstream s))                                  \
    X(EventCreate, "cuEventCreate", (CUevent *e, unsigned int flags))                          \
    X(EventRecord, "cuEventRecord", (CUevent e, CUstream s))                                   \
    X(EventSynchronize, "cuEventSynchronize", (CUevent e))                                     \
    X(EventDestroy, "cuEventDestroy", (CUevent e))                                             \
    X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync",                                                    \
      (CUdeviceptr dst, const void *src, size_t n, CUstream s))                                \
    X(MemcpyDtoH, "cuMemcpyDtoH", (void *dst, CUdeviceptr src, size_t n))                      \
    X(MemcpyDtoD, "cuMemcpyDtoD", (CUdeviceptr dst, CUdeviceptr src, size_t n))

struct cuda_api {
    void *lib;                 /* dlopen handle of libcuda.so.1 */
    int driver_version;        /* e.g. 12040 */
#define CUDA_API_MEMBER(m, sym, params) CUresult (*m) params;
    CUDA_API_FUNCS(CUDA_API_MEMBER)
#undef CUDA_API_MEMBER
    /* cuDeviceGetUuid as CUDA 11.0 had it (NULL where the driver has none):
     * for a MIG instance it gives the physical GPU's UUID where the 12.0
     * variant (_v2) gives the instance's own, which is how a MIG instance
     * is told apart. */
    CUresult (*DeviceGetUuidV1)(CUuuid *uuid, CUdevice dev);
};

/* "CUDA_ERROR_X (N): description" for r, in buf (returned). */
static inline const char *cuda_api_describe(const struct cuda_api *api, CUresult r, char *buf,
                                            size_t len)
{
    const char *name = NULL, *text = NULL;
    if (!api->GetErrorName || api->GetErrorName(r, &name) != CUDA_SUCCESS)
        name = NULL;
    if (!api->GetErrorString || api->GetErrorString(r, &text) != CUDA_SUCCESS)
        text = NULL;
    snprintf(buf, len, "%s (%d): %s", name ? name : "CUDA error", (int)r,
             text ? text : "unknown CUDA error");
    return buf;
}

/* Loads the driver and every entry point, and initialises it (cuInit).
 * Returns 0, or -1 with a reason in err (no driver, driver too old, a
 * missing entry point, cuInit's error: then the library stays loaded, as
 * unloading a driver that ran is not safe). A message
 * buffer, not core's struct st_error: the client library compiles this
 * header too, and it links nothing of core's errors (its own API reports
 * into the caller's buffer). */
static inline int cuda_api_load(struct cuda_api *api, char *err, size_t errlen)
{
    typedef CUresult (*proc_v2_fn)(const char *, void **, int, cuuint64_t,
                                   CUdriverProcAddressQueryResult *);
    typedef CUresult (*proc_v1_fn)(const char *, void **, int, cuuint64_t);
    typedef CUresult (*version_fn)(int *);
    memset(api, 0, sizeof(*api));
    api->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!api->lib) {
        const char *e = dlerror();
        snprintf(err, errlen, "no NVIDIA driver: cannot load libcuda.so.1 (%s)", e ? e : "?");
        return -1;
    }
    version_fn version = (version_fn)dlsym(api->lib, "cuDriverGetVersion");
    proc_v2_fn proc2 = (proc_v2_fn)dlsym(api->lib, "cuGetProcAddress_v2");
    proc_v1_fn proc1 = (proc_v1_fn)dlsym(api->lib, "cuGetProcAddress");
    if (!version || (!proc2 && !proc1) || version(&api->driver_version) != CUDA_SUCCESS) {
        snprintf(err, errlen, "libcuda.so.1 lacks cuDriverGetVersion/cuGetProcAddress "
                              "(driver older than CUDA 11.3)");
        goto fail;
    }
    if (api->driver_version < 11030) {
        snprintf(err, errlen, "the NVIDIA driver supports CUDA %d.%d; 11.3 or newer is needed",
                 api->driver_version / 1000, api->driver_version % 1000 / 10);
        goto fail;
    }
    int want = api->driver_version < CUDA_API_ABI_VERSION ? api->driver_version
                                                           : CUDA_API_ABI_VERSION;
#define CUDA_API_RESOLVE(m, sym, params)                                                       \
    {                                                                                          \
        void *fn = NULL;                                                                       \
        CUresult r = proc2 ? proc2(sym, &fn, want, CU_GET_PROC_ADDRESS_DEFAULT, NULL)          \
                           : proc1(sym, &fn, want, CU_GET_PROC_ADDRESS_DEFAULT);               \
        if (r != CUDA_SUCCESS || !fn) {                                                        \
            snprintf(err, errlen, "the NVIDIA driver (CUDA %d.%d) has no %s",                  \
                     api->driver_version / 1000, api->driver_version % 1000 / 10, sym);        \
            goto fail;                                                                         \
        }                                                                                      \
        memcpy(&api->m, &fn, sizeof(fn));                                                      \
    }
    CUDA_API_FUNCS(CUDA_API_RESOLVE)
#undef CUDA_API_RESOLVE
    {
        void *fn = NULL;
        CUresult r = proc2 ? proc2("cuDeviceGetUuid", &fn, 11000, CU_GET_PROC_ADDRESS_DEFAULT, NULL)
                           : proc1("cuDeviceGetUuid", &fn, 11000, CU_GET_PROC_ADDRESS_DEFAULT);
        if (r == CUDA_SUCCESS && fn)
            memcpy(&api->DeviceGetUuidV1, &fn, sizeof(fn));
    }
    CUresult r = api->Init(0);
    if (r != CUDA_SUCCESS) {
        char d[160];
        snprintf(err, errlen, "cuInit: %s", cuda_api_describe(api, r, d, sizeof(d)));
        return -1;
    }
    return 0;
fail:
    dlclose(api->lib);
    memset(api, 0, sizeof(*api));
    return -1;
}

/* The properties of device memory on ordinal dev shared as a POSIX fd:
 * what the daemon creates and workers import. */
static inline void cuda_api_posix_prop(CUmemAllocationProp *p, int dev)
{
    memset(p, 0, sizeof(*p));
    p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->location.id = dev;
    p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

/* dev's UUID as `nvidia-smi -L` prints it: "MIG-" and the instance's UUID
 * for a MIG instance, "GPU-" and the GPU's otherwise. A MIG instance is one
 * whose UUID differs from what the pre-11.4 cuDeviceGetUuid reports (its
 * GPU's); where the driver lacks that variant, one whose name says MIG
 * ("NVIDIA A100-SXM4-40GB MIG 1g.5gb"). Returns CUDA_SUCCESS or the error. */
static inline CUresult cuda_api_device_uuid(const struct cuda_api *api, CUdevice dev, char *out,
                                            size_t outlen)
{
    CUuuid u, parent;
    char name[256];
    CUresult r = api->DeviceGetUuid(&u, dev);
    if (r != CUDA_SUCCESS)
        return r;
    int mig;
    if (api->DeviceGetUuidV1 && api->DeviceGetUuidV1(&parent, dev) == CUDA_SUCCESS)
        mig = memcmp(parent.bytes, u.bytes, sizeof(u.bytes)) != 0;
    else
        mig = api->DeviceGetName(name, (int)sizeof(name), dev) == CUDA_SUCCESS &&
              strstr(name, " MIG ") != NULL;
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(out, outlen,
             "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             mig ? "MIG" : "GPU", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
             b[10], b[11], b[12], b[13], b[14], b[15]);
    return CUDA_SUCCESS;
}

#endif
