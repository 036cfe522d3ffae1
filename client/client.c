/* client: the lease socket protocol, host mappings, DLPack. */
#include "tensord_client.h"

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
#include "cmem.h"
#include "dlpack_v1.h"
#include "gpu/ipc_proto.h"
#include "tjson.h"
#include "util.h"

struct tensord_client {
    atomic_int refs;           /* the user's + one per model still mapped */
    pthread_mutex_t lock;      /* one request at a time; guards what follows */
    int fd;                    /* -1 after a failed reconnect */
    char *path;                /* to reconnect while no lease is held */
    unsigned leases;           /* leases this connection holds */
    unsigned epoch;            /* bumped by every (re)connection and loss of one */
};

static const char oom[] = "out of memory";

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
    if (c->fd >= 0)
        close(c->fd); /* the daemon ends whatever this connection still held */
    pthread_mutex_destroy(&c->lock);
    free(c->path);
    free(c);
}

/* ---- the wire ------------------------------------------------------------ */

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

enum { RT_OK = 0, RT_REFUSED = -1, RT_TRANSPORT = -2 };

/* Sends one request on c->fd (c->lock held) and reads the answer. RT_OK
 * with *doc (and *raw when asked) when it says ok; RT_REFUSED with err
 * "CODE: message" when the daemon said no (or answered nonsense);
 * RT_TRANSPORT when the connection failed before an answer came. */
static int exchange(struct tensord_client *c, const char *req, int *fds, size_t max_fds,
                    size_t *n_fds, struct tjson **doc, char **raw, char *err, size_t errlen)
{
    unsigned char hdr[IPC_HEADER_BYTES];
    size_t n = strlen(req);
    char *body = NULL;
    int rc = RT_REFUSED;
    *n_fds = 0;
    *doc = NULL;
    if (c->fd < 0) {
        seterr(err, errlen, "not connected to tensord (%s)", c->path);
        return RT_TRANSPORT;
    }
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
        rc = RT_TRANSPORT;
        goto desync;
    }
    uint32_t len = ipc_get_header(hdr);
    if (len > IPC_MAX_ANSWER) {
        seterr(err, errlen, "tensord answered %u bytes (more than %u)", len, IPC_MAX_ANSWER);
        goto desync;
    }
    body = cmem_malloc((size_t)len + 1);
    if (!body) {
        seterr(err, errlen, "%s for a %u-byte answer", oom, len);
        goto desync;
    }
    if (recv_all(c->fd, body, len, fds, max_fds, n_fds) < 0) {
        seterr(err, errlen, "tensord closed the connection mid-answer");
        goto desync;
    }
    body[len] = '\0';
    *doc = tjson_parse(body, len, err, errlen);
    if (!*doc)
        goto out;
    const struct tjson *ok = tjson_get(*doc, "ok");
    if (!ok || ok->type != TJ_BOOL || !ok->boolean) {
        const struct tjson *e = tjson_get(*doc, "error");
        const char *code = tjson_str(tjson_get(e, "code")), *msg = tjson_str(tjson_get(e, "message"));
        seterr(err, errlen, "%s: %s", code ? code : "error", msg ? msg : "request failed");
        tjson_free(*doc);
        *doc = NULL;
        goto out;
    }
    rc = RT_OK;
    if (raw) {
        *raw = body;
        body = NULL;
    }
out:
    free(body);
    if (rc != RT_OK) {
        close_fds(fds, *n_fds);
        *n_fds = 0;
    }
    return rc;
desync:
    /* An answer that was not read whole leaves the stream out of step:
     * this connection is done, and the daemon ends its leases with it
     * (the mappings this process made stay valid). */
    close(c->fd);
    c->fd = -1;
    c->leases = 0;
    c->epoch++;
    goto out;
}

/* A new connection to path. Returns the fd, or -1 with err. */
static int dial(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(a.sun_path)) {
        seterr(err, errlen, "socket path too long: %s", path);
        return -1;
    }
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        seterr(err, errlen, "connect %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Agrees on lease protocol 2 (c->lock held). */
static int hello(struct tensord_client *c, char *err, size_t errlen)
{
    struct tjson *doc;
    size_t n_fds;
    char req[64];
    snprintf(req, sizeof(req), "{\"op\":\"hello\",\"protocol\":%d}", IPC_PROTOCOL);
    int rc = exchange(c, req, NULL, 0, &n_fds, &doc, NULL, err, errlen);
    if (rc == RT_REFUSED && err && strstr(err, "unknown op"))
        seterr(err, errlen, "this tensord speaks lease protocol 1 only (no \"hello\"); this "
                            "client needs protocol %d (a lease per open): upgrade the daemon",
               IPC_PROTOCOL);
    tjson_free(doc);
    return rc;
}

/* (Re)connects c (c->lock held). */
static int redial(struct tensord_client *c, char *err, size_t errlen)
{
    if (c->fd >= 0)
        close(c->fd);
    c->leases = 0;
    c->epoch++;
    c->fd = dial(c->path, err, errlen);
    if (c->fd < 0)
        return RT_TRANSPORT;
    int rc = hello(c, err, errlen);
    if (rc != RT_OK) {
        close(c->fd);
        c->fd = -1;
    }
    return rc;
}

/* exchange(), reconnecting once when the connection is gone (the daemon
 * closes idle connections that hold no lease) and this one held none. */
static int roundtrip(struct tensord_client *c, const char *req, int *fds, size_t max_fds,
                     size_t *n_fds, struct tjson **doc, char **raw, char *err, size_t errlen)
{
    unsigned held = c->leases;
    int rc = exchange(c, req, fds, max_fds, n_fds, doc, raw, err, errlen);
    if (rc == RT_TRANSPORT && held == 0 && redial(c, err, errlen) == RT_OK)
        rc = exchange(c, req, fds, max_fds, n_fds, doc, raw, err, errlen);
    return rc;
}

TENSORD_API struct tensord_client *tensord_connect(const char *path, char *err, size_t errlen)
{
    if (!path || !*path)
        path = getenv("TENSORD_SOCKET");
    if (!path || !*path)
        path = TENSORD_DEFAULT_SOCKET;
    struct tensord_client *c = cmem_calloc(1, sizeof(*c));
    if (!c || !(c->path = cmem_strdup(path))) {
        free(c);
        seterr(err, errlen, "%s", oom);
        return NULL;
    }
    atomic_init(&c->refs, 1);
    c->fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_lock(&c->lock);
    int rc = redial(c, err, errlen);
    pthread_mutex_unlock(&c->lock);
    if (rc != RT_OK) {
        client_unref(c);
        return NULL;
    }
    return c;
}

TENSORD_API void tensord_close(struct tensord_client *c)
{
    if (c)
        client_unref(c);
}

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

TENSORD_API char *tensord_list(struct tensord_client *c, char *err, size_t errlen)
{
    size_t n_fds;
    char *raw = NULL;
    struct tjson *doc;
    if (!c) {
        seterr(err, errlen, "no client");
        return NULL;
    }
    pthread_mutex_lock(&c->lock);
    roundtrip(c, "{\"op\":\"list\"}", NULL, 0, &n_fds, &doc, &raw, err, errlen);
    pthread_mutex_unlock(&c->lock);
    tjson_free(doc);
    return raw;
}

/* Gives lease back to the daemon, if the connection that took it is still
 * the one open. */
static void release_lease(struct tensord_client *c, uint64_t lease, unsigned epoch)
{
    char req[80], err[256];
    struct tjson *doc;
    size_t n_fds;
    pthread_mutex_lock(&c->lock);
    if (c->fd >= 0 && c->epoch == epoch) {
        snprintf(req, sizeof(req), "{\"op\":\"release\",\"lease\":%llu}",
                 (unsigned long long)lease);
        /* Failing here only means the connection went, taking the lease with it. */
        exchange(c, req, NULL, 0, &n_fds, &doc, NULL, err, sizeof(err));
        tjson_free(doc);
        if (c->epoch == epoch && c->leases)
            c->leases--;
    }
    pthread_mutex_unlock(&c->lock);
}

/* ---- open ---------------------------------------------------------------- */

static void model_free(struct tensord_model *m)
{
    if (m->is_cuda)
        tdc_cuda_unmap(m);
    for (size_t i = 0; m->allocs && i < m->n_allocs; i++) {
        if (m->allocs[i].host_ptr)
            munmap(m->allocs[i].host_ptr, m->allocs[i].alloc_size);
        if (m->cow && m->cow[i])
            munmap(m->cow[i], m->allocs[i].alloc_size);
        free((char *)m->allocs[i].file);
    }
    for (size_t i = 0; m->tensors && i < m->n_tensors; i++) {
        free((char *)m->tensors[i].name);
        free((char *)m->tensors[i].dtype);
        free((int64_t *)m->tensors[i].shape);
    }
    /* Unmapped first: the daemon may free its hold as soon as it hears. */
    if (m->c && m->lease)
        release_lease(m->c, m->lease, m->epoch);
    free(m->cow);
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

/* A copy of v's string ("" when it is none), or NULL when out of memory. */
static char *dup_str(const struct tjson *v)
{
    const char *s = tjson_str(v);
    return cmem_strdup(s ? s : "");
}

/* Fills m's tables from the "open" answer; checks every number against the
 * others (a tensor must lie inside its allocation). */
static int parse_open(struct tensord_model *m, const struct tjson *doc, size_t n_fds, char *err,
                      size_t errlen)
{
    const struct tjson *allocs = tjson_get(doc, "allocations");
    const struct tjson *tensors = tjson_get(doc, "tensors");
    uint64_t v;
    if (!(m->name = dup_str(tjson_get(doc, "model"))) ||
        !(m->backend = dup_str(tjson_get(doc, "backend"))) ||
        !(m->device = dup_str(tjson_get(doc, "device"))) ||
        !(m->uuid = dup_str(tjson_get(doc, "device_uuid"))))
        goto nomem;
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
    if (!(m->allocs = cmem_calloc(allocs->len, sizeof(*m->allocs))) ||
        !(m->cow = cmem_calloc(allocs->len, sizeof(*m->cow))))
        goto nomem;
    m->n_allocs = allocs->len;
    for (size_t i = 0; i < allocs->len; i++) {
        const struct tjson *a = &allocs->items[i];
        struct tensord_alloc *pa = &m->allocs[i];
        const char *sum = tjson_str(tjson_get(a, "checksum"));
        if (!(pa->file = dup_str(tjson_get(a, "file"))))
            goto nomem;
        if (tjson_uint(tjson_get(a, "fd_index"), &v) < 0 || v != i ||
            tjson_uint(tjson_get(a, "byte_size"), &pa->byte_size) < 0 ||
            tjson_uint(tjson_get(a, "alloc_size"), &pa->alloc_size) < 0 ||
            pa->byte_size > pa->alloc_size || pa->alloc_size == 0 || !sum) {
            seterr(err, errlen, "malformed allocation %zu in the open answer", i);
            return -1;
        }
        pa->checksum = strtoull(sum, NULL, 16);
    }
    if (!(m->tensors = cmem_calloc(tensors->len, sizeof(*m->tensors))))
        goto nomem;
    for (size_t i = 0; i < tensors->len; i++) {
        const struct tjson *t = &tensors->items[i];
        struct tensord_tensor *pt = &m->tensors[i];
        const struct tjson *shape = tjson_get(t, "shape");
        uint64_t end;
        m->n_tensors++;
        if (!(pt->name = dup_str(tjson_get(t, "name"))) ||
            !(pt->dtype = dup_str(tjson_get(t, "dtype"))))
            goto nomem;
        if (!shape || shape->type != TJ_ARRAY || shape->len > 64 ||
            tjson_uint(tjson_get(t, "alloc"), &v) < 0 || v >= m->n_allocs ||
            tjson_uint(tjson_get(t, "offset"), &pt->offset) < 0 ||
            tjson_uint(tjson_get(t, "nbytes"), &pt->nbytes) < 0 ||
            u64_add(pt->offset, pt->nbytes, &end) < 0 || end > m->allocs[v].byte_size) {
            seterr(err, errlen, "malformed tensor %zu in the open answer", i);
            return -1;
        }
        pt->alloc = (uint32_t)v;
        int64_t *dims = cmem_calloc(shape->len, sizeof(*dims));
        if (!dims)
            goto nomem;
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
nomem:
    seterr(err, errlen, "%s reading the open answer", oom);
    return -1;
}

/* Maps every allocation twice: read-only and shared (the daemon's bytes,
 * for `data`), and private copy-on-write for DLPack consumers, which may
 * write (the pages are copied on the first write, in this process only;
 * the sealed memfd refuses shared writable mappings anyway). */
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
        p = mmap(NULL, a->alloc_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fds[i], 0);
        if (p == MAP_FAILED) {
            seterr(err, errlen, "private mmap of allocation %zu (%llu bytes): %s", i,
                   (unsigned long long)a->alloc_size, strerror(errno));
            return -1;
        }
        m->cow[i] = p;
    }
    return 0;
}

TENSORD_API struct tensord_model *tensord_open(struct tensord_client *c, const char *model,
                                               const char *device, char *err, size_t errlen)
{
    int fds[IPC_MAX_FDS];
    size_t n_fds = 0;
    struct tjson *doc = NULL;
    struct tensord_model *m = NULL;
    if (!c || !model) {
        seterr(err, errlen, "no client or no model name");
        return NULL;
    }
    char *qm = json_quote(model), *qd = json_quote(device ? device : "");
    size_t reqlen = (qm ? strlen(qm) : 0) + (qd ? strlen(qd) : 0) + 64;
    char *req = qm && qd ? cmem_malloc(reqlen) : NULL;
    if (req)
        snprintf(req, reqlen, "{\"op\":\"open\",\"model\":%s,\"device\":%s}", qm, qd);
    free(qm);
    free(qd);
    if (!req) {
        seterr(err, errlen, "%s", oom);
        return NULL;
    }
    pthread_mutex_lock(&c->lock);
    int rc = roundtrip(c, req, fds, IPC_MAX_FDS, &n_fds, &doc, NULL, err, errlen);
    uint64_t lease = 0;
    unsigned epoch = c->epoch;
    if (rc == RT_OK) {
        if (tjson_uint(tjson_get(doc, "lease"), &lease) < 0 || lease == 0) {
            seterr(err, errlen, "the open answer names no lease");
            rc = RT_REFUSED;
        } else {
            c->leases++;
        }
    }
    pthread_mutex_unlock(&c->lock);
    free(req);
    if (rc != RT_OK) {
        tjson_free(doc);
        return NULL;
    }
    /* From here every failure gives the lease back (model_free does). */
    atomic_fetch_add(&c->refs, 1);
    m = cmem_calloc(1, sizeof(*m));
    if (!m) {
        seterr(err, errlen, "%s", oom);
        close_fds(fds, n_fds);
        tjson_free(doc);
        release_lease(c, lease, epoch);
        client_unref(c);
        return NULL;
    }
    atomic_init(&m->refs, 1);
    m->c = c;
    m->lease = lease;
    m->epoch = epoch;
    rc = parse_open(m, doc, n_fds, err, errlen);
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
            if (!buf && !(buf = cmem_malloc(step))) {
                seterr(err, errlen, "%s for a %zu-byte read buffer", oom, step);
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

/* One exported tensor: either DLPack form, and the model it keeps. */
struct dl_ctx {
    DLManagedTensor mt;
    struct DLManagedTensorVersioned vt;
    struct tensord_model *m;
    int64_t raw_shape[1];      /* TENSORD_DLPACK_RAW's shape: [nbytes] */
};

static void dl_deleter(DLManagedTensor *mt)
{
    struct dl_ctx *ctx = mt->manager_ctx;
    model_unref(ctx->m);
    free(ctx);
}

static void dl_deleter_versioned(struct DLManagedTensorVersioned *vt)
{
    struct dl_ctx *ctx = vt->manager_ctx;
    model_unref(ctx->m);
    free(ctx);
}

static int dl_dtype(const char *name, DLDataType *t)
{
    static const struct {
        const char *name;
        uint8_t code, bits;
    } map[] = {
        {"BOOL", TDC_DL_BOOL, 8},
        {"U8", kDLUInt, 8},
        {"I8", kDLInt, 8},
        {"U16", kDLUInt, 16},
        {"I16", kDLInt, 16},
        {"F16", kDLFloat, 16},
        {"BF16", kDLBfloat, 16},
        {"U32", kDLUInt, 32},
        {"I32", kDLInt, 32},
        {"F32", kDLFloat, 32},
        {"U64", kDLUInt, 64},
        {"I64", kDLInt, 64},
        {"F64", kDLFloat, 64},
        {"C64", kDLComplex, 64},
        {"F8_E4M3", TDC_DL_FLOAT8_E4M3FN, 8},
        {"F8_E5M2", TDC_DL_FLOAT8_E5M2, 8},
        {"F8_E4M3FNUZ", TDC_DL_FLOAT8_E4M3FNUZ, 8},
        {"F8_E5M2FNUZ", TDC_DL_FLOAT8_E5M2FNUZ, 8},
        {"F8_E8M0", TDC_DL_FLOAT8_E8M0FNU, 8},
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

/* A context for tensor i with its DLTensor filled in (into *d), holding a
 * model reference; NULL with err. */
static struct dl_ctx *dl_new(struct tensord_model *m, size_t i, unsigned flags, int versioned,
                             char *err, size_t errlen)
{
    if (!m || i >= m->n_tensors) {
        seterr(err, errlen, "no tensor %zu", i);
        return NULL;
    }
    const struct tensord_tensor *t = &m->tensors[i];
    DLDataType dt = {.code = kDLUInt, .bits = 8, .lanes = 1};
    if (!(flags & TENSORD_DLPACK_RAW) && dl_dtype(t->dtype, &dt) < 0) {
        seterr(err, errlen, "DLPack has no dtype for %s (tensor %s): ask for its raw bytes "
                            "(TENSORD_DLPACK_RAW, a uint8 tensor of %llu bytes)", t->dtype, t->name,
               (unsigned long long)t->nbytes);
        return NULL;
    }
    struct dl_ctx *ctx = cmem_calloc(1, sizeof(*ctx));
    if (!ctx) {
        seterr(err, errlen, "%s", oom);
        return NULL;
    }
    DLTensor *d = versioned ? &ctx->vt.dl_tensor : &ctx->mt.dl_tensor;
    ctx->m = m;
    atomic_fetch_add(&m->refs, 1);
    if (m->is_cuda)
        d->data = (void *)(uintptr_t)t->device_ptr;
    else /* the private copy-on-write view: consumers may write in place */
        d->data = (char *)m->cow[t->alloc] + t->offset;
    d->device.device_type = m->is_cuda ? kDLCUDA : kDLCPU;
    d->device.device_id = m->is_cuda ? m->dev_index : 0;
    d->dtype = dt;
    if (flags & TENSORD_DLPACK_RAW) {
        ctx->raw_shape[0] = (int64_t)t->nbytes;
        d->ndim = 1;
        d->shape = ctx->raw_shape;
    } else {
        d->ndim = t->ndim;
        d->shape = (int64_t *)t->shape; /* owned by the model, which the tensor keeps */
    }
    d->strides = NULL; /* compact row-major */
    d->byte_offset = 0;
    return ctx;
}

TENSORD_API struct DLManagedTensor *tensord_tensor_dlpack_ex(struct tensord_model *m, size_t i,
                                                             unsigned flags, char *err,
                                                             size_t errlen)
{
    struct dl_ctx *ctx = dl_new(m, i, flags, 0, err, errlen);
    if (!ctx)
        return NULL;
    ctx->mt.manager_ctx = ctx;
    ctx->mt.deleter = dl_deleter;
    return &ctx->mt;
}

TENSORD_API struct DLManagedTensor *tensord_tensor_dlpack(struct tensord_model *m, size_t i)
{
    return tensord_tensor_dlpack_ex(m, i, 0, NULL, 0);
}

TENSORD_API struct DLManagedTensorVersioned *
tensord_tensor_dlpack_versioned(struct tensord_model *m, size_t i, unsigned flags, char *err,
                                size_t errlen)
{
    struct dl_ctx *ctx = dl_new(m, i, flags, 1, err, errlen);
    if (!ctx)
        return NULL;
    ctx->vt.version.major = TDC_DLPACK_MAJOR;
    ctx->vt.version.minor = TDC_DLPACK_MINOR;
    ctx->vt.manager_ctx = ctx;
    ctx->vt.deleter = dl_deleter_versioned;
    ctx->vt.flags = TDC_DLPACK_FLAG_READ_ONLY;
    return &ctx->vt;
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
