/* gpu_sums: the checksum thread (gpu/gpu_manager_int.h, "checksums").
 *
 * A worker checks what it mapped against the daemon's checksums
 * (client/model.c); summing them on the copy threads cost a third of their
 * speed, so they are summed here instead, after the preload: each
 * allocation read back from the device in pieces and summed (ipc_tsum), on
 * a thread of lowered priority that steps aside while a preload runs. What
 * they attest: the allocation as it stood once ready; with `verify` the
 * preload also compared every byte of it with the file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gpu_manager_int.h"
#include "ipc_proto.h"
#include "log.h"
#include "util.h"

/* Bytes read back and summed at a time (a multiple of 8, as the sum's
 * pieces must be): small enough to stay in the CPU's cache. */
#define SUM_PIECE (4u << 20)
/* The thread's niceness: below the loader's copy threads and the HTTP
 * threads, which it must never slow down. */
#define SUM_NICE 10

void do_gm_sums_queue(struct gpu_manager *gm, struct gm_instance *m)
{
    m->refs++;
    m->sums = GM_SUMS_PENDING;
    m->qnext = NULL;
    if (gm->stail)
        gm->stail->qnext = m;
    else
        gm->shead = m;
    gm->stail = m;
    pthread_cond_broadcast(&gm->cond);
}

/* Waits until no preload is loading. Returns 0, or -1 when m was retired
 * meanwhile or the manager stops (nobody needs its sums: a reload may be
 * waiting for m's memory, which this thread's reference keeps). */
static int yield_to_loads(struct gpu_manager *gm, struct gm_instance *m)
{
    pthread_mutex_lock(&gm->lock);
    while (gm->loading && !gm->stopping && !atomic_load(&m->retired))
        pthread_cond_wait(&gm->cond, &gm->lock);
    int stop = gm->stopping || atomic_load(&m->retired);
    pthread_mutex_unlock(&gm->lock);
    return stop ? -1 : 0;
}

/* Sums every allocation of m into its shards' checksums. Returns 0, 1 when
 * m was retired meanwhile or the manager stops (nobody needs them), or
 * -errno with err. */
static int sum_instance(struct gpu_manager *gm, struct gm_instance *m, char *buf,
                        struct st_error *err)
{
    for (size_t i = 0; i < m->n_shards; i++) {
        struct gm_shard *s = &m->shards[i];
        uint64_t acc = 0;
        for (uint64_t off = 0; off < s->bytes; off += SUM_PIECE) {
            size_t len = (size_t)(s->bytes - off < SUM_PIECE ? s->bytes - off : SUM_PIECE);
            if (yield_to_loads(gm, m) < 0)
                return 1;
            if (m->be->ops->read_back(m->be, &s->a, off, buf, len, err) < 0)
                return -EIO;
            acc = ipc_tsum_add(acc, buf, len, off);
        }
        s->checksum = ipc_tsum_final(acc, s->bytes);
    }
    return 0;
}

static void *summer_main(void *arg)
{
    struct gpu_manager *gm = arg;
    /* Linux: a thread's own niceness (setpriority takes a thread id). */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), SUM_NICE);
    char *buf = xmalloc(SUM_PIECE);
    pthread_mutex_lock(&gm->lock);
    for (;;) {
        while (!gm->shead && !gm->stopping)
            pthread_cond_wait(&gm->cond, &gm->lock);
        if (gm->stopping)
            break;
        struct gm_instance *m = gm->shead;
        gm->shead = m->qnext;
        if (!gm->shead)
            gm->stail = NULL;
        m->qnext = NULL;
        gm->summing = m;
        pthread_mutex_unlock(&gm->lock);

        struct st_error err = {0};
        int rc = sum_instance(gm, m, buf, &err);
        if (rc < 0)
            log_msg(LOG_WARN, "gpu: checksums of %s (generation %llu) on %s: %s", m->name,
                    (unsigned long long)m->generation, m->device, err.message);

        pthread_mutex_lock(&gm->lock);
        m->sums = rc == 0 ? GM_SUMS_READY : GM_SUMS_UNAVAILABLE;
        if (rc != 0)
            snprintf(m->sums_error, sizeof(m->sums_error), "%.150s",
                     rc > 0 ? "the instance was retired before they were summed" : err.message);
        gm->summing = NULL;
        struct gm_instance *dead = do_gm_instance_unref(gm, m);
        pthread_cond_broadcast(&gm->cond);
        pthread_mutex_unlock(&gm->lock);
        gm_dispose(gm, dead);
        pthread_mutex_lock(&gm->lock);
    }
    pthread_mutex_unlock(&gm->lock);
    free(buf);
    return NULL;
}

int gm_sums_start(struct gpu_manager *gm, struct st_error *err)
{
    int rc = pthread_create(&gm->summer, NULL, summer_main, gm);
    if (rc != 0)
        return st_error_errno(err, rc, "cannot start the checksum thread");
    gm->summer_started = 1;
    return 0;
}

void gm_sums_stop(struct gpu_manager *gm)
{
    if (gm->summer_started)
        pthread_join(gm->summer, NULL);
    gm->summer_started = 0;
    pthread_mutex_lock(&gm->lock);
    struct gm_instance *m = gm->shead;
    gm->shead = gm->stail = NULL;
    while (m) { /* the table frees them: drop only the thread's references */
        struct gm_instance *next = m->qnext;
        m->qnext = NULL;
        m->sums = GM_SUMS_UNAVAILABLE;
        m->refs--;
        m = next;
    }
    pthread_mutex_unlock(&gm->lock);
}
