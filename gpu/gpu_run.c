/* gpu_run: what the movers of one load share (see gpu_run.h): its first
 * failure, its progress, and the queue of runs the copy threads hand to the
 * disk mover. */
#include "gpu_run.h"

#include <errno.h>
#include <stdlib.h>

#include "gpu_part.h"

int gpu_run_fail(struct gpu_run *r, int shard, int rc, const struct st_error *e)
{
    pthread_mutex_lock(&r->lock);
    if (r->rc == 0) {
        r->rc = rc;
        r->failed_shard = shard;
        if (e)
            r->err = *e;
    }
    atomic_store(&r->stop, 1);
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

size_t gpu_run_select(const struct gpu_run *r, uint32_t i, uint64_t off, char *buf, size_t n,
                      uint64_t *dst)
{
    const struct gpu_select *sel = r->shards[i].sel;
    if (!sel) {
        *dst = off;
        return n;
    }
    *dst = gpu_select_dst(sel, off);
    return gpu_select_compact(sel, off, buf, n);
}

int gpu_run_stopped(struct gpu_run *r)
{
    if (atomic_load(&r->stop))
        return 1;
    if (r->l->cancel && atomic_load(r->l->cancel)) {
        gpu_run_fail(r, -1, -ECANCELED, NULL);
        return 1;
    }
    return 0;
}

void gpu_run_copied(struct gpu_run *r, enum gpu_src src, uint64_t n)
{
    atomic_fetch_add(&r->bytes[src], n);
    if (r->l->progress)
        atomic_fetch_add(r->l->progress, n);
}

/* Queues [from, to) of chunk c (offsets in the shard's data) for the disk
 * mover. */
int gpu_run_hand_over(struct gpu_run *r, const struct gpu_chunk *c, uint64_t from, uint64_t to)
{
    struct gpu_chunk rest = {.shard = c->shard, .src = GPU_SRC_DISK, .off = from,
                             .len = to - from};
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    if (r->n_handed == r->cap_handed) {
        size_t cap = r->cap_handed ? 2 * r->cap_handed : 16;
        struct gpu_chunk *v = realloc(r->handed, cap * sizeof(*v));
        if (v) {
            r->handed = v;
            r->cap_handed = cap;
        } else {
            rc = -ENOMEM;
        }
    }
    if (rc == 0) {
        r->handed[r->n_handed++] = rest;
        atomic_fetch_add(&r->handed_bytes, rest.len);
        pthread_cond_broadcast(&r->cond);
    }
    pthread_mutex_unlock(&r->lock);
    if (rc < 0) {
        struct st_error e;
        st_error_fail(&e, ST_ERR_NO_MEMORY, "no memory for the preload's disk queue");
        return gpu_run_fail(r, -1, rc, &e);
    }
    return 0;
}

/* The next chunk for the disk mover: the plan's, then the handed ones.
 * Returns 1 with *c; 0 when none is there now but copy threads may still
 * hand one over (never when block is set: it waits); -1 when none will
 * come (or the load stops). */
int gpu_run_take_disk(struct gpu_run *r, struct gpu_chunk *c, int block)
{
    if (gpu_run_stopped(r))
        return -1;
    if (r->next_dk < r->n_dk) {
        *c = r->dk[r->next_dk++];
        return 1;
    }
    pthread_mutex_lock(&r->lock);
    while (block && !atomic_load(&r->stop) && r->next_handed == r->n_handed && r->active > 0)
        pthread_cond_wait(&r->cond, &r->lock);
    int got = !atomic_load(&r->stop) && r->next_handed < r->n_handed;
    if (got)
        *c = r->handed[r->next_handed++];
    int more = !atomic_load(&r->stop) && r->active > 0;
    pthread_mutex_unlock(&r->lock);
    return got ? 1 : more ? 0 : -1;
}
