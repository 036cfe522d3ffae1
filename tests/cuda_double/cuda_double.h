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
 * With CUDA_DOUBLE_LINK_GBPS=R the double models a link instead (cd_link.c):
 * each device has one link of R GB/s (1e9 bytes/s) that every stream and
 * thread shares, and a copy engine thread of the double's own performs the
 * queued copies, each when its modelled transfer ends: a copy of n bytes
 * queued at t ends at max(t, the end of the device's previous copy) + n/R,
 * its bytes land then (read from the source then, so a buffer refilled
 * before the wait still lands as the wrong bytes), and only then does its
 * event complete (cuEventQuery says CUDA_ERROR_NOT_READY before). Waiting
 * (cuEventSynchronize, cuStreamSynchronize, cuCtxSynchronize, the
 * synchronous copies) and the copying itself happen without the double's
 * lock held. cuMemHostAlloc memory is populated when it is allocated, as
 * pinning does, and so is fresh device memory (see below).
 *
 * Device memory (cd_pool.c) is written through the double's own mapping of
 * each memfd, not the caller's, so first writes into a mapping do not page
 * fault, as a GPU's do not; memory released by the process is pooled and
 * handed out again to an allocation of the same size on the same device,
 * already populated, but only once no other process can still map it: every
 * exported descriptor is its own open file description holding a shared
 * flock, which the kernel keeps while any process holds that descriptor or
 * a mapping of it, and an allocation is reused only when an exclusive flock
 * succeeds. Pooled and live memory together stay within the device's size.
 *
 * Environment (all optional):
 *   CUDA_DOUBLE_DEVICES=N          devices (default 1, at most CD_MAX_DEVICES: 24)
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
 *   CUDA_DOUBLE_LINK_GBPS=R        model a host-to-device link of R GB/s per device (above,
 *                                  at least 0.001); unset or 0: copies run when something
 *                                  waits for them
 * Fault counters count calls in one process. */
#ifndef CUDA_DOUBLE_H
#define CUDA_DOUBLE_H

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define CD_MAX_DEVICES 24
#define CD_CTX_STACK 16
/* Every device memfd's name: the prefix, then the device's ordinal. */
#define CD_MEMFD_PREFIX "cuda-double dev "

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
    int running;               /* the copy engine is copying it, without the lock */
    uint64_t seq;              /* its position in the stream */
    uint64_t due_ns;           /* link model: when its transfer ends (CLOCK_MONOTONIC) */
};

struct CUstream_st {
    int live;
    struct CUctx_st *ctx;
    unsigned flags;
    uint64_t queued, done;     /* ops ever queued / ever completed */
    struct cd_op *ops;         /* pending, oldest first */
    size_t n_ops, cap_ops;
    CUresult error;            /* a failed op's error, reported by the next sync */
    uint64_t error_seq;        /* link model: the position of the op that failed */
    struct CUstream_st *next;
};

/* A copy running outside the lock (the copy engine's, or a synchronous
 * copy's in link mode): what frees [a, a+n) or [b, b+n) waits for. */
struct cd_busy {
    const char *a, *b;
    size_t n;
    int sync;                  /* a synchronous copy (not the copy engine) */
    struct cd_busy *next;
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
    char *view;                /* the double's own read-write mapping, what copies use;
                                  NULL for an import */
    size_t size;
    int dev;                   /* -1: imported from another process */
    int exportable;            /* requested with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
    int poolable;              /* every export holds the flock (cd_pool_export) */
    unsigned refs;             /* live handles + live mappings */
};

/* Released device memory kept for the next allocation (cd_pool.c). */
struct cd_pooled {
    int fd;
    char *view;
    size_t size;
    int dev;
    struct cd_pooled *next;    /* newest first */
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
    /* the link model (cd_link.c); link_gbps 0: copies run when waited for */
    double link_gbps;
    uint64_t link_free_ns[CD_MAX_DEVICES]; /* when each device's link is next idle */
    pthread_cond_t work;       /* the copy engine: a copy was queued */
    pthread_cond_t done;       /* waiters: a copy completed, or a device was lost */
    int engine_started;
    pthread_t engine;
    struct cd_busy *busy;      /* copies running outside the lock */
    unsigned long long link_copies, link_bytes;
    int link_waiting;          /* threads asleep in cd_link_wait (cuda_double_link_waiting) */
    /* the device memory pool (cd_pool.c) */
    struct cd_pooled *pool;
    size_t pooled[CD_MAX_DEVICES];
    unsigned long long pool_reused, pool_fresh, pool_held;
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

/* cd_link.c: the link model (CUDA_DOUBLE_LINK_GBPS) and its copy engine. */
/* Reads CUDA_DOUBLE_LINK_GBPS and sets up what the engine waits on (at load). */
void cd_link_configure(void);
/* Under the lock, for a copy of n bytes to dev queued now: when its transfer
 * ends (CLOCK_MONOTONIC ns), with the engine started and told. Returns 0, or
 * -1 when the engine thread cannot be started. */
int cd_link_queue(int dev, size_t n, uint64_t *due_ns);
/* Under the lock: waits, releasing it, until s has completed position seq
 * (or its device is lost). Returns the error of a failed copy at or before
 * seq (reported once), else CUDA_SUCCESS. */
CUresult cd_link_wait(struct CUstream_st *s, uint64_t seq);
/* Exported, not CUDA: the threads asleep in cd_link_wait now (takes the lock). */
int cuda_double_link_waiting(void);
/* Under the lock, dev just lost: with a link, drops its queued copies and
 * wakes their waiters. */
void cd_link_lost(int dev);
/* Under the lock: marks b as running outside it / done (waking waiters). */
void cd_busy_begin(struct cd_busy *b);
void cd_busy_end(struct cd_busy *b);
/* Under the lock: waits, releasing it, until no copy running outside the
 * lock touches [p, p+n); one on another thread's synchronous copy is a
 * violation recorded under fn. Returns whether it waited, in which case the
 * caller's pointers into the double's lists are stale. */
int cd_wait_copies(const char *fn, const void *p, size_t n);
/* "\"link\": {...}" for the report (empty without a link). */
void cd_link_report(char *buf, size_t len);

/* cd_pool.c: device memory, the double's views of it, and the pool. */
/* A memfd of size bytes named for device dev ("cuda-double dev N"), or -1. */
int cd_memfd(size_t size, int dev);
/* Without the lock: a new memfd for dev with the double's read-write view of
 * it, populated when populate is set. Returns 0 or -errno (what failed in
 * why). */
int cd_pool_fresh(int dev, size_t size, int populate, int *fd, char **view, char *why,
                  size_t whylen);
/* Under the lock: a pooled memfd of exactly size bytes for dev that no other
 * process holds or maps, taken out of the pool. Returns whether one was. */
int cd_pool_take(int dev, size_t size, int *fd, char **view);
/* Under the lock: drops pooled memory of dev until it and what is in use fit
 * in the device. */
void cd_pool_trim(int dev);
/* Under the lock: m's memfd and view, no longer used in this process, go to
 * the pool (or are closed). */
void cd_pool_give(struct cd_mem *m);
/* A new descriptor of m for another process: its own open file description
 * holding a shared flock. Returns it, or -1 with errno. */
int cd_pool_export(struct cd_mem *m);
/* "\"pool\": {...}" for the report. */
void cd_pool_report(char *buf, size_t len);

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
/* Where the double reads and writes the device bytes at host address a (as
 * cd_device_lookup returned it): the allocation's own view, or a itself. */
char *cd_device_bytes(char *a);
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
/* Runs s's queued copies up to (and including) position seq (with a link:
 * waits, releasing the lock, for the copy engine to have run them). Returns
 * the error one of them had, else CUDA_SUCCESS. */
CUresult cd_stream_run(struct CUstream_st *s, uint64_t seq);
/* Runs every pending copy of ctx's streams (all = also non-blocking ones). */
CUresult cd_ctx_run(struct CUctx_st *ctx, int all);
/* Whether op may run now: its destination still writable device memory of
 * s's device, its source still pinned, no fault injected. Returns where its
 * bytes go (cd_device_bytes), or NULL with *err set (violations recorded). */
char *cd_op_target(struct CUstream_st *s, const struct cd_op *op, CUresult *err);
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
