/* client: the lease socket protocol, host mappings, DLPack. */
#include "tensord_client.h"

#include <dlpack/dlpack.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_int.h"
#include "ipc_proto.h"
#include "tjson.h"
#include "util.h"

struct tensord_client {
    atomic_int refs;           /* the user's + one per model still mapped */
    int fd;
    pthread_mutex_t lock;      /* one request at a time */
};

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void client_unref(struct tensord_client *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    close(c->fd); /* the daemon ends this connection's leases */
    pthread_mutex_destroy(&c->lock);
    free(c);
}

TENSORD_API struct tensord_client *tensord_connect(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (!path || !*path)
        path = getenv("TENSORD_SOCKET");
    if (!path || !*path)
        path = TENSORD_DEFAULT_SOCKET;
    if (strlen(path) >= sizeof(a.sun_path)) {
        seterr(err, errlen, "socket path too long: %s", path);
        return NULL;
    }
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        seterr(err, errlen, "connect %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    struct tensord_client *c = xcalloc(1, sizeof(*c));
    atomic_init(&c->refs, 1);
    c->fd = fd;
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

TENSORD_API void tensord_close(struct tensord_client *c)
{
    if (c)
        client_unref(c);
}

static int send_all(int fd, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Receives exactly n bytes, collecting passed descriptors into fds (extra
 * ones beyond max_fds are closed). Returns 0 or -1 (errno; 0 on EOF). */
static int recv_all(int fd, void *p, size_t n, int *fds, size_t max_fds, size_t *n_fds)
{
    char *d = p;
    while (n > 0) {
        union {
            char buf[CMSG_SPACE(sizeof(int) * IPC_MAX_FDS)];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {.iov_base = d, .iov_len = n};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                             .msg_controllen = sizeof(ctl.buf)};
        ssize_t r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == EINTR)
            continue;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); r >= 0 && cm; cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int f;
                memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                if (*n_fds < max_fds)
                    fds[(*n_fds)++] = f;
                else
                    close(f);
            }
        }
        if (r <= 0) {
            if (r == 0)
                errno = 0;
            return -1;
        }
        d += r;
        n -= (size_t)r;
    }
    return 0;
}

static void close_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        close(fds[i]);
}

/* Sends one request and returns the parsed answer when it says ok, else
 * NULL with err ("CODE: message" for daemon errors). */
static struct tjson *roundtrip(struct tensord_client *c, const char *req, int *fds, size_t max_fds,
                               size_t *n_fds, char **raw, char *err, size_t errlen)
{
    unsigned char hdr[IPC_HEADER_BYTES];
    size_t n = strlen(req);
    char *body = NULL;
    struct tjson *doc = NULL;
    *n_fds = 0;
    pthread_mutex_lock(&c->lock);
    ipc_put_header(hdr, (uint32_t)n);
    /* A daemon that refuses this peer answers and closes before reading the
     * request: when sending fails, its answer may still be there to read. */
    int sent = send_all(c->fd, hdr, sizeof(hdr)) == 0 && send_all(c->fd, req, n) == 0;
    int send_errno = errno;
    if (recv_all(c->fd, hdr, sizeof(hdr), fds, max_fds, n_fds) < 0) {
        if (!sent)
            seterr(err, errlen, "sending to tensord: %s", strerror(send_errno));
        else
            seterr(err, errlen, "tensord closed the connection%s%s", errno ? ": " : "",
                   errno ? strerror(errno) : "");
        goto out;
    }
    uint32_t len = ipc_get_header(hdr);
    if (len > IPC_MAX_ANSWER) {
        seterr(err, errlen, "tensord answered %u bytes (more than %u)", len, IPC_MAX_ANSWER);
        goto out;
    }
    body = xmalloc(len + 1);
    if (recv_all(c->fd, body, len, fds, max_fds, n_fds) < 0) {
        seterr(err, errlen, "tensord closed the connection mid-answer");
        goto out;
    }
    body[len] = '\0';
    doc = tjson_parse(body, len, err, errlen);
    if (!doc)
        goto out;
    const struct tjson *ok = tjson_get(doc, "ok");
    if (!ok || ok->type != TJ_BOOL || !ok->boolean) {
        const struct tjson *e = tjson_get(doc, "error");
        const char *code = tjson_str(tjson_get(e, "code")), *msg = tjson_str(tjson_get(e, "message"));
        seterr(err, errlen, "%s: %s", code ? code : "error", msg ? msg : "request failed");
        tjson_free(doc);
        doc = NULL;
    }
out:
    pthread_mutex_unlock(&c->lock);
    if (doc && raw) {
        *raw = body;
        body = NULL;
    }
    free(body);
    if (!doc) {
        close_fds(fds, *n_fds);
        *n_fds = 0;
    }
    return doc;
}

/* JSON string literal of s (for requests). Caller frees. */
static char *json_quote(const char *s)
{
    size_t n = strlen(s);
    char *o = xmalloc(n * 6 + 3), *p = o;
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

TENSORD_API char *tensord_list(struct tensord_client *c, char *err, size_t errlen)
{
    int fds[1];
    size_t n_fds;
    char *raw = NULL;
    struct tjson *doc = roundtrip(c, "{\"op\":\"list\"}", fds, 0, &n_fds, &raw, err, errlen);
    tjson_free(doc);
    return raw;
}

/* ---- open ---------------------------------------------------------------- */

static void model_free(struct tensord_model *m)
{
    if (m->is_cuda)
        tdc_cuda_unmap(m);
    for (size_t i = 0; i < m->n_allocs; i++) {
        if (m->allocs[i].host_ptr)
            munmap(m->allocs[i].host_ptr, m->allocs[i].alloc_size);
        free((char *)m->allocs[i].file);
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        free((char *)m->tensors[i].name);
        free((char *)m->tensors[i].dtype);
        free((int64_t *)m->tensors[i].shape);
    }
    free(m->allocs);
    free(m->tensors);
    free(m->name);
    free(m->backend);
    free(m->device);
    free(m->uuid);
    if (m->c)
        client_unref(m->c);
    free(m);
}

static void model_unref(struct tensord_model *m)
{
    if (atomic_fetch_sub(&m->refs, 1) == 1)
        model_free(m);
}

static char *dup_str(const struct tjson *v)
{
    const char *s = tjson_str(v);
    return xstrdup(s ? s : "");
}

/* Fills m's tables from the "open" answer; checks every number against the
 * others (a tensor must lie inside its allocation). */
static int parse_open(struct tensord_model *m, const struct tjson *doc, size_t n_fds, char *err,
                      size_t errlen)
{
    const struct tjson *allocs = tjson_get(doc, "allocations");
    const struct tjson *tensors = tjson_get(doc, "tensors");
    uint64_t v;
    m->name = dup_str(tjson_get(doc, "model"));
    m->backend = dup_str(tjson_get(doc, "backend"));
    m->device = dup_str(tjson_get(doc, "device"));
    m->uuid = dup_str(tjson_get(doc, "device_uuid"));
    m->dev_index = tjson_uint(tjson_get(doc, "device_index"), &v) == 0 ? (int)v : 0;
    if (tjson_uint(tjson_get(doc, "generation"), &m->generation) < 0 || !allocs ||
        allocs->type != TJ_ARRAY || !tensors || tensors->type != TJ_ARRAY) {
        seterr(err, errlen, "malformed open answer (generation, allocations, tensors)");
        return -1;
    }
    m->is_cuda = strcmp(m->backend, "cuda") == 0;
    if (!m->is_cuda && strcmp(m->backend, "host") != 0) {
        seterr(err, errlen, "unknown backend \"%s\"", m->backend);
        return -1;
    }
    if (allocs->len != n_fds) {
        seterr(err, errlen, "the answer lists %zu allocations but carried %zu descriptors",
               allocs->len, n_fds);
        return -1;
    }
    m->allocs = xcalloc(allocs->len ? allocs->len : 1, sizeof(*m->allocs));
    m->n_allocs = allocs->len;
    for (size_t i = 0; i < allocs->len; i++) {
        const struct tjson *a = &allocs->items[i];
        struct tensord_alloc *pa = &m->allocs[i];
        const char *sum = tjson_str(tjson_get(a, "checksum"));
        pa->file = dup_str(tjson_get(a, "file"));
        if (tjson_uint(tjson_get(a, "fd_index"), &v) < 0 || v != i ||
            tjson_uint(tjson_get(a, "byte_size"), &pa->byte_size) < 0 ||
            tjson_uint(tjson_get(a, "alloc_size"), &pa->alloc_size) < 0 ||
            pa->byte_size > pa->alloc_size || pa->alloc_size == 0 || !sum) {
            seterr(err, errlen, "malformed allocation %zu in the open answer", i);
            return -1;
        }
        pa->checksum = strtoull(sum, NULL, 16);
    }
    m->tensors = xcalloc(tensors->len ? tensors->len : 1, sizeof(*m->tensors));
    for (size_t i = 0; i < tensors->len; i++) {
        const struct tjson *t = &tensors->items[i];
        struct tensord_tensor *pt = &m->tensors[i];
        const struct tjson *shape = tjson_get(t, "shape");
        uint64_t end;
        m->n_tensors++;
        pt->name = dup_str(tjson_get(t, "name"));
        pt->dtype = dup_str(tjson_get(t, "dtype"));
        if (!shape || shape->type != TJ_ARRAY || shape->len > 64 ||
            tjson_uint(tjson_get(t, "alloc"), &v) < 0 || v >= m->n_allocs ||
            tjson_uint(tjson_get(t, "offset"), &pt->offset) < 0 ||
            tjson_uint(tjson_get(t, "nbytes"), &pt->nbytes) < 0 ||
            u64_add(pt->offset, pt->nbytes, &end) < 0 || end > m->allocs[v].byte_size) {
            seterr(err, errlen, "malformed tensor %zu in the open answer", i);
            return -1;
        }
        pt->alloc = (uint32_t)v;
        int64_t *dims = xcalloc(shape->len ? shape->len : 1, sizeof(*dims));
        pt->shape = dims;
        pt->ndim = (int)shape->len;
        for (size_t d = 0; d < shape->len; d++) {
            if (tjson_uint(&shape->items[d], &v) < 0 || v > INT64_MAX) {
                seterr(err, errlen, "malformed shape of tensor %s", pt->name);
                return -1;
            }
            dims[d] = (int64_t)v;
        }
    }
    return 0;
}

static int map_host(struct tensord_model *m, const int *fds, char *err, size_t errlen)
{
    for (size_t i = 0; i < m->n_allocs; i++) {
        struct tensord_alloc *a = &m->allocs[i];
        void *p = mmap(NULL, a->alloc_size, PROT_READ, MAP_SHARED, fds[i], 0);
        if (p == MAP_FAILED) {
            seterr(err, errlen, "mmap of allocation %zu (%llu bytes): %s", i,
                   (unsigned long long)a->alloc_size, strerror(errno));
            return -1;
        }
        a->host_ptr = p;
        a->device_ptr = (uint64_t)(uintptr_t)p;
    }
    return 0;
}

TENSORD_API struct tensord_model *tensord_open(struct tensord_client *c, const char *model,
                                               const char *device, char *err, size_t errlen)
{
    int fds[IPC_MAX_FDS];
    size_t n_fds = 0;
    if (!c || !model) {
        seterr(err, errlen, "no client or no model name");
        return NULL;
    }
    char *qm = json_quote(model), *qd = json_quote(device ? device : "");
    char *req = xasprintf("{\"op\":\"open\",\"model\":%s,\"device\":%s}", qm, qd);
    free(qm);
    free(qd);
    struct tjson *doc = roundtrip(c, req, fds, IPC_MAX_FDS, &n_fds, NULL, err, errlen);
    free(req);
    if (!doc)
        return NULL;
    struct tensord_model *m = xcalloc(1, sizeof(*m));
    atomic_init(&m->refs, 1);
    int rc = parse_open(m, doc, n_fds, err, errlen);
    tjson_free(doc);
    if (rc == 0)
        rc = m->is_cuda ? tdc_cuda_map(m, fds, err, errlen) : map_host(m, fds, err, errlen);
    close_fds(fds, n_fds); /* the mappings hold the memory now */
    if (rc < 0) {
        model_free(m);
        return NULL;
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        struct tensord_tensor *t = &m->tensors[i];
        struct tensord_alloc *a = &m->allocs[t->alloc];
        t->device_ptr = a->device_ptr + t->offset;
        t->data = m->is_cuda ? NULL : (char *)a->host_ptr + t->offset;
    }
    atomic_fetch_add(&c->refs, 1);
    m->c = c;
    return m;
}

TENSORD_API void tensord_model_close(struct tensord_model *m)
{
    if (m)
        model_unref(m);
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

TENSORD_API int tensord_model_verify(const struct tensord_model *m, char *err, size_t errlen)
{
    const size_t step = 16u << 20; /* a multiple of 8, as the checksum's pieces must be */
    char *buf = NULL;
    int rc = 0;
    for (size_t i = 0; i < m->n_allocs && rc == 0; i++) {
        const struct tensord_alloc *a = &m->allocs[i];
        uint64_t acc = 0;
        if (!m->is_cuda) {
            acc = ipc_tsum_add(0, a->host_ptr, (size_t)a->byte_size, 0);
        } else {
            if (!buf)
                buf = xmalloc(step);
            for (uint64_t off = 0; off < a->byte_size && rc == 0; off += step) {
                size_t n = (size_t)(a->byte_size - off < step ? a->byte_size - off : step);
                rc = tdc_cuda_read((struct tensord_model *)m, buf, a->device_ptr + off, n, err,
                                   errlen);
                acc = ipc_tsum_add(acc, buf, n, off);
            }
        }
        if (rc == 0 && ipc_tsum_final(acc, a->byte_size) != a->checksum) {
            seterr(err, errlen, "allocation %zu (%s): checksum %016llx, the daemon loaded %016llx",
                   i, a->file, (unsigned long long)ipc_tsum_final(acc, a->byte_size),
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
        seterr(err, errlen, "no tensor %zu", i);
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

/* ---- DLPack -------------------------------------------------------------- */

struct dl_ctx {
    DLManagedTensor mt;
    struct tensord_model *m;
};

static void dl_deleter(DLManagedTensor *mt)
{
    struct dl_ctx *ctx = mt->manager_ctx;
    model_unref(ctx->m);
    free(ctx);
}

static int dl_dtype(const char *name, DLDataType *t)
{
    static const struct {
        const char *name;
        uint8_t code, bits;
    } map[] = {
        {"BOOL", kDLUInt, 8}, {"U8", kDLUInt, 8},    {"I8", kDLInt, 8},       {"U16", kDLUInt, 16},
        {"I16", kDLInt, 16},  {"F16", kDLFloat, 16}, {"BF16", kDLBfloat, 16}, {"U32", kDLUInt, 32},
        {"I32", kDLInt, 32},  {"F32", kDLFloat, 32}, {"U64", kDLUInt, 64},    {"I64", kDLInt, 64},
        {"F64", kDLFloat, 64}, {"C64", kDLComplex, 64},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        if (strcmp(map[i].name, name) == 0) {
            t->code = map[i].code;
            t->bits = map[i].bits;
            t->lanes = 1;
            return 0;
        }
    }
    return -1;
}

TENSORD_API struct DLManagedTensor *tensord_tensor_dlpack(struct tensord_model *m, size_t i)
{
    if (!m || i >= m->n_tensors)
        return NULL;
    const struct tensord_tensor *t = &m->tensors[i];
    DLDataType dt;
    if (dl_dtype(t->dtype, &dt) < 0)
        return NULL;
    struct dl_ctx *ctx = xcalloc(1, sizeof(*ctx));
    DLTensor *d = &ctx->mt.dl_tensor;
    ctx->m = m;
    atomic_fetch_add(&m->refs, 1);
    d->data = m->is_cuda ? (void *)(uintptr_t)t->device_ptr : t->data;
    d->device.device_type = m->is_cuda ? kDLCUDA : kDLCPU;
    d->device.device_id = m->is_cuda ? m->dev_index : 0;
    d->ndim = t->ndim;
    d->dtype = dt;
    d->shape = (int64_t *)t->shape; /* owned by the model, which the tensor keeps */
    d->strides = NULL;              /* compact row-major */
    d->byte_offset = 0;
    ctx->mt.manager_ctx = ctx;
    ctx->mt.deleter = dl_deleter;
    return &ctx->mt;
}

#ifndef TENSORD_CUDA
int tdc_cuda_map(struct tensord_model *m, const int *fds, char *err, size_t errlen)
{
    (void)m;
    (void)fds;
    seterr(err, errlen, "this client library was built without CUDA support");
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
    seterr(err, errlen, "this client library was built without CUDA support");
    return -1;
}
#endif
