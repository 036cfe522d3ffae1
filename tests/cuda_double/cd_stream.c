/* cuda_double streams, events and copies: cuStream*, cuEvent* and
 * cuMemcpy*, asynchronous copies queued on their stream until something
 * waits for them. A test double, not CUDA: see cuda_double.h. The rules come from the CUDA Driver API's "Stream
 * Management", "Event Management" and "Memory Management" sections
 * (group__CUDA__STREAM, __EVENT, __MEM) and cuda.h. */
#include "cuda_double.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

char *cd_op_target(struct CUstream_st *s, const struct cd_op *op, CUresult *err)
{
    /* The destination must still be writable device memory and the source
     * still pinned when the copy finally runs. */
    char *dst = cd_device_lookup((CUdeviceptr)(uintptr_t)op->dst, op->n,
                                 CU_MEM_ACCESS_FLAGS_PROT_READWRITE, s->ctx->dev);
    if (!dst) {
        cd_violation("cuMemcpyHtoDAsync", "the destination %p+%zu was unmapped or freed "
                     "before the queued copy ran", (void *)op->dst, op->n);
        *err = CUDA_ERROR_ILLEGAL_ADDRESS;
    } else if (!cd_is_pinned(op->src, op->n)) {
        cd_violation("cuMemcpyHtoDAsync", "the source %p+%zu was freed before the queued "
                     "copy ran", (void *)op->src, op->n);
        *err = CUDA_ERROR_ILLEGAL_ADDRESS;
    } else if (op->fail) {
        *err = CUDA_ERROR_ILLEGAL_ADDRESS;
    } else {
        return cd_device_bytes(dst);
    }
    return NULL;
}

CUresult cd_stream_run(struct CUstream_st *s, uint64_t seq)
{
    if (cd.link_gbps > 0)
        return cd_link_wait(s, seq); /* the copy engine runs them */
    size_t k = 0;
    while (k < s->n_ops && s->ops[k].seq <= seq) {
        struct cd_op *op = &s->ops[k++];
        CUresult e = CUDA_SUCCESS;
        char *dst = cd_op_target(s, op, &e);
        if (dst)
            memcpy(dst, op->src, op->n);
        else
            s->error = e;
        s->done = op->seq;
    }
    if (k) /* a stream that never queued a copy has no ops array */
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
        /* A destroyed stream's queued work (link only) is the context's too. */
        if ((!s->live && !s->n_ops) || s->ctx != ctx ||
            (!all && (s->flags & CU_STREAM_NON_BLOCKING)))
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
         * first and the stream's resources go afterwards (with a link, the
         * copy engine frees them when it has drained the stream). */
        if (cd.link_gbps <= 0)
            cd_stream_run(s, s->queued);
        s->live = 0;
        if (!s->n_ops) {
            free(s->ops);
            s->ops = NULL;
            s->cap_ops = 0;
        }
        r = cd_lost_after(fn, cd.lost[s->ctx->dev], s->ctx->dev);
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
        cd_fail(r, fn, cd.lost[s->ctx->dev] ? "the device was lost" : "a queued copy failed");
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

static CUresult event_wait(const char *fn, CUevent he, int query)
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
    } else if (e && e->stream && query && cd.link_gbps > 0 && e->stream->done < e->seq) {
        /* cuEventQuery: CUDA_ERROR_NOT_READY while the work it captured is
         * incomplete; a status, not a failure (nothing is recorded). */
        r = CUDA_ERROR_NOT_READY;
    } else if (e && e->stream && (r = cd_stream_run(e->stream, e->seq)) != CUDA_SUCCESS) {
        cd_fail(r, fn, cd.lost[e->ctx->dev] ? "the device was lost"
                                            : "a copy before the event failed");
    }
    cd_unlock();
    return r;
}

CUresult cd_EventSynchronize(CUevent e) { return event_wait("cuEventSynchronize", e, 0); }
CUresult cd_EventQuery(CUevent e) { return event_wait("cuEventQuery", e, 1); }

CUresult cd_EventDestroy(CUevent he)
{
    const char *fn = "cuEventDestroy";
    cd_lock();
    CUresult r = cd_check_init(fn);
    struct CUevent_st *e = r == CUDA_SUCCESS ? find_event(fn, he, &r) : NULL;
    if (e) {
        e->live = 0;
        r = cd_lost_after(fn, cd.lost[e->ctx->dev], e->ctx->dev);
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
            cd_link_lost(c->dev);
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
        uint64_t due = 0;
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
        if (cd.link_gbps > 0 && cd_link_queue(c->dev, n, &due) < 0) {
            cd_unlock();
            return cd_fail(CUDA_ERROR_OUT_OF_MEMORY, fn, "cannot start the copy engine thread");
        }
        s->ops[s->n_ops++] = (struct cd_op){.dst = d, .src = src, .n = n, .fail = fail,
                                            .seq = ++s->queued, .due_ns = due};
    } else if (r == CUDA_SUCCESS) {
        /* From pageable memory (or on the legacy stream) the copy has
         * consumed the source by the time the call returns: the stream's
         * earlier work first, then the bytes. */
        if (s)
            r = cd_stream_run(s, s->queued);
        else
            r = cd_ctx_run(c, 0);
        /* With a link that waited without the lock: look again. */
        if (r == CUDA_SUCCESS && cd.link_gbps > 0)
            d = cd_device_range(fn, dst, n, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, c->dev, &r);
        if (fail && r == CUDA_SUCCESS)
            r = CUDA_ERROR_ILLEGAL_ADDRESS;
        else if (r == CUDA_SUCCESS)
            memcpy(cd_device_bytes(d), src, n);
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
    char *to = r == CUDA_SUCCESS && !dst_host ? cd_device_bytes(d) : d;
    const char *from = r == CUDA_SUCCESS && !src_host ? cd_device_bytes(s) : s;
    if (r == CUDA_SUCCESS && n && cd.link_gbps > 0) {
        /* With a link nothing copies under the lock: what frees this
         * memory meanwhile waits (cd_wait_copies). */
        struct cd_busy b = {.a = d, .b = s, .n = n, .sync = 1};
        cd_busy_begin(&b);
        cd_unlock();
        memmove(to, from, n);
        cd_lock();
        cd_busy_end(&b);
    } else if (r == CUDA_SUCCESS && n) {
        memmove(to, from, n);
    }
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
