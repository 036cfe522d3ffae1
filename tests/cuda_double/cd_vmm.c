/* cuda_double VMM: cuMemCreate/Release, address reservations, mappings,
 * access, POSIX fd export and import, over memfds. A test double, not
 * CUDA: see cuda_double.h. The rules come from the CUDA Driver API's
 * "Virtual Memory Management" section (group__CUDA__VA) and cuda.h. */
#include "cuda_double.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static size_t page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

static void mem_unref(struct cd_mem *m)
{
    if (--m->refs > 0)
        return;
    cd_pool_give(m);
    if (cd_valid_dev(m->dev) && cd.used[m->dev] >= m->size)
        cd.used[m->dev] -= m->size;
    free(m);
}

/* The handle h; a released one is a use after release (the driver calls
 * that undefined). Records the refusal under fn. */
static struct cd_handle *find_handle(const char *fn, CUmemGenericAllocationHandle h, CUresult *r)
{
    for (struct cd_handle *x = cd.handles; x; x = x->next) {
        if (x->id != h)
            continue;
        if (!x->live) {
            /* cuMemRelease: using a handle after releasing it is undefined. */
            cd_violation(fn, "handle %#llx used after cuMemRelease", (unsigned long long)h);
            *r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "released handle %#llx",
                         (unsigned long long)h);
            return NULL;
        }
        return x;
    }
    *r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%#llx is not an allocation handle",
                 (unsigned long long)h);
    return NULL;
}

static struct cd_handle *new_handle(struct cd_mem *m, int imported)
{
    struct cd_handle *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->id = cd.next_handle++;
    x->mem = m;
    x->live = 1;
    x->imported = imported;
    x->next = cd.handles;
    cd.handles = x;
    return x;
}

/* A device allocation property as tensord must pass it: pinned memory on a
 * device that exists. */
static CUresult check_prop(const char *fn, const CUmemAllocationProp *p)
{
    if (!p)
        return cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "NULL prop");
    if (p->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "type %d is not PINNED", (int)p->type);
    if (p->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return cd_fail(CUDA_ERROR_NOT_SUPPORTED, fn, "location type %d is not DEVICE",
                       (int)p->location.type);
    if (!cd_valid_dev(p->location.id))
        return cd_fail(CUDA_ERROR_INVALID_DEVICE, fn, "device %d", p->location.id);
    if (p->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE &&
        p->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return cd_fail(CUDA_ERROR_NOT_SUPPORTED, fn, "handle types %#x (the double has POSIX fds)",
                       (unsigned)p->requestedHandleTypes);
    if (cd.lost[p->location.id])
        return cd_fail(cd.vanish_error, fn, "device %d is lost", p->location.id);
    return CUDA_SUCCESS;
}

CUresult cd_MemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p,
                                        CUmemAllocationGranularity_flags f)
{
    const char *fn = "cuMemGetAllocationGranularity";
    cd_lock();
    CUresult r = cd_check_init(fn);
    if (r == CUDA_SUCCESS)
        r = check_prop(fn, p);
    if (r == CUDA_SUCCESS && !g)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "NULL granularity");
    if (r == CUDA_SUCCESS)
        *g = f == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED ? 2 * cd.granularity : cd.granularity;
    cd_unlock();
    return r;
}

CUresult cd_MemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *p,
                      unsigned long long flags)
{
    const char *fn = "cuMemCreate";
    cd_lock();
    cd_trace(fn, "%zu", size);
    CUresult r = cd_check_init(fn);
    if (r == CUDA_SUCCESS)
        r = check_prop(fn, p);
    /* cuMemCreate: flags are reserved (0), and the size must be a
     * multiple of the CU_MEM_ALLOC_GRANULARITY_MINIMUM granularity. */
    if (r == CUDA_SUCCESS && flags != 0)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "flags %#llx must be 0", flags);
    if (r == CUDA_SUCCESS && (size == 0 || size % cd.granularity != 0))
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn,
                    "size %zu is not a positive multiple of the granularity %zu", size,
                    cd.granularity);
    if (r == CUDA_SUCCESS && ++cd.n_allocs == cd.oom_at)
        r = cd_inject(CUDA_ERROR_OUT_OF_MEMORY, fn, "CUDA_DOUBLE_OOM_AT");
    int dev = r == CUDA_SUCCESS ? p->location.id : 0;
    if (r == CUDA_SUCCESS && cd.used[dev] + size > cd.mem_bytes)
        r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "%zu bytes with %zu of %zu in use", size,
                    cd.used[dev], cd.mem_bytes);
    int fd = -1;
    char *view = NULL;
    if (r == CUDA_SUCCESS && !cd_pool_take(dev, size, &fd, &view)) {
        /* New memory, made (and, with a link, populated) without the lock:
         * the size is taken first, so no other allocation can have it. */
        char why[160];
        cd.used[dev] += size;
        cd_pool_trim(dev);
        cd_unlock();
        int e = cd_pool_fresh(dev, size, cd.link_gbps > 0, &fd, &view, why, sizeof(why));
        cd_lock();
        cd.used[dev] -= size;
        if (e < 0)
            r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "%s", why);
        else
            cd.pool_fresh++;
    }
    if (r == CUDA_SUCCESS) {
        struct cd_mem *m = calloc(1, sizeof(*m));
        struct cd_handle *x = m ? new_handle(m, 0) : NULL;
        if (!x) {
            free(m);
            munmap(view, size);
            close(fd);
            r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "bookkeeping");
        } else {
            m->fd = fd;
            m->view = view;
            m->size = size;
            m->dev = dev;
            m->exportable = p->requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
            m->poolable = 1;
            m->refs = 1;
            cd.used[dev] += size;
            *h = x->id;
        }
    }
    cd_unlock();
    return r;
}

CUresult cd_MemRelease(CUmemGenericAllocationHandle h)
{
    const char *fn = "cuMemRelease";
    cd_lock();
    cd_trace(fn, "%#llx", (unsigned long long)h);
    CUresult r = cd_check_init(fn);
    struct cd_handle *x = r == CUDA_SUCCESS ? find_handle(fn, h, &r) : NULL;
    if (x) {
        /* cuMemRelease: the memory itself goes once every handle is
         * released and every mapping unmapped. */
        x->live = 0;
        int dev = x->mem->dev;
        mem_unref(x->mem);
        x->mem = NULL;
        if (cd_valid_dev(dev) && cd.lost[dev])
            r = cd_fail(cd.vanish_error, fn, "device %d is lost (released anyway)", dev);
    }
    cd_unlock();
    return r;
}

CUresult cd_MemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                              unsigned long long flags)
{
    const char *fn = "cuMemAddressReserve";
    (void)addr; /* only a hint */
    cd_lock();
    cd_trace(fn, "%zu, align %zu", size, align);
    CUresult r = cd_check_init(fn);
    /* cuMemAddressReserve: size a multiple of the host page size, the
     * alignment zero or a power of two, flags zero. */
    if (r == CUDA_SUCCESS && (size == 0 || size % page_size() != 0))
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "size %zu is not a multiple of the page size",
                    size);
    if (r == CUDA_SUCCESS && align & (align - 1))
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "alignment %zu is not a power of two", align);
    if (r == CUDA_SUCCESS && flags != 0)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "flags %#llx must be 0", flags);
    if (r == CUDA_SUCCESS) {
        size_t a = align > page_size() ? align : page_size();
        char *base = mmap(NULL, size + a, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                          -1, 0);
        struct cd_reservation *v = base != MAP_FAILED ? calloc(1, sizeof(*v)) : NULL;
        if (!v) {
            if (base != MAP_FAILED)
                munmap(base, size + a);
            r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "%zu bytes of address space", size);
        } else {
            char *va = (char *)(((uintptr_t)base + a - 1) / a * a);
            if (va > base)
                munmap(base, (size_t)(va - base));
            if (base + size + a > va + size)
                munmap(va + size, (size_t)(base + size + a - (va + size)));
            v->va = va;
            v->size = size;
            v->next = cd.reservations;
            cd.reservations = v;
            *ptr = (CUdeviceptr)(uintptr_t)va;
        }
    }
    cd_unlock();
    return r;
}

static struct cd_mapping **find_mapping_exact(char *va, size_t size)
{
    for (struct cd_mapping **pp = &cd.mappings; *pp; pp = &(*pp)->next)
        if ((*pp)->va == va && (*pp)->size == size)
            return pp;
    return NULL;
}

static void drop_mapping(struct cd_mapping **pp)
{
    struct cd_mapping *m = *pp;
    *pp = m->next;
    /* Back to a bare reservation: nothing mapped, no access. */
    mmap(m->va, m->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    mem_unref(m->mem);
    free(m);
}

CUresult cd_MemAddressFree(CUdeviceptr ptr, size_t size)
{
    const char *fn = "cuMemAddressFree";
    char *va = (char *)(uintptr_t)ptr;
    cd_lock();
    cd_trace(fn, "%p, %zu", (void *)va, size);
    CUresult r = cd_check_init(fn);
    cd_wait_copies(fn, va, size); /* before any pointer into the lists is taken */
    struct cd_reservation **pp = NULL;
    /* cuMemAddressFree: ptr and size must be exactly what
     * cuMemAddressReserve gave and was given. */
    for (struct cd_reservation **q = &cd.reservations; r == CUDA_SUCCESS && *q; q = &(*q)->next)
        if ((*q)->va == va && (*q)->size == size)
            pp = q;
    if (r == CUDA_SUCCESS && !pp)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p+%zu is not a reservation", (void *)va, size);
    if (pp) {
        for (struct cd_mapping **q = &cd.mappings; *q;) {
            if ((*q)->va >= va && (*q)->va < va + size) {
                cd_violation(fn, "the reservation at %p still has a mapping at %p: unmap first",
                             (void *)va, (void *)(*q)->va);
                drop_mapping(q);
            } else {
                q = &(*q)->next;
            }
        }
        struct cd_reservation *v = *pp;
        *pp = v->next;
        munmap(v->va, v->size);
        free(v);
    }
    cd_unlock();
    return r;
}

CUresult cd_MemMap(CUdeviceptr ptr, size_t size, size_t off, CUmemGenericAllocationHandle h,
                   unsigned long long flags)
{
    const char *fn = "cuMemMap";
    char *va = (char *)(uintptr_t)ptr;
    cd_lock();
    cd_trace(fn, "%p, %zu, handle %#llx", (void *)va, size, (unsigned long long)h);
    CUresult r = cd_check_init(fn);
    struct cd_handle *x = r == CUDA_SUCCESS ? find_handle(fn, h, &r) : NULL;
    struct cd_reservation *v = NULL;
    for (struct cd_reservation *q = cd.reservations; x && q; q = q->next)
        if (va >= q->va && va + size <= q->va + q->size && va + size >= va)
            v = q;
    /* cuMemMap: the range must lie in a reservation and not be mapped
     * already; ptr, size and offset must be multiples of the minimum
     * granularity; the offset must currently be zero; offset + size must
     * fit in the allocation; flags are reserved. */
    if (x && !v)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p+%zu is not inside a reservation",
                    (void *)va, size);
    else if (x && (size == 0 || size % cd.granularity || (uintptr_t)va % cd.granularity))
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn,
                    "address %p or size %zu is not a multiple of the granularity %zu",
                    (void *)va, size, cd.granularity);
    else if (x && off != 0)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "offset %zu must be 0", off);
    else if (x && size > x->mem->size)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%zu bytes of a %zu-byte allocation", size,
                    x->mem->size);
    else if (x && flags != 0)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "flags %#llx must be 0", flags);
    else if (x && cd_valid_dev(x->mem->dev) && cd.lost[x->mem->dev])
        r = cd_fail(cd.vanish_error, fn, "device %d is lost", x->mem->dev);
    for (struct cd_mapping *m = cd.mappings; r == CUDA_SUCCESS && x && m; m = m->next)
        if (va < m->va + m->size && m->va < va + size)
            r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p+%zu overlaps the mapping at %p",
                        (void *)va, size, (void *)m->va);
    if (r == CUDA_SUCCESS && x) {
        struct cd_mapping *m = calloc(1, sizeof(*m));
        /* Mapped, but nothing may touch it before cuMemSetAccess. */
        if (!m || mmap(va, size, PROT_NONE, MAP_SHARED | MAP_FIXED, x->mem->fd, 0) == MAP_FAILED) {
            free(m);
            r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "mmap");
        } else {
            m->va = va;
            m->size = size;
            m->mem = x->mem;
            m->access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
            m->access_dev = -1;
            x->mem->refs++;
            m->next = cd.mappings;
            cd.mappings = m;
        }
    }
    cd_unlock();
    return r;
}

CUresult cd_MemUnmap(CUdeviceptr ptr, size_t size)
{
    const char *fn = "cuMemUnmap";
    char *va = (char *)(uintptr_t)ptr;
    cd_lock();
    cd_trace(fn, "%p, %zu", (void *)va, size);
    CUresult r = cd_check_init(fn);
    /* cuMemUnmap: the whole range one cuMemMap mapped, never a part. */
    struct cd_mapping **pp = r == CUDA_SUCCESS ? find_mapping_exact(va, size) : NULL;
    if (r == CUDA_SUCCESS && !pp)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p+%zu is not one whole mapping", (void *)va,
                    size);
    if (pp && cd_pending_touches(va, size))
        cd_violation(fn, "%p+%zu is unmapped while a queued copy still writes it "
                     "(synchronise first)", (void *)va, size);
    /* A copy still running into it finishes first: the lists may change meanwhile. */
    if (pp && cd_wait_copies(fn, va, size)) {
        pp = find_mapping_exact(va, size);
        if (!pp)
            r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p+%zu was unmapped by another thread",
                        (void *)va, size);
    }
    if (pp) {
        int dev = (*pp)->mem->dev;
        drop_mapping(pp);
        if (cd_valid_dev(dev) && cd.lost[dev])
            r = cd_fail(cd.vanish_error, fn, "device %d is lost (unmapped anyway)", dev);
    }
    cd_unlock();
    return r;
}

CUresult cd_MemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    const char *fn = "cuMemSetAccess";
    char *va = (char *)(uintptr_t)ptr;
    cd_lock();
    cd_trace(fn, "%p, %zu, flags %d", (void *)va, size, desc && count ? (int)desc[0].flags : -1);
    CUresult r = cd_check_init(fn);
    if (r == CUDA_SUCCESS && (!desc || count == 0))
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "no access descriptor");
    for (size_t i = 0; r == CUDA_SUCCESS && i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "location type %d", (int)desc[i].location.type);
        else if (!cd_valid_dev(desc[i].location.id))
            r = cd_fail(CUDA_ERROR_INVALID_DEVICE, fn, "device %d", desc[i].location.id);
        else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
                 desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
                 desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "flags %d", (int)desc[i].flags);
        else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && cd.no_readonly)
            r = cd_fail(CUDA_ERROR_NOT_SUPPORTED, fn, "read-only access (CUDA_DOUBLE_NO_READONLY)");
    }
    /* cuMemSetAccess: the range must be fully mapped, made of whole
     * mappings. */
    size_t covered = 0;
    for (char *p = va; r == CUDA_SUCCESS && p < va + size;) {
        struct cd_mapping *m = NULL;
        for (struct cd_mapping *q = cd.mappings; q; q = q->next)
            if (q->va == p)
                m = q;
        if (!m || p + m->size > va + size) {
            r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p+%zu is not a fully mapped range "
                        "(stops at %p)", (void *)va, size, (void *)p);
            break;
        }
        p += m->size;
        covered += m->size;
    }
    if (r == CUDA_SUCCESS && covered == 0)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "empty range");
    for (char *p = va; r == CUDA_SUCCESS && p < va + size;) {
        struct cd_mapping *m = NULL;
        for (struct cd_mapping *q = cd.mappings; q; q = q->next)
            if (q->va == p)
                m = q;
        /* One device sees the memory in the double: the last descriptor's. */
        const CUmemAccessDesc *d = &desc[count - 1];
        int prot = d->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
                   : d->flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                                   : PROT_NONE;
        mprotect(m->va, m->size, prot);
        m->access = d->flags;
        m->access_dev = d->flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ? -1 : d->location.id;
        p += m->size;
    }
    cd_unlock();
    return r;
}

CUresult cd_MemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                       CUmemAllocationHandleType t, unsigned long long flags)
{
    const char *fn = "cuMemExportToShareableHandle";
    cd_lock();
    CUresult r = cd_check_init(fn);
    struct cd_handle *x = r == CUDA_SUCCESS ? find_handle(fn, h, &r) : NULL;
    if (x && t != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        r = cd_fail(CUDA_ERROR_NOT_SUPPORTED, fn, "handle type %d", (int)t);
    /* The shareable type must have been asked for when the allocation was
     * created (CUmemAllocationProp::requestedHandleTypes). */
    else if (x && !x->mem->exportable)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "created without POSIX fd handles requested");
    else if (x && flags != 0)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "flags %#llx must be 0", flags);
    else if (x && !out)
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "NULL output");
    if (r == CUDA_SUCCESS && x) {
        /* A new descriptor the caller owns and closes. */
        int fd = cd_pool_export(x->mem);
        if (fd < 0)
            r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "dup");
        else
            memcpy(out, &fd, sizeof(fd));
    }
    cd_unlock();
    return r;
}

CUresult cd_MemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os,
                                         CUmemAllocationHandleType t)
{
    const char *fn = "cuMemImportFromShareableHandle";
    int fd = (int)(intptr_t)os;
    char link[64], target[128] = "";
    struct stat st;
    cd_lock();
    cd_trace(fn, "fd %d", fd);
    CUresult r = cd_check_init(fn);
    if (r == CUDA_SUCCESS && t != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        r = cd_fail(CUDA_ERROR_NOT_SUPPORTED, fn, "handle type %d", (int)t);
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = r == CUDA_SUCCESS ? readlink(link, target, sizeof(target) - 1) : -1;
    if (n > 0)
        target[n] = '\0';
    /* cuMemImportFromShareableHandle: a descriptor that is not such a
     * handle is CUDA_ERROR_INVALID_VALUE (here: not the double's memfd). */
    if (r == CUDA_SUCCESS && (n <= 0 || strncmp(target, "/memfd:" CD_MEMFD_PREFIX, 7 + strlen(CD_MEMFD_PREFIX)) != 0 ||
                              fstat(fd, &st) < 0))
        r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "fd %d (%s) is not an exported allocation", fd,
                    target[0] ? target : "not open");
    int dev = r == CUDA_SUCCESS ? atoi(target + 7 + strlen(CD_MEMFD_PREFIX)) : 0;
    if (r == CUDA_SUCCESS && !cd_valid_dev(dev))
        r = cd_fail(CUDA_ERROR_INVALID_DEVICE, fn, "exported from device %d", dev);
    if (r == CUDA_SUCCESS) {
        struct cd_mem *m = calloc(1, sizeof(*m));
        int mine = m ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1; /* the caller may close fd */
        struct cd_handle *x = mine >= 0 ? new_handle(m, 1) : NULL;
        if (!x) {
            if (mine >= 0)
                close(mine);
            free(m);
            r = cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "import");
        } else {
            m->fd = mine;
            m->size = (size_t)st.st_size;
            m->dev = -1; /* counted in the exporter's device memory, not here */
            m->refs = 1;
            *h = x->id;
        }
    }
    cd_unlock();
    return r;
}

char *cd_device_lookup(CUdeviceptr p, size_t n, int need, int dev)
{
    char *a = (char *)(uintptr_t)p;
    for (struct cd_mapping *m = cd.mappings; m; m = m->next) {
        if (a < m->va || a + n > m->va + m->size || a + n < a)
            continue;
        if (m->access_dev != dev || m->access == CU_MEM_ACCESS_FLAGS_PROT_NONE ||
            (need == CU_MEM_ACCESS_FLAGS_PROT_READWRITE &&
             m->access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            return NULL;
        return a;
    }
    for (struct cd_linear *l = cd.linears; l; l = l->next)
        if (a >= l->va && a + n <= l->va + l->size && a + n >= a && l->dev == dev)
            return a;
    return NULL;
}

char *cd_device_bytes(char *a)
{
    for (struct cd_mapping *m = cd.mappings; m; m = m->next)
        if (a >= m->va && a < m->va + m->size)
            return m->mem->view ? m->mem->view + (a - m->va) : a;
    return a; /* linear memory: the double's own mapping already */
}

char *cd_device_range(const char *fn, CUdeviceptr p, size_t n, int need, int dev, CUresult *r)
{
    char *a = cd_device_lookup(p, n, need, dev);
    if (a)
        return a;
    /* The copy must lie inside device memory the current device may
     * access that way: a mapping without cuMemSetAccess (or read-only,
     * for a write) is not accessible (cuMemMap: mapping does not make the
     * range accessible). A real GPU faults (illegal address). */
    const char *why = "is not device memory of this device";
    char *x = (char *)(uintptr_t)p;
    for (struct cd_mapping *m = cd.mappings; m; m = m->next)
        if (x >= m->va && x < m->va + m->size)
            why = m->access == CU_MEM_ACCESS_FLAGS_PROT_NONE ? "is mapped but cuMemSetAccess was never called"
                  : m->access_dev != dev                    ? "is not accessible from this device"
                  : x + n > m->va + m->size                 ? "runs past the end of its mapping"
                                                            : "is read-only";
    *r = cd_fail(CUDA_ERROR_INVALID_VALUE, fn, "%p+%zu %s", (void *)x, n, why);
    return NULL;
}

void cd_vmm_report(char *buf, size_t len)
{
    unsigned handles = 0, imported = 0, mappings = 0, reservations = 0;
    for (struct cd_handle *x = cd.handles; x; x = x->next)
        if (x->live)
            x->imported ? imported++ : handles++;
    for (struct cd_mapping *m = cd.mappings; m; m = m->next)
        mappings++;
    for (struct cd_reservation *v = cd.reservations; v; v = v->next)
        reservations++;
    char rest[256];
    cd_mem_report(rest, sizeof(rest));
    snprintf(buf, len,
             "\"live\": {\"handles\": %u, \"imported_handles\": %u, \"mappings\": %u, "
             "\"reservations\": %u, %s}",
             handles, imported, mappings, reservations, rest);
}
