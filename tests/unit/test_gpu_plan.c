/* Tests for gpu/gpu_plan.c: chunks cover every shard exactly, in file
 * order, at most a chunk long, on the source the page cache says (checked
 * against mincore from the test and against pages the test drops with
 * posix_fadvise), and all on the page cache where the kernel will not tell
 * (a file the process neither owns nor may write). */
#include <sys/wait.h>

#include "gpu_plan.h"
#include "gpu_files.h"

#define SEG GPU_PLAN_SEGMENT

/* Checks the invariants every plan keeps; returns the bytes per source. */
static void check_cover(const struct gpu_plan *p, const struct gpu_plan_shard *s, size_t n,
                        uint64_t chunk)
{
    uint64_t *next = xcalloc(n ? n : 1, sizeof(*next));
    uint64_t bytes[GPU_SRC_COUNT] = {0};
    size_t counts[GPU_SRC_COUNT] = {0};
    /* Each source's chunks are in file order within a shard, the disk's
     * also shard by shard, the page cache's taking the shards in turn. */
    uint64_t *last_end = xcalloc(n ? n : 1, sizeof(*last_end));
    for (int src = 0; src < GPU_SRC_COUNT; src++) {
        uint32_t last_shard = 0;
        memset(last_end, 0, (n ? n : 1) * sizeof(*last_end));
        for (size_t k = 0; k < p->n_chunks; k++) {
            const struct gpu_chunk *c = &p->chunks[k];
            if ((int)c->src != src)
                continue;
            CHECK((size_t)src == 0 ? k < p->n_src[0] : k >= p->n_src[0]);
            CHECK(c->shard < n && c->len > 0 && c->len <= chunk && c->off % 4096 == 0);
            CHECK(c->off + c->len <= s[c->shard].size);
            CHECK(c->off >= last_end[c->shard]);
            if (src == GPU_SRC_DISK)
                CHECK(c->shard >= last_shard);
            if (src == GPU_SRC_PAGE_CACHE && k > 0 && p->chunks[k - 1].shard == c->shard) {
                /* the same shard twice in a row: every other shard is done */
                for (size_t j = k + 1; j < p->n_src[0]; j++)
                    CHECK(p->chunks[j].shard == c->shard);
            }
            last_shard = c->shard;
            last_end[c->shard] = c->off + c->len;
            bytes[src] += c->len;
            counts[src]++;
        }
    }
    free(last_end);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += s[i].size;
    CHECK_EQ_U64(bytes[GPU_SRC_PAGE_CACHE] + bytes[GPU_SRC_DISK] + bytes[GPU_SRC_UPSTREAM], total);
    for (int src = 0; src < GPU_SRC_COUNT; src++) {
        CHECK_EQ_U64(p->bytes[src], bytes[src]);
        CHECK_EQ_U64(p->n_src[src], counts[src]);
    }
    /* No overlap: with the total right, per-shard sums settle it. */
    for (size_t k = 0; k < p->n_chunks; k++)
        next[p->chunks[k].shard] += p->chunks[k].len;
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_U64(next[i], s[i].size);
    free(next);
}

TEST(resident_file_is_all_page_cache)
{
    size_t n = 5 * SEG + 12345;
    unsigned char *d = pattern(n, 1);
    int fd = data_file("warm.bin", 777, d, n);
    struct gpu_plan_shard s = {fd, 777, n, NULL};
    struct gpu_plan p;
    struct st_error err;
    CHECK(gpu_plan_mincore_trusted(fd)); /* the test owns the file */
    CHECK(gpu_plan_build(&p, &s, 1, 1 << 20, -1, NULL, &err) == 0);
    check_cover(&p, &s, 1, 1 << 20);
    if (cached_pages(fd, 0, 777 + n) == (777 + n + 4095) / 4096) {
        CHECK_EQ_U64(p.bytes[GPU_SRC_PAGE_CACHE], n);
        CHECK(p.n_guessed == 0);
    } else {
        fprintf(stderr, "  (the kernel dropped pages already: residency not checked)\n");
    }
    gpu_plan_free(&p);
    close(fd);
    free(d);
}

TEST(dropped_segments_go_to_the_disk)
{
    /* The data starts at 2 MiB so that its segments are whole folios of the
     * page cache: posix_fadvise cannot drop part of a large folio. */
    size_t n = 8 * SEG, head = SEG;
    unsigned char *d = pattern(n, 2);
    int fd = data_file("mixed.bin", head, d, n);
    /* Drop segments 1, 2 and 5; the rest stays cached. */
    int dropped = drop_cached(fd, head + 1 * SEG, 2 * SEG) && drop_cached(fd, head + 5 * SEG, SEG);
    struct gpu_plan_shard s = {fd, head, n, NULL};
    struct gpu_plan p;
    struct st_error err;
    CHECK(gpu_plan_build(&p, &s, 1, 3 << 20, -1, NULL, &err) == 0);
    check_cover(&p, &s, 1, 3 << 20);
    if (!dropped || cached_pages(fd, head, SEG) != SEG / 4096) {
        fprintf(stderr, "  (the page cache did not do as asked: residency not checked)\n");
    } else {
        CHECK_EQ_U64(p.bytes[GPU_SRC_DISK], 3 * SEG);
        CHECK_EQ_U64(p.bytes[GPU_SRC_PAGE_CACHE], 5 * SEG);
        /* disk: [SEG, 3 SEG) cut at 3 MiB is two chunks, then [5 SEG, 6 SEG) */
        CHECK_EQ_U64(p.n_src[GPU_SRC_DISK], 3);
        const struct gpu_chunk *c = p.chunks + p.n_src[GPU_SRC_PAGE_CACHE];
        CHECK(c[0].off == SEG && c[0].len == 3 << 20);
        CHECK(c[1].off == SEG + (3 << 20) && c[1].len == SEG - (1 << 20));
        CHECK(c[2].off == 5 * SEG && c[2].len == SEG);
    }
    gpu_plan_free(&p);
    close(fd);
    free(d);
}

TEST(shards_forced_and_empty)
{
    size_t sizes[] = {0, 1, 4096, 3 * SEG + 5, 100};
    struct gpu_plan_shard s[5];
    unsigned char *d[5];
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof(name), "s%d.bin", i);
        d[i] = pattern(sizes[i], (unsigned)i);
        s[i] = (struct gpu_plan_shard){data_file(name, 8 + (size_t)i * 13, d[i], sizes[i]),
                                       8 + (uint64_t)i * 13, sizes[i], NULL};
    }
    for (int force = -1; force < GPU_SRC_COUNT; force++) {
        for (uint64_t chunk = 4096; chunk <= (8u << 20); chunk *= 16) {
            struct gpu_plan p;
            struct st_error err;
            CHECK(gpu_plan_build(&p, s, 5, chunk, force, NULL, &err) == 0);
            check_cover(&p, s, 5, chunk);
            if (force >= 0)
                CHECK_EQ_U64(p.n_src[force], p.n_chunks);
            gpu_plan_free(&p);
        }
    }
    struct gpu_plan p;
    struct st_error err;
    CHECK(gpu_plan_build(&p, s, 0, 4096, -1, NULL, &err) == 0 && p.n_chunks == 0 && !p.chunks);
    gpu_plan_free(&p);
    for (int i = 0; i < 5; i++) {
        close(s[i].fd);
        free(d[i]);
    }
}

/* Run as a user who neither owns the file nor may write it: mincore would
 * claim every page resident, so the plan must not believe it (it guesses
 * the page cache, and says so), even for pages that are not there. */
TEST(untrusted_mincore_is_a_guess)
{
    if (geteuid() != 0) {
        fprintf(stderr, "  (not root: cannot become another user to check)\n");
        return;
    }
    size_t n = 2 * SEG;
    unsigned char *d = pattern(n, 3);
    int fd = data_file("theirs.bin", 4096, d, n);
    CHECK(fchmod(fd, 0444) == 0);
    drop_cached(fd, 4096, n);
    pid_t pid = fork();
    if (pid == 0) {
        if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
            _exit(3);
        struct gpu_plan_shard s = {fd, 4096, n, NULL};
        struct gpu_plan p;
        struct st_error err;
        if (gpu_plan_mincore_trusted(fd))
            _exit(4);
        if (gpu_plan_build(&p, &s, 1, 1 << 20, -1, NULL, &err) != 0)
            _exit(5);
        int ok = p.n_guessed == 1 && p.bytes[GPU_SRC_PAGE_CACHE] == n;
        gpu_plan_free(&p);
        _exit(ok ? 0 : 6);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(fd);
    free(d);
}

int main(void)
{
    if (gpu_files_setup() < 0)
        return 1;
    RUN(resident_file_is_all_page_cache);
    RUN(dropped_segments_go_to_the_disk);
    RUN(shards_forced_and_empty);
    RUN(untrusted_mincore_is_a_guess);
    gpu_files_teardown();
    return TEST_SUMMARY();
}
