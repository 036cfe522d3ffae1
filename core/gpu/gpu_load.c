/* gpu_load: the io_uring -> staging ring -> backend copy pipeline. */
#include "gpu_load.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fileio.h"
#include "ipc_proto.h"
#include "log.h"
#include "util.h"

/* One staging buffer's state. */
struct slot {
    int reading;               /* a read into it is in flight */
    uint64_t k;                /* the chunk being read (the read's user data) */
    int copying;               /* its last copy may not have completed yet */
    uint64_t a0;               /* file offset the read starts at */
    size_t skip;               /* bytes before the shard data in the buffer (O_DIRECT alignment) */
    size_t dlen;               /* shard bytes in this chunk */
    int direct;                /* read from the O_DIRECT descriptor */
};

static size_t slot_bytes(const struct gpu_loader *l)
{
    return l->chunk + 2 * GPU_LOAD_ALIGN;
}

int gpu_loader_init(struct gpu_loader *l, struct gpu_backend *be, int dev, unsigned nbuf,
                    size_t chunk, const atomic_int *cancel, _Atomic uint64_t *progress,
                    struct st_error *err)
{
    memset(l, 0, sizeof(*l));
    l->be = be;
    l->nbuf = nbuf ? nbuf : 1;
    l->chunk = (chunk + GPU_LOAD_ALIGN - 1) / GPU_LOAD_ALIGN * GPU_LOAD_ALIGN;
    if (l->chunk == 0)
        l->chunk = GPU_LOAD_ALIGN;
    l->cancel = cancel;
    l->progress = progress;
    l->stage = be->ops->stage_open(be, dev, l->nbuf, slot_bytes(l), err);
    if (!l->stage)
        return -1;
    /* io_uring can be missing (old kernel) or forbidden (seccomp): pread then.
     * Room for a cancel per read besides the reads (drain_reads). */
    l->have_ring = io_uring_queue_init(2 * (l->nbuf < 4 ? 4 : l->nbuf), &l->ring, 0) == 0;
    l->wait_cqe = io_uring_wait_cqe;
    snprintf(l->io_mode, sizeof(l->io_mode), "%s", l->have_ring ? "io_uring" : "pread");
    return 0;
}

void gpu_loader_close(struct gpu_loader *l)
{
    if (l->have_ring)
        io_uring_queue_exit(&l->ring);
    l->have_ring = 0;
    if (l->stage && l->unsafe)
        log_msg(LOG_ERROR, "gpu: io_uring reads may still be in flight after an error: "
                           "leaking the staging buffers rather than freeing them");
    else if (l->stage)
        l->be->ops->stage_close(l->stage);
    l->stage = NULL;
}

static int cancelled(const struct gpu_loader *l)
{
    return l->cancel && atomic_load(l->cancel);
}

/* Plans chunk k's read into slot s. */
static void plan_chunk(const struct gpu_loader *l, struct slot *s, uint64_t k, uint64_t file_off,
                       uint64_t size, int direct)
{
    uint64_t doff = k * l->chunk;
    uint64_t foff = file_off + doff;
    s->dlen = (size_t)(size - doff < l->chunk ? size - doff : l->chunk);
    s->direct = direct;
    s->a0 = direct ? foff / GPU_LOAD_ALIGN * GPU_LOAD_ALIGN : foff;
    s->skip = (size_t)(foff - s->a0);
}

/* Read length: O_DIRECT wants whole aligned blocks (the file may end sooner). */
static size_t read_len(const struct slot *s)
{
    size_t need = s->skip + s->dlen;
    return s->direct ? (need + GPU_LOAD_ALIGN - 1) / GPU_LOAD_ALIGN * GPU_LOAD_ALIGN : need;
}

/* A read finished with res: completes it with buffered preads when it came
 * back short (end of an O_DIRECT range, or a filesystem that refused
 * O_DIRECT after all). Returns 0 or -1 with err. */
static int complete_read(struct slot *s, char *buf, int fd, int res, int *direct,
                         struct st_error *err)
{
    size_t need = s->skip + s->dlen;
    size_t got = res > 0 ? (size_t)res : 0;
    if (res < 0 && !(s->direct && res == -EINVAL)) {
        return st_error_fail(err, ST_ERR_IO, "read at %llu: %s", (unsigned long long)s->a0,
                             strerror(-res));
    }
    if (res < 0)
        *direct = 0; /* this filesystem takes O_DIRECT opens but not the reads */
    if (got < need) {
        int rc = fileio_pread_full(fd, buf + got, need - got, s->a0 + got);
        if (rc < 0) {
            return st_error_fail(
                err, ST_ERR_IO, "read at %llu: %s", (unsigned long long)(s->a0 + got),
                rc == -ENODATA ? "the file is shorter than its header says (truncated?)"
                               : strerror(-rc));
        }
    }
    return 0;
}

static int copy_chunk(struct gpu_loader *l, unsigned i, struct slot *s, uint64_t k,
                      struct gpu_alloc *a, uint64_t *acc, struct st_error *err)
{
    const char *src = (const char *)l->be->ops->stage_buf(l->stage, i) + s->skip;
    uint64_t doff = k * l->chunk;
    *acc = ipc_tsum_add(*acc, src, s->dlen, doff);
    if (l->be->ops->stage_copy(l->stage, i, a, doff, src, s->dlen, err) < 0)
        return -1;
    s->copying = 1;
    if (l->progress)
        atomic_fetch_add(l->progress, s->dlen);
    return 0;
}

static int shard_pread(struct gpu_loader *l, struct slot *slots, int fd, uint64_t file_off,
                       uint64_t size, struct gpu_alloc *a, uint64_t *acc, struct st_error *err)
{
    uint64_t nchunks = (size + l->chunk - 1) / l->chunk;
    snprintf(l->io_mode, sizeof(l->io_mode), "pread");
    for (uint64_t k = 0; k < nchunks; k++) {
        unsigned i = (unsigned)(k % l->nbuf);
        struct slot *s = &slots[i];
        if (cancelled(l))
            return -ECANCELED;
        if (s->copying && l->be->ops->stage_wait(l->stage, i, err) < 0)
            return -1;
        s->copying = 0;
        plan_chunk(l, s, k, file_off, size, 0);
        char *buf = l->be->ops->stage_buf(l->stage, i);
        if (complete_read(s, buf, fd, 0, &(int){0}, err) < 0 ||
            copy_chunk(l, i, s, k, a, acc, err) < 0)
            return -1;
    }
    return 0;
}

#define CANCEL_TAG UINT64_MAX /* user data of the cancel requests */

/* After an error: asks the kernel to cancel every read still in flight,
 * submits whatever is queued, and reaps completions until no read is left.
 * Returns 0, or -1 when the ring fails so that reads may still land. */
static int drain_reads(struct gpu_loader *l, struct slot *slots, unsigned *inflight)
{
    for (unsigned i = 0; i < l->nbuf; i++) {
        if (!slots[i].reading)
            continue;
        struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);
        if (!sqe)
            break; /* the reads complete by themselves (files), only later */
        io_uring_prep_cancel64(sqe, slots[i].k, 0);
        io_uring_sqe_set_data64(sqe, CANCEL_TAG);
    }
    int failures = 0;
    while (*inflight > 0) {
        int sr = io_uring_submit(&l->ring);
        struct io_uring_cqe *cqe;
        int wr = sr < 0 && sr != -EINTR && sr != -EAGAIN && sr != -EBUSY
                     ? sr : l->wait_cqe(&l->ring, &cqe);
        if (wr == -EINTR)
            continue;
        if (wr < 0) {
            if (++failures > 3)
                return -1;
            continue;
        }
        uint64_t k = io_uring_cqe_get_data64(cqe);
        io_uring_cqe_seen(&l->ring, cqe);
        if (k == CANCEL_TAG)
            continue;
        struct slot *s = &slots[k % l->nbuf];
        if (s->reading) {
            s->reading = 0;
            (*inflight)--;
        }
    }
    return 0;
}

static int shard_uring(struct gpu_loader *l, struct slot *slots, int fd, int direct_fd,
                       uint64_t file_off, uint64_t size, struct gpu_alloc *a, uint64_t *acc,
                       struct st_error *err)
{
    uint64_t nchunks = (size + l->chunk - 1) / l->chunk, next = 0, done = 0;
    unsigned inflight = 0;
    int direct = direct_fd >= 0, rc = 0;
    while (inflight > 0 || (rc == 0 && done < nchunks)) {
        if (rc == 0 && cancelled(l))
            rc = -ECANCELED;
        /* Fill every free buffer, in ring order, whose last copy is done. */
        while (rc == 0 && next < nchunks) {
            unsigned i = (unsigned)(next % l->nbuf);
            struct slot *s = &slots[i];
            if (s->reading)
                break;
            if (s->copying && l->be->ops->stage_wait(l->stage, i, err) < 0) {
                rc = -1;
                break;
            }
            s->copying = 0;
            struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);
            if (!sqe)
                break;
            plan_chunk(l, s, next, file_off, size, direct);
            io_uring_prep_read(sqe, direct ? direct_fd : fd, l->be->ops->stage_buf(l->stage, i),
                               (unsigned)read_len(s), s->a0);
            io_uring_sqe_set_data64(sqe, next);
            s->reading = 1;
            s->k = next;
            next++;
            inflight++;
        }
        if (inflight == 0)
            break;
        int sr = io_uring_submit(&l->ring);
        if (sr < 0 && sr != -EINTR && sr != -EAGAIN && sr != -EBUSY) {
            /* Reads submitted earlier may still be in flight into the
             * staging buffers: they must end before the buffers can go. */
            rc = st_error_fail(err, ST_ERR_IO, "io_uring_submit: %s", strerror(-sr));
            break;
        }
        struct io_uring_cqe *cqe;
        int wr = l->wait_cqe(&l->ring, &cqe);
        if (wr == -EINTR)
            continue;
        if (wr < 0) {
            rc = st_error_fail(err, ST_ERR_IO, "io_uring_wait_cqe: %s", strerror(-wr));
            break;
        }
        uint64_t k = io_uring_cqe_get_data64(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&l->ring, cqe);
        unsigned i = (unsigned)(k % l->nbuf);
        struct slot *s = &slots[i];
        s->reading = 0;
        inflight--;
        if (rc != 0)
            continue; /* draining after an error or a cancel */
        char *buf = l->be->ops->stage_buf(l->stage, i);
        if (complete_read(s, buf, fd, res, &direct, err) < 0 ||
            copy_chunk(l, i, s, k, a, acc, err) < 0) {
            rc = -1;
            continue;
        }
        done++;
    }
    if (inflight > 0 && drain_reads(l, slots, &inflight) < 0)
        l->unsafe = 1;
    if (rc == 0)
        snprintf(l->io_mode, sizeof(l->io_mode), "%s", direct ? "io_uring+O_DIRECT" : "io_uring");
    return rc;
}

int gpu_loader_shard(struct gpu_loader *l, int fd, int direct_fd, uint64_t file_off,
                     uint64_t size, struct gpu_alloc *a, uint64_t *checksum, struct st_error *err)
{
    struct slot *slots = xcalloc(l->nbuf, sizeof(*slots));
    uint64_t acc = 0;
    int rc;
    if (l->have_ring)
        rc = shard_uring(l, slots, fd, direct_fd, file_off, size, a, &acc, err);
    else
        rc = shard_pread(l, slots, fd, file_off, size, a, &acc, err);
    /* Every copy must be done before the buffers are reused or freed. */
    for (unsigned i = 0; i < l->nbuf; i++) {
        struct st_error e2;
        if (slots[i].copying && l->be->ops->stage_wait(l->stage, i, &e2) < 0 && rc == 0) {
            if (err)
                *err = e2;
            rc = st_status_errno(e2.code);
        }
    }
    free(slots);
    *checksum = ipc_tsum_final(acc, size);
    return rc;
}

int gpu_loader_verify(struct gpu_loader *l, int fd, uint64_t file_off, uint64_t size,
                      struct gpu_alloc *a, struct st_error *err)
{
    size_t n = l->chunk;
    char *mem = mmap(NULL, 2 * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        return st_error_fail(err, ST_ERR_IO, "verify buffers: %s", strerror(errno));
    }
    int rc = 0;
    for (uint64_t off = 0; off < size && rc == 0; off += n) {
        size_t len = (size_t)(size - off < n ? size - off : n);
        if (cancelled(l)) {
            rc = -ECANCELED;
            break;
        }
        if (l->be->ops->read_back(l->be, a, off, mem, len, err) < 0) {
            rc = -1;
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
