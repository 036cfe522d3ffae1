/* cuda_double memory: cuMemAlloc and legacy IPC, pinned host memory, what a
 * context reset takes with it, and the memory report (streams, events and
 * copies are in cd_stream.c). A test double, not CUDA: see cuda_double.h.
 * The rules come from the CUDA Driver API's "Memory Management" section
 * (group__CUDA__MEM) and cuda.h. */
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

CUresult cd_lost_after(const char *fn, int lost, int dev)
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
    int fd = -1;
    char *va = NULL;
    if (r == CUDA_SUCCESS) {
        /* Made (and, with a link, populated) without the lock, the size
         * taken first. Linear memory is not pooled: its legacy IPC handle is
         * opened by path in the other process, a descriptor the pool could
         * not see. */
        char why[160];
        cd.used[c->dev] += size;
        cd_unlock();
        int e = cd_pool_fresh(c->dev, page_round(size), cd.link_gbps > 0, &fd, &va, why,
                              sizeof(why));
        cd_lock();
        cd.used[c->dev] -= size;
        if (e < 0)
            r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "%s", why);
    }
    if (r == CUDA_SUCCESS) {
        struct cd_linear *l = calloc(1, sizeof(*l));
        if (!l) {
            munmap(va, page_round(size));
            close(fd);
            r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "bookkeeping");
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
    /* cuMemFree: only what cuMemAlloc returned; it may synchronise. With a
     * link, synchronising waits without the lock: look it up again. */
    if (l) {
        cd_ctx_run(l->ctx, 1);
        while ((l = find_linear((char *)(uintptr_t)p, 0)) && cd_wait_copies(fn, l->va, l->size))
            ;
    }
    if (r == CUDA_SUCCESS && !l)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p was not returned by cuMemAlloc",
                    (void *)(uintptr_t)p);
    if (l) {
        linear_free(l);
        linear_unlink(l);
        r = cd_lost_after(fn, lost, c->dev);
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
    while (l && cd_wait_copies(fn, l->va, l->size))
        l = find_linear((char *)(uintptr_t)p, 1);
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
        /* Pinning makes every page resident: with a link the double does
         * that too (without the lock), so that filling the buffers costs
         * what it costs with a real driver. */
        cd_unlock();
        struct cd_host *h = calloc(1, sizeof(*h));
        void *m = h ? mmap(NULL, page_round(size), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | (cd.link_gbps > 0 ? MAP_POPULATE : 0),
                           -1, 0)
                    : MAP_FAILED;
        cd_lock();
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
    /* Freeing the source of a copy that has not run yet: the device would
     * read freed memory. Nothing documents a synchronisation here, so
     * tensord must wait for its copies first. */
    if (pp && cd_pending_touches((*pp)->p, (*pp)->size))
        cd_violation(fn, "%p is freed while a queued copy still reads it (synchronise first)", p);
    /* One the copy engine is copying from right now finishes first. */
    while (pp && cd_wait_copies(fn, (*pp)->p, (*pp)->size))
        pp = find_host(p, 0);
    /* cuMemFreeHost: only memory cuMemHostAlloc/cuMemAllocHost returned. */
    if (r == CUDA_SUCCESS && !pp)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p was not returned by cuMemHostAlloc", p);
    if (pp) {
        struct cd_host *h = *pp;
        *pp = h->next;
        munmap(h->p, page_round(h->size));
        free(h);
        r = cd_lost_after(fn, lost, c->dev);
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
    if (pp && cd_pending_touches((*pp)->p, (*pp)->size))
        cd_violation(fn, "%p is unregistered while a queued copy still reads it", p);
    while (pp && cd_wait_copies(fn, (*pp)->p, (*pp)->size))
        pp = find_host(p, 1);
    if (r == CUDA_SUCCESS && !pp)
        r = cd_fail(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, fn, "%p", p);
    if (pp) {
        struct cd_host *h = *pp;
        *pp = h->next;
        free(h);
    }
    cd_unlock();
    return r;
}

size_t cd_ctx_reset(struct CUctx_st *ctx)
{
    size_t n = 0;
    for (struct CUstream_st *s = cd.streams; s; s = s->next)
        if (s->live && s->ctx == ctx) {
            /* Its queued work is dropped, but a copy the engine is running
             * finishes (and is dequeued) first. */
            s->live = 0;
            s->n_ops = s->n_ops && s->ops[0].running ? 1 : 0;
            s->done = s->queued;
            n++;
        }
    pthread_cond_broadcast(&cd.done); /* their waiters */
    for (struct CUevent_st *e = cd.events; e; e = e->next)
        if (e->live && e->ctx == ctx) {
            e->live = 0;
            n++;
        }
again:
    for (struct cd_linear *l = cd.linears, *next; l; l = next) {
        next = l->next;
        if (l->ctx == ctx) {
            if (cd_wait_copies("cuDevicePrimaryCtxRelease", l->va, l->size))
                goto again; /* the list may have changed meanwhile */
            linear_free(l);
            linear_unlink(l);
            n++;
        }
    }
    return n;
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
