/* gpu_load: a load, its page-cache copy threads, and verify (see
 * gpu_load.h; the disk mover is gpu/gpu_load_disk.c). */
#include "gpu_load.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"
#include "gpu_load_disk.h"
#include "gpu_part.h"
#include "util.h"

/* Bytes a copy thread reads at a time through its own buffer into a
 * backend that takes writes (host): a whole 2 MiB page of the memfd, which
 * shmem allocates at once where it gives huge pages
 * (transparent_hugepage/shmem_enabled set to within_size or always: 5x less
 * CPU per byte than 4 KiB pages measured on a 2-core VM), written in pieces
 * it would allocate a huge page per piece. */
#define PIECE_WRITE (2u << 20)
/* Bytes a copy thread waits for at a time where the page cache lacks a
 * page of a file whose residency it cannot survey (copy_unsurveyed). */
#define PIECE_WAIT (2u << 20)

unsigned gpu_load_stage_buffers(const struct gpu_backend *be, unsigned threads, unsigned depth)
{
    return depth + (be->ops->write ? 0 : 2 * threads);
}

size_t gpu_load_stage_bytes(size_t chunk)
{
    return chunk + 2 * GPU_LOAD_ALIGN;
}

/* Whether mincore() reports fd's real page-cache residency to this process:
 * Linux 5.2 and later tell it only to the file's owner and to whoever may
 * write it (mm/mincore.c), and claim every page resident to anyone else,
 * against page-cache side channels. */
static int mincore_trusted(int fd)
{
    struct stat sb;
    char path[64];
    if (fstat(fd, &sb) < 0)
        return 0;
    if (geteuid() == 0 || sb.st_uid == geteuid())
        return 1;
    /* /proc/self/fd/N leads access() to the very inode. */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    return faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) == 0;
}

/* ---- page cache ---------------------------------------------------------- */

struct copier {
    struct gpu_run *r;
    unsigned id;
    pthread_t thread;
    char *bounce;                  /* write backends: PIECE_WRITE bytes of its own */
    unsigned char *vec;            /* mincore's answer for up to a chunk's pages */
    int pending[2];                /* staged: the buffer's copies may still run */
    int shard[2];                  /* ... and the shard they copy to */
};

/* Reads up to len bytes at off of fd from the page cache into buf. Returns
 * the bytes read (fewer than len when the next page is not cached), or
 * -errno; -ENODATA when the file ends first (it was truncated). */
static ssize_t read_cached(struct gpu_run *r, int fd, char *buf, size_t len, uint64_t off)
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
                break; /* not cached: the caller hands the missing run over */
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

/* Fills cp->vec with the residency of file pages [first, end) of shard:
 * mincore on a mapping of just that stretch, never touched (it only names
 * the pages), so no read and no readahead starts. Returns 0, or -1 when
 * mincore cannot be used. */
static int survey(struct copier *cp, uint32_t shard, uint64_t first, uint64_t end)
{
    struct gpu_run *r = cp->r;
    size_t len = (size_t)((end - first) * r->page);
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, r->shards[shard].fd,
                     (off_t)(first * r->page));
    if (map == MAP_FAILED)
        return -1;
    int rc = mincore(map, len, cp->vec);
    munmap(map, len);
    return rc;
}

/* Sends bytes [p, p + n) of chunk c, just read into buf (from src), on
 * their way: a partition's selected ones compacted first, into the
 * allocation (write backends), or as an asynchronous copy out of the
 * staging buffer. Returns 0 or -errno (recorded). */
static int deliver(struct copier *cp, const struct gpu_chunk *c, unsigned which, char *buf,
                   uint64_t p, size_t n, enum gpu_src src)
{
    struct gpu_run *r = cp->r;
    struct gpu_load *l = r->l;
    struct gpu_alloc *a = r->shards[c->shard].a;
    struct st_error e;
    uint64_t dst;
    n = gpu_run_select(r, c->shard, c->off + p, buf, n, &dst);
    if (n == 0)
        return 0;
    if (cp->bounce) {
        if (l->be->ops->write(l->be, a, dst, buf, n, &e) < 0)
            return gpu_run_fail(r, (int)c->shard, -EIO, &e);
    } else {
        unsigned b = l->depth + 2 * cp->id + which;
        if (l->be->ops->stage_copy(l->stage, b, a, dst, buf, n, &e) < 0)
            return gpu_run_fail(r, (int)c->shard, -EIO, &e);
        cp->pending[which] = 1;
        cp->shard[which] = (int)c->shard;
    }
    gpu_run_copied(r, c->src == GPU_SRC_UPSTREAM && src == GPU_SRC_PAGE_CACHE ? GPU_SRC_UPSTREAM : src,
               n);
    return 0;
}

static int read_failed(struct gpu_run *r, const struct gpu_chunk *c, uint64_t foff, ssize_t got)
{
    struct st_error e;
    st_error_fail(&e, ST_ERR_IO, "read at %llu: %s", (unsigned long long)foff,
                  got == -ENODATA ? "the file is shorter than its header says (truncated?)"
                                  : strerror((int)-got));
    return gpu_run_fail(r, (int)c->shard, (int)got, &e);
}

/* Where the next piece of chunk c goes: the thread's own buffer (write
 * backends: at most PIECE_WRITE bytes at a time) or its place in the
 * staging buffer. *want is cut to fit. */
static char *piece_buf(struct copier *cp, char *dst, uint64_t p, size_t *want)
{
    if (!cp->bounce)
        return dst + p;
    if (*want > PIECE_WRITE)
        *want = PIECE_WRITE;
    return cp->bounce;
}

/* Copies chunk c of a file whose residency mincore tells: the chunk's pages
 * are surveyed first (reading a page the cache lacks, even with RWF_NOWAIT,
 * starts the kernel's readahead of it, which O_DIRECT would then read a
 * second time), each run of cached pages is read from the page cache, and
 * each run of missing ones is handed to the disk queue. Returns 0, 1 when
 * the survey failed (the caller copies without one), or -errno (recorded). */
static int copy_surveyed(struct copier *cp, const struct gpu_chunk *c, unsigned which, char *dst)
{
    struct gpu_run *r = cp->r;
    const struct gpu_load_shard *s = &r->shards[c->shard];
    uint64_t pg = r->page, f0 = s->data_start + c->off;
    uint64_t first = f0 / pg, end = (f0 + c->len + pg - 1) / pg;
    if (survey(cp, c->shard, first, end) < 0)
        return 1;
    uint64_t p = 0;
    while (p < c->len) {
        uint64_t k = (f0 + p) / pg - first, j = k + 1;
        int resident = cp->vec[k] & 1;
        while (first + j < end && (cp->vec[j] & 1) == resident)
            j++;
        uint64_t q = (first + j) * pg - f0;
        if (q > c->len)
            q = c->len;
        while (resident && p < q) {
            size_t want = (size_t)(q - p);
            char *buf = piece_buf(cp, dst, p, &want);
            ssize_t got = read_cached(r, s->fd, buf, want, f0 + p);
            if (got < 0)
                return read_failed(r, c, f0 + p, got);
            if (got > 0 && deliver(cp, c, which, buf, p, (size_t)got, GPU_SRC_PAGE_CACHE) < 0)
                return -1;
            p += (uint64_t)got;
            if ((size_t)got < want)
                break; /* evicted since the survey: the rest of the run goes to the disk */
        }
        if (p < q) {
            atomic_fetch_add(&r->missing_runs, 1);
            if (gpu_run_hand_over(r, c, c->off + p, c->off + q) < 0)
                return -1;
            p = q;
        }
        if (gpu_run_stopped(r))
            return -1;
    }
    return 0;
}

/* Copies chunk c of a file whose residency the kernel will not tell this
 * process (mincore claims every page resident to those who may not write
 * the file): what the page cache holds is read from it, and where a read
 * stops short the thread reads on with plain reads, waiting for the disk
 * through the readahead that the short read started, a piece at a time.
 * Only the missing pages come from the disk, once, buffered. Returns 0 or
 * -errno (recorded). */
static int copy_unsurveyed(struct copier *cp, const struct gpu_chunk *c, unsigned which,
                           char *dst)
{
    struct gpu_run *r = cp->r;
    const struct gpu_load_shard *s = &r->shards[c->shard];
    uint64_t p = 0, f0 = s->data_start + c->off;
    while (p < c->len) {
        size_t want = (size_t)(c->len - p);
        char *buf = piece_buf(cp, dst, p, &want);
        ssize_t got = read_cached(r, s->fd, buf, want, f0 + p);
        enum gpu_src src = GPU_SRC_PAGE_CACHE;
        if (got == 0) { /* the next page is missing: wait for it, and a piece after it */
            atomic_fetch_add(&r->missing_runs, 1);
            atomic_store(&r->read_buffered, 1);
            size_t n = want < PIECE_WAIT ? want : PIECE_WAIT;
            int rc = fileio_pread_full(s->fd, buf, n, f0 + p);
            got = rc < 0 ? rc : (ssize_t)n;
            src = GPU_SRC_DISK;
        }
        if (got < 0)
            return read_failed(r, c, f0 + p, got);
        if (deliver(cp, c, which, buf, p, (size_t)got, src) < 0)
            return -1;
        p += (uint64_t)got;
        if (gpu_run_stopped(r))
            return -1;
    }
    return 0;
}

/* Copies chunk c, into staging buffer `which` of the thread's two when the
 * backend has no write. Returns 0 or -errno (recorded). */
static int copy_chunk(struct copier *cp, const struct gpu_chunk *c, unsigned which)
{
    struct gpu_run *r = cp->r;
    struct gpu_load *l = r->l;
    struct st_error e;
    char *dst = NULL;
    if (!cp->bounce) {
        unsigned b = l->depth + 2 * cp->id + which;
        if (cp->pending[which] && l->be->ops->stage_wait(l->stage, b, &e) < 0)
            return gpu_run_fail(r, cp->shard[which], -EIO, &e);
        cp->pending[which] = 0;
        dst = l->be->ops->stage_buf(l->stage, b);
    }
    int rc = r->trusted[c->shard] && !atomic_load(&r->no_nowait) ? copy_surveyed(cp, c, which, dst)
                                                                   : 1;
    return rc == 1 ? copy_unsurveyed(cp, c, which, dst) : rc;
}

/* Waits until upstream chunk c's bytes are in its file. Returns 0 or -errno
 * (recorded). */
static int wait_upstream(struct gpu_run *r, const struct gpu_chunk *c)
{
    const struct gpu_load_shard *s = &r->shards[c->shard];
    const struct gpu_gate *g = r->l->gate;
    struct st_error e;
    if (!g || !s->gate_file)
        return 0;
    int rc = g->wait(g->arg, s->gate_file, s->data_start + c->off, c->len, r->l->cancel, &e);
    return rc < 0 ? gpu_run_fail(r, (int)c->shard, rc, rc == -ECANCELED ? NULL : &e) : 0;
}

/* The next chunk for a copy thread: the page-cache ones, then the
 * upstream ones. NULL when none is left. */
static const struct gpu_chunk *take_copy(struct gpu_run *r)
{
    size_t k = atomic_load(&r->next_pc) < r->n_pc ? atomic_fetch_add(&r->next_pc, 1) : r->n_pc;
    if (k < r->n_pc)
        return &r->pc[k];
    k = atomic_fetch_add(&r->next_up, 1);
    return k < r->n_up ? &r->up[k] : NULL;
}

/* This thread's CPU time so far, in ns. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *copier_main(void *arg)
{
    struct copier *cp = arg;
    struct gpu_run *r = cp->r;
    unsigned which = 0;
    uint64_t cpu0 = thread_cpu_ns();
    while (!gpu_run_stopped(r)) {
        const struct gpu_chunk *c = take_copy(r);
        if (!c || (c->src == GPU_SRC_UPSTREAM && wait_upstream(r, c) < 0) ||
            copy_chunk(cp, c, which) < 0)
            break;
        which ^= 1;
    }
    for (unsigned i = 0; i < 2; i++) {
        struct st_error e;
        unsigned b = r->l->depth + 2 * cp->id + i;
        if (cp->pending[i] && r->l->be->ops->stage_wait(r->l->stage, b, &e) < 0)
            gpu_run_fail(r, cp->shard[i], -EIO, &e);
        cp->pending[i] = 0;
    }
    atomic_fetch_add(&r->copy_cpu_ns, thread_cpu_ns() - cpu0);
    pthread_mutex_lock(&r->lock);
    r->active--;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* ---- a load ---------------------------------------------------------------- */

/* A copier's own memory: its bounce buffer (write backends) and room for
 * mincore's answer over a chunk. Returns 0 or -ENOMEM. */
static int copier_init(struct copier *cp, struct gpu_run *r, unsigned id)
{
    *cp = (struct copier){.r = r, .id = id};
    cp->vec = malloc(r->l->chunk / r->page + 2); /* a chunk spans at most this many pages */
    if (r->l->be->ops->write)
        cp->bounce = aligned_alloc(GPU_LOAD_ALIGN, PIECE_WRITE);
    if (!cp->vec || (r->l->be->ops->write && !cp->bounce)) {
        free(cp->vec);
        free(cp->bounce);
        return -ENOMEM;
    }
    return 0;
}

static void copier_free(struct copier *cp)
{
    free(cp->vec);
    free(cp->bounce);
}

/* Starts up to l->threads copy threads (no more than there are chunks).
 * Returns how many started. */
static unsigned start_copiers(struct gpu_run *r, struct copier *cps)
{
    struct gpu_load *l = r->l;
    unsigned want = l->threads < GPU_LOAD_MAX_THREADS ? l->threads : GPU_LOAD_MAX_THREADS, n = 0;
    if (want > r->n_pc + r->n_up)
        want = (unsigned)(r->n_pc + r->n_up);
    for (unsigned t = 0; t < want; t++) {
        if (copier_init(&cps[t], r, t) < 0)
            break;
        pthread_mutex_lock(&r->lock);
        r->active++;
        pthread_mutex_unlock(&r->lock);
        if (pthread_create(&cps[t].thread, NULL, copier_main, &cps[t]) != 0) {
            pthread_mutex_lock(&r->lock);
            r->active--;
            pthread_mutex_unlock(&r->lock);
            copier_free(&cps[t]);
            break;
        }
        n++;
    }
    return n;
}

/* Every chunk on the calling thread, before the disk mover runs: when no
 * copy thread could start. */
static void copy_here(struct gpu_run *r)
{
    struct copier self;
    if (copier_init(&self, r, 0) < 0) {
        struct st_error e;
        st_error_fail(&e, ST_ERR_NO_MEMORY, "no memory for a copy buffer");
        gpu_run_fail(r, -1, -ENOMEM, &e);
        return;
    }
    r->active = 1;
    copier_main(&self);
    copier_free(&self);
}

int gpu_load_run(struct gpu_load *l, struct gpu_load_shard *shards, size_t n,
                 const struct gpu_plan *plan, struct gpu_load_stats *st, struct st_error *err)
{
    struct gpu_run r = {.l = l, .shards = shards, .n_shards = n,
                    .page = (uint64_t)sysconf(_SC_PAGESIZE)};
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
    pthread_mutex_init(&r.lock, NULL);
    pthread_cond_init(&r.cond, NULL);
    /* Each file's version now: one written while it is read (in place, a
     * version the registry has not seen) must not be published half old
     * and half new (checked once the movers are done). One fstat per
     * shard also tells whether mincore may be asked about it. */
    struct fileio_stat *before = xcalloc(n ? n : 1, sizeof(*before));
    r.trusted = xcalloc(n ? n : 1, sizeof(*r.trusted));
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        if (fstat(shards[i].fd, &sb) == 0)
            fileio_stat_from(&sb, &before[i]);
        r.trusted[i] = mincore_trusted(shards[i].fd);
    }
    unsigned started = start_copiers(&r, cps);
    if (started == 0 && r.n_pc + r.n_up > 0)
        copy_here(&r);
    gpu_load_disk(&r, st);
    for (unsigned t = 0; t < started; t++) {
        pthread_join(cps[t].thread, NULL);
        copier_free(&cps[t]);
    }
    for (size_t i = 0; i < n && r.rc == 0; i++) {
        /* A file still arriving from a mirror's upstream is written by its
         * fetchers all along; the mirror checks its digest instead. */
        if (shards[i].gate_file || fileio_unchanged(shards[i].fd, &before[i]))
            continue;
        struct st_error e;
        st_error_fail(&e, ST_ERR_IO, "the file was written while it was being read: its bytes "
                      "may mix two versions; preload it again");
        gpu_run_fail(&r, (int)i, -EAGAIN, &e);
    }
    free(before);
    for (int s = 0; s < GPU_SRC_COUNT; s++)
        st->bytes[s] = atomic_load(&r.bytes[s]);
    st->handed_over = atomic_load(&r.handed_bytes);
    st->missing_runs = atomic_load(&r.missing_runs);
    st->copy_cpu_ns = atomic_load(&r.copy_cpu_ns);
    if (atomic_load(&r.read_buffered)) /* the copy threads read some themselves */
        snprintf(st->disk_io + strlen(st->disk_io), sizeof(st->disk_io) - strlen(st->disk_io),
                 "%sbuffered", st->disk_io[0] ? "+" : "");
    st->threads = started ? started : r.n_pc + r.n_up > 0;
    st->failed_shard = r.rc < 0 ? r.failed_shard : -1;
    if (r.rc < 0 && err)
        *err = r.err;
    pthread_cond_destroy(&r.cond);
    pthread_mutex_destroy(&r.lock);
    free(r.handed);
    free(r.trusted);
    return r.rc;
}

/* What verify compares, one stretch of the data at a time. */
struct verify_ctx {
    struct gpu_backend *be;
    struct gpu_alloc *a;
    const struct gpu_load_shard *s;
    char *dev, *file;          /* chunk bytes each */
    size_t chunk;
    const atomic_int *cancel;
    struct st_error *err;
};

/* Compares the allocation's bytes that stretch [lo, hi) of the data fills
 * with the file's. Returns 0 or -errno with err. */
static int verify_stretch(void *arg, uint64_t lo, uint64_t hi)
{
    struct verify_ctx *v = arg;
    for (uint64_t off = lo; off < hi; off += v->chunk) {
        size_t len = (size_t)(hi - off < v->chunk ? hi - off : v->chunk);
        if (v->cancel && atomic_load(v->cancel))
            return -ECANCELED;
        int r = fileio_pread_full(v->s->fd, v->file, len, v->s->data_start + off);
        if (r < 0)
            return st_error_fail(v->err, ST_ERR_IO, "verify read at %llu: %s",
                                 (unsigned long long)(v->s->data_start + off), strerror(-r));
        uint64_t dst = off;
        size_t n = v->s->sel ? gpu_select_compact(v->s->sel, off, v->file, len) : len;
        if (v->s->sel)
            dst = gpu_select_dst(v->s->sel, off);
        if (n && v->be->ops->read_back(v->be, v->a, dst, v->dev, n, v->err) < 0)
            return -EIO;
        if (memcmp(v->dev, v->file, n) != 0) {
            size_t j = 0;
            while (v->dev[j] == v->file[j])
                j++;
            return st_error_fail(v->err, ST_ERR_DEVICE, "verify: device byte %llu differs from "
                                 "the file", (unsigned long long)(dst + j));
        }
    }
    return 0;
}

int gpu_load_verify(struct gpu_backend *be, struct gpu_alloc *a, const struct gpu_load_shard *s,
                    size_t chunk, const atomic_int *cancel, struct st_error *err)
{
    char *mem = mmap(NULL, 2 * chunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return st_error_fail(err, ST_ERR_IO, "verify buffers: %s", strerror(errno));
    struct verify_ctx v = {.be = be, .a = a, .s = s, .dev = mem, .file = mem + chunk,
                           .chunk = chunk, .cancel = cancel, .err = err};
    int rc = s->sel ? gpu_select_stretches(s->sel, verify_stretch, &v)
                    : verify_stretch(&v, 0, s->size);
    munmap(mem, 2 * chunk);
    return rc;
}
