/* mirror_read: reading a mirrored file as its bytes arrive (the design is
 * in mirror.h): what is readable now (the last byte only once the hash
 * matched), the waiters of HTTP answers, which the fetchers call back
 * (do_mirror_collect), and the blocking waits of a preload's copy
 * threads. */
#include <errno.h>
#include <sched.h>
#include <time.h>

#include "mirror_int.h"
#include "util.h"

/* ---- reading --------------------------------------------------------------- */

/* Bytes of block b present or written so far by the fetcher that has it. */
static uint64_t do_block_avail(const struct mirror *m, const struct mirror_file *f, uint64_t b)
{
    if (bit_get(f->present, b))
        return block_len(f, b);
    if (!bit_get(f->inflight, b))
        return 0;
    for (unsigned i = 0; i < m->n_fetchers; i++) {
        const struct mirror_fetcher *fe = &m->fetchers[i];
        if (fe->f == f && fe->b == b && fe->gen == f->gen)
            return fe->done;
    }
    return 0;
}

static uint64_t do_readable(const struct mirror *m, const struct mirror_file *f, uint64_t off,
                            uint64_t max, enum mirror_how how)
{
    if (off >= f->id.size)
        return 0;
    /* A file loaded complete at start-up has no present bits: all of it. */
    if (f->complete)
        return f->id.size - off < max ? f->id.size - off : max;
    /* A download's last byte waits for the hash: a client never completes
     * a file the hash has not confirmed. */
    uint64_t limit = how == MIRROR_PARTS ? f->id.size : f->id.size - 1;
    uint64_t pos = off;
    while (pos < limit && pos - off < max) {
        uint64_t b = pos / f->block, start = b * f->block;
        uint64_t avail = do_block_avail(m, f, b);
        if (start + avail <= pos)
            break;
        uint64_t end = start + avail < limit ? start + avail : limit;
        pos = end;
        if (avail < block_len(f, b))
            break;
    }
    return pos - off < max ? pos - off : max;
}

int64_t mirror_readable(struct mirror *m, struct mirror_file *f, uint64_t off, uint64_t max,
                        enum mirror_how how, struct st_error *err)
{
    pthread_mutex_lock(&m->lock);
    int64_t n = (int64_t)do_readable(m, f, off, max, how);
    if (n == 0 && f->failed && off < f->id.size) {
        if (err)
            *err = f->error;
        n = -EIO;
    }
    pthread_mutex_unlock(&m->lock);
    return n;
}

/* ---- waiters --------------------------------------------------------------- */

void do_mirror_collect(struct mirror *m, struct mirror_file *f, struct mirror_waiter **fire)
{
    struct mirror_waiter **pp = &f->waiters;
    while (*pp) {
        struct mirror_waiter *w = *pp;
        if (f->failed || do_readable(m, f, w->off, 1, w->how) > 0) {
            *pp = w->next;
            w->linked = 0;
            atomic_fetch_add(&w->firing, 1);
            w->next = *fire;
            *fire = w;
        } else {
            pp = &w->next;
        }
    }
}

int mirror_wait(struct mirror *m, struct mirror_file *f, uint64_t off, struct mirror_waiter *w)
{
    pthread_mutex_lock(&m->lock);
    int now = f->failed || do_readable(m, f, off, 1, w->how) > 0;
    if (!now) {
        w->f = f;
        w->off = off;
        w->linked = 1;
        w->next = f->waiters;
        f->waiters = w;
        /* The reader waits here: fetch from here on first. */
        if (f->n_queued && !bit_get(f->present, off / f->block) &&
            !bit_get(f->inflight, off / f->block))
            f->cursor = off / f->block;
    }
    pthread_mutex_unlock(&m->lock);
    return now;
}

void mirror_unwait(struct mirror *m, struct mirror_waiter *w)
{
    pthread_mutex_lock(&m->lock);
    if (w->linked) {
        struct mirror_waiter **pp = &w->f->waiters;
        while (*pp && *pp != w)
            pp = &(*pp)->next;
        if (*pp)
            *pp = w->next;
        w->linked = 0;
    }
    pthread_mutex_unlock(&m->lock);
    while (atomic_load(&w->firing))
        sched_yield();
}

int mirror_wait_range(struct mirror *m, struct mirror_file *f, uint64_t off, uint64_t len,
                      const atomic_int *cancel, struct st_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&m->lock);
    do_mirror_want(m, f, off, len, MIRROR_WHOLE);
    m->range_waiters++;
    for (;;) {
        if (len == 0 || do_readable(m, f, off, len, MIRROR_WHOLE) == len)
            break;
        if (f->failed) {
            if (err)
                *err = f->error;
            rc = -EIO;
            break;
        }
        if ((cancel && atomic_load(cancel)) || m->stopping) {
            rc = -ECANCELED;
            break;
        }
        struct timespec ts = time_real_after(100);
        pthread_cond_timedwait(&m->changed, &m->lock, &ts); /* wakes for a cancel too */
    }
    m->range_waiters--;
    pthread_mutex_unlock(&m->lock);
    return rc;
}

