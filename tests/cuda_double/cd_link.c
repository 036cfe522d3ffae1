/* cuda_double link model (CUDA_DOUBLE_LINK_GBPS=R): a copy engine thread
 * that performs the queued host-to-device copies as a DMA engine would, each
 * when its modelled transfer over the device's link ends, and the waits for
 * them. A test double, not CUDA: see cuda_double.h.
 *
 * The link is modelled at queue time: a device's copies take its link one
 * after another in the order they were queued, from every stream and thread,
 * each for n/R, so no copy of n bytes completes sooner than n/R after it was
 * queued and the device never moves more than R. The engine sleeps until the
 * earliest queued copy is due, checks it under the lock as the deferred copies
 * are checked (cd_op_target), copies its bytes without the lock (frees of
 * the memory it touches wait for it: cd_wait_copies), then completes it and
 * wakes the waiters. Waiters sleep on a condition variable, so nothing holds
 * the lock while a copy runs or is waited for. */
#include "cuda_double.h"

#include <math.h> /* isfinite */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

void cd_link_configure(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC); /* the engine's deadlines */
    pthread_cond_init(&cd.work, &a);
    pthread_condattr_destroy(&a);
    pthread_cond_init(&cd.done, NULL);
    const char *s = getenv("CUDA_DOUBLE_LINK_GBPS");
    if (!s || !*s)
        return;
    char *end;
    double r = strtod(s, &end);
    /* Below 1 MB/s a copy's nanoseconds could overflow. */
    if (*end || !isfinite(r) || (r != 0 && r < 0.001)) {
        fprintf(stderr, "cuda-double: CUDA_DOUBLE_LINK_GBPS=%s is not a rate of at least "
                "0.001 GB/s: the link is not modelled\n", s);
        return;
    }
    cd.link_gbps = r;
}

/* The stream whose oldest queued copy is due first, or NULL. Destroyed
 * streams count: their queued work still completes (cuStreamDestroy). */
static struct CUstream_st *next_stream(void)
{
    struct CUstream_st *best = NULL;
    for (struct CUstream_st *s = cd.streams; s; s = s->next)
        if (s->n_ops && (!best || s->ops[0].due_ns < best->ops[0].due_ns))
            best = s;
    return best;
}

/* Under the lock: position seq of s has completed, with error e. */
static void complete(struct CUstream_st *s, uint64_t seq, CUresult e)
{
    /* A context reset may have dropped the stream's queue meanwhile. */
    if (s->n_ops && s->ops[0].seq == seq) {
        memmove(s->ops, s->ops + 1, (s->n_ops - 1) * sizeof(*s->ops));
        s->n_ops--;
    }
    if (s->done < seq)
        s->done = seq;
    if (e != CUDA_SUCCESS && s->error == CUDA_SUCCESS) {
        s->error = e;
        s->error_seq = seq;
    }
    if (!s->live && !s->n_ops) { /* destroyed, and now drained */
        free(s->ops);
        s->ops = NULL;
        s->cap_ops = 0;
    }
    pthread_cond_broadcast(&cd.done);
}

static void *engine(void *arg)
{
    (void)arg;
    cd_lock();
    for (;;) {
        struct CUstream_st *s = next_stream();
        if (!s) {
            pthread_cond_wait(&cd.work, &cd.lock);
            continue;
        }
        uint64_t due = s->ops[0].due_ns;
        if (now_ns() < due) {
            /* Until it is due, or until an earlier one is queued; then look again. */
            struct timespec t = {.tv_sec = (time_t)(due / 1000000000u),
                                 .tv_nsec = (long)(due % 1000000000u)};
            pthread_cond_timedwait(&cd.work, &cd.lock, &t);
            continue;
        }
        struct cd_op op = s->ops[0];
        CUresult e = CUDA_SUCCESS;
        /* A lost device completes nothing; its waiters report the loss. */
        char *dst = cd.lost[s->ctx->dev] ? NULL : cd_op_target(s, &op, &e);
        if (dst) {
            struct cd_busy b = {.a = op.dst, .b = op.src, .n = op.n};
            s->ops[0].running = 1;
            cd_busy_begin(&b);
            cd_unlock();
            memcpy(dst, op.src, op.n);
            cd_lock();
            cd_busy_end(&b);
            cd.link_copies++;
            cd.link_bytes += op.n;
        }
        complete(s, op.seq, e);
    }
    return NULL;
}

int cd_link_queue(int dev, size_t n, uint64_t *due_ns)
{
    if (!cd.engine_started) {
        if (pthread_create(&cd.engine, NULL, engine, NULL) != 0)
            return -1;
        pthread_detach(cd.engine);
        pthread_setname_np(cd.engine, "cd-copy-engine");
        cd.engine_started = 1;
    }
    uint64_t now = now_ns(), start = cd.link_free_ns[dev] > now ? cd.link_free_ns[dev] : now;
    /* n bytes at R GB/s take n / R ns; rounded up, so never sooner. */
    double ns = (double)n / cd.link_gbps;
    uint64_t took = (uint64_t)ns;
    cd.link_free_ns[dev] = start + took + ((double)took < ns);
    *due_ns = cd.link_free_ns[dev];
    pthread_cond_signal(&cd.work);
    return 0;
}

CUresult cd_link_wait(struct CUstream_st *s, uint64_t seq)
{
    cd.link_waiting++;
    while (s->done < seq && !cd.lost[s->ctx->dev])
        pthread_cond_wait(&cd.done, &cd.lock);
    cd.link_waiting--;
    if (cd.lost[s->ctx->dev])
        return cd.vanish_error;
    CUresult e = CUDA_SUCCESS;
    if (s->error != CUDA_SUCCESS && s->error_seq <= seq) {
        e = s->error;
        s->error = CUDA_SUCCESS; /* reported once */
    }
    return e;
}

/* How many threads wait for a copy now (they hold no lock: this count is
 * read under it). A test that checks what other threads can do while one
 * waits waits for this instead of sleeping. */
__attribute__((visibility("default"))) int cuda_double_link_waiting(void)
{
    cd_lock();
    int n = cd.link_waiting;
    cd_unlock();
    return n;
}

void cd_link_lost(int dev)
{
    if (cd.link_gbps <= 0)
        return;
    /* A lost device moves nothing more: its queued copies are dropped (one
     * the engine is copying finishes), and whoever waits for them wakes. */
    for (struct CUstream_st *s = cd.streams; s; s = s->next) {
        if (s->ctx->dev != dev)
            continue;
        s->n_ops = s->n_ops && s->ops[0].running ? 1 : 0;
        s->done = s->queued;
    }
    pthread_cond_broadcast(&cd.done);
}

void cd_busy_begin(struct cd_busy *b)
{
    b->next = cd.busy;
    cd.busy = b;
}

void cd_busy_end(struct cd_busy *b)
{
    for (struct cd_busy **pp = &cd.busy; *pp; pp = &(*pp)->next) {
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    }
    pthread_cond_broadcast(&cd.done);
}

static int overlaps(const char *x, size_t xn, const char *p, size_t n)
{
    return x && x < p + n && p < x + xn;
}

static struct cd_busy *busy_touching(const char *p, size_t n)
{
    for (struct cd_busy *b = cd.busy; b; b = b->next)
        if (overlaps(b->a, b->n, p, n) || overlaps(b->b, b->n, p, n))
            return b;
    return NULL;
}

int cd_wait_copies(const char *fn, const void *p, size_t n)
{
    int waited = 0, told = 0;
    struct cd_busy *b;
    while ((b = busy_touching(p, n))) {
        /* The copy engine's copies are still queued ops, which the caller
         * reports itself (cd_pending_touches); another thread's synchronous
         * copy is not. */
        if (b->sync && !told++)
            cd_violation(fn, "%p+%zu is released while a synchronous copy on another thread "
                         "still uses it", p, n);
        pthread_cond_wait(&cd.done, &cd.lock);
        waited = 1;
    }
    return waited;
}

void cd_link_report(char *buf, size_t len)
{
    buf[0] = '\0';
    if (cd.link_gbps <= 0)
        return;
    double cpu = 0;
    clockid_t clock;
    struct timespec t;
    if (cd.engine_started && pthread_getcpuclockid(cd.engine, &clock) == 0 &&
        clock_gettime(clock, &t) == 0)
        cpu = (double)t.tv_sec + (double)t.tv_nsec / 1e9;
    snprintf(buf, len,
             ", \"link\": {\"gbps\": %g, \"copies\": %llu, \"bytes\": %llu, "
             "\"engine_cpu_seconds\": %.6f}",
             cd.link_gbps, cd.link_copies, cd.link_bytes, cpu);
}
