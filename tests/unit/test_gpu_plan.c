/* Tests for gpu/gpu_plan.c: chunks cover every shard exactly, in file
 * order, at most a chunk long, all on the page cache (the plan reads no
 * file: residency is the copy threads' business, test_gpu_load.c), but
 * where a gate (a mirror still fetching) lacks a segment's bytes, or where
 * a source is forced. */
#include "gpu_plan.h"
#include "test.h"
#include "util.h"

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

/* The plan touches no file: a shard whose pages are all gone from the page
 * cache is planned on the page cache all the same (the copy threads find
 * out, chunk by chunk, while they copy). */
TEST(every_chunk_starts_on_the_page_cache)
{
    size_t sizes[] = {5 * SEG + 12345, 1, 3 * SEG};
    struct gpu_plan_shard s[3];
    uint64_t total = 0;
    for (int i = 0; i < 3; i++) {
        s[i] = (struct gpu_plan_shard){.data_start = 777 * (uint64_t)i, .size = sizes[i]};
        total += sizes[i];
    }
    for (uint64_t chunk = 4096; chunk <= (8u << 20); chunk *= 8) {
        struct gpu_plan p;
        struct st_error err;
        CHECK(gpu_plan_build(&p, s, 3, chunk, -1, NULL, &err) == 0);
        check_cover(&p, s, 3, chunk);
        CHECK_EQ_U64(p.bytes[GPU_SRC_PAGE_CACHE], total);
        CHECK_EQ_U64(p.n_src[GPU_SRC_DISK] + p.n_src[GPU_SRC_UPSTREAM], 0);
        gpu_plan_free(&p);
    }
}

/* A gate lacking segments 1, 2 and 5 of a shard, and all of another's. */
static int gate_present(void *arg, const void *file, uint64_t off, uint64_t len)
{
    (void)arg, (void)len;
    uint64_t k = (off - 100) / SEG;
    return (uintptr_t)file == 1 && k != 1 && k != 2 && k != 5;
}

static int gate_wait(void *arg, const void *file, uint64_t off, uint64_t len,
                     const atomic_int *cancel, struct st_error *err)
{
    (void)arg, (void)file, (void)off, (void)len, (void)cancel, (void)err;
    return 0;
}

TEST(gated_segments_go_upstream)
{
    struct gpu_plan_shard s[3] = {{100, 8 * SEG, (const void *)1, NULL},
                                  {100, 2 * SEG + 1, (const void *)2, NULL},
                                  {100, 3 * SEG, NULL, NULL}};
    struct gpu_gate gate = {.present = gate_present, .wait = gate_wait};
    struct gpu_plan p;
    struct st_error err;
    CHECK(gpu_plan_build(&p, s, 3, 3 << 20, -1, &gate, &err) == 0);
    check_cover(&p, s, 3, 3 << 20);
    CHECK_EQ_U64(p.bytes[GPU_SRC_UPSTREAM], 3 * SEG + 2 * SEG + 1);
    CHECK_EQ_U64(p.bytes[GPU_SRC_PAGE_CACHE], 5 * SEG + 3 * SEG);
    /* shard 0's upstream runs: [SEG, 3 SEG) cut at 3 MiB, then [5 SEG, 6 SEG) */
    const struct gpu_chunk *c = p.chunks + p.n_src[GPU_SRC_PAGE_CACHE];
    int seen = 0;
    for (size_t k = 0; k < p.n_src[GPU_SRC_UPSTREAM]; k++) {
        if (c[k].shard != 0)
            continue;
        static const uint64_t offs[] = {SEG, SEG + (3 << 20), 5 * SEG};
        static const uint64_t lens[] = {3 << 20, SEG - (1 << 20), SEG};
        CHECK(seen < 3 && c[k].off == offs[seen] && c[k].len == lens[seen]);
        seen++;
    }
    CHECK(seen == 3);
    gpu_plan_free(&p);
    /* forced: the gate is not asked */
    CHECK(gpu_plan_build(&p, s, 3, 3 << 20, GPU_SRC_DISK, &gate, &err) == 0);
    CHECK_EQ_U64(p.n_src[GPU_SRC_DISK], p.n_chunks);
    gpu_plan_free(&p);
}

TEST(shards_forced_and_empty)
{
    size_t sizes[] = {0, 1, 4096, 3 * SEG + 5, 100};
    struct gpu_plan_shard s[5];
    for (int i = 0; i < 5; i++)
        s[i] = (struct gpu_plan_shard){.data_start = 8 + (uint64_t)i * 13, .size = sizes[i]};
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
}

int main(void)
{
    RUN(every_chunk_starts_on_the_page_cache);
    RUN(gated_segments_go_upstream);
    RUN(shards_forced_and_empty);
    return TEST_SUMMARY();
}
