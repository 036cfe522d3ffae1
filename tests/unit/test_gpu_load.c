/* Tests for gpu/gpu_load.c and gpu_load_disk.c on the host backend: every
 * byte of every shard lands where it belongs, whichever way it came
 * (page-cache threads writing straight into the memfd, or through staging
 * buffers as on a GPU; O_DIRECT io_uring, buffered io_uring or pread from
 * the disk; runs of pages the copy threads found missing and handed to the
 * disk queue), and the byte counts say which way: exactly the missing
 * pages go to the disk, whether the threads measure the missing runs with
 * mincore or, for a file the process may not write, with probes; O_DIRECT
 * descriptors are asked for only for shards with bytes on the disk; a
 * truncated file fails, a cancel stops, and an io_uring failure never
 * returns while a read is still in flight into a staging buffer (which the
 * caller may then free or reuse): the file there is a pipe, whose reads
 * stay pending until someone writes, so a read left behind would swallow
 * bytes written after the loader returned. */
#include <errno.h>
#include <sys/ioctl.h>
#include <sys/wait.h>

#include "gpu.h"
#include "gpu_load.h"
#include "gpu_plan.h"
#include "gpu_files.h"

/* The host backend without `write`: copy threads then go through staging
 * buffers of their own, as they do on a GPU. */
static struct gpu_backend_ops staged_ops;

static struct gpu_backend *backend(int staged)
{
    struct gpu_backend *b = gpu_host_new();
    if (staged) {
        staged_ops = *b->ops;
        staged_ops.write = NULL;
        b->ops = &staged_ops;
    }
    return b;
}

struct load_case {
    unsigned n_shards;
    size_t sizes[4];
    size_t heads[4];
    int force;                 /* plan: -1 from the page cache, or a gpu_src */
    int staged, direct, no_uring;
    unsigned threads, depth;
    size_t chunk;
    int drop;                  /* drop the files from the page cache after planning */
    int gated;                 /* a gate (a mirror still fetching) lacks each shard's second half */
    int gate_fail;             /* ... and fails the wait of its first chunk */
};

/* A gate as a mirror's would be: the bytes of each shard's second half are
 * not there at plan time; a wait "fetches" them (a short sleep) and
 * records what was waited for. The shard's gate_file is its index + 1. */
struct fake_gate {
    const struct load_case *lc;
    _Atomic uint64_t waited;   /* bytes waited for */
    atomic_int waits;
};

static int gate_present(void *arg, const void *file, uint64_t off, uint64_t len)
{
    struct fake_gate *g = arg;
    size_t i = (size_t)(uintptr_t)file - 1;
    uint64_t half = g->lc->heads[i] + g->lc->sizes[i] / 2;
    return off + len <= half;
}

static int gate_wait(void *arg, const void *file, uint64_t off, uint64_t len,
                     const atomic_int *cancel, struct st_error *err)
{
    struct fake_gate *g = arg;
    (void)file, (void)off;
    if (cancel && atomic_load(cancel))
        return -ECANCELED;
    if (g->lc->gate_fail)
        return st_error_fail(err, ST_ERR_IO, "the upstream went away");
    struct timespec ts = {0, 200 * 1000};
    nanosleep(&ts, NULL);
    atomic_fetch_add(&g->waited, len);
    atomic_fetch_add(&g->waits, 1);
    return 0;
}

/* Loads the case and checks bytes, checksums, counts and progress. */
static void run_case(const struct load_case *lc)
{
    struct gpu_backend *b = backend(lc->staged);
    struct gpu_load_shard ls[4];
    struct gpu_plan_shard ps[4];
    struct gpu_alloc a[4];
    unsigned char *data[4];
    uint64_t total = 0;
    struct st_error err = {0};
    for (unsigned i = 0; i < lc->n_shards; i++) {
        char name[32];
        snprintf(name, sizeof(name), "load%u.bin", i);
        data[i] = pattern(lc->sizes[i], (unsigned)(lc->sizes[i] + 31 * i));
        int fd = data_file(name, lc->heads[i], data[i], lc->sizes[i]);
        a[i] = (struct gpu_alloc){.fd = -1};
        CHECK(b->ops->alloc(b, 0, lc->sizes[i], 0, name, &a[i], &err) == 0);
        ls[i] = (struct gpu_load_shard){.fd = fd, .direct_fd = lc->direct ? direct_fd(name) : -1,
                                        .data_start = lc->heads[i], .size = lc->sizes[i],
                                        .a = &a[i]};
        ps[i] = (struct gpu_plan_shard){.data_start = lc->heads[i], .size = lc->sizes[i]};
        if (lc->gated)
            ls[i].gate_file = ps[i].gate_file = (const void *)(uintptr_t)(i + 1);
        total += lc->sizes[i];
    }
    struct fake_gate fg = {.lc = lc};
    struct gpu_gate gate = {.present = gate_present, .wait = gate_wait, .arg = &fg};
    struct gpu_plan plan;
    CHECK(gpu_plan_build(&plan, ps, lc->n_shards, lc->chunk, lc->force, lc->gated ? &gate : NULL,
                         &err) == 0);
    for (unsigned i = 0; lc->drop && i < lc->n_shards; i++)
        drop_cached(ls[i].fd, 0, lc->heads[i] + lc->sizes[i]);
    _Atomic uint64_t progress = 0;
    atomic_int cancel = 0;
    struct gpu_load l = {.be = b, .threads = lc->threads, .depth = lc->depth, .chunk = lc->chunk,
                         .cancel = &cancel, .progress = &progress, .no_uring = lc->no_uring,
                         .wait_cqe = io_uring_wait_cqe, .gate = lc->gated ? &gate : NULL};
    l.stage = b->ops->stage_open(b, 0, gpu_load_stage_buffers(b, l.threads, l.depth),
                                 gpu_load_stage_bytes(l.chunk), &err);
    CHECK(l.stage != NULL);
    struct gpu_load_stats st;
    int rc = gpu_load_run(&l, ls, lc->n_shards, &plan, &st, &err);
    if (rc != 0)
        fprintf(stderr, "  shards %u force %d staged %d direct %d threads %u depth %u: %s\n",
                lc->n_shards, lc->force, lc->staged, lc->direct, lc->threads, lc->depth,
                err.message);
    CHECK(rc == 0 && !l.unsafe);
    CHECK_EQ_U64(atomic_load(&progress), total);
    CHECK_EQ_U64(st.bytes[GPU_SRC_PAGE_CACHE] + st.bytes[GPU_SRC_DISK] +
                 st.bytes[GPU_SRC_UPSTREAM], total);
    /* The gate was waited on for exactly the bytes it lacked, once each
     * (what the plan put upstream), and they count as the upstream's. */
    CHECK_EQ_U64(atomic_load(&fg.waited), lc->gated ? plan.bytes[GPU_SRC_UPSTREAM] : 0);
    CHECK(st.bytes[GPU_SRC_UPSTREAM] <= plan.bytes[GPU_SRC_UPSTREAM]);
    if (!lc->drop) /* just written: the waited-for bytes are in the page cache */
        CHECK_EQ_U64(st.bytes[GPU_SRC_UPSTREAM], plan.bytes[GPU_SRC_UPSTREAM]);
    if (lc->gated && lc->force < 0) {
        uint64_t halves = 0;
        for (unsigned i = 0; i < lc->n_shards; i++)
            halves += lc->sizes[i] - lc->sizes[i] / 2;
        CHECK(plan.bytes[GPU_SRC_UPSTREAM] >= halves);
    }
    if (lc->force == GPU_SRC_DISK) {
        CHECK_EQ_U64(st.bytes[GPU_SRC_DISK], total);
        CHECK_STR(st.disk_io, !total ? "" : lc->no_uring ? "pread"
                                       : lc->direct && ls[0].direct_fd >= 0 ? "io_uring+O_DIRECT"
                                                                            : "io_uring");
    }
    if (lc->force == GPU_SRC_PAGE_CACHE && !lc->drop) /* just written: all cached */
        CHECK_EQ_U64(st.bytes[GPU_SRC_PAGE_CACHE], total);
    CHECK(st.handed_over <= st.bytes[GPU_SRC_DISK]);
    for (unsigned i = 0; i < lc->n_shards; i++) {
        size_t n = lc->sizes[i];
        CHECK(b->ops->finish(b, &a[i], &err) == 0);
        unsigned char *got = xmalloc(n ? n : 1);
        CHECK(b->ops->read_back(b, &a[i], 0, got, n, &err) == 0);
        CHECK(memcmp(got, data[i], n) == 0);
        struct gpu_load_shard vs = {.fd = ls[i].fd, .data_start = lc->heads[i], .size = n};
        CHECK(gpu_load_verify(b, &a[i], &vs, lc->chunk, NULL, &err) == 0);
        if (n > 1 && lc->heads[i] > 0) { /* verify names the first difference */
            vs.data_start--;
            CHECK(gpu_load_verify(b, &a[i], &vs, lc->chunk, NULL, &err) < 0);
            CHECK(err.code == ST_ERR_DEVICE);
            CHECK_CONTAINS(err.message, "differs");
        }
        free(got);
        b->ops->free(b, &a[i]);
        close(ls[i].fd);
        if (ls[i].direct_fd >= 0)
            close(ls[i].direct_fd);
        free(data[i]);
    }
    gpu_plan_free(&plan);
    b->ops->stage_close(l.stage);
    b->ops->destroy(b);
}

TEST(both_sources_every_shape)
{
    static const size_t heads[] = {0, 8, 4096, 5000};
    static const size_t sizes[] = {0, 1, 4095, 4096, 4097, 200000};
    for (int force = 0; force < GPU_SRC_COUNT; force++)
        for (int staged = 0; staged < 2; staged++)
            for (size_t h = 0; h < ARRAY_LEN(heads); h++)
                for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
                    struct load_case lc = {.n_shards = 1, .sizes = {sizes[s]},
                                           .heads = {heads[h]}, .force = force,
                                           .staged = staged, .direct = 1, .threads = 2,
                                           .depth = 3, .chunk = 8192};
                    run_case(&lc);
                }
}

/* A gated source (a mirror still fetching): the chunks it lacks wait for
 * it, whatever the shapes, threads and staging. */
TEST(gated_chunks_wait_for_their_bytes)
{
    static const size_t sizes[] = {0, 1, 4097, 200000, (5u << 20) + 3};
    for (int staged = 0; staged < 2; staged++)
        for (unsigned threads = 1; threads <= 3; threads += 2)
            for (size_t k = 0; k < ARRAY_LEN(sizes); k++) {
                struct load_case lc = {.n_shards = 2, .sizes = {sizes[k], sizes[(k + 2) % 5]},
                                       .heads = {8, 4096}, .force = -1, .staged = staged,
                                       .direct = 1, .threads = threads, .depth = 2,
                                       .chunk = 1u << 20, .gated = 1};
                run_case(&lc);
            }
}

/* A gate that fails its wait fails the load with its message. */
TEST(gate_failure_fails_the_load)
{
    struct gpu_backend *b = backend(0);
    unsigned char *data = pattern(100000, 3);
    int fd = data_file("gate.bin", 8, data, 100000);
    struct gpu_alloc a = {.fd = -1};
    struct st_error err = {0};
    CHECK(b->ops->alloc(b, 0, 100000, 0, "gate", &a, &err) == 0);
    struct load_case lc = {.n_shards = 1, .sizes = {100000}, .heads = {8}, .gated = 1,
                           .gate_fail = 1};
    struct fake_gate fg = {.lc = &lc};
    struct gpu_gate gate = {.present = gate_present, .wait = gate_wait, .arg = &fg};
    struct gpu_load_shard ls = {.fd = fd, .gate_file = (const void *)1, .direct_fd = -1,
                                .data_start = 8, .size = 100000, .a = &a};
    struct gpu_plan_shard ps = {.data_start = 8, .size = 100000, .gate_file = (const void *)1};
    struct gpu_plan plan;
    CHECK(gpu_plan_build(&plan, &ps, 1, 1u << 20, -1, &gate, &err) == 0);
    CHECK_EQ_U64(plan.n_src[GPU_SRC_UPSTREAM], 1);
    struct gpu_load l = {.be = b, .threads = 2, .depth = 2, .chunk = 1u << 20,
                         .wait_cqe = io_uring_wait_cqe, .gate = &gate};
    l.stage = b->ops->stage_open(b, 0, gpu_load_stage_buffers(b, l.threads, l.depth),
                                 gpu_load_stage_bytes(l.chunk), &err);
    struct gpu_load_stats st;
    CHECK(gpu_load_run(&l, &ls, 1, &plan, &st, &err) == -EIO);
    CHECK_CONTAINS(err.message, "the upstream went away");
    CHECK_EQ_U64(st.failed_shard, 0);
    b->ops->stage_close(l.stage);
    b->ops->free(b, &a);
    gpu_plan_free(&plan);
    close(fd);
    free(data);
    b->ops->destroy(b);
}

TEST(disk_reads_with_and_without_o_direct_and_io_uring)
{
    for (int mode = 0; mode < 3; mode++) {
        struct load_case lc = {.n_shards = 3, .sizes = {3 << 20, 12345, 1 << 20},
                               .heads = {123, 8, 4096}, .force = GPU_SRC_DISK, .staged = 1,
                               .direct = mode == 0, .no_uring = mode == 2, .threads = 2,
                               .depth = 4, .chunk = 64 << 10, .drop = 1};
        run_case(&lc);
    }
}

TEST(planned_mixed_many_threads)
{
    /* 3 shards, the middle of the first dropped from the page cache: the
     * real plan mixes both movers, four threads and four reads in flight. */
    for (int staged = 0; staged < 2; staged++) {
        struct load_case lc = {.n_shards = 3, .sizes = {6 << 20, 5 << 20, 777},
                               .heads = {4096, 40, 4096}, .force = -1, .staged = staged,
                               .direct = 1, .threads = 4, .depth = 4, .chunk = 1 << 20};
        run_case(&lc); /* everything cached */
        lc.drop = 1;   /* planned on the page cache, found missing: handed over */
        run_case(&lc);
    }
}

/* O_DIRECT descriptors, asked for through open_direct: counted per shard. */
struct opener {
    const char *names[4];
    int calls[4];
};

static int open_counted(void *arg, size_t i)
{
    struct opener *o = arg;
    o->calls[i]++;
    return direct_fd(o->names[i]);
}

/* Loads a file of n bytes after head bytes, planned all on the page cache,
 * through staging buffers or not, and checks every byte; *st says where
 * they came from. */
static void load_one(int fd, const char *name, size_t head, const unsigned char *d, size_t n,
                     int staged, struct gpu_load_stats *st, int *opens)
{
    struct gpu_backend *b = backend(staged);
    struct gpu_alloc a = {.fd = -1};
    struct st_error err;
    CHECK(b->ops->alloc(b, 0, n, 0, name, &a, &err) == 0);
    struct gpu_load_shard ls = {.fd = fd, .direct_fd = -1, .data_start = head, .size = n,
                                .a = &a};
    struct gpu_plan_shard ps = {.data_start = head, .size = n};
    struct gpu_plan plan;
    CHECK(gpu_plan_build(&plan, &ps, 1, 3 << 20, -1, NULL, &err) == 0);
    struct opener o = {.names = {name}};
    struct gpu_load l = {.be = b, .threads = 2, .depth = 2, .chunk = 3 << 20,
                         .wait_cqe = io_uring_wait_cqe, .open_direct = open_counted,
                         .open_arg = &o};
    l.stage = b->ops->stage_open(b, 0, gpu_load_stage_buffers(b, 2, 2),
                                 gpu_load_stage_bytes(3 << 20), &err);
    int rc = gpu_load_run(&l, &ls, 1, &plan, st, &err);
    if (rc != 0)
        fprintf(stderr, "  load: %s\n", err.message);
    CHECK(rc == 0);
    unsigned char *got = xmalloc(n);
    CHECK(b->ops->read_back(b, &a, 0, got, n, &err) == 0);
    CHECK(memcmp(got, d, n) == 0);
    free(got);
    *opens = o.calls[0];
    gpu_plan_free(&plan);
    b->ops->stage_close(l.stage);
    b->ops->free(b, &a);
    b->ops->destroy(b);
}

/* The data starts at 2 MiB so that its segments are whole folios of the
 * page cache (posix_fadvise cannot drop part of a large folio). Drops
 * segments 1, 2 and 5 of 8: 1 when the kernel did as asked. */
static int drop_three(int fd, size_t head)
{
    size_t seg = GPU_PLAN_SEGMENT;
    return drop_cached(fd, head + seg, 2 * seg) && drop_cached(fd, head + 5 * seg, seg) &&
           cached_pages(fd, head, seg) == seg / 4096 &&
           cached_pages(fd, head + 3 * seg, 2 * seg) == 2 * seg / 4096;
}

/* Reads the whole file, so that the page cache holds it again. */
static void warm(int fd)
{
    char buf[1 << 16];
    off_t off = 0;
    ssize_t n;
    while ((n = pread(fd, buf, sizeof(buf), off)) > 0)
        off += n;
}

/* Where mincore tells the truth (this process owns the file): exactly the
 * dropped pages come from the disk, handed over by the copy threads in
 * runs and read with O_DIRECT, which leaves them out of the page cache
 * (nothing read them a second time through readahead); a warm file opens
 * no O_DIRECT descriptor. */
static int exact_case(int fd, const char *name, size_t head, const unsigned char *d, int staged)
{
    size_t seg = GPU_PLAN_SEGMENT, n = 8 * seg;
    struct gpu_load_stats st;
    int opens;
    warm(fd);
    load_one(fd, name, head, d, n, staged, &st, &opens);
    CHECK_EQ_U64(st.bytes[GPU_SRC_PAGE_CACHE], n);
    CHECK_EQ_U64(st.handed_over + st.missing_runs, 0);
    CHECK(opens == 0 && !st.disk_io[0]);
    if (!drop_three(fd, head))
        return 0;
    load_one(fd, name, head, d, n, staged, &st, &opens);
    CHECK_EQ_U64(st.bytes[GPU_SRC_DISK], 3 * seg);
    CHECK_EQ_U64(st.handed_over, 3 * seg);
    CHECK_EQ_U64(st.bytes[GPU_SRC_PAGE_CACHE], 5 * seg);
    CHECK(st.missing_runs >= 2 && opens == 1);
    CHECK_STR(st.disk_io, "io_uring+O_DIRECT");
    CHECK_EQ_U64(cached_pages(fd, head + seg, 2 * seg) + cached_pages(fd, head + 5 * seg, seg), 0);
    return 1;
}

TEST(missing_pages_are_handed_over_exactly)
{
    size_t seg = GPU_PLAN_SEGMENT, n = 8 * seg;
    unsigned char *d = pattern(n, 9);
    int fd = data_file("exact.bin", seg, d, n);
    for (int staged = 0; staged < 2; staged++)
        if (!exact_case(fd, "exact.bin", seg, d, staged))
            fprintf(stderr, "  (the page cache did not do as asked: residency not checked)\n");
    close(fd);
    free(d);
}

/* As a user who neither owns the file nor may write it, mincore claims
 * every page resident: the copy threads must not trust it, copy what the
 * page cache holds and read the missing pages themselves, buffered (no
 * O_DIRECT descriptor, whose reads would repeat the readahead their short
 * reads started). Loads the file as that user in a child (the caller, as
 * root, arranged what the page cache holds: cold, segments 1, 2 and 5 are
 * missing). */
static void theirs_load(int fd, const unsigned char *d, int staged, int cold)
{
    size_t seg = GPU_PLAN_SEGMENT, n = 8 * seg;
    pid_t pid = fork();
    if (pid == 0) {
        struct gpu_load_stats st;
        int opens;
        if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
            _exit(3);
        load_one(fd, "theirs.bin", seg, d, n, staged, &st, &opens);
        CHECK(opens == 0 && st.handed_over == 0);
        if (!cold) {
            CHECK_EQ_U64(st.bytes[GPU_SRC_PAGE_CACHE], n);
            CHECK(st.missing_runs == 0);
        } else {
            CHECK(st.bytes[GPU_SRC_DISK] > 0 && st.bytes[GPU_SRC_DISK] <= 3 * seg);
            CHECK(st.bytes[GPU_SRC_PAGE_CACHE] >= 5 * seg);
            /* at least one run: the readahead a failed read starts may
             * bring segment 5 in before a copy thread reaches it */
            CHECK(st.missing_runs >= 1);
            CHECK_STR(st.disk_io, "buffered");
        }
        _exit(test_failed_flag ? 4 : 0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(unsurveyed_files_read_missing_pages_once)
{
    if (geteuid() != 0) {
        fprintf(stderr, "  (not root: cannot become another user to check)\n");
        return;
    }
    size_t seg = GPU_PLAN_SEGMENT, n = 8 * seg;
    unsigned char *d = pattern(n, 10);
    int fd = data_file("theirs.bin", seg, d, n);
    CHECK(fchmod(fd, 0444) == 0);
    CHECK(chmod(gpu_files_dir, 0755) == 0);
    for (int staged = 0; staged < 2; staged++) {
        warm(fd);
        theirs_load(fd, d, staged, 0);
        if (!drop_three(fd, seg)) {
            fprintf(stderr, "  (the page cache did not do as asked: residency not checked)\n");
            continue;
        }
        theirs_load(fd, d, staged, 1);
        /* every page was read, once, into the page cache */
        CHECK_EQ_U64(cached_pages(fd, seg, n), n / 4096);
    }
    close(fd);
    free(d);
}

/* Loads a file 60000 bytes long as if it held 80000 (truncated under the
 * daemon) from either source: the load fails saying so. */
TEST(truncated_file_and_cancel)
{
    unsigned char *d = pattern(60000, 5);
    int fd = data_file("short.bin", 100, d, 60000);
    for (int force = 0; force < GPU_SRC_COUNT; force++) {
        for (int staged = 0; staged < 2; staged++) {
            struct gpu_backend *b = backend(staged);
            struct gpu_alloc a = {.fd = -1};
            struct st_error err = {0};
            atomic_int cancel = 0;
            CHECK(b->ops->alloc(b, 0, 80000, 0, "short", &a, &err) == 0);
            struct gpu_load_shard ls = {.fd = fd, .direct_fd = direct_fd("short.bin"),
                                        .data_start = 100, .size = 80000, .a = &a};
            struct gpu_plan_shard ps = {.data_start = 100, .size = 80000};
            struct gpu_plan plan;
            CHECK(gpu_plan_build(&plan, &ps, 1, 8192, force, NULL, &err) == 0);
            struct gpu_load l = {.be = b, .threads = 3, .depth = 2, .chunk = 8192,
                                 .cancel = &cancel, .wait_cqe = io_uring_wait_cqe};
            l.stage = b->ops->stage_open(b, 0, gpu_load_stage_buffers(b, 3, 2),
                                         gpu_load_stage_bytes(8192), &err);
            struct gpu_load_stats st;
            CHECK(gpu_load_run(&l, &ls, 1, &plan, &st, &err) < 0);
            CHECK_CONTAINS(err.message, "shorter than its header says");
            CHECK(err.code == ST_ERR_IO && !l.unsafe);
            atomic_store(&cancel, 1);
            CHECK(gpu_load_run(&l, &ls, 1, &plan, &st, &err) == -ECANCELED);
            l.depth = 0;
            CHECK(gpu_load_run(&l, &ls, 1, &plan, &st, &err) < 0);
            CHECK(err.code == ST_ERR_INVALID_ARGUMENT);
            gpu_plan_free(&plan);
            b->ops->stage_close(l.stage);
            b->ops->free(b, &a);
            b->ops->destroy(b);
            if (ls.direct_fd >= 0)
                close(ls.direct_fd);
        }
    }
    close(fd);
    free(d);
}

/* The file written_wait writes into, in place, while the load waits for
 * its first read: as a process rewriting a model file under the daemon. */
static int written_fd = -1;

static int written_wait(struct io_uring *ring, struct io_uring_cqe **cqe)
{
    if (written_fd >= 0) {
        CHECK(pwrite(written_fd, "XXXXXXXX", 8, 5000) == 8);
        close(written_fd);
        written_fd = -1;
    }
    return io_uring_wait_cqe(ring, cqe);
}

/* A file written while it is read fails the load: what was copied may mix
 * two versions (red team finding 12). Read from the disk, where the wait
 * hook runs between the reads. */
TEST(file_written_during_the_load_fails_it)
{
    struct io_uring probe;
    if (io_uring_queue_init(2, &probe, 0) != 0) {
        fprintf(stderr, "  (no io_uring here: the hook never runs)\n");
        return;
    }
    io_uring_queue_exit(&probe);
    size_t n = 1 << 20;
    unsigned char *d = pattern(n, 12);
    int fd = data_file("written.bin", 4096, d, n);
    char *path = xasprintf("%s/written.bin", gpu_files_dir);
    struct gpu_backend *b = backend(0);
    struct gpu_alloc a = {.fd = -1};
    struct st_error err = {0};
    CHECK(b->ops->alloc(b, 0, n, 0, "w", &a, &err) == 0);
    struct gpu_load_shard ls = {.fd = fd, .direct_fd = -1, .data_start = 4096, .size = n, .a = &a};
    struct gpu_plan_shard ps = {.data_start = 4096, .size = n};
    struct gpu_plan plan;
    CHECK(gpu_plan_build(&plan, &ps, 1, 64 << 10, GPU_SRC_DISK, NULL, &err) == 0);
    struct gpu_load l = {.be = b, .threads = 1, .depth = 2, .chunk = 64 << 10,
                         .wait_cqe = written_wait};
    l.stage = b->ops->stage_open(b, 0, gpu_load_stage_buffers(b, 1, 2),
                                 gpu_load_stage_bytes(64 << 10), &err);
    struct gpu_load_stats st;
    usleep(20000); /* a later mtime than the file's own write, on coarse clocks too */
    written_fd = open(path, O_WRONLY);
    CHECK(gpu_load_run(&l, &ls, 1, &plan, &st, &err) < 0);
    CHECK(err.code == ST_ERR_IO && st.failed_shard == 0);
    CHECK_CONTAINS(err.message, "written while it was being read");
    /* unchanged since: the same load succeeds */
    CHECK(gpu_load_run(&l, &ls, 1, &plan, &st, &err) == 0);
    gpu_plan_free(&plan);
    b->ops->stage_close(l.stage);
    b->ops->free(b, &a);
    b->ops->destroy(b);
    close(fd);
    free(path);
    free(d);
}

static int waits;

/* io_uring_wait_cqe that fails the first time, as a broken ring would. */
static int failing_wait(struct io_uring *ring, struct io_uring_cqe **cqe)
{
    if (waits++ == 0)
        return -EIO;
    return io_uring_wait_cqe(ring, cqe);
}

TEST(ring_error_leaves_no_read_in_flight)
{
    struct io_uring probe;
    if (io_uring_queue_init(2, &probe, 0) != 0) {
        fprintf(stderr, "  (no io_uring here: nothing to test)\n");
        return;
    }
    io_uring_queue_exit(&probe);
    int p[2];
    CHECK(pipe(p) == 0);
    struct gpu_backend *b = backend(0);
    struct gpu_alloc a = {.fd = -1};
    struct st_error err = {0};
    CHECK(b->ops->alloc(b, 0, 3 * 4096, 0, "t", &a, &err) == 0);
    struct gpu_load_shard ls = {.fd = p[0], .direct_fd = -1, .data_start = 0, .size = 3 * 4096,
                                .a = &a};
    struct gpu_plan_shard ps = {.data_start = 0, .size = 3 * 4096};
    struct gpu_plan plan;
    CHECK(gpu_plan_build(&plan, &ps, 1, 4096, GPU_SRC_DISK, NULL, &err) == 0);
    struct gpu_load l = {.be = b, .threads = 1, .depth = 3, .chunk = 4096,
                         .wait_cqe = failing_wait};
    l.stage = b->ops->stage_open(b, 0, 3, gpu_load_stage_bytes(4096), &err);
    struct gpu_load_stats st;
    waits = 0;
    /* Three reads of the (empty) pipe are queued; the wait fails. */
    int rc = gpu_load_run(&l, &ls, 1, &plan, &st, &err);
    CHECK(waits > 0);
    {
        CHECK(rc < 0);
        CHECK_CONTAINS(err.message, "io_uring_wait_cqe");
        CHECK(!l.unsafe);
        /* Nothing may still be reading: bytes written now stay in the pipe. */
        char buf[100];
        memset(buf, 'x', sizeof(buf));
        CHECK(write(p[1], buf, sizeof(buf)) == (ssize_t)sizeof(buf));
        usleep(100000);
        int queued = -1;
        CHECK(ioctl(p[0], FIONREAD, &queued) == 0);
        CHECK(queued == (int)sizeof(buf));
    }
    gpu_plan_free(&plan);
    b->ops->stage_close(l.stage);
    b->ops->free(b, &a);
    b->ops->destroy(b);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    if (gpu_files_setup() < 0)
        return 1;
    RUN(both_sources_every_shape);
    RUN(gated_chunks_wait_for_their_bytes);
    RUN(gate_failure_fails_the_load);
    RUN(disk_reads_with_and_without_o_direct_and_io_uring);
    RUN(planned_mixed_many_threads);
    RUN(missing_pages_are_handed_over_exactly);
    RUN(unsurveyed_files_read_missing_pages_once);
    RUN(truncated_file_and_cancel);
    RUN(ring_error_leaves_no_read_in_flight);
    RUN(file_written_during_the_load_fails_it);
    gpu_files_teardown();
    return TEST_SUMMARY();
}
