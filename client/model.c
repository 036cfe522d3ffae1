/* model: opening a model (its lease, mapping its allocations) and what a
 * mapped model answers: its tables, checksums, tensor bytes. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "answer.h"
#include "answer_open.h"
#include "client_int.h"
#include "cmem.h"
#include "ipc_proto.h"
#include "tensord_client.h"

/* JSON string literal of s (for requests), or NULL. Caller frees. */
static char *json_quote(const char *s)
{
    size_t n = strlen(s);
    char *o = cmem_malloc(n * 6 + 3), *p = o;
    if (!o)
        return NULL;
    *p++ = '"';
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            *p++ = '\\';
            *p++ = (char)ch;
        } else if (ch < 0x20) {
            p += sprintf(p, "\\u%04x", ch);
        } else {
            *p++ = (char)ch;
        }
    }
    *p++ = '"';
    *p = '\0';
    return o;
}

static void model_free(struct tensord_model *m)
{
    if (m->is_cuda)
        tdc_cuda_unmap(m);
    for (size_t i = 0; m->allocs && i < m->n_allocs; i++) {
        if (m->allocs[i].host_ptr)
            munmap(m->allocs[i].host_ptr, m->allocs[i].alloc_size);
        if (m->cow && m->cow[i])
            munmap(m->cow[i], m->allocs[i].alloc_size);
    }
    /* Unmapped first: the daemon may free its hold as soon as it hears. */
    if (m->c && m->lease)
        tdc_release_lease(m->c, m->lease, m->epoch);
    answer_open_free(m);
    if (m->c)
        tdc_client_unref(m->c);
    free(m);
}

void tdc_model_unref(struct tensord_model *m)
{
    if (atomic_fetch_sub(&m->refs, 1) == 1)
        model_free(m);
}

/* The seals the daemon puts on a host allocation's memfd once it is filled
 * (gpu/gpu_host.c): it can no longer change size or bytes, nor lose
 * those seals. */
#define HOST_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

/* Checks descriptor fd of allocation i before it is mapped: a file shorter
 * than the mapping kills the worker with SIGBUS on the first read past its
 * end, and one that is not sealed could be shrunk (the same) or rewritten
 * under the worker by whoever else holds it. 0, or -1 with err. */
static int check_host_fd(size_t i, int fd, const struct tensord_alloc *a, char *err,
                         size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        tdc_seterr(err, errlen, "allocation %zu: fstat of its descriptor: %s", i,
                   strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        tdc_seterr(err, errlen, "allocation %zu: its descriptor is no memfd (mode %#o)", i,
                   (unsigned)st.st_mode & S_IFMT);
        return -1;
    }
    if (st.st_size < 0 || (uint64_t)st.st_size < a->alloc_size) {
        tdc_seterr(err, errlen, "allocation %zu: its memfd holds %lld bytes, fewer than the "
                   "%llu to map", i, (long long)st.st_size, (unsigned long long)a->alloc_size);
        return -1;
    }
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & HOST_SEALS) != HOST_SEALS) {
        tdc_seterr(err, errlen, "allocation %zu: its memfd is not sealed against shrinking, "
                   "growing and writing (seals %#x, want %#x)", i, seals < 0 ? 0 : seals,
                   HOST_SEALS);
        return -1;
    }
    return 0;
}

/* Maps every allocation twice, once its descriptor passed check_host_fd:
 * read-only and shared (the daemon's bytes, for `data`), and private
 * copy-on-write for DLPack consumers, which may write (the pages are copied
 * on the first write, in this process only; the sealed memfd refuses shared
 * writable mappings anyway). CUDA handles are opaque: the driver refuses
 * to map more than the exported allocation holds (cuMemMap). */
static int map_host(struct tensord_model *m, const int *fds, char *err, size_t errlen)
{
    for (size_t i = 0; i < m->n_allocs; i++) {
        struct tensord_alloc *a = &m->allocs[i];
        if (check_host_fd(i, fds[i], a, err, errlen) != 0)
            return -1;
        void *p = mmap(NULL, a->alloc_size, PROT_READ, MAP_SHARED, fds[i], 0);
        if (p == MAP_FAILED) {
            tdc_seterr(err, errlen, "mmap of allocation %zu (%llu bytes): %s", i,
                       (unsigned long long)a->alloc_size, strerror(errno));
            return -1;
        }
        a->host_ptr = p;
        a->device_ptr = (uint64_t)(uintptr_t)p;
        p = mmap(NULL, a->alloc_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fds[i], 0);
        if (p == MAP_FAILED) {
            tdc_seterr(err, errlen, "private mmap of allocation %zu (%llu bytes): %s", i,
                       (unsigned long long)a->alloc_size, strerror(errno));
            return -1;
        }
        m->cow[i] = p;
    }
    return 0;
}

/* The open request for model as opts names it (prefer: the UUID of the
 * calling thread's CUDA device, or ""), or NULL when out of memory. */
static char *open_request(const char *model, const struct tensord_open_options *opts,
                          const char *prefer)
{
    char *qm = json_quote(model), *qd = json_quote(opts->device ? opts->device : "");
    char *qp = json_quote(prefer);
    size_t reqlen = (qm ? strlen(qm) : 0) + (qd ? strlen(qd) : 0) + (qp ? strlen(qp) : 0) + 96;
    char *req = qm && qd && qp ? cmem_malloc(reqlen) : NULL;
    if (req) {
        int n = snprintf(req, reqlen, "{\"op\":\"open\",\"model\":%s,\"device\":%s", qm, qd);
        if (*prefer)
            n += snprintf(req + n, reqlen - (size_t)n, ",\"prefer_device\":%s", qp);
        if (opts->rank >= 0)
            n += snprintf(req + n, reqlen - (size_t)n, ",\"rank\":%d", opts->rank);
        snprintf(req + n, reqlen - (size_t)n, "}");
    }
    free(qm);
    free(qd);
    free(qp);
    return req;
}

/* Sends the open request and takes the lease its answer names (counted on
 * c): RT_OK with *lease, *epoch, the descriptors and the answer's text
 * (caller frees), or an RT_ code with err and nothing held; *reloading says
 * the daemon refused because the model is being reloaded in place. */
static int take_lease(struct tensord_client *c, const char *req, int *fds, size_t *n_fds,
                      char **raw, uint64_t *lease, unsigned *epoch, int *reloading, char *err,
                      size_t errlen)
{
    struct answer a = {0};
    pthread_mutex_lock(&c->lock);
    int rc = tdc_roundtrip(c, req, fds, IPC_MAX_FDS, n_fds, &a, raw, err, errlen);
    *reloading = rc == RT_REFUSED && strcmp(a.code, "reloading") == 0;
    *epoch = c->epoch;
    if (rc == RT_OK && (!a.has_lease || a.lease == 0)) {
        tdc_seterr(err, errlen, "the open answer names no lease");
        tdc_close_fds(fds, *n_fds);
        *n_fds = 0;
        free(*raw);
        *raw = NULL;
        rc = RT_REFUSED;
    } else if (rc == RT_OK) {
        *lease = a.lease;
        c->leases++;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* Points every tensor at its bytes in this process (host) or on the device. */
static void place_tensors(struct tensord_model *m)
{
    for (size_t i = 0; i < m->n_tensors; i++) {
        struct tensord_tensor *t = &m->tensors[i];
        struct tensord_alloc *a = &m->allocs[t->alloc];
        t->device_ptr = a->device_ptr + t->offset;
        t->data = m->is_cuda ? NULL : (char *)a->host_ptr + t->offset;
    }
}

/* The options as this library knows them, from the caller's (which may
 * be an older, shorter struct: its size says). */
static int read_options(const struct tensord_open_options *in, struct tensord_open_options *o,
                        char *err, size_t errlen)
{
    *o = (struct tensord_open_options)TENSORD_OPEN_OPTIONS_INIT;
    if (!in)
        return 0;
    if (in->size < offsetof(struct tensord_open_options, device) + sizeof(in->device)) {
        tdc_seterr(err, errlen, "tensord_open_options.size is %zu: start from "
                   "TENSORD_OPEN_OPTIONS_INIT", in->size);
        return -1;
    }
    memcpy(o, in, in->size < sizeof(*o) ? in->size : sizeof(*o));
    o->size = sizeof(*o);
    if (o->rank < -1) {
        tdc_seterr(err, errlen, "rank %d: a rank is 0 or more (-1: any)", o->rank);
        return -1;
    }
    return 0;
}

TENSORD_API struct tensord_model *tensord_open(struct tensord_client *c, const char *model,
                                               const char *device, char *err, size_t errlen)
{
    struct tensord_open_options o = TENSORD_OPEN_OPTIONS_INIT;
    o.device = device;
    return tensord_open_ex(c, model, &o, err, errlen);
}

TENSORD_API struct tensord_model *tensord_open_ex(struct tensord_client *c, const char *model,
                                                  const struct tensord_open_options *opts,
                                                  char *err, size_t errlen)
{
    int fds[IPC_MAX_FDS];
    size_t n_fds = 0;
    char *req = NULL, *raw = NULL, prefer[96] = "";
    struct tensord_open_options o;
    if (!c || !model) {
        tdc_seterr(err, errlen, "no client or no model name");
        return NULL;
    }
    if (read_options(opts, &o, err, errlen) < 0)
        return NULL;
    /* Named no device: among several instances, the one on this thread's
     * CUDA device. */
    if ((!o.device || !*o.device) && tdc_cuda_current_uuid(prefer, sizeof(prefer)) < 0)
        prefer[0] = '\0';
    struct tensord_model *m = cmem_calloc(1, sizeof(*m));
    if (!m || !(req = open_request(model, &o, prefer))) {
        free(m);
        tdc_seterr(err, errlen, "%s", tdc_oom);
        return NULL;
    }
    /* A model reloaded in place (its new generation did not fit beside
     * the old one, so it loads where the old one was) is moments from
     * ready: wait for it rather than fail the worker. */
    int rc, reloading;
    unsigned waited = 0, pause = 10;
    for (;;) {
        rc = take_lease(c, req, fds, &n_fds, &raw, &m->lease, &m->epoch, &reloading, err, errlen);
        if (!reloading || waited >= TENSORD_RELOAD_WAIT_MS)
            break;
        usleep(pause * 1000u);
        waited += pause;
        pause = pause < 200 ? 2 * pause : 200;
    }
    free(req);
    if (rc != RT_OK) {
        free(m);
        return NULL;
    }
    /* From here every failure gives the lease back (model_free does). */
    atomic_fetch_add(&c->refs, 1);
    atomic_init(&m->refs, 1);
    m->c = c;
    rc = answer_open(raw, strlen(raw), n_fds, m, err, errlen);
    free(raw);
    if (rc == 0)
        rc = m->is_cuda ? tdc_cuda_map(m, fds, err, errlen) : map_host(m, fds, err, errlen);
    tdc_close_fds(fds, n_fds); /* the mappings hold the memory now */
    if (rc < 0) {
        model_free(m);
        return NULL;
    }
    place_tensors(m);
    return m;
}

TENSORD_API struct tensord_model *tensord_model_ref(struct tensord_model *m)
{
    if (m)
        atomic_fetch_add(&m->refs, 1);
    return m;
}

TENSORD_API void tensord_model_close(struct tensord_model *m)
{
    if (m)
        tdc_model_unref(m);
}

TENSORD_API const char *tensord_model_name(const struct tensord_model *m) { return m->name; }
TENSORD_API const char *tensord_model_backend(const struct tensord_model *m) { return m->backend; }
TENSORD_API const char *tensord_model_device(const struct tensord_model *m) { return m->device; }
TENSORD_API const char *tensord_model_device_uuid(const struct tensord_model *m) { return m->uuid; }
TENSORD_API int tensord_model_device_index(const struct tensord_model *m) { return m->dev_index; }
TENSORD_API uint64_t tensord_model_generation(const struct tensord_model *m)
{
    return m->generation;
}
TENSORD_API int tensord_model_world(const struct tensord_model *m) { return (int)m->world; }
TENSORD_API int tensord_model_rank(const struct tensord_model *m) { return (int)m->rank; }
TENSORD_API const char *tensord_model_split(const struct tensord_model *m) { return m->split; }
TENSORD_API size_t tensord_model_tensor_count(const struct tensord_model *m)
{
    return m->n_tensors;
}
TENSORD_API size_t tensord_model_alloc_count(const struct tensord_model *m)
{
    return m->n_allocs;
}

TENSORD_API const struct tensord_tensor *tensord_model_tensor(const struct tensord_model *m,
                                                              size_t i)
{
    return i < m->n_tensors ? &m->tensors[i] : NULL;
}

TENSORD_API const struct tensord_alloc *tensord_model_alloc(const struct tensord_model *m, size_t i)
{
    return i < m->n_allocs ? &m->allocs[i] : NULL;
}

TENSORD_API const struct tensord_tensor *tensord_model_find(const struct tensord_model *m,
                                                            const char *name)
{
    for (size_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    return NULL;
}

/* Whether every allocation of m has the daemon's checksum. Caller holds
 * m->c->lock, under which they are filled in. */
static int have_checksums(const struct tensord_model *m)
{
    for (size_t i = 0; i < m->n_allocs; i++)
        if (!m->allocs[i].has_checksum)
            return 0;
    return 1;
}

/* Makes sure m has the daemon's checksums: asks for them on the connection
 * that holds its lease, waiting while the daemon sums them. They are
 * written under the client's lock, so that two verifies of one model do
 * not fill them at once. Returns 0 or -1 with err. */
static int fetch_checksums(struct tensord_model *m, char *err, size_t errlen)
{
    char req[96];
    unsigned waited = 0, pause = 10;
    snprintf(req, sizeof(req), "{\"op\":\"checksums\",\"lease\":%llu}",
             (unsigned long long)m->lease);
    for (;;) {
        struct answer a = {0};
        char *raw = NULL;
        size_t n_fds = 0;
        int rc = 0;
        pthread_mutex_lock(&m->c->lock);
        if (have_checksums(m)) {
            pthread_mutex_unlock(&m->c->lock);
            return 0;
        }
        if (m->c->epoch != m->epoch) {
            rc = -1;
            tdc_seterr(err, errlen, "the connection that held this model's lease was lost: "
                       "open it again to check it");
        } else {
            rc = tdc_roundtrip(m->c, req, NULL, 0, &n_fds, &a, &raw, err, errlen);
            rc = rc == RT_OK ? answer_checksums(raw, strlen(raw), m, err, errlen) : -1;
        }
        pthread_mutex_unlock(&m->c->lock);
        free(raw);
        if (rc != 1)
            return rc;
        if (waited >= TENSORD_SUMS_WAIT_MS)
            return tdc_seterr(err, errlen, "the daemon was still summing the checksums after "
                              "%u ms", waited), -1;
        usleep(pause * 1000u);
        waited += pause;
        pause = pause < 200 ? 2 * pause : 200;
    }
}

TENSORD_API int tensord_model_verify(const struct tensord_model *m, char *err, size_t errlen)
{
    const size_t step = 16u << 20; /* a multiple of 8, as the checksum's pieces must be */
    char *buf = NULL;
    int rc = 0;
    if (fetch_checksums((struct tensord_model *)m, err, errlen) < 0)
        return -1;
    for (size_t i = 0; i < m->n_allocs && rc == 0; i++) {
        const struct tensord_alloc *a = &m->allocs[i];
        uint64_t acc = 0;
        if (!m->is_cuda) {
            acc = ipc_tsum_add(0, a->host_ptr, (size_t)a->byte_size, 0);
        } else {
            if (!buf && !(buf = cmem_malloc(step))) {
                tdc_seterr(err, errlen, "%s for a %zu-byte read buffer", tdc_oom, step);
                return -1;
            }
            for (uint64_t off = 0; off < a->byte_size && rc == 0; off += step) {
                size_t n = (size_t)(a->byte_size - off < step ? a->byte_size - off : step);
                rc = tdc_cuda_read((struct tensord_model *)m, buf, a->device_ptr + off, n, err,
                                   errlen);
                acc = ipc_tsum_add(acc, buf, n, off);
            }
        }
        if (rc == 0 && ipc_tsum_final(acc, a->byte_size) != a->checksum) {
            tdc_seterr(err, errlen,
                       "allocation %zu (%s): checksum %016llx, the daemon loaded %016llx", i,
                       a->file, (unsigned long long)ipc_tsum_final(acc, a->byte_size),
                       (unsigned long long)a->checksum);
            rc = -1;
        }
    }
    free(buf);
    return rc;
}

TENSORD_API int tensord_tensor_read(const struct tensord_model *m, size_t i, void *dst, char *err,
                                    size_t errlen)
{
    if (!m || i >= m->n_tensors) {
        tdc_seterr(err, errlen, "no tensor %zu", i);
        return -1;
    }
    const struct tensord_tensor *t = &m->tensors[i];
    if (!m->is_cuda) {
        memcpy(dst, t->data, (size_t)t->nbytes);
        return 0;
    }
    return tdc_cuda_read((struct tensord_model *)m, dst, t->device_ptr, (size_t)t->nbytes, err,
                         errlen);
}


#ifndef TENSORD_CUDA
int tdc_cuda_map(struct tensord_model *m, const int *fds, char *err, size_t errlen)
{
    (void)m;
    (void)fds;
    tdc_seterr(err, errlen, "this client library was built without CUDA support");
    return -1;
}

void tdc_cuda_unmap(struct tensord_model *m)
{
    (void)m;
}

int tdc_cuda_read(struct tensord_model *m, void *dst, uint64_t src, size_t n, char *err,
                  size_t errlen)
{
    (void)m;
    (void)dst;
    (void)src;
    (void)n;
    tdc_seterr(err, errlen, "this client library was built without CUDA support");
    return -1;
}

int tdc_cuda_current_uuid(char *uuid, size_t len)
{
    (void)uuid;
    (void)len;
    return -1;
}
#endif
