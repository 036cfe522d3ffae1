/* cuda_double core: the state and its configuration, the checks every call
 * shares, devices, contexts, and the entry-point table behind
 * cuGetProcAddress (error names, what is recorded and the exit report are in
 * cd_report.c). A test double, not CUDA: see cuda_double.h. */
#include "cuda_double.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

struct cd_state cd = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The calling thread's context stack (cuCtxPushCurrent/PopCurrent; cuCtxSetCurrent
 * replaces the top). */
static __thread struct CUctx_st *ctx_stack[CD_CTX_STACK];
static __thread int ctx_depth;

void cd_lock(void) { pthread_mutex_lock(&cd.lock); }
void cd_unlock(void) { pthread_mutex_unlock(&cd.lock); }

/* ---- configuration ----------------------------------------------------- */

static long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtol(s, NULL, 0) : dflt;
}

__attribute__((constructor)) static void cd_configure(void)
{
    cd.n_devices = (int)env_long("CUDA_DOUBLE_DEVICES", 1);
    if (cd.n_devices < 0)
        cd.n_devices = 0;
    if (cd.n_devices > CD_MAX_DEVICES)
        cd.n_devices = CD_MAX_DEVICES;
    cd.driver_version = (int)env_long("CUDA_DOUBLE_DRIVER_VERSION", 12080);
    cd.mem_bytes = (size_t)env_long("CUDA_DOUBLE_MEM_MB", 4096) << 20;
    cd.granularity = (size_t)env_long("CUDA_DOUBLE_GRANULARITY", 2 << 20);
    cd.mig = env_long("CUDA_DOUBLE_MIG", 0) != 0;
    cd.bad_device = (int)env_long("CUDA_DOUBLE_BAD_DEVICE", -1);
    cd.no_readonly = env_long("CUDA_DOUBLE_NO_READONLY", 0) != 0;
    cd.init_error = cd_parse_error(getenv("CUDA_DOUBLE_INIT_ERROR"), CUDA_SUCCESS);
    cd.vanish_error = cd_parse_error(getenv("CUDA_DOUBLE_VANISH_ERROR"), CUDA_ERROR_DEVICE_UNAVAILABLE);
    cd.oom_at = env_long("CUDA_DOUBLE_OOM_AT", 0);
    cd.fail_copy_at = env_long("CUDA_DOUBLE_FAIL_COPY_AT", 0);
    cd.fail_copy_async_at = env_long("CUDA_DOUBLE_FAIL_COPY_ASYNC_AT", 0);
    cd.vanish_at = env_long("CUDA_DOUBLE_VANISH_AT", 0);
    cd.trace = env_long("CUDA_DOUBLE_TRACE", 0) != 0;
    const char *s = getenv("CUDA_DOUBLE_MISSING");
    snprintf(cd.missing, sizeof(cd.missing), ",%s,", s ? s : "");
    s = getenv("CUDA_DOUBLE_REPORT_DIR");
    snprintf(cd.report_dir, sizeof(cd.report_dir), "%s", s ? s : "");
    for (int i = 0; i < CD_MAX_DEVICES; i++)
        cd.ctx[i].dev = i;
    cd.next_handle = 0x1000;
    cd_link_configure();
}

/* ---- shared checks ----------------------------------------------------- */

CUresult cd_check_init(const char *fn)
{
    /* cuda.h, cuInit: before cuInit succeeded every other driver call
     * answers CUDA_ERROR_NOT_INITIALIZED. */
    if (!cd.inited)
        return cd_fail(CUDA_ERROR_NOT_INITIALIZED, fn, "cuInit has not succeeded");
    return CUDA_SUCCESS;
}

int cd_valid_dev(int dev)
{
    return dev >= 0 && dev < cd.n_devices;
}

struct CUctx_st *cd_current(void)
{
    return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
}

CUresult cd_need_ctx(const char *fn, struct CUctx_st **ctx)
{
    CUresult r = cd_check_init(fn);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUctx_st *c = cd_current();
    /* group__CUDA__MEM / __STREAM / __EVENT: the calls that work on "the
     * current context" list CUDA_ERROR_INVALID_CONTEXT for a thread that
     * has none (a context is per thread: making it current on the loader
     * thread says nothing about the IPC thread). A primary context whose
     * last reference was released is reset and no longer usable. */
    if (!c)
        return cd_fail(CUDA_ERROR_INVALID_CONTEXT, fn, "no current context on this thread");
    if (c->refs == 0)
        return cd_fail(CUDA_ERROR_INVALID_CONTEXT, fn,
                       "the current context (device %d) was released and reset", c->dev);
    if (cd.lost[c->dev])
        return cd_fail(cd.vanish_error, fn, "device %d is lost", c->dev);
    *ctx = c;
    return CUDA_SUCCESS;
}

static struct CUctx_st *ctx_of(CUcontext c)
{
    for (int i = 0; i < CD_MAX_DEVICES; i++)
        if (c == &cd.ctx[i])
            return &cd.ctx[i];
    return NULL;
}

/* ---- init, version, devices -------------------------------------------- */

static CUresult cd_Init(unsigned int flags)
{
    cd_lock();
    cd_trace("cuInit", "%u", flags);
    CUresult r = CUDA_SUCCESS;
    /* cuInit: flags must be 0. */
    if (flags != 0)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, "cuInit", "flags %u must be 0", flags);
    else if (cd.init_error != CUDA_SUCCESS)
        r = cd_inject(cd.init_error, "cuInit", "CUDA_DOUBLE_INIT_ERROR");
    else if (cd.n_devices == 0)
        r = cd_fail(CUDA_ERROR_NO_DEVICE, "cuInit", "CUDA_DOUBLE_DEVICES=0");
    else
        cd.inited = 1;
    cd_unlock();
    return r;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = cd.driver_version;
    return CUDA_SUCCESS;
}

static CUresult cd_DeviceGetCount(int *count)
{
    cd_lock();
    CUresult r = cd_check_init("cuDeviceGetCount");
    if (r == CUDA_SUCCESS) {
        if (!count)
            r = cd_fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetCount", "NULL count");
        else
            *count = cd.n_devices;
    }
    cd_unlock();
    return r;
}

static CUresult cd_DeviceGet(CUdevice *dev, int ordinal)
{
    cd_lock();
    CUresult r = cd_check_init("cuDeviceGet");
    /* cuDeviceGet: the ordinal must lie in [0, cuDeviceGetCount() - 1]. */
    if (r == CUDA_SUCCESS && !cd_valid_dev(ordinal))
        r = cd_fail(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet", "ordinal %d of %d", ordinal,
                    cd.n_devices);
    if (r == CUDA_SUCCESS)
        *dev = ordinal;
    cd_unlock();
    return r;
}

static CUresult dev_call(const char *fn, CUdevice dev)
{
    CUresult r = cd_check_init(fn);
    if (r != CUDA_SUCCESS)
        return r;
    if (!cd_valid_dev(dev))
        return cd_fail(CUDA_ERROR_INVALID_DEVICE, fn, "device %d", dev);
    if (cd.lost[dev])
        return cd_fail(cd.vanish_error, fn, "device %d is lost", dev);
    return CUDA_SUCCESS;
}

static CUresult cd_DeviceGetName(char *name, int len, CUdevice dev)
{
    cd_lock();
    CUresult r = dev_call("cuDeviceGetName", dev);
    if (r == CUDA_SUCCESS) {
        if (!name || len <= 0)
            r = cd_fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetName", "no buffer");
        else if (cd.mig)
            snprintf(name, (size_t)len, "CUDA test double (not a GPU) MIG 1g.10gb");
        else
            snprintf(name, (size_t)len, "CUDA test double %d (not a GPU)", dev);
    }
    cd_unlock();
    return r;
}

/* v1 (before CUDA 11.4) gives the physical GPU's UUID even for a MIG
 * instance; v2 gives the MIG instance's own (cuda.h, cuDeviceGetUuid_v2:
 * "If the device is in MIG mode, returns its MIG UUID"). Without MIG both
 * are the GPU's. */
static void fill_uuid(CUuuid *u, int dev, int v2)
{
    unsigned char *b = (unsigned char *)u->bytes;
    for (int i = 0; i < 16; i++)
        b[i] = (unsigned char)(0x5d + 17 * i);
    if (cd.mig && v2) {
        b[0] = 0x3a;
        b[15] = (unsigned char)(0x40 + dev);
    } else if (!cd.mig) {
        b[15] = (unsigned char)dev;
    }
}

static CUresult get_uuid(CUuuid *u, CUdevice dev, int v2)
{
    const char *fn = v2 ? "cuDeviceGetUuid_v2" : "cuDeviceGetUuid";
    cd_lock();
    CUresult r = dev_call(fn, dev);
    if (r == CUDA_SUCCESS && !u)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "NULL uuid");
    else if (r == CUDA_SUCCESS && dev == cd.bad_device)
        r = cd_inject(CUDA_ERROR_DEVICE_UNAVAILABLE, fn, "CUDA_DOUBLE_BAD_DEVICE");
    if (r == CUDA_SUCCESS)
        fill_uuid(u, dev, v2);
    cd_unlock();
    return r;
}

static CUresult cd_DeviceGetUuid(CUuuid *u, CUdevice dev) { return get_uuid(u, dev, 0); }
static CUresult cd_DeviceGetUuid_v2(CUuuid *u, CUdevice dev) { return get_uuid(u, dev, 1); }

static CUresult cd_DeviceTotalMem(size_t *bytes, CUdevice dev)
{
    cd_lock();
    CUresult r = dev_call("cuDeviceTotalMem", dev);
    if (r == CUDA_SUCCESS)
        *bytes = cd.mem_bytes;
    cd_unlock();
    return r;
}

static CUresult cd_DeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev)
{
    cd_lock();
    CUresult r = dev_call("cuDeviceGetAttribute", dev);
    if (r == CUDA_SUCCESS) {
        switch (a) {
        case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
            *v = 1;
            break;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
            *v = CU_COMPUTEMODE_DEFAULT;
            break;
        default:
            *v = 0;
        }
    }
    cd_unlock();
    return r;
}

/* ---- contexts ---------------------------------------------------------- */

static CUresult cd_DevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    cd_lock();
    CUresult r = dev_call("cuDevicePrimaryCtxRetain", dev);
    if (r == CUDA_SUCCESS && !pctx)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, "cuDevicePrimaryCtxRetain", "NULL pctx");
    else if (r == CUDA_SUCCESS && dev == cd.bad_device)
        r = cd_inject(CUDA_ERROR_DEVICE_UNAVAILABLE, "cuDevicePrimaryCtxRetain",
                      "CUDA_DOUBLE_BAD_DEVICE");
    if (r == CUDA_SUCCESS) {
        cd.ctx[dev].refs++;
        *pctx = &cd.ctx[dev];
    }
    cd_trace("cuDevicePrimaryCtxRetain", "dev %d -> refs %u", dev, cd.ctx[dev < 0 ? 0 : dev % CD_MAX_DEVICES].refs);
    cd_unlock();
    return r;
}

static CUresult cd_DevicePrimaryCtxRelease(CUdevice dev)
{
    cd_lock();
    CUresult r = cd_check_init("cuDevicePrimaryCtxRelease");
    if (r == CUDA_SUCCESS && !cd_valid_dev(dev))
        r = cd_fail(CUDA_ERROR_INVALID_DEVICE, "cuDevicePrimaryCtxRelease", "device %d", dev);
    /* group__CUDA__PRIMARY__CTX: releasing a primary context that was not
     * retained fails with CUDA_ERROR_INVALID_CONTEXT; when the last
     * reference goes the context is reset, and what was created in it
     * (streams, events, cuMemAlloc memory) goes with it. */
    else if (r == CUDA_SUCCESS && cd.ctx[dev].refs == 0)
        r = cd_fail(CUDA_ERROR_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease",
                    "device %d's primary context is not retained", dev);
    else if (r == CUDA_SUCCESS && --cd.ctx[dev].refs == 0) {
        cd.ctx[dev].resets++;
        size_t n = cd_ctx_reset(&cd.ctx[dev]);
        if (n)
            cd_violation("cuDevicePrimaryCtxRelease",
                         "the last release of device %d's primary context destroys %zu live "
                         "streams, events or allocations made in it", dev, n);
    }
    cd_trace("cuDevicePrimaryCtxRelease", "dev %d", dev);
    cd_unlock();
    return r;
}

static CUresult check_ctx_arg(const char *fn, CUcontext c)
{
    CUresult r = cd_check_init(fn);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUctx_st *x = ctx_of(c);
    if (!x)
        return cd_fail(CUDA_ERROR_INVALID_CONTEXT, fn, "%p is not a context", (void *)c);
    if (x->refs == 0)
        return cd_fail(CUDA_ERROR_INVALID_CONTEXT, fn,
                       "device %d's primary context is not retained (or was reset)", x->dev);
    return CUDA_SUCCESS;
}

static CUresult cd_CtxSetCurrent(CUcontext c)
{
    cd_lock();
    CUresult r = CUDA_SUCCESS;
    /* cuCtxSetCurrent: NULL pops the top of the stack (no-op when empty);
     * otherwise it replaces the top, or becomes the only entry. */
    if (!c) {
        if (ctx_depth > 0)
            ctx_depth--;
    } else if ((r = check_ctx_arg("cuCtxSetCurrent", c)) == CUDA_SUCCESS) {
        if (ctx_depth == 0)
            ctx_depth = 1;
        ctx_stack[ctx_depth - 1] = c;
    }
    cd_unlock();
    return r;
}

static CUresult cd_CtxGetCurrent(CUcontext *c)
{
    *c = cd_current();
    return CUDA_SUCCESS;
}

/* cuDeviceGetPCIBusId: "domain:bus:device.function", a bus per device. */
static CUresult cd_DeviceGetPCIBusId(char *bus, int len, CUdevice dev)
{
    cd_lock();
    CUresult r = dev_call("cuDeviceGetPCIBusId", dev);
    if (r == CUDA_SUCCESS && (!bus || len < 13))
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetPCIBusId", "buffer of %d bytes", len);
    if (r == CUDA_SUCCESS)
        snprintf(bus, (size_t)len, "0000:%02X:00.0", 0x1b + dev);
    cd_unlock();
    return r;
}

static CUresult cd_CtxGetDevice(CUdevice *d)
{
    cd_lock();
    struct CUctx_st *c;
    CUresult r = cd_need_ctx("cuCtxGetDevice", &c);
    if (r == CUDA_SUCCESS)
        *d = c->dev;
    cd_unlock();
    return r;
}

static CUresult cd_CtxPushCurrent(CUcontext c)
{
    cd_lock();
    CUresult r = check_ctx_arg("cuCtxPushCurrent", c);
    if (r == CUDA_SUCCESS && ctx_depth == CD_CTX_STACK)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, "cuCtxPushCurrent", "context stack full");
    if (r == CUDA_SUCCESS)
        ctx_stack[ctx_depth++] = c;
    cd_unlock();
    return r;
}

static CUresult cd_CtxPopCurrent(CUcontext *pc)
{
    cd_lock();
    CUresult r = cd_check_init("cuCtxPopCurrent");
    /* cuCtxPopCurrent: popping an empty stack is CUDA_ERROR_INVALID_CONTEXT. */
    if (r == CUDA_SUCCESS && ctx_depth == 0)
        r = cd_fail(CUDA_ERROR_INVALID_CONTEXT, "cuCtxPopCurrent", "the context stack is empty");
    if (r == CUDA_SUCCESS) {
        struct CUctx_st *c = ctx_stack[--ctx_depth];
        if (pc)
            *pc = c;
    }
    cd_unlock();
    return r;
}

static CUresult cd_CtxSynchronize(void)
{
    cd_lock();
    struct CUctx_st *c;
    CUresult r = cd_need_ctx("cuCtxSynchronize", &c);
    /* cuCtxSynchronize waits for everything queued in the context and
     * returns an error if one of those tasks failed. */
    if (r == CUDA_SUCCESS)
        r = cd_ctx_run(c, 1);
    cd_unlock();
    return r;
}

/* ---- cuGetProcAddress -------------------------------------------------- */


/* name, the CUDA version that introduced this variant, the function. The
 * real driver picks, per name, the newest variant no newer than the
 * version asked for (cuGetProcAddress). */
static const struct {
    const char *name;
    int since;
    void *fn;
} procs[] = {
#define P(name, since, fn) {name, since, (void *)(fn)}
    P("cuInit", 2000, cd_Init),
    P("cuDriverGetVersion", 2020, cuDriverGetVersion),
    P("cuDeviceGetCount", 2000, cd_DeviceGetCount),
    P("cuDeviceGet", 2000, cd_DeviceGet),
    P("cuDeviceGetName", 2000, cd_DeviceGetName),
    P("cuDeviceGetUuid", 9020, cd_DeviceGetUuid),
    P("cuDeviceGetUuid", 11040, cd_DeviceGetUuid_v2),
    P("cuDeviceTotalMem", 3020, cd_DeviceTotalMem),
    P("cuDeviceGetAttribute", 2000, cd_DeviceGetAttribute),
    P("cuDevicePrimaryCtxRetain", 7000, cd_DevicePrimaryCtxRetain),
    P("cuDevicePrimaryCtxRelease", 11000, cd_DevicePrimaryCtxRelease),
    P("cuCtxSetCurrent", 4000, cd_CtxSetCurrent),
    P("cuCtxGetCurrent", 4000, cd_CtxGetCurrent),
    P("cuCtxGetDevice", 2000, cd_CtxGetDevice),
    P("cuDeviceGetPCIBusId", 4010, cd_DeviceGetPCIBusId),
    P("cuCtxPushCurrent", 4000, cd_CtxPushCurrent),
    P("cuCtxPopCurrent", 4000, cd_CtxPopCurrent),
    P("cuCtxSynchronize", 2000, cd_CtxSynchronize),
    P("cuGetErrorString", 6000, cd_GetErrorString),
    P("cuGetErrorName", 6000, cd_GetErrorName),
    P("cuMemGetAllocationGranularity", 10020, cd_MemGetAllocationGranularity),
    P("cuMemCreate", 10020, cd_MemCreate),
    P("cuMemRelease", 10020, cd_MemRelease),
    P("cuMemAddressReserve", 10020, cd_MemAddressReserve),
    P("cuMemAddressFree", 10020, cd_MemAddressFree),
    P("cuMemMap", 10020, cd_MemMap),
    P("cuMemUnmap", 10020, cd_MemUnmap),
    P("cuMemSetAccess", 10020, cd_MemSetAccess),
    P("cuMemExportToShareableHandle", 10020, cd_MemExportToShareableHandle),
    P("cuMemImportFromShareableHandle", 10020, cd_MemImportFromShareableHandle),
    P("cuMemAlloc", 3020, cd_MemAlloc),
    P("cuMemFree", 3020, cd_MemFree),
    P("cuMemGetInfo", 3020, cd_MemGetInfo),
    P("cuIpcGetMemHandle", 4010, cd_IpcGetMemHandle),
    P("cuIpcOpenMemHandle", 11000, cd_IpcOpenMemHandle),
    P("cuIpcCloseMemHandle", 4010, cd_IpcCloseMemHandle),
    P("cuMemHostAlloc", 2020, cd_MemHostAlloc),
    P("cuMemFreeHost", 2000, cd_MemFreeHost),
    P("cuMemHostRegister", 6050, cd_MemHostRegister),
    P("cuMemHostUnregister", 4000, cd_MemHostUnregister),
    P("cuStreamCreate", 2000, cd_StreamCreate),
    P("cuStreamDestroy", 4000, cd_StreamDestroy),
    P("cuStreamSynchronize", 2000, cd_StreamSynchronize),
    P("cuEventCreate", 2000, cd_EventCreate),
    P("cuEventRecord", 2000, cd_EventRecord),
    P("cuEventSynchronize", 2000, cd_EventSynchronize),
    P("cuEventQuery", 2000, cd_EventQuery),
    P("cuEventDestroy", 4000, cd_EventDestroy),
    P("cuMemcpyHtoDAsync", 3020, cd_MemcpyHtoDAsync),
    P("cuMemcpyHtoD", 3020, cd_MemcpyHtoD),
    P("cuMemcpyDtoH", 3020, cd_MemcpyDtoH),
    P("cuMemcpyDtoD", 3020, cd_MemcpyDtoD),
#undef P
};

static CUresult get_proc(const char *fn, const char *symbol, void **pfn, int version,
                         CUdriverProcAddressQueryResult *status)
{
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = CUDA_SUCCESS;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    cd_lock();
    /* cuGetProcAddress: asking for a CUDA version newer than the driver's
     * is CUDA_ERROR_INVALID_VALUE; a symbol that is missing, or has no
     * variant that old, gives CUDA_SUCCESS with a NULL pointer and says
     * which in symbolStatus. */
    if (version > cd.driver_version) {
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%s asked for CUDA %d, the driver is %d",
                    symbol, version, cd.driver_version);
    } else {
        char key[128];
        snprintf(key, sizeof(key), ",%s,", symbol);
        int best = -1;
        for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
            if (strcmp(procs[i].name, symbol) != 0)
                continue;
            if (strstr(cd.missing, key))
                break;
            st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            if (procs[i].since <= version && (best < 0 || procs[i].since > procs[best].since))
                best = (int)i;
        }
        if (best >= 0) {
            *pfn = procs[best].fn;
            st = CU_GET_PROC_ADDRESS_SUCCESS;
        }
        cd_trace(fn, "%s, %d -> %s", symbol, version, best >= 0 ? "found" : "not found");
    }
    cd_unlock();
    if (status)
        *status = st;
    return r;
}

EXPORT CUresult cd_get_proc_v1(const char *symbol, void **pfn, int version, cuuint64_t flags)
    __asm__("cuGetProcAddress");
EXPORT CUresult cd_get_proc_v1(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    (void)flags;
    return get_proc("cuGetProcAddress", symbol, pfn, version, NULL);
}

EXPORT CUresult cd_get_proc_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                               CUdriverProcAddressQueryResult *status)
    __asm__("cuGetProcAddress_v2");
EXPORT CUresult cd_get_proc_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                               CUdriverProcAddressQueryResult *status)
{
    (void)flags;
    return get_proc("cuGetProcAddress_v2", symbol, pfn, version, status);
}
