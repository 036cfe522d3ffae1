/* cuda_double: a CUDA driver TEST DOUBLE. It is not CUDA.
 *
 * A shared library built as libcuda.so.1 that tensord and its client load
 * in place of NVIDIA's driver, through the same dlopen("libcuda.so.1") +
 * cuGetProcAddress path they use in production (the tests put its
 * directory first on LD_LIBRARY_PATH; nothing in tensord knows about it).
 * It proves tensord's control flow: which calls it makes, in which order,
 * on which thread, with which arguments, and what it does when a call
 * fails. It proves nothing about GPU performance, real driver bugs, or code
 * that runs on a GPU.
 *
 * Device memory lives in host memory. Every cuMemCreate/cuMemAlloc
 * allocation is a memfd, so the POSIX file descriptor that
 * cuMemExportToShareableHandle returns is a real descriptor that crosses a
 * Unix socket and maps in another process. A mapping's host protection
 * follows its CUDA access flags (none until cuMemSetAccess, PROT_READ for
 * read-only, read-write otherwise), so touching memory before access was
 * set, or writing through a read-only mapping, faults, as a kernel doing so
 * would. Unlike a real GPU the host can read device pointers: the double
 * cannot catch host code dereferencing them.
 *
 * The rules the driver documents and tensord must respect are enforced
 * (each checked against the CUDA Driver API reference, group__CUDA__VA,
 * __MEM, __CTX, __PRIMARY__CTX, __STREAM, __EVENT, __DRIVER__ENTRY__POINT,
 * and the comments in cuda.h; see the comment at each check). A call the
 * real driver refuses returns the documented error. Misuse the real driver
 * does not report but that makes tensord's behaviour undefined or racy
 * (waiting on an event never recorded, freeing memory a pending copy still
 * reads, using a released handle) is a "violation". Both are logged on
 * stderr and written to a per-process report.
 *
 * Asynchronous copies really are asynchronous: a copy from pinned memory is
 * queued on its stream and performed only when something synchronises with
 * it (an event recorded after it, its stream, the context), so a staging
 * buffer refilled before its copy was waited for lands in device memory as
 * the wrong bytes.
 *
 * Environment (all optional):
 *   CUDA_DOUBLE_DEVICES=N          devices (default 1, at most 8)
 *   CUDA_DOUBLE_DRIVER_VERSION=V   what cuDriverGetVersion says (default 12080)
 *   CUDA_DOUBLE_MEM_MB=N           memory per device (default 4096)
 *   CUDA_DOUBLE_GRANULARITY=N      minimum VMM granularity in bytes (default 2 MiB)
 *   CUDA_DOUBLE_MIG=1              the devices are MIG instances of one GPU
 *   CUDA_DOUBLE_BAD_DEVICE=K       ordinal K cannot be opened (cuDeviceGetUuid and
 *                                  cuDevicePrimaryCtxRetain fail)
 *   CUDA_DOUBLE_NO_READONLY=1      cuMemSetAccess refuses read-only access
 *   CUDA_DOUBLE_MISSING=a,b        cuGetProcAddress does not find these symbols
 *   CUDA_DOUBLE_INIT_ERROR=E       cuInit fails with E (a number or CUDA_ERROR_ name)
 *   CUDA_DOUBLE_OOM_AT=N           the Nth device allocation (cuMemCreate or cuMemAlloc,
 *                                  counted together from 1) is out of memory
 *   CUDA_DOUBLE_FAIL_COPY_AT=N     the Nth cuMemcpyHtoDAsync is refused when queued
 *   CUDA_DOUBLE_FAIL_COPY_ASYNC_AT=N  the Nth cuMemcpyHtoDAsync fails while it runs; the
 *                                  synchronisation that waits for it reports the error
 *   CUDA_DOUBLE_VANISH_AT=N        the device is lost at the Nth cuMemcpyHtoDAsync: from
 *                                  then on every call on it fails (releases still release)
 *   CUDA_DOUBLE_VANISH_ERROR=E     the error a lost device reports (default
 *                                  CUDA_ERROR_DEVICE_UNAVAILABLE)
 *   CUDA_DOUBLE_REPORT_DIR=DIR     at exit, write DIR/cuda-double.PID.json: live objects,
 *                                  violations, errors returned, faults injected
 *   CUDA_DOUBLE_TRACE=1            log every call on stderr
 * Fault counters count calls in one process. */
#ifndef CUDA_DOUBLE_H
#define CUDA_DOUBLE_H

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define CD_MAX_DEVICES 8
#define CD_CTX_STACK 16

struct CUctx_st {
    int dev;
    unsigned refs;             /* primary context retain count */
    unsigned resets;           /* times the count fell to zero */
};

/* One queued asynchronous copy. */
struct cd_op {
    char *dst;
    const char *src;
    size_t n;
    int fail;                  /* injected: the copy fails when it runs */
    uint64_t seq;              /* its position in the stream */
};

struct CUstream_st {
    int live;
    struct CUctx_st *ctx;
    unsigned flags;
    uint64_t queued, done;     /* ops ever queued / ever completed */
    struct cd_op *ops;         /* pending, oldest first */
    size_t n_ops, cap_ops;
    CUresult error;            /* a failed op's error, reported by the next sync */
    struct CUstream_st *next;
};

struct CUevent_st {
    int live;
    struct CUctx_st *ctx;
    int recorded;
    struct CUstream_st *stream; /* NULL: recorded on the legacy stream */
    uint64_t seq;              /* the stream position it captured */
    struct CUevent_st *next;
};

/* Device memory: one memfd. */
struct cd_mem {
    int fd;
    size_t size;
    int dev;
    int exportable;            /* requested with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
    unsigned refs;             /* live handles + live mappings */
};

struct cd_handle {
    CUmemGenericAllocationHandle id;
    struct cd_mem *mem;
    int live;                  /* not yet cuMemRelease'd */
    int imported;
    struct cd_handle *next;
};

struct cd_reservation {
    char *va;
    size_t size;
    struct cd_reservation *next;
};

struct cd_mapping {
    char *va;
    size_t size;
    struct cd_mem *mem;
    unsigned long long access; /* CU_MEM_ACCESS_FLAGS_PROT_*; NONE until cuMemSetAccess */
    int access_dev;            /* the device granted access */
    struct cd_mapping *next;
};

/* cuMemAlloc memory (legacy IPC copies), and cuIpcOpenMemHandle imports. */
struct cd_linear {
    char *va;
    size_t size;
    int fd;
    int dev;
    struct CUctx_st *ctx;
    int opened;                /* an import from another process (cuIpcOpenMemHandle) */
    struct cd_linear *next;
};

struct cd_host {
    char *p;
    size_t size;
    int registered;            /* cuMemHostRegister (else cuMemHostAlloc) */
    struct cd_host *next;
};

struct cd_state {
    pthread_mutex_t lock;
    int inited;
    int n_devices;
    int driver_version;
    size_t mem_bytes, granularity;
    int mig, bad_device, no_readonly;
    CUresult init_error, vanish_error;
    long oom_at, fail_copy_at, fail_copy_async_at, vanish_at;
    char missing[512];
    int trace;
    char report_dir[512];
    /* counters */
    long n_allocs, n_copies;
    unsigned long long next_handle;
    size_t used[CD_MAX_DEVICES];
    int lost[CD_MAX_DEVICES];
    struct CUctx_st ctx[CD_MAX_DEVICES];
    /* objects */
    struct cd_handle *handles;
    struct cd_reservation *reservations;
    struct cd_mapping *mappings;
    struct cd_linear *linears;
    struct cd_host *hosts;
    struct CUstream_st *streams;
    struct CUevent_st *events;
    /* what the report lists */
    char **violations, **errors, **injected;
    size_t n_violations, n_errors, n_injected;
};

extern struct cd_state cd;

/* cd_core.c */
void cd_lock(void);
void cd_unlock(void);
/* The calling thread's current context, or NULL. */
struct CUctx_st *cd_current(void);
/* CUDA_SUCCESS, or the error for a call that needs a current, active
 * context (and, lost, the device's vanish error). */
CUresult cd_need_ctx(const char *fn, struct CUctx_st **ctx);
CUresult cd_check_init(const char *fn);
int cd_valid_dev(int dev);

/* cd_report.c: error names, what the double records, the exit report. */
/* Records a documented refusal: logs "fn: why (CUDA_ERROR_X)" and returns r. */
CUresult cd_fail(CUresult r, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records misuse the real driver would not report (undefined or racy). */
void cd_violation(const char *fn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records an injected fault and returns r. */
CUresult cd_inject(CUresult r, const char *fn, const char *what);
void cd_trace(const char *fn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *cd_error_name(CUresult r);
/* The CUresult named by s ("CUDA_ERROR_X" or a number); dflt when s is NULL
 * or empty. */
CUresult cd_parse_error(const char *s, CUresult dflt);
/* cd_report.c's entry points. */
CUresult cd_GetErrorString(CUresult e, const char **s);
CUresult cd_GetErrorName(CUresult e, const char **s);

/* cd_vmm.c: cuMem* virtual memory management. */
CUresult cd_MemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p,
                                        CUmemAllocationGranularity_flags f);
CUresult cd_MemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *p,
                      unsigned long long flags);
CUresult cd_MemRelease(CUmemGenericAllocationHandle h);
CUresult cd_MemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                              unsigned long long flags);
CUresult cd_MemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cd_MemMap(CUdeviceptr ptr, size_t size, size_t off, CUmemGenericAllocationHandle h,
                   unsigned long long flags);
CUresult cd_MemUnmap(CUdeviceptr ptr, size_t size);
CUresult cd_MemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult cd_MemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                       CUmemAllocationHandleType t, unsigned long long flags);
CUresult cd_MemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os,
                                         CUmemAllocationHandleType t);
/* Device memory at [p, p+n) the current context's device may access with
 * `need` (CU_MEM_ACCESS_FLAGS_PROT_READ or _READWRITE). Returns its host
 * address, or NULL with *r set (and the refusal recorded under fn). */
char *cd_device_range(const char *fn, CUdeviceptr p, size_t n, int need, int dev, CUresult *r);
/* The same lookup without recording anything: the host address, or NULL. */
char *cd_device_lookup(CUdeviceptr p, size_t n, int need, int dev);
/* A memfd of size bytes named for device dev ("cuda-double dev N"), or -1. */
int cd_memfd(size_t size, int dev);
/* "\"handles\": N, ..." counts of live VMM objects, for the report. */
void cd_vmm_report(char *buf, size_t len);

/* cd_mem.c: linear memory, host memory, IPC. */
/* Whether [p, p+n) lies inside pinned host memory. */
int cd_is_pinned(const void *p, size_t n);
/* Destroys what a primary context reset takes with it (streams, events and
 * linear memory). Returns how many. */
size_t cd_ctx_reset(struct CUctx_st *ctx);
/* Like cd_need_ctx for calls that release something: a lost device still
 * releases (*lost is set and the caller returns the vanish error after). */
CUresult cd_release_ctx(const char *fn, struct CUctx_st **ctx, int *lost);
/* After a release: CUDA_SUCCESS, or (lost) the vanish error for dev, recorded
 * under fn. */
CUresult cd_lost_after(const char *fn, int lost, int dev);
void cd_mem_report(char *buf, size_t len);
/* cd_mem.c's entry points. */
CUresult cd_MemAlloc(CUdeviceptr *p, size_t size);
CUresult cd_MemFree(CUdeviceptr p);
CUresult cd_MemGetInfo(size_t *free_bytes, size_t *total_bytes);
CUresult cd_IpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p);
CUresult cd_IpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags);
CUresult cd_IpcCloseMemHandle(CUdeviceptr p);
CUresult cd_MemHostAlloc(void **p, size_t size, unsigned int flags);
CUresult cd_MemFreeHost(void *p);
CUresult cd_MemHostRegister(void *p, size_t size, unsigned int flags);
CUresult cd_MemHostUnregister(void *p);

/* cd_stream.c: streams, events, copies. */
/* Runs s's queued copies up to (and including) position seq. Returns the
 * first error one of them had (left on the stream), else CUDA_SUCCESS. */
CUresult cd_stream_run(struct CUstream_st *s, uint64_t seq);
/* Runs every pending copy of ctx's streams (all = also non-blocking ones). */
CUresult cd_ctx_run(struct CUctx_st *ctx, int all);
/* Whether a pending copy reads or writes [p, p+n). */
int cd_pending_touches(const char *p, size_t n);
/* cd_stream.c's entry points. */
CUresult cd_StreamCreate(CUstream *s, unsigned int flags);
CUresult cd_StreamDestroy(CUstream s);
CUresult cd_StreamSynchronize(CUstream s);
CUresult cd_EventCreate(CUevent *e, unsigned int flags);
CUresult cd_EventRecord(CUevent e, CUstream s);
CUresult cd_EventSynchronize(CUevent e);
CUresult cd_EventQuery(CUevent e);
CUresult cd_EventDestroy(CUevent e);
CUresult cd_MemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult cd_MemcpyHtoD(CUdeviceptr dst, const void *src, size_t n);
CUresult cd_MemcpyDtoH(void *dst, CUdeviceptr src, size_t n);
CUresult cd_MemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n);


#endif
