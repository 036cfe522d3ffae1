/* gpu_load_disk: a load's disk mover (see gpu_load.h): the runs the copy
 * threads found missing from the page cache, read with io_uring at the
 * load's depth into the disk staging buffers, each copied to its allocation
 * as soon as its read completes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"
#include "gpu_load_disk.h"
#include "util.h"

#define CANCEL_TAG UINT64_MAX /* user data of io_uring cancel requests */
#define DIRECT_UNTRIED (-2)  /* a shard's O_DIRECT descriptor not asked for yet */

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
    struct gpu_run *r;
    struct slot *slots;            /* l->depth */
    int *dfd;                      /* per shard: the O_DIRECT descriptor, -1 for none, or
                                    * DIRECT_UNTRIED */
    int *owned;                    /* ... opened here (closed at the end) */
    int *direct;                   /* per shard: O_DIRECT reads still work */
    struct io_uring ring;
    int have_ring;
    unsigned inflight;
    uint64_t bytes;                /* bytes it read */
    int buffered;                  /* some of them were read without O_DIRECT */
};

/* Shard i's O_DIRECT descriptor, opened on first use; negative: none. */
static int direct_fd(struct disk *d, uint32_t i)
{
    struct gpu_load *l = d->r->l;
    if (d->dfd[i] == DIRECT_UNTRIED) {
        d->dfd[i] = l->open_direct ? l->open_direct(l->open_arg, i) : -1;
        d->owned[i] = d->dfd[i] >= 0;
    }
    return d->dfd[i];
}

static void plan_read(struct disk *d, struct slot *s, const struct gpu_chunk *c)
{
    const struct gpu_load_shard *sh = &d->r->shards[c->shard];
    uint64_t foff = sh->data_start + c->off;
    s->c = *c;
    s->direct = d->have_ring && d->direct[c->shard] && direct_fd(d, c->shard) >= 0;
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
 * reads) and starts the copy. Returns 0 or -errno (recorded). */
static int finish_read(struct disk *d, unsigned i, int res)
{
    struct gpu_run *r = d->r;
    struct gpu_load *l = r->l;
    struct slot *s = &d->slots[i];
    struct gpu_load_shard *sh = &r->shards[s->c.shard];
    char *buf = l->be->ops->stage_buf(l->stage, i);
    size_t need = s->skip + (size_t)s->c.len, got = res > 0 ? (size_t)res : 0;
    struct st_error e;
    if (res < 0 && !(s->direct && res == -EINVAL)) {
        st_error_fail(&e, ST_ERR_IO, "read at %llu: %s", (unsigned long long)s->a0,
                      strerror(-res));
        return gpu_run_fail(r, (int)s->c.shard, res, &e);
    }
    if (res < 0)
        d->direct[s->c.shard] = 0; /* this file system takes O_DIRECT opens but not the reads */
    /* io_uring may end an O_DIRECT read short: the rest is read the same
     * way, not buffered, which would fill the page cache with what O_DIRECT
     * is there to keep out of it. */
    while (res >= 0 && s->direct && got < need && got % GPU_LOAD_ALIGN == 0) {
        ssize_t n = pread(d->dfd[s->c.shard], buf + got, read_len(s) - got,
                          (off_t)(s->a0 + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* the end of the file (its last block), or an error: buffered below */
        got += (size_t)n;
    }
    if (!s->direct || got < need)
        d->buffered = 1;
    if (got < need) {
        int rc = fileio_pread_full(sh->fd, buf + got, need - got, s->a0 + got);
        if (rc < 0) {
            st_error_fail(&e, ST_ERR_IO, "read at %llu: %s", (unsigned long long)(s->a0 + got),
                          rc == -ENODATA ? "the file is shorter than its header says (truncated?)"
                                         : strerror(-rc));
            return gpu_run_fail(r, (int)s->c.shard, rc, &e);
        }
    }
    uint64_t dst;
    size_t n = gpu_run_select(r, s->c.shard, s->c.off, buf + s->skip, (size_t)s->c.len, &dst);
    d->bytes += s->c.len;
    if (n == 0)
        return 0;
    if (l->be->ops->stage_copy(l->stage, i, sh->a, dst, buf + s->skip, n, &e) < 0)
        return gpu_run_fail(r, (int)s->c.shard, -EIO, &e);
    s->copying = 1;
    gpu_run_copied(r, GPU_SRC_DISK, n);
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
            gpu_run_fail(d->r, (int)s->c.shard, -EIO, &e);
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
    while (gpu_run_take_disk(d->r, &c, 1) > 0) {
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
    struct gpu_run *r = d->r;
    struct st_error e;
    for (;;) {
        int i = free_slot(d);
        if (i < 0)
            return atomic_load(&r->stop);
        struct gpu_chunk c;
        int t = gpu_run_take_disk(r, &c, d->inflight == 0);
        if (t <= 0)
            return t < 0;
        struct slot *s = &d->slots[i];
        struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
        if (!sqe) { /* the ring has room for every slot: cannot happen */
            st_error_fail(&e, ST_ERR_IO, "io_uring: no submission entry free");
            gpu_run_fail(r, -1, -EIO, &e);
            return 1;
        }
        plan_read(d, s, &c);
        io_uring_prep_read(sqe, s->direct ? d->dfd[c.shard] : r->shards[c.shard].fd,
                           r->l->be->ops->stage_buf(r->l->stage, (unsigned)i),
                           (unsigned)read_len(s), s->a0);
        io_uring_sqe_set_data64(sqe, (uint64_t)i);
        s->reading = 1;
        d->inflight++;
    }
}

static void disk_uring(struct disk *d)
{
    struct gpu_run *r = d->r;
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
            gpu_run_fail(r, -1, sr, &e);
            break;
        }
        struct io_uring_cqe *cqe;
        int wr = r->l->wait_cqe(&d->ring, &cqe);
        if (wr == -EINTR)
            continue;
        if (wr < 0) {
            st_error_fail(&e, ST_ERR_IO, "io_uring_wait_cqe: %s", strerror(-wr));
            gpu_run_fail(r, -1, wr, &e);
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

void gpu_load_disk(struct gpu_run *r, struct gpu_load_stats *st)
{
    struct gpu_load *l = r->l;
    size_t n = r->n_shards ? r->n_shards : 1;
    struct disk d = {.r = r};
    d.slots = xcalloc(l->depth, sizeof(*d.slots));
    d.dfd = xcalloc(n, sizeof(*d.dfd));
    d.owned = xcalloc(n, sizeof(*d.owned));
    d.direct = xcalloc(n, sizeof(*d.direct));
    for (size_t i = 0; i < r->n_shards; i++) {
        d.direct[i] = 1;
        d.dfd[i] = r->shards[i].direct_fd >= 0 ? r->shards[i].direct_fd : DIRECT_UNTRIED;
    }
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
            gpu_run_fail(r, (int)d.slots[i].c.shard, -EIO, &e);
    }
    if (d.have_ring)
        io_uring_queue_exit(&d.ring);
    if (d.bytes)
        snprintf(st->disk_io, sizeof(st->disk_io), "%s",
                 !d.have_ring ? "pread" : d.buffered ? "io_uring" : "io_uring+O_DIRECT");
    for (size_t i = 0; i < r->n_shards; i++)
        if (d.owned[i]) /* a read still in flight holds the file itself */
            close(d.dfd[i]);
    free(d.direct);
    free(d.owned);
    free(d.dfd);
    free(d.slots);
}
