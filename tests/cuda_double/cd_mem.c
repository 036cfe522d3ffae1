/* cuda_double memory and streams: cuMemAlloc and legacy IPC, pinned host
 * memory, streams, events and copies. A test double, not CUDA: see
 * cuda_double.h. The rules come from the CUDA Driver API's "Memory
 * Management", "Stream Management" and "Event Management" sections
 * (group__CUDA__MEM, __STREAM, __EVENT) and cuda.h. */
#include "cuda_double.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static size_t page_round(size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

CUresult cd_release_ctx(const char *fn, struct CUctx_st **ctx, int *lost)
{
    *lost = 0;
    CUresult r = cd_check_init(fn);
    if (r != CUDA_SUCCESS)
        return r;
    struct CUctx_st *c = cd_current();
    if (!c)
        return cd_fail(CUDA_ERROR_INVALID_CONTEXT, fn, "no current context on this thread");
    if (c->refs == 0)
        return cd_fail(CUDA_ERROR_INVALID_CONTEXT, fn,
                       "the current context (device %d) was released and reset", c->dev);
    *lost = cd.lost[c->dev];
    *ctx = c;
    return CUDA_SUCCESS;
}

static CUresult lost_after(const char *fn, int lost, int dev)
{
    return lost ? cd_fail(cd.vanish_error, fn, "device %d is lost (released anyway)", dev)
                : CUDA_SUCCESS;
}

/* ---- linear memory and legacy IPC --------------------------------------- */

static void linear_free(struct cd_linear *l)
{
    munmap(l->va, page_round(l->size));
    close(l->fd);
    if (!l->opened && cd.used[l->dev] >= l->size)
        cd.used[l->dev] -= l->size;
    l->va = NULL;
}

static void linear_unlink(struct cd_linear *l)
{
    for (struct cd_linear **pp = &cd.linears; *pp; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    }
    free(l);
}

CUresult cd_MemAlloc(CUdeviceptr *p, size_t size)
{
    const char *fn = "cuMemAlloc";
    struct CUctx_st *c;
    cd_lock();
    cd_trace(fn, "%zu", size);
    CUresult r = cd_need_ctx(fn, &c);
    /* cuMemAlloc: zero bytes is CUDA_ERROR_INVALID_VALUE. */
    if (r == CUDA_SUCCESS && size == 0)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "0 bytes");
    if (r == CUDA_SUCCESS && ++cd.n_allocs == cd.oom_at)
        r = cd_inject(CUDA_ERROR_OUT_OF_MEMORY, fn, "CUDA_DOUBLE_OOM_AT");
    if (r == CUDA_SUCCESS && cd.used[c->dev] + size > cd.mem_bytes)
        r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "%zu bytes with %zu of %zu in use", size,
                    cd.used[c->dev], cd.mem_bytes);
    if (r == CUDA_SUCCESS) {
        struct cd_linear *l = calloc(1, sizeof(*l));
        int fd = l ? cd_memfd(page_round(size), c->dev) : -1;
        void *va = fd >= 0 ? mmap(NULL, page_round(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                           : MAP_FAILED;
        if (va == MAP_FAILED) {
            if (fd >= 0)
                close(fd);
            free(l);
            r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "memfd for %zu bytes", size);
        } else {
            l->va = va;
            l->size = size;
            l->fd = fd;
            l->dev = c->dev;
            l->ctx = c;
            l->next = cd.linears;
            cd.linears = l;
            cd.used[c->dev] += size;
            *p = (CUdeviceptr)(uintptr_t)va;
        }
    }
    cd_unlock();
    return r;
}

static struct cd_linear *find_linear(char *va, int opened)
{
    for (struct cd_linear *l = cd.linears; l; l = l->next)
        if (l->va == va && l->opened == opened)
            return l;
    return NULL;
}

CUresult cd_MemFree(CUdeviceptr p)
{
    const char *fn = "cuMemFree";
    struct CUctx_st *c;
    int lost;
    cd_lock();
    CUresult r = cd_release_ctx(fn, &c, &lost);
    struct cd_linear *l = r == CUDA_SUCCESS ? find_linear((char *)(uintptr_t)p, 0) : NULL;
    /* cuMemFree: only what cuMemAlloc returned; it may synchronise. */
    if (r == CUDA_SUCCESS && !l)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p was not returned by cuMemAlloc",
                    (void *)(uintptr_t)p);
    if (l) {
        cd_ctx_run(l->ctx, 1);
        linear_free(l);
        linear_unlink(l);
        r = lost_after(fn, lost, c->dev);
    }
    cd_unlock();
    return r;
}

CUresult cd_MemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    struct CUctx_st *c;
    cd_lock();
    CUresult r = cd_need_ctx("cuMemGetInfo", &c);
    if (r == CUDA_SUCCESS) {
        *free_bytes = cd.mem_bytes - cd.used[c->dev];
        *total_bytes = cd.mem_bytes;
    }
    cd_unlock();
    return r;
}

/* The double's CUipcMemHandle: where the exporting process keeps the memfd. */
struct ipc_blob {
    char magic[8];
    int32_t pid, fd, dev;
    uint64_t size;
};

CUresult cd_IpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
    const char *fn = "cuIpcGetMemHandle";
    struct CUctx_st *c;
    cd_lock();
    CUresult r = cd_need_ctx(fn, &c);
    struct cd_linear *l = r == CUDA_SUCCESS ? find_linear((char *)(uintptr_t)p, 0) : NULL;
    /* cuIpcGetMemHandle: p must be the base of a cuMemAlloc allocation
     * (VMM memory is shared through cuMemExportToShareableHandle). */
    if (r == CUDA_SUCCESS && !l)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p is not the base of a cuMemAlloc allocation",
                    (void *)(uintptr_t)p);
    if (l) {
        struct ipc_blob b = {.magic = "CDIPC01", .pid = getpid(), .fd = l->fd, .dev = l->dev,
                             .size = l->size};
        memset(h, 0, sizeof(*h));
        memcpy(h->reserved, &b, sizeof(b));
    }
    cd_unlock();
    return r;
}

CUresult cd_IpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags)
{
    const char *fn = "cuIpcOpenMemHandle";
    struct CUctx_st *c;
    struct ipc_blob b;
    memcpy(&b, h.reserved, sizeof(b));
    cd_lock();
    CUresult r = cd_need_ctx(fn, &c);
    /* cuIpcOpenMemHandle: flags must be CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS. */
    if (r == CUDA_SUCCESS && flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "flags %u", flags);
    else if (r == CUDA_SUCCESS && (memcmp(b.magic, "CDIPC01", 8) != 0 || b.pid == getpid()))
        r = cd_fail(CUDA_ERROR_INVALID_HANDLE, fn, "not a handle from another process");
    int fd = -1;
    if (r == CUDA_SUCCESS) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)b.pid, (int)b.fd);
        fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            r = cd_fail(CUDA_ERROR_INVALID_HANDLE, fn, "the exporting process %d or its memory "
                        "is gone", (int)b.pid);
    }
    if (r == CUDA_SUCCESS) {
        struct cd_linear *l = calloc(1, sizeof(*l));
        void *va = l ? mmap(NULL, page_round(b.size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                     : MAP_FAILED;
        if (va == MAP_FAILED) {
            close(fd);
            free(l);
            r = cd_fail(CUDA_ERROR_MAP_FAILED, fn, "mmap");
        } else {
            l->va = va;
            l->size = b.size;
            l->fd = fd;
            l->dev = c->dev;
            l->ctx = c;
            l->opened = 1;
            l->next = cd.linears;
            cd.linears = l;
            *p = (CUdeviceptr)(uintptr_t)va;
        }
    }
    cd_unlock();
    return r;
}

CUresult cd_IpcCloseMemHandle(CUdeviceptr p)
{
    const char *fn = "cuIpcCloseMemHandle";
    struct CUctx_st *c;
    int lost;
    cd_lock();
    CUresult r = cd_release_ctx(fn, &c, &lost);
    struct cd_linear *l = r == CUDA_SUCCESS ? find_linear((char *)(uintptr_t)p, 1) : NULL;
    if (r == CUDA_SUCCESS && !l)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p was not opened", (void *)(uintptr_t)p);
    if (l) {
        linear_free(l);
        linear_unlink(l);
    }
    cd_unlock();
    return r;
}

/* ---- pinned host memory ------------------------------------------------- */

int cd_is_pinned(const void *p, size_t n)
{
    const char *a = p;
    for (struct cd_host *h = cd.hosts; h; h = h->next)
        if (a >= h->p && a + n <= h->p + h->size)
            return 1;
    return 0;
}

CUresult cd_MemHostAlloc(void **p, size_t size, unsigned int flags)
{
    const char *fn = "cuMemHostAlloc";
    struct CUctx_st *c;
    cd_lock();
    CUresult r = cd_need_ctx(fn, &c);
    if (r == CUDA_SUCCESS && (size == 0 || !p))
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%zu bytes", size);
    if (r == CUDA_SUCCESS && flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                                                  CU_MEMHOSTALLOC_WRITECOMBINED))
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "flags %#x", flags);
    if (r == CUDA_SUCCESS) {
        struct cd_host *h = calloc(1, sizeof(*h));
        void *m = h ? mmap(NULL, page_round(size), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                    : MAP_FAILED;
        if (m == MAP_FAILED) {
            free(h);
            r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "%zu bytes", size);
        } else {
            h->p = m;
            h->size = size;
            h->next = cd.hosts;
            cd.hosts = h;
            *p = m;
        }
    }
    cd_unlock();
    return r;
}

static struct cd_host **find_host(const void *p, int registered)
{
    for (struct cd_host **pp = &cd.hosts; *pp; pp = &(*pp)->next)
        if ((*pp)->p == p && (*pp)->registered == registered)
            return pp;
    return NULL;
}

CUresult cd_MemFreeHost(void *p)
{
    const char *fn = "cuMemFreeHost";
    struct CUctx_st *c;
    int lost;
    cd_lock();
    CUresult r = cd_release_ctx(fn, &c, &lost);
    struct cd_host **pp = r == CUDA_SUCCESS ? find_host(p, 0) : NULL;
    /* cuMemFreeHost: only memory cuMemHostAlloc/cuMemAllocHost returned. */
    if (r == CUDA_SUCCESS && !pp)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p was not returned by cuMemHostAlloc", p);
    if (pp) {
        struct cd_host *h = *pp;
        /* Freeing the source of a copy that has not run yet: the device
         * would read freed memory. Nothing documents a synchronisation
         * here, so tensord must wait for its copies first. */
        if (cd_pending_touches(h->p, h->size))
            cd_violation(fn, "%p is freed while a queued copy still reads it (synchronise first)",
                         p);
        *pp = h->next;
        munmap(h->p, page_round(h->size));
        free(h);
        r = lost_after(fn, lost, c->dev);
    }
    cd_unlock();
    return r;
}

CUresult cd_MemHostRegister(void *p, size_t size, unsigned int flags)
{
    const char *fn = "cuMemHostRegister";
    struct CUctx_st *c;
    (void)flags;
    cd_lock();
    CUresult r = cd_need_ctx(fn, &c);
    if (r == CUDA_SUCCESS && (!p || size == 0))
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p+%zu", p, size);
    /* cuMemHostRegister: a range that overlaps pinned memory already is
     * CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED. */
    for (struct cd_host *h = cd.hosts; r == CUDA_SUCCESS && h; h = h->next)
        if ((char *)p < h->p + h->size && h->p < (char *)p + size)
            r = cd_fail(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, fn, "%p+%zu", p, size);
    if (r == CUDA_SUCCESS) {
        struct cd_host *h = calloc(1, sizeof(*h));
        if (!h) {
            r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "bookkeeping");
        } else {
            h->p = p;
            h->size = size;
            h->registered = 1;
            h->next = cd.hosts;
            cd.hosts = h;
        }
    }
    cd_unlock();
    return r;
}

CUresult cd_MemHostUnregister(void *p)
{
    const char *fn = "cuMemHostUnregister";
    struct CUctx_st *c;
    int lost;
    cd_lock();
    CUresult r = cd_release_ctx(fn, &c, &lost);
    struct cd_host **pp = r == CUDA_SUCCESS ? find_host(p, 1) : NULL;
    if (r == CUDA_SUCCESS && !pp)
        r = cd_fail(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, fn, "%p", p);
    if (pp) {
        struct cd_host *h = *pp;
        if (cd_pending_touches(h->p, h->size))
            cd_violation(fn, "%p is unregistered while a queued copy still reads it", p);
        *pp = h->next;
        free(h);
    }
    cd_unlock();
    return r;
}

/* ---- streams and events ------------------------------------------------- */

static struct CUstream_st *find_stream(const char *fn, CUstream s, CUresult *r)
{
    for (struct CUstream_st *x = cd.streams; x; x = x->next) {
        if (x != s)
            continue;
        if (!x->live) {
            cd_violation(fn, "stream %p used after cuStreamDestroy", (void *)s);
            *r = cd_fail(CUDA_ERROR_INVALID_HANDLE, fn, "destroyed stream %p", (void *)s);
            return NULL;
        }
        return x;
    }
    *r = cd_fail(CUDA_ERROR_INVALID_HANDLE, fn, "%p is not a stream", (void *)s);
    return NULL;
}

static struct CUevent_st *find_event(const char *fn, CUevent e, CUresult *r)
{
    for (struct CUevent_st *x = cd.events; x; x = x->next) {
        if (x != e)
            continue;
        if (!x->live) {
            cd_violation(fn, "event %p used after cuEventDestroy", (void *)e);
            *r = cd_fail(CUDA_ERROR_INVALID_HANDLE, fn, "destroyed event %p", (void *)e);
            return NULL;
        }
        return x;
    }
    *r = cd_fail(CUDA_ERROR_INVALID_HANDLE, fn, "%p is not an event", (void *)e);
    return NULL;
}

CUresult cd_stream_run(struct CUstream_st *s, uint64_t seq)
{
    size_t k = 0;
    while (k < s->n_ops && s->ops[k].seq <= seq) {
        struct cd_op *op = &s->ops[k++];
        /* The destination must still be writable device memory and the
         * source still pinned when the copy finally runs. */
        char *dst = cd_device_lookup((CUdeviceptr)(uintptr_t)op->dst, op->n,
                                     CU_MEM_ACCESS_FLAGS_PROT_READWRITE, s->ctx->dev);
        if (!dst) {
            cd_violation("cuMemcpyHtoDAsync", "the destination %p+%zu was unmapped or freed "
                         "before the queued copy ran", (void *)op->dst, op->n);
            s->error = CUDA_ERROR_ILLEGAL_ADDRESS;
        } else if (!cd_is_pinned(op->src, op->n)) {
            cd_violation("cuMemcpyHtoDAsync", "the source %p+%zu was freed before the queued "
                         "copy ran", (void *)op->src, op->n);
            s->error = CUDA_ERROR_ILLEGAL_ADDRESS;
        } else if (op->fail) {
            s->error = CUDA_ERROR_ILLEGAL_ADDRESS;
        } else {
            memcpy(dst, op->src, op->n);
        }
        s->done = op->seq;
    }
    memmove(s->ops, s->ops + k, (s->n_ops - k) * sizeof(*s->ops));
    s->n_ops -= k;
    CUresult e = s->error;
    s->error = CUDA_SUCCESS; /* reported once (a real GPU's fault would be sticky) */
    return e;
}

CUresult cd_ctx_run(struct CUctx_st *ctx, int all)
{
    CUresult first = CUDA_SUCCESS;
    for (struct CUstream_st *s = cd.streams; s; s = s->next) {
        if (!s->live || s->ctx != ctx || (!all && (s->flags & CU_STREAM_NON_BLOCKING)))
            continue;
        CUresult r = cd_stream_run(s, s->queued);
        if (first == CUDA_SUCCESS)
            first = r;
    }
    return first;
}

int cd_pending_touches(const char *p, size_t n)
{
    for (struct CUstream_st *s = cd.streams; s; s = s->next)
        for (size_t i = 0; i < s->n_ops; i++) {
            const struct cd_op *op = &s->ops[i];
            if ((op->dst < p + n && p < op->dst + op->n) || (op->src < p + n && p < op->src + op->n))
                return 1;
        }
    return 0;
}

size_t cd_ctx_reset(struct CUctx_st *ctx)
{
    size_t n = 0;
    for (struct CUstream_st *s = cd.streams; s; s = s->next)
        if (s->live && s->ctx == ctx) {
            s->live = 0;
            s->n_ops = 0;
            n++;
        }
    for (struct CUevent_st *e = cd.events; e; e = e->next)
        if (e->live && e->ctx == ctx) {
            e->live = 0;
            n++;
        }
    for (struct cd_linear *l = cd.linears, *next; l; l = next) {
        next = l->next;
        if (l->ctx == ctx) {
            linear_free(l);
            linear_unlink(l);
            n++;
        }
    }
    return n;
}

CUresult cd_StreamCreate(CUstream *ps, unsigned int flags)
{
    const char *fn = "cuStreamCreate";
    struct CUctx_st *c;
    cd_lock();
    CUresult r = cd_need_ctx(fn, &c);
    if (r == CUDA_SUCCESS && flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "flags %#x", flags);
    if (r == CUDA_SUCCESS) {
        struct CUstream_st *s = calloc(1, sizeof(*s));
        if (!s) {
            r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "stream");
        } else {
            s->live = 1;
            s->ctx = c;
            s->flags = flags;
            s->next = cd.streams;
            cd.streams = s;
            *ps = s;
        }
    }
    cd_unlock();
    return r;
}

CUresult cd_StreamDestroy(CUstream hs)
{
    const char *fn = "cuStreamDestroy";
    cd_lock();
    CUresult r = cd_check_init(fn);
    struct CUstream_st *s = r == CUDA_SUCCESS ? find_stream(fn, hs, &r) : NULL;
    if (s) {
        /* cuStreamDestroy returns at once; work still queued completes
         * first and the stream's resources go afterwards. */
        cd_stream_run(s, s->queued);
        s->live = 0;
        free(s->ops);
        s->ops = NULL;
        s->cap_ops = 0;
        r = lost_after(fn, cd.lost[s->ctx->dev], s->ctx->dev);
    }
    cd_unlock();
    return r;
}

CUresult cd_StreamSynchronize(CUstream hs)
{
    const char *fn = "cuStreamSynchronize";
    cd_lock();
    CUresult r = cd_check_init(fn);
    struct CUstream_st *s = r == CUDA_SUCCESS ? find_stream(fn, hs, &r) : NULL;
    if (s && cd.lost[s->ctx->dev])
        r = cd_fail(cd.vanish_error, fn, "device %d is lost", s->ctx->dev);
    else if (s && (r = cd_stream_run(s, s->queued)) != CUDA_SUCCESS)
        cd_fail(r, fn, "a queued copy failed");
    cd_unlock();
    return r;
}

CUresult cd_EventCreate(CUevent *pe, unsigned int flags)
{
    const char *fn = "cuEventCreate";
    struct CUctx_st *c;
    cd_lock();
    CUresult r = cd_need_ctx(fn, &c);
    if (r == CUDA_SUCCESS && flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                                                  CU_EVENT_INTERPROCESS))
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "flags %#x", flags);
    if (r == CUDA_SUCCESS) {
        struct CUevent_st *e = calloc(1, sizeof(*e));
        if (!e) {
            r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "event");
        } else {
            e->live = 1;
            e->ctx = c;
            e->next = cd.events;
            cd.events = e;
            *pe = e;
        }
    }
    cd_unlock();
    return r;
}

CUresult cd_EventRecord(CUevent he, CUstream hs)
{
    const char *fn = "cuEventRecord";
    struct CUctx_st *c;
    cd_lock();
    CUresult r = cd_need_ctx(fn, &c);
    struct CUevent_st *e = r == CUDA_SUCCESS ? find_event(fn, he, &r) : NULL;
    struct CUstream_st *s = e && hs ? find_stream(fn, hs, &r) : NULL;
    if (e && hs && !s)
        e = NULL;
    /* cuEventRecord: event and stream must belong to one context
     * (CUDA_ERROR_INVALID_HANDLE otherwise). */
    if (e && s && e->ctx != s->ctx)
        r = cd_fail(CUDA_ERROR_INVALID_HANDLE, fn, "event of device %d, stream of device %d",
                    e->ctx->dev, s->ctx->dev);
    else if (e) {
        e->recorded = 1;
        e->stream = s; /* NULL: the legacy stream, whose copies are synchronous here */
        e->seq = s ? s->queued : 0;
    }
    cd_unlock();
    return r;
}

static CUresult event_wait(const char *fn, CUevent he)
{
    cd_lock();
    CUresult r = cd_check_init(fn);
    struct CUevent_st *e = r == CUDA_SUCCESS ? find_event(fn, he, &r) : NULL;
    if (e && cd.lost[e->ctx->dev]) {
        r = cd_fail(cd.vanish_error, fn, "device %d is lost", e->ctx->dev);
    } else if (e && !e->recorded) {
        /* cuEventRecord: before its first record an event stands for no
         * work, so waiting for it returns at once. Code that waits for a
         * copy through an event it never recorded waits for nothing. */
        cd_violation(fn, "event %p was never recorded on a stream: this waits for nothing", he);
    } else if (e && e->stream && (r = cd_stream_run(e->stream, e->seq)) != CUDA_SUCCESS) {
        cd_fail(r, fn, "a copy before the event failed");
    }
    cd_unlock();
    return r;
}

CUresult cd_EventSynchronize(CUevent e) { return event_wait("cuEventSynchronize", e); }
CUresult cd_EventQuery(CUevent e) { return event_wait("cuEventQuery", e); }

CUresult cd_EventDestroy(CUevent he)
{
    const char *fn = "cuEventDestroy";
    cd_lock();
    CUresult r = cd_check_init(fn);
    struct CUevent_st *e = r == CUDA_SUCCESS ? find_event(fn, he, &r) : NULL;
    if (e) {
        e->live = 0;
        r = lost_after(fn, cd.lost[e->ctx->dev], e->ctx->dev);
    }
    cd_unlock();
    return r;
}

/* ---- copies ------------------------------------------------------------- */

CUresult cd_MemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream hs)
{
    const char *fn = "cuMemcpyHtoDAsync";
    struct CUctx_st *c;
    cd_lock();
    cd_trace(fn, "%p <- %p, %zu", (void *)(uintptr_t)dst, src, n);
    CUresult r = cd_need_ctx(fn, &c);
    struct CUstream_st *s = r == CUDA_SUCCESS && hs ? find_stream(fn, hs, &r) : NULL;
    /* A stream belongs to the context it was created in: queueing work on
     * it from another current context is an invalid handle. */
    if (s && s->ctx != c)
        r = cd_fail(CUDA_ERROR_INVALID_HANDLE, fn, "stream of device %d, current device %d",
                    s->ctx->dev, c->dev);
    char *d = r == CUDA_SUCCESS
                  ? cd_device_range(fn, dst, n, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, c->dev, &r)
                  : NULL;
    if (r == CUDA_SUCCESS && !src)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "NULL source");
    int fail = 0;
    if (r == CUDA_SUCCESS) {
        long k = ++cd.n_copies;
        if (k == cd.vanish_at) {
            cd.lost[c->dev] = 1;
            r = cd_inject(cd.vanish_error, fn, "CUDA_DOUBLE_VANISH_AT: the device is lost");
        } else if (k == cd.fail_copy_at) {
            r = cd_inject(CUDA_ERROR_INVALID_VALUE, fn, "CUDA_DOUBLE_FAIL_COPY_AT");
        } else if (k == cd.fail_copy_async_at) {
            cd_inject(CUDA_ERROR_ILLEGAL_ADDRESS, fn,
                      "CUDA_DOUBLE_FAIL_COPY_ASYNC_AT (reported when waited for)");
            fail = 1;
        }
    }
    if (r == CUDA_SUCCESS && s && cd_is_pinned(src, n)) {
        if (s->n_ops == s->cap_ops) {
            size_t cap = s->cap_ops ? 2 * s->cap_ops : 16;
            struct cd_op *ops = realloc(s->ops, cap * sizeof(*ops));
            if (!ops) {
                cd_unlock();
                return cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "queue");
            }
            s->ops = ops;
            s->cap_ops = cap;
        }
        s->ops[s->n_ops++] = (struct cd_op){.dst = d, .src = src, .n = n, .fail = fail,
                                            .seq = ++s->queued};
    } else if (r == CUDA_SUCCESS) {
        /* From pageable memory (or on the legacy stream) the copy has
         * consumed the source by the time the call returns: the stream's
         * earlier work first, then the bytes. */
        if (s)
            r = cd_stream_run(s, s->queued);
        else
            r = cd_ctx_run(c, 0);
        if (fail && r == CUDA_SUCCESS)
            r = CUDA_ERROR_ILLEGAL_ADDRESS;
        else if (r == CUDA_SUCCESS)
            memcpy(d, src, n);
    }
    cd_unlock();
    return r;
}

/* A synchronous copy runs on the legacy default stream: it waits for the
 * context's blocking streams, not for those made CU_STREAM_NON_BLOCKING
 * (cuStreamCreate), so reading back what a non-blocking stream has not
 * finished reads old bytes, as on a GPU. */
static CUresult sync_copy(const char *fn, char *dst_host, CUdeviceptr dst, CUdeviceptr src,
                          const void *src_host, size_t n)
{
    struct CUctx_st *c;
    cd_lock();
    cd_trace(fn, "%zu bytes", n);
    CUresult r = cd_need_ctx(fn, &c);
    if (r == CUDA_SUCCESS)
        r = cd_ctx_run(c, 0);
    char *d = dst_host, *s = (char *)src_host;
    if (r == CUDA_SUCCESS && !d)
        d = cd_device_range(fn, dst, n, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, c->dev, &r);
    if (r == CUDA_SUCCESS && !s)
        s = cd_device_range(fn, src, n, CU_MEM_ACCESS_FLAGS_PROT_READ, c->dev, &r);
    if (r == CUDA_SUCCESS && n && (!d || !s))
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "NULL pointer");
    if (r == CUDA_SUCCESS && n)
        memmove(d, s, n);
    cd_unlock();
    return r;
}

CUresult cd_MemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
    return sync_copy("cuMemcpyHtoD", NULL, dst, 0, src, n);
}

CUresult cd_MemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
    if (!dst)
        return cd_fail(CUDA_ERROR_INVALID_VALUE, "cuMemcpyDtoH", "NULL destination");
    return sync_copy("cuMemcpyDtoH", dst, 0, src, NULL, n);
}

CUresult cd_MemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return sync_copy("cuMemcpyDtoD", NULL, dst, src, NULL, n);
}

void cd_mem_report(char *buf, size_t len)
{
    unsigned linear = 0, opened = 0, pinned = 0, registered = 0, streams = 0, events = 0, ops = 0;
    for (struct cd_linear *l = cd.linears; l; l = l->next)
        l->opened ? opened++ : linear++;
    for (struct cd_host *h = cd.hosts; h; h = h->next)
        h->registered ? registered++ : pinned++;
    for (struct CUstream_st *s = cd.streams; s; s = s->next) {
        streams += s->live;
        ops += (unsigned)s->n_ops;
    }
    for (struct CUevent_st *e = cd.events; e; e = e->next)
        events += e->live;
    size_t used = 0;
    for (int i = 0; i < CD_MAX_DEVICES; i++)
        used += cd.used[i];
    snprintf(buf, len,
             "\"linear\": %u, \"ipc_opened\": %u, \"pinned_host\": %u, \"registered_host\": %u, "
             "\"streams\": %u, \"events\": %u, \"queued_copies\": %u, \"device_bytes\": %zu",
             linear, opened, pinned, registered, streams, events, ops, used);
}
