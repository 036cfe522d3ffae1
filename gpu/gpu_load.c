/* gpu_load: the page-cache copy threads and the disk pipeline (see
 * gpu_load.h). */
#include "gpu_load.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fileio.h"
#include "ipc_proto.h"
#include "util.h"

/* Bytes read and summed at a time into a staging buffer: small enough to
 * stay in the cache between the read and the sum. */
#define PIECE_STAGED (256u << 10)
/* ... and through a copy thread's own buffer into a backend that takes
 * writes (host): a whole 2 MiB page of the memfd, which shmem allocates at
 * once where it gives huge pages (transparent_hugepage/shmem_enabled set to
 * within_size or always: 5x less CPU per byte than 4 KiB pages measured on a
 * 2-core VM), written in pieces it would allocate a huge page per piece. */
#define PIECE_WRITE (2u << 20)
#define CANCEL_TAG UINT64_MAX /* user data of io_uring cancel requests */

/* One gpu_load_run: what both movers share. */
struct run {
    struct gpu_load *l;
    struct gpu_load_shard *shards;
    const struct gpu_chunk *pc;    /* the plan's page-cache chunks */
    size_t n_pc;
    _Atomic size_t next_pc;        /* the next one a copy thread takes */
    const struct gpu_chunk *dk;    /* the plan's disk chunks */
    size_t n_dk, next_dk;          /* next_dk: the disk mover's alone */
    const struct gpu_chunk *up;    /* the plan's upstream chunks */
    size_t n_up;
    _Atomic size_t next_up;        /* the next one a copy thread waits for */
    _Atomic uint64_t *sums;        /* per shard: ipc_tsum accumulators */
    _Atomic uint64_t bytes[GPU_SRC_COUNT];
    _Atomic uint64_t handed_bytes;
    atomic_int stop;               /* a failure or a cancel: stop at the next chunk */
    atomic_int no_nowait;          /* the file system refused RWF_NOWAIT: plain reads */
    pthread_mutex_t lock;          /* guards what follows */
    pthread_cond_t cond;           /* a hand-over, a failure, or a copy thread ended */
    struct gpu_chunk *handed;      /* chunks the copy threads handed to the disk queue */
    size_t n_handed, cap_handed, next_handed;
    unsigned active;               /* copy threads still running */
    int rc;                        /* the first failure, with err and failed_shard */
    int failed_shard;
    struct st_error err;
};

unsigned gpu_load_stage_buffers(const struct gpu_backend *be, unsigned threads, unsigned depth)
{
    return depth + (be->ops->write ? 0 : 2 * threads);
}

size_t gpu_load_stage_bytes(size_t chunk)
{
    return chunk + 2 * GPU_LOAD_ALIGN;
}

/* Records the first failure (about shard, or -1) and tells everyone to
 * stop. Returns rc. */
static int run_fail(struct run *r, int shard, int rc, const struct st_error *e)
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

static int run_stopped(struct run *r)
{
    if (atomic_load(&r->stop))
        return 1;
    if (r->l->cancel && atomic_load(r->l->cancel)) {
        run_fail(r, -1, -ECANCELED, NULL);
        return 1;
    }
    return 0;
}

static void sum_piece(struct run *r, uint32_t shard, const void *p, size_t len, uint64_t off)
{
    atomic_fetch_add(&r->sums[shard], ipc_tsum_add(0, p, len, off));
}

static void copied(struct run *r, enum gpu_src src, uint64_t n)
{
    atomic_fetch_add(&r->bytes[src], n);
    if (r->l->progress)
        atomic_fetch_add(r->l->progress, n);
}

/* ---- page cache ---------------------------------------------------------- */

struct copier {
    struct run *r;
    unsigned id;
    pthread_t thread;
    char *bounce;                  /* write backends: PIECE_WRITE bytes of its own */
    int pending[2];                /* staged: the buffer's copy may still run */
    int shard[2];                  /* ... and the shard it copies to */
};

/* Reads up to len bytes at off of fd from the page cache into buf. Returns
 * the bytes read (fewer than len when the next page is not cached), or
 * -errno; -ENODATA when the file ends first (it was truncated). */
static ssize_t read_cached(struct run *r, int fd, char *buf, size_t len, uint64_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n;
        if (!atomic_load(&r->no_nowait)) {
            struct iovec iov = {.iov_base = buf + got, .iov_len = len - got};
            n = preadv2(fd, &iov, 1, (off_t)(off + got), RWF_NOWAIT);
            if (n < 0 && errno == EOPNOTSUPP) {
                atomic_store(&r->no_nowait, 1);
                continue;
            }
            if (n < 0 && errno == EAGAIN)
                break; /* not cached: the rest goes to the disk queue */
        } else {
            n = pread(fd, buf + got, len - got, (off_t)(off + got));
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -ENODATA;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

/* Queues [off, end) of chunk c for the disk mover. */
static int hand_over(struct run *r, const struct gpu_chunk *c, uint64_t off)
{
    struct gpu_chunk rest = {.shard = c->shard, .src = GPU_SRC_DISK, .off = off,
                             .len = c->off + c->len - off};
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
        return run_fail(r, -1, rc, &e);
    }
    return 0;
}

/* Reads what the page cache holds of chunk c into dst (a staging buffer),
 * or piece by piece through the bounce buffer into the allocation, summing
 * each piece. *done: the bytes from the chunk's start that were copied (a
 * multiple of GPU_LOAD_ALIGN unless the whole chunk). Returns 0 or -errno
 * (recorded). */
static int read_chunk_cached(struct copier *cp, const struct gpu_chunk *c, char *dst,
                             uint64_t *done)
{
    struct run *r = cp->r;
    struct gpu_load_shard *s = &r->shards[c->shard];
    struct st_error e;
    uint64_t p = 0, piece = cp->bounce ? PIECE_WRITE : PIECE_STAGED;
    while (p < c->len) {
        size_t want = (size_t)(c->len - p < piece ? c->len - p : piece);
        char *buf = cp->bounce ? cp->bounce : dst + p;
        uint64_t foff = s->data_start + c->off + p;
        ssize_t got = read_cached(r, s->fd, buf, want, foff);
        if (got < 0) {
            st_error_fail(&e, ST_ERR_IO, "read at %llu: %s", (unsigned long long)foff,
                          got == -ENODATA ? "the file is shorter than its header says "
                                            "(truncated?)" : strerror((int)-got));
            return run_fail(r, (int)c->shard, (int)got, &e);
        }
        size_t keep = (size_t)got == want ? want : (size_t)got / GPU_LOAD_ALIGN * GPU_LOAD_ALIGN;
        sum_piece(r, c->shard, buf, keep, c->off + p);
        if (cp->bounce && keep &&
            r->l->be->ops->write(r->l->be, s->a, c->off + p, buf, keep, &e) < 0)
            return run_fail(r, (int)c->shard, -EIO, &e);
        p += keep;
        if (keep < want)
            break;
    }
    *done = p;
    return 0;
}

/* Copies chunk c, using staging buffer `which` of the thread's two when
 * the backend has no write. Returns 0 or -errno (recorded). */
static int copy_chunk_cached(struct copier *cp, const struct gpu_chunk *c, unsigned which)
{
    struct run *r = cp->r;
    struct gpu_load *l = r->l;
    struct st_error e;
    unsigned b = l->depth + 2 * cp->id + which;
    char *dst = NULL;
    uint64_t done = 0;
    if (!cp->bounce) {
        if (cp->pending[which] && l->be->ops->stage_wait(l->stage, b, &e) < 0)
            return run_fail(r, cp->shard[which], -EIO, &e);
        cp->pending[which] = 0;
        dst = l->be->ops->stage_buf(l->stage, b);
    }
    if (read_chunk_cached(cp, c, dst, &done) < 0)
        return -1;
    if (!cp->bounce && done > 0) {
        if (l->be->ops->stage_copy(l->stage, b, r->shards[c->shard].a, c->off, dst, (size_t)done,
                                   &e) < 0)
            return run_fail(r, (int)c->shard, -EIO, &e);
        cp->pending[which] = 1;
        cp->shard[which] = (int)c->shard;
    }
    copied(r, c->src == GPU_SRC_UPSTREAM ? GPU_SRC_UPSTREAM : GPU_SRC_PAGE_CACHE, done);
    return done < c->len ? hand_over(r, c, c->off + done) : 0;
}

/* Waits until upstream chunk c's bytes are in its file. Returns 0 or -errno
 * (recorded). */
static int wait_upstream(struct run *r, const struct gpu_chunk *c)
{
    const struct gpu_load_shard *s = &r->shards[c->shard];
    const struct gpu_gate *g = r->l->gate;
    struct st_error e;
    if (!g || !s->gate_file)
        return 0;
    int rc = g->wait(g->arg, s->gate_file, s->data_start + c->off, c->len, r->l->cancel, &e);
    return rc < 0 ? run_fail(r, (int)c->shard, rc, rc == -ECANCELED ? NULL : &e) : 0;
}

/* The next chunk for a copy thread: the page-cache ones, then the
 * upstream ones. NULL when none is left. */
static const struct gpu_chunk *take_copy(struct run *r)
{
    size_t k = atomic_load(&r->next_pc) < r->n_pc ? atomic_fetch_add(&r->next_pc, 1) : r->n_pc;
    if (k < r->n_pc)
        return &r->pc[k];
    k = atomic_fetch_add(&r->next_up, 1);
    return k < r->n_up ? &r->up[k] : NULL;
}

static void *copier_main(void *arg)
{
    struct copier *cp = arg;
    struct run *r = cp->r;
    unsigned which = 0;
    while (!run_stopped(r)) {
        const struct gpu_chunk *c = take_copy(r);
        if (!c || (c->src == GPU_SRC_UPSTREAM && wait_upstream(r, c) < 0) ||
            copy_chunk_cached(cp, c, which) < 0)
            break;
        which ^= 1;
    }
    for (unsigned i = 0; i < 2; i++) {
        struct st_error e;
        unsigned b = r->l->depth + 2 * cp->id + i;
        if (cp->pending[i] && r->l->be->ops->stage_wait(r->l->stage, b, &e) < 0)
            run_fail(r, cp->shard[i], -EIO, &e);
        cp->pending[i] = 0;
    }
    pthread_mutex_lock(&r->lock);
    r->active--;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* ---- disk ---------------------------------------------------------------- */

/* The next chunk for the disk mover: the plan's, then the handed ones.
 * Returns 1 with *c; 0 when none is there now but copy threads may still
 * hand one over (never when block is set: it waits); -1 when none will
 * come (or the load stops). */
static int take_disk(struct run *r, struct gpu_chunk *c, int block)
{
    if (run_stopped(r))
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

/* One disk staging buffer. */
struct slot {
    int reading;                   /* a read into it is in flight */
    int copying;                   /* its last copy may not have completed yet */
    struct gpu_chunk c;            /* the chunk it holds */
    uint64_t a0;                   /* file offset the read starts at */
    size_t skip;                   /* bytes before the chunk in the buffer (O_DIRECT alignment) */
    int direct;                    /* read from the O_DIRECT descriptor */
};

struct disk {
    struct run *r;
    struct slot *slots;            /* l->depth */
    int *direct;                   /* per shard: O_DIRECT still works */
    struct io_uring ring;
    int have_ring;
    unsigned inflight;
    int buffered;                  /* some disk bytes were read without O_DIRECT */
};

static void plan_read(struct disk *d, struct slot *s, const struct gpu_chunk *c)
{
    const struct gpu_load_shard *sh = &d->r->shards[c->shard];
    uint64_t foff = sh->data_start + c->off;
    s->c = *c;
    s->direct = d->have_ring && d->direct[c->shard] && sh->direct_fd >= 0;
    s->a0 = s->direct ? foff / GPU_LOAD_ALIGN * GPU_LOAD_ALIGN : foff;
    s->skip = (size_t)(foff - s->a0);
}

/* Read length: O_DIRECT wants whole aligned blocks (the file may end sooner). */
static size_t read_len(const struct slot *s)
{
    size_t need = s->skip + (size_t)s->c.len;
    return s->direct ? (need + GPU_LOAD_ALIGN - 1) / GPU_LOAD_ALIGN * GPU_LOAD_ALIGN : need;
}

/* Slot i's read ended with res (0 for pread, which reads everything
 * itself): completes a short one with buffered reads (the end of an
 * O_DIRECT range, a file system that took O_DIRECT opens but not the
 * reads), sums the bytes and starts their copy. Returns 0 or -errno
 * (recorded). */
static int finish_read(struct disk *d, unsigned i, int res)
{
    struct run *r = d->r;
    struct gpu_load *l = r->l;
    struct slot *s = &d->slots[i];
    struct gpu_load_shard *sh = &r->shards[s->c.shard];
    char *buf = l->be->ops->stage_buf(l->stage, i);
    size_t need = s->skip + (size_t)s->c.len, got = res > 0 ? (size_t)res : 0;
    struct st_error e;
    if (res < 0 && !(s->direct && res == -EINVAL)) {
        st_error_fail(&e, ST_ERR_IO, "read at %llu: %s", (unsigned long long)s->a0,
                      strerror(-res));
        return run_fail(r, (int)s->c.shard, res, &e);
    }
    if (res < 0)
        d->direct[s->c.shard] = 0; /* this file system takes O_DIRECT opens but not the reads */
    if (!s->direct || got < need)
        d->buffered = 1;
    if (got < need) {
        int rc = fileio_pread_full(sh->fd, buf + got, need - got, s->a0 + got);
        if (rc < 0) {
            st_error_fail(&e, ST_ERR_IO, "read at %llu: %s", (unsigned long long)(s->a0 + got),
                          rc == -ENODATA ? "the file is shorter than its header says (truncated?)"
                                         : strerror(-rc));
            return run_fail(r, (int)s->c.shard, rc, &e);
        }
    }
    sum_piece(r, s->c.shard, buf + s->skip, (size_t)s->c.len, s->c.off);
    if (l->be->ops->stage_copy(l->stage, i, sh->a, s->c.off, buf + s->skip, (size_t)s->c.len,
                               &e) < 0)
        return run_fail(r, (int)s->c.shard, -EIO, &e);
    s->copying = 1;
    copied(r, GPU_SRC_DISK, s->c.len);
    return 0;
}

/* A free slot whose last copy is done, or -1 when every slot is reading. */
static int free_slot(struct disk *d)
{
    struct gpu_load *l = d->r->l;
    for (unsigned i = 0; i < l->depth; i++) {
        struct slot *s = &d->slots[i];
        if (s->reading)
            continue;
        struct st_error e;
        if (s->copying && l->be->ops->stage_wait(l->stage, i, &e) < 0) {
            run_fail(d->r, (int)s->c.shard, -EIO, &e);
            return -1;
        }
        s->copying = 0;
        return (int)i;
    }
    return -1;
}

/* Without io_uring: one chunk at a time with pread. */
static void disk_pread(struct disk *d)
{
    struct gpu_chunk c;
    while (take_disk(d->r, &c, 1) > 0) {
        int i = free_slot(d);
        if (i < 0)
            return;
        plan_read(d, &d->slots[i], &c);
        if (finish_read(d, (unsigned)i, 0) < 0)
            return;
    }
}

/* After an error: asks the kernel to cancel every read still in flight,
 * submits, and reaps completions until no read is left. Returns 0, or -1
 * when the ring fails so that reads may still land. */
static int drain_reads(struct disk *d)
{
    struct gpu_load *l = d->r->l;
    for (unsigned i = 0; i < l->depth; i++) {
        struct io_uring_sqe *sqe;
        if (!d->slots[i].reading || !(sqe = io_uring_get_sqe(&d->ring)))
            continue; /* without an sqe the read completes by itself (files), only later */
        io_uring_prep_cancel64(sqe, i, 0);
        io_uring_sqe_set_data64(sqe, CANCEL_TAG);
    }
    int failures = 0;
    while (d->inflight > 0) {
        int sr = io_uring_submit(&d->ring);
        struct io_uring_cqe *cqe;
        int wr = sr < 0 && sr != -EINTR && sr != -EAGAIN && sr != -EBUSY
                     ? sr : l->wait_cqe(&d->ring, &cqe);
        if (wr == -EINTR)
            continue;
        if (wr < 0) {
            if (++failures > 3)
                return -1;
            continue;
        }
        uint64_t k = io_uring_cqe_get_data64(cqe);
        io_uring_cqe_seen(&d->ring, cqe);
        if (k < l->depth && d->slots[k].reading) {
            d->slots[k].reading = 0;
            d->inflight--;
        }
    }
    return 0;
}

/* Starts reads into every free slot. Returns 1 when no chunk is left to
 * read (nor will be), else 0. */
static int fill_slots(struct disk *d)
{
    struct run *r = d->r;
    struct st_error e;
    for (;;) {
        int i = free_slot(d);
        if (i < 0)
            return atomic_load(&r->stop);
        struct gpu_chunk c;
        int t = take_disk(r, &c, d->inflight == 0);
        if (t <= 0)
            return t < 0;
        struct slot *s = &d->slots[i];
        struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
        if (!sqe) { /* the ring has room for every slot: cannot happen */
            st_error_fail(&e, ST_ERR_IO, "io_uring: no submission entry free");
            run_fail(r, -1, -EIO, &e);
            return 1;
        }
        plan_read(d, s, &c);
        const struct gpu_load_shard *sh = &r->shards[c.shard];
        io_uring_prep_read(sqe, s->direct ? sh->direct_fd : sh->fd,
                           r->l->be->ops->stage_buf(r->l->stage, (unsigned)i),
                           (unsigned)read_len(s), s->a0);
        io_uring_sqe_set_data64(sqe, (uint64_t)i);
        s->reading = 1;
        d->inflight++;
    }
}

static void disk_uring(struct disk *d)
{
    struct run *r = d->r;
    struct st_error e;
    for (;;) {
        int finished = atomic_load(&r->stop) ? 1 : fill_slots(d);
        if (d->inflight == 0) {
            if (finished)
                break;
            continue;
        }
        int sr = io_uring_submit(&d->ring);
        if (sr < 0 && sr != -EINTR && sr != -EAGAIN && sr != -EBUSY) {
            st_error_fail(&e, ST_ERR_IO, "io_uring_submit: %s", strerror(-sr));
            run_fail(r, -1, sr, &e);
            break;
        }
        struct io_uring_cqe *cqe;
        int wr = r->l->wait_cqe(&d->ring, &cqe);
        if (wr == -EINTR)
            continue;
        if (wr < 0) {
            st_error_fail(&e, ST_ERR_IO, "io_uring_wait_cqe: %s", strerror(-wr));
            run_fail(r, -1, wr, &e);
            break;
        }
        uint64_t k = io_uring_cqe_get_data64(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&d->ring, cqe);
        if (k >= r->l->depth || !d->slots[k].reading)
            continue; /* a cancel's own completion */
        d->slots[k].reading = 0;
        d->inflight--;
        if (!atomic_load(&r->stop))
            finish_read(d, (unsigned)k, res);
    }
    if (d->inflight > 0 && drain_reads(d) < 0)
        r->l->unsafe = 1;
}

/* The disk mover, on the calling thread. Waits for its copies before it
 * returns. */
static void disk_main(struct run *r, size_t n_shards, struct gpu_load_stats *st)
{
    struct gpu_load *l = r->l;
    struct disk d = {.r = r};
    d.slots = xcalloc(l->depth, sizeof(*d.slots));
    d.direct = xcalloc(n_shards ? n_shards : 1, sizeof(*d.direct));
    for (size_t i = 0; i < n_shards; i++)
        d.direct[i] = 1;
    /* io_uring can be missing (old kernel) or forbidden (seccomp): pread
     * then. Room for a cancel per read besides the reads (drain_reads). */
    d.have_ring = !l->no_uring && io_uring_queue_init(2 * l->depth, &d.ring, 0) == 0;
    if (d.have_ring)
        disk_uring(&d);
    else
        disk_pread(&d);
    for (unsigned i = 0; i < l->depth; i++) {
        struct st_error e;
        if (d.slots[i].copying && l->be->ops->stage_wait(l->stage, i, &e) < 0)
            run_fail(r, (int)d.slots[i].c.shard, -EIO, &e);
    }
    if (d.have_ring)
        io_uring_queue_exit(&d.ring);
    if (atomic_load(&r->bytes[GPU_SRC_DISK]))
        snprintf(st->disk_io, sizeof(st->disk_io), "%s",
                 !d.have_ring ? "pread" : d.buffered ? "io_uring" : "io_uring+O_DIRECT");
    free(d.direct);
    free(d.slots);
}

/* ---- a load ---------------------------------------------------------------- */

/* Starts up to l->threads copy threads (no more than there are chunks).
 * Returns how many started. */
static unsigned start_copiers(struct run *r, struct copier *cps)
{
    struct gpu_load *l = r->l;
    unsigned want = l->threads < GPU_LOAD_MAX_THREADS ? l->threads : GPU_LOAD_MAX_THREADS, n = 0;
    if (want > r->n_pc + r->n_up)
        want = (unsigned)(r->n_pc + r->n_up);
    for (unsigned t = 0; t < want; t++) {
        cps[t] = (struct copier){.r = r, .id = t};
        if (l->be->ops->write && !(cps[t].bounce = aligned_alloc(GPU_LOAD_ALIGN, PIECE_WRITE)))
            break;
        pthread_mutex_lock(&r->lock);
        r->active++;
        pthread_mutex_unlock(&r->lock);
        if (pthread_create(&cps[t].thread, NULL, copier_main, &cps[t]) != 0) {
            pthread_mutex_lock(&r->lock);
            r->active--;
            pthread_mutex_unlock(&r->lock);
            free(cps[t].bounce);
            break;
        }
        n++;
    }
    return n;
}

int gpu_load_run(struct gpu_load *l, struct gpu_load_shard *shards, size_t n,
                 const struct gpu_plan *plan, struct gpu_load_stats *st, struct st_error *err)
{
    struct run r = {.l = l, .shards = shards};
    struct copier cps[GPU_LOAD_MAX_THREADS];
    memset(st, 0, sizeof(*st));
    if (l->depth == 0 || l->depth > GPU_LOAD_MAX_DEPTH)
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "%u disk reads in flight: 1 to %d",
                             l->depth, GPU_LOAD_MAX_DEPTH);
    r.pc = plan->chunks;
    r.n_pc = plan->n_src[GPU_SRC_PAGE_CACHE];
    r.dk = plan->chunks + r.n_pc;
    r.n_dk = plan->n_src[GPU_SRC_DISK];
    r.up = r.dk + r.n_dk;
    r.n_up = plan->n_src[GPU_SRC_UPSTREAM];
    r.sums = xcalloc(n ? n : 1, sizeof(*r.sums));
    pthread_mutex_init(&r.lock, NULL);
    pthread_cond_init(&r.cond, NULL);
    /* Each file's version now: one written while it is read (in place, a
     * version the registry has not seen) must not be published half old
     * and half new (checked once the movers are done). */
    struct fileio_stat *before = xcalloc(n ? n : 1, sizeof(*before));
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        if (fstat(shards[i].fd, &sb) == 0)
            fileio_stat_from(&sb, &before[i]);
    }
    unsigned started = start_copiers(&r, cps);
    if (started == 0 && r.n_pc + r.n_up > 0) {
        /* No thread could start: copy the page-cache (and upstream) chunks
         * here first. */
        struct copier self = {.r = &r, .id = 0};
        if (l->be->ops->write && !(self.bounce = aligned_alloc(GPU_LOAD_ALIGN, PIECE_WRITE))) {
            struct st_error e;
            st_error_fail(&e, ST_ERR_NO_MEMORY, "no memory for a copy buffer");
            run_fail(&r, -1, -ENOMEM, &e);
        } else {
            r.active = 1;
            copier_main(&self);
        }
        free(self.bounce);
    }
    disk_main(&r, n, st);
    for (unsigned t = 0; t < started; t++) {
        pthread_join(cps[t].thread, NULL);
        free(cps[t].bounce);
    }
    for (size_t i = 0; i < n && r.rc == 0; i++) {
        /* A file still arriving from a mirror's upstream is written by its
         * fetchers all along; the mirror checks its digest instead. */
        if (shards[i].gate_file || fileio_unchanged(shards[i].fd, &before[i]))
            continue;
        struct st_error e;
        st_error_fail(&e, ST_ERR_IO, "the file was written while it was being read: its bytes "
                      "may mix two versions; preload it again");
        run_fail(&r, (int)i, -EAGAIN, &e);
    }
    free(before);
    for (size_t i = 0; i < n; i++)
        shards[i].checksum = ipc_tsum_final(atomic_load(&r.sums[i]), shards[i].size);
    for (int s = 0; s < GPU_SRC_COUNT; s++)
        st->bytes[s] = atomic_load(&r.bytes[s]);
    st->handed_over = atomic_load(&r.handed_bytes);
    st->threads = started ? started : r.n_pc + r.n_up > 0;
    st->failed_shard = r.rc < 0 ? r.failed_shard : -1;
    if (r.rc < 0 && err)
        *err = r.err;
    pthread_cond_destroy(&r.cond);
    pthread_mutex_destroy(&r.lock);
    free(r.handed);
    free(r.sums);
    return r.rc;
}

int gpu_load_verify(struct gpu_backend *be, struct gpu_alloc *a, int fd, uint64_t file_off,
                    uint64_t size, size_t chunk, const atomic_int *cancel, struct st_error *err)
{
    size_t n = chunk;
    char *mem = mmap(NULL, 2 * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return st_error_fail(err, ST_ERR_IO, "verify buffers: %s", strerror(errno));
    int rc = 0;
    for (uint64_t off = 0; off < size && rc == 0; off += n) {
        size_t len = (size_t)(size - off < n ? size - off : n);
        if (cancel && atomic_load(cancel)) {
            rc = -ECANCELED;
            break;
        }
        if (be->ops->read_back(be, a, off, mem, len, err) < 0) {
            rc = -EIO;
            break;
        }
        int r = fileio_pread_full(fd, mem + n, len, file_off + off);
        if (r < 0) {
            rc = st_error_fail(err, ST_ERR_IO, "verify read at %llu: %s",
                               (unsigned long long)(file_off + off), strerror(-r));
            break;
        }
        if (memcmp(mem, mem + n, len) != 0) {
            size_t j = 0;
            while (mem[j] == mem[n + j])
                j++;
            rc = st_error_fail(err, ST_ERR_DEVICE, "verify: device byte %llu differs from the file",
                               (unsigned long long)(off + j));
        }
    }
    munmap(mem, 2 * n);
    return rc;
}
