/* gpu_cuda: the CUDA backend. One cuMemCreate allocation per shard, created
 * shareable as a POSIX file descriptor (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
 * and mapped into the daemon's address space for the copies; with legacy IPC
 * also a cuMemAlloc copy (2 MiB-rounded) exported with cuIpcGetMemHandle.
 * Staging buffers are pinned (cuMemHostAlloc), each with its own stream so
 * that the loader's threads copy side by side; each copy is a
 * cuMemcpyHtoDAsync on its buffer's stream followed by an event that
 * stage_wait synchronises before the buffer is refilled.
 *
 * Every entry point makes the device's primary context current first: the
 * loader thread allocates and copies, but the last lease can end (and free
 * an allocation) on the IPC thread. */
#include "gpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "cuda_api.h"
#include "log.h"
#include "machine.h"
#include "util.h"

#define LEGACY_ALIGN (2u << 20)

struct cuda_backend {
    struct cuda_api api;
    pthread_mutex_t lock;      /* guards ctx[] creation */
    CUcontext ctx[DEVICE_NAME_MAX_DEVICES]; /* primary contexts, retained on first use */
    CUdevice dev[DEVICE_NAME_MAX_DEVICES];
    int posix_fd[DEVICE_NAME_MAX_DEVICES]; /* device can export POSIX fds */
};

struct cuda_alloc {
    int dev;
    CUmemGenericAllocationHandle handle;
    int have_handle;
    CUdeviceptr va;            /* the daemon's mapping (read-write, for the copies) */
    int reserved, mapped;
    CUdeviceptr legacy;        /* cuMemAlloc copy, 0 when none */
};

struct gpu_stage {
    struct cuda_backend *cb;
    int dev;
    unsigned nbuf;
    size_t bytes;
    void *host;                /* nbuf * bytes pinned */
    CUstream *streams;         /* one per buffer */
    CUevent *events;           /* one per buffer, recorded after its copy */
};

/* The one place a CUresult becomes an error: out of device memory is
 * ST_ERR_DEVICE_MEMORY, anything else ST_ERR_DEVICE; the message names the
 * call and the driver's description. Returns the errno that goes with it. */
static int cuda_fail(struct cuda_backend *cb, CUresult r, const char *what, struct st_error *err)
{
    char d[160];
    return st_error_fail(err, r == CUDA_ERROR_OUT_OF_MEMORY ? ST_ERR_DEVICE_MEMORY : ST_ERR_DEVICE,
                         "%s: %s", what, cuda_api_describe(&cb->api, r, d, sizeof(d)));
}

static void log_cuda(struct cuda_backend *cb, CUresult r, const char *what)
{
    char d[160];
    log_msg(LOG_ERROR, "gpu: %s: %s", what, cuda_api_describe(&cb->api, r, d, sizeof(d)));
}

/* Makes dev's primary context current on this thread. */
static int use_device(struct cuda_backend *cb, int dev, struct st_error *err)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&cb->lock);
    if (!cb->ctx[dev])
        r = cb->api.DevicePrimaryCtxRetain(&cb->ctx[dev], cb->dev[dev]);
    CUcontext ctx = cb->ctx[dev];
    pthread_mutex_unlock(&cb->lock);
    if (r != CUDA_SUCCESS)
        return cuda_fail(cb, r, "cuDevicePrimaryCtxRetain", err);
    r = cb->api.CtxSetCurrent(ctx);
    return r == CUDA_SUCCESS ? 0 : cuda_fail(cb, r, "cuCtxSetCurrent", err);
}

static int cuda_alloc(struct gpu_backend *b, int dev, uint64_t size, int legacy, const char *label,
                      struct gpu_alloc *a, struct st_error *err)
{
    (void)label;
    struct cuda_backend *cb = b->priv;
    struct cuda_alloc *ca = xcalloc(1, sizeof(*ca));
    CUmemAllocationProp prop;
    size_t gran = 0;
    CUresult r;
    ca->dev = dev;
    a->priv = ca;
    a->fd = -1;
    a->size = size;
    int rc = use_device(cb, dev, err);
    if (rc < 0)
        return rc;
    if (!cb->posix_fd[dev]) {
        return st_error_fail(err, ST_ERR_NO_DEVICE,
                             "device %d cannot export memory as POSIX file descriptors", dev);
    }
    cuda_api_posix_prop(&prop, dev);
    r = cb->api.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS || gran == 0)
        return cuda_fail(cb, r, "cuMemGetAllocationGranularity", err);
    a->alloc_size = ((size ? size : 1) + gran - 1) / gran * gran;
    r = cb->api.MemCreate(&ca->handle, a->alloc_size, &prop, 0);
    if (r != CUDA_SUCCESS)
        return cuda_fail(cb, r, "cuMemCreate", err);
    ca->have_handle = 1;
    r = cb->api.MemAddressReserve(&ca->va, a->alloc_size, gran, 0, 0);
    if (r != CUDA_SUCCESS)
        return cuda_fail(cb, r, "cuMemAddressReserve", err);
    ca->reserved = 1;
    r = cb->api.MemMap(ca->va, a->alloc_size, 0, ca->handle, 0);
    if (r != CUDA_SUCCESS)
        return cuda_fail(cb, r, "cuMemMap", err);
    ca->mapped = 1;
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    r = cb->api.MemSetAccess(ca->va, a->alloc_size, &acc, 1);
    if (r != CUDA_SUCCESS)
        return cuda_fail(cb, r, "cuMemSetAccess", err);
    int fd = -1;
    r = cb->api.MemExportToShareableHandle(&fd, ca->handle,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS)
        return cuda_fail(cb, r, "cuMemExportToShareableHandle", err);
    a->fd = fd;
    if (legacy) {
        a->legacy_size = ((size ? size : 1) + LEGACY_ALIGN - 1) / LEGACY_ALIGN * LEGACY_ALIGN;
        r = cb->api.MemAlloc(&ca->legacy, a->legacy_size);
        if (r != CUDA_SUCCESS) {
            a->legacy_size = 0;
            return cuda_fail(cb, r, "cuMemAlloc (legacy IPC copy)", err);
        }
        CUipcMemHandle h;
        r = cb->api.IpcGetMemHandle(&h, ca->legacy);
        if (r != CUDA_SUCCESS)
            return cuda_fail(cb, r, "cuIpcGetMemHandle", err);
        memcpy(a->legacy_handle, &h, sizeof(h) < GPU_LEGACY_HANDLE_BYTES ? sizeof(h)
                                                                         : GPU_LEGACY_HANDLE_BYTES);
    }
    return 0;
}

static void cuda_free(struct gpu_backend *b, struct gpu_alloc *a)
{
    struct cuda_backend *cb = b->priv;
    struct cuda_alloc *ca = a->priv;
    struct st_error err;
    if (ca) {
        /* Every release is tried even when the device's context cannot be
         * made current: skipping them would leak the whole allocation for
         * the daemon's lifetime. Each failure is logged. */
        if (use_device(cb, ca->dev, &err) < 0)
            log_msg(LOG_ERROR, "gpu: freeing an allocation on device %d: %s; trying anyway",
                    ca->dev, err.message);
        CUresult r;
        if (ca->mapped && (r = cb->api.MemUnmap(ca->va, a->alloc_size)) != CUDA_SUCCESS)
            log_cuda(cb, r, "cuMemUnmap");
        if (ca->reserved && (r = cb->api.MemAddressFree(ca->va, a->alloc_size)) != CUDA_SUCCESS)
            log_cuda(cb, r, "cuMemAddressFree");
        /* Importers hold their own references: the memory lives until they unmap. */
        if (ca->have_handle && (r = cb->api.MemRelease(ca->handle)) != CUDA_SUCCESS)
            log_cuda(cb, r, "cuMemRelease");
        if (ca->legacy && (r = cb->api.MemFree(ca->legacy)) != CUDA_SUCCESS)
            log_cuda(cb, r, "cuMemFree (legacy IPC copy)");
    }
    free(ca);
    a->priv = NULL;
    if (a->fd >= 0)
        close(a->fd);
    a->fd = -1;
}

static void cuda_stage_close(struct gpu_stage *s)
{
    if (!s)
        return;
    struct cuda_backend *cb = s->cb;
    if (use_device(cb, s->dev, NULL) == 0) {
        for (unsigned i = 0; i < s->nbuf; i++) {
            if (s->streams[i])
                cb->api.StreamSynchronize(s->streams[i]);
            if (s->events[i])
                cb->api.EventDestroy(s->events[i]);
            if (s->streams[i])
                cb->api.StreamDestroy(s->streams[i]);
        }
        if (s->host)
            cb->api.MemFreeHost(s->host);
    }
    free(s->streams);
    free(s->events);
    free(s);
}

static struct gpu_stage *cuda_stage_open(struct gpu_backend *b, int dev, unsigned nbuf,
                                         size_t bytes, struct st_error *err)
{
    struct cuda_backend *cb = b->priv;
    struct gpu_stage *s = xcalloc(1, sizeof(*s));
    CUresult r;
    s->cb = cb;
    s->dev = dev;
    s->nbuf = nbuf;
    s->bytes = bytes;
    s->events = xcalloc(nbuf, sizeof(*s->events));
    s->streams = xcalloc(nbuf, sizeof(*s->streams));
    if (use_device(cb, dev, err) < 0)
        goto fail;
    r = cb->api.MemHostAlloc(&s->host, (size_t)nbuf * bytes, 0);
    if (r != CUDA_SUCCESS) {
        s->host = NULL;
        cuda_fail(cb, r, "cuMemHostAlloc (staging buffers)", err);
        goto fail;
    }
    for (unsigned i = 0; i < nbuf; i++) {
        r = cb->api.StreamCreate(&s->streams[i], CU_STREAM_NON_BLOCKING);
        if (r != CUDA_SUCCESS) {
            s->streams[i] = NULL;
            cuda_fail(cb, r, "cuStreamCreate", err);
            goto fail;
        }
        r = cb->api.EventCreate(&s->events[i], CU_EVENT_DISABLE_TIMING);
        if (r != CUDA_SUCCESS) {
            s->events[i] = NULL;
            cuda_fail(cb, r, "cuEventCreate", err);
            goto fail;
        }
    }
    return s;
fail:
    cuda_stage_close(s);
    return NULL;
}

static void *cuda_stage_buf(struct gpu_stage *s, unsigned i)
{
    return (char *)s->host + (size_t)i * s->bytes;
}

static int cuda_stage_copy(struct gpu_stage *s, unsigned i, struct gpu_alloc *a, uint64_t off,
                           const void *src, size_t len, struct st_error *err)
{
    struct cuda_backend *cb = s->cb;
    struct cuda_alloc *ca = a->priv;
    int rc = use_device(cb, s->dev, err);
    if (rc < 0)
        return rc;
    CUresult r = cb->api.MemcpyHtoDAsync(ca->va + off, src, len, s->streams[i]);
    if (r != CUDA_SUCCESS)
        return cuda_fail(cb, r, "cuMemcpyHtoDAsync", err);
    r = cb->api.EventRecord(s->events[i], s->streams[i]);
    return r == CUDA_SUCCESS ? 0 : cuda_fail(cb, r, "cuEventRecord", err);
}

static int cuda_stage_wait(struct gpu_stage *s, unsigned i, struct st_error *err)
{
    CUresult r = s->cb->api.EventSynchronize(s->events[i]);
    return r == CUDA_SUCCESS ? 0 : cuda_fail(s->cb, r, "cuEventSynchronize", err);
}

static int cuda_finish(struct gpu_backend *b, struct gpu_alloc *a, struct st_error *err)
{
    struct cuda_backend *cb = b->priv;
    struct cuda_alloc *ca = a->priv;
    int rc = use_device(cb, ca->dev, err);
    if (rc < 0)
        return rc;
    CUresult r;
    if (ca->legacy && a->size) {
        r = cb->api.MemcpyDtoD(ca->legacy, ca->va, a->size);
        if (r != CUDA_SUCCESS)
            return cuda_fail(cb, r, "cuMemcpyDtoD (legacy IPC copy)", err);
    }
    r = cb->api.CtxSynchronize();
    return r == CUDA_SUCCESS ? 0 : cuda_fail(cb, r, "cuCtxSynchronize", err);
}

static int cuda_read_back(struct gpu_backend *b, struct gpu_alloc *a, uint64_t off, void *dst,
                          size_t len, struct st_error *err)
{
    struct cuda_backend *cb = b->priv;
    struct cuda_alloc *ca = a->priv;
    int rc = use_device(cb, ca->dev, err);
    if (rc < 0)
        return rc;
    CUresult r = cb->api.MemcpyDtoH(dst, ca->va + off, len);
    return r == CUDA_SUCCESS ? 0 : cuda_fail(cb, r, "cuMemcpyDtoH", err);
}

/* The device's free memory (cuMemGetInfo, in its primary context) less
 * GPU_RESERVE_DEVICE, or a sixteenth of the device on a small one. */
static int cuda_mem_available(struct gpu_backend *b, int dev, uint64_t *bytes,
                              struct st_error *err)
{
    struct cuda_backend *cb = b->priv;
    size_t free_bytes = 0, total = 0;
    int rc = use_device(cb, dev, err);
    if (rc < 0)
        return rc;
    CUresult r = cb->api.MemGetInfo(&free_bytes, &total);
    if (r != CUDA_SUCCESS)
        return cuda_fail(cb, r, "cuMemGetInfo", err);
    uint64_t reserve = total / 16 < GPU_RESERVE_DEVICE ? total / 16 : GPU_RESERVE_DEVICE;
    *bytes = free_bytes > reserve ? free_bytes - reserve : 0;
    return 0;
}

static void cuda_destroy(struct gpu_backend *b)
{
    struct cuda_backend *cb = b->priv;
    for (size_t i = 0; i < DEVICE_NAME_MAX_DEVICES; i++)
        if (cb->ctx[i])
            cb->api.DevicePrimaryCtxRelease(cb->dev[i]);
    pthread_mutex_destroy(&cb->lock);
    /* libcuda stays loaded: unloading a driver library mid-process is not safe. */
    free(cb);
    free(b);
}

static const struct gpu_backend_ops cuda_ops = {
    .alloc = cuda_alloc,
    .free = cuda_free,
    .stage_open = cuda_stage_open,
    .stage_buf = cuda_stage_buf,
    .stage_copy = cuda_stage_copy,
    .stage_wait = cuda_stage_wait,
    .stage_close = cuda_stage_close,
    .finish = cuda_finish,
    .read_back = cuda_read_back,
    .mem_available = cuda_mem_available,
    .destroy = cuda_destroy,
};

/* Fills devices[i] for ordinal i: every device the driver reports keeps its
 * slot, so a table index is always the ordinal. One that cannot be used
 * (no handle, no UUID, no POSIX fd export) keeps the reason in error. */
static void probe_device(struct cuda_backend *cb, struct gpu_device *d, int i)
{
    char e[160];
    size_t mem = 0;
    int vmm = 0, pfd = 0;
    CUresult r;
    d->index = i;
    d->numa_node = -1;
    snprintf(d->name, sizeof(d->name), "CUDA device %d", i);
    if ((r = cb->api.DeviceGet(&cb->dev[i], i)) != CUDA_SUCCESS) {
        snprintf(d->error, sizeof(d->error), "cuDeviceGet: %s",
                 cuda_api_describe(&cb->api, r, e, sizeof(e)));
        return;
    }
    cb->api.DeviceGetName(d->name, (int)sizeof(d->name), cb->dev[i]);
    if ((r = cuda_api_device_uuid(&cb->api, cb->dev[i], d->uuid, sizeof(d->uuid))) !=
        CUDA_SUCCESS) {
        d->uuid[0] = '\0';
        snprintf(d->error, sizeof(d->error), "cuDeviceGetUuid: %s",
                 cuda_api_describe(&cb->api, r, e, sizeof(e)));
        return;
    }
    if (cb->api.DeviceTotalMem(&mem, cb->dev[i]) == CUDA_SUCCESS)
        d->memory_bytes = mem;
    char bus[32];
    if (cb->api.DeviceGetPCIBusId(bus, (int)sizeof(bus), cb->dev[i]) == CUDA_SUCCESS)
        d->numa_node = machine_pci_numa_node("", bus);
    if (cb->api.DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                   cb->dev[i]) != CUDA_SUCCESS)
        vmm = 0;
    if (cb->api.DeviceGetAttribute(&pfd,
                                   CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                   cb->dev[i]) != CUDA_SUCCESS)
        pfd = 0;
    cb->posix_fd[i] = vmm && pfd;
    if (!cb->posix_fd[i])
        snprintf(d->error, sizeof(d->error), "the device cannot share memory as POSIX file "
                 "descriptors (virtual memory management %s, POSIX fd handles %s)",
                 vmm ? "supported" : "unsupported", pfd ? "supported" : "unsupported");
}

struct gpu_backend *gpu_cuda_probe(struct st_error *err)
{
    struct cuda_backend *cb = xcalloc(1, sizeof(*cb));
    char e[160], why[256];
    int count = 0;
    CUresult r;
    if (cuda_api_load(&cb->api, why, sizeof(why)) < 0) {
        st_error_fail(err, ST_ERR_NO_DEVICE, "%s", why);
        goto fail;
    }
    r = cb->api.DeviceGetCount(&count);
    if (r != CUDA_SUCCESS) {
        st_error_fail(err, ST_ERR_NO_DEVICE, "cuDeviceGetCount: %s",
                      cuda_api_describe(&cb->api, r, e, sizeof(e)));
        goto fail;
    }
    if (count <= 0) {
        st_error_fail(err, ST_ERR_NO_DEVICE, "no CUDA devices");
        goto fail;
    }
    if (count > DEVICE_NAME_MAX_DEVICES)
        log_msg(LOG_WARN, "gpu: %d CUDA devices; only the first %d are used", count,
                DEVICE_NAME_MAX_DEVICES);
    struct gpu_backend *b = xcalloc(1, sizeof(*b));
    pthread_mutex_init(&cb->lock, NULL);
    b->ops = &cuda_ops;
    b->name = "cuda";
    b->kind = DEVICE_CUDA;
    b->handle_type = "posix_fd";
    b->alloc_round = LEGACY_ALIGN; /* the VMM granularity of NVIDIA GPUs: 2 MiB */
    b->priv = cb;
    b->n_devices = (size_t)(count < DEVICE_NAME_MAX_DEVICES ? count : DEVICE_NAME_MAX_DEVICES);
    for (int i = 0; i < (int)b->n_devices; i++) {
        struct gpu_device *d = &b->devices[i];
        probe_device(cb, d, i);
        if (d->error[0])
            log_msg(LOG_WARN, "gpu: cuda:%d (%s) cannot be used: %s", i, d->name, d->error);
        else
            log_msg(LOG_INFO, "gpu: cuda:%d %s, %s, %llu MiB, NUMA node %d", i, d->uuid,
                    d->name, (unsigned long long)(d->memory_bytes >> 20), d->numa_node);
    }
    return b;
fail:
    free(cb);
    return NULL;
}
