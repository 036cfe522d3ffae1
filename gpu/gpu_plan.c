/* gpu_plan: where each byte of a preload comes from (see gpu_plan.h). */
#include "gpu_plan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MINCORE_WINDOW (256u << 20) /* bytes of mapping per mincore() call */

/* A growable list of chunks; fallible (a plan's size follows the files'). */
struct chunk_list {
    struct gpu_chunk *v;
    size_t n, cap;
};

static int list_push(struct chunk_list *l, const struct gpu_chunk *c)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        struct gpu_chunk *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *c;
    return 0;
}

int gpu_plan_mincore_trusted(int fd)
{
    struct stat sb;
    char path[64];
    if (fstat(fd, &sb) < 0)
        return 0;
    if (geteuid() == 0 || sb.st_uid == geteuid())
        return 1;
    /* The kernel asks whether the caller may write the file (mm/mincore.c);
     * /proc/self/fd/N leads access() to the very inode. */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    return faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) == 0;
}

/* Residency of the segments of one shard, one byte per segment (its
 * source: GPU_SRC_PAGE_CACHE when every page of it is cached, else
 * GPU_SRC_DISK), into seg[0..nseg). Returns 0, or -1 when mincore cannot
 * be used (the caller guesses). */
static int shard_residency(const struct gpu_plan_shard *s, unsigned char *seg, size_t nseg)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uint64_t map_off = s->data_start / pg * pg;
    uint64_t map_len = s->data_start + s->size - map_off;
    if (map_len > SIZE_MAX)
        return -1;
    /* Never touched: mapping the file only names its pages for mincore. */
    unsigned char *map = mmap(NULL, (size_t)map_len, PROT_READ, MAP_SHARED, s->fd, (off_t)map_off);
    if (map == MAP_FAILED)
        return -1;
    unsigned char *vec = malloc(MINCORE_WINDOW / pg);
    int rc = vec ? 0 : -1;
    memset(seg, GPU_SRC_PAGE_CACHE, nseg);
    for (uint64_t w = 0; rc == 0 && w < map_len; w += MINCORE_WINDOW) {
        size_t len = (size_t)(map_len - w < MINCORE_WINDOW ? map_len - w : MINCORE_WINDOW);
        if (mincore(map + w, len, vec) < 0) {
            rc = -1;
            break;
        }
        for (size_t i = 0; i < (len + pg - 1) / pg; i++) {
            if (vec[i] & 1)
                continue;
            /* Page i of the window covers file bytes [page, page + pg). */
            uint64_t fpage = map_off + w + (uint64_t)i * pg;
            uint64_t lo = fpage > s->data_start ? fpage - s->data_start : 0;
            uint64_t hi = fpage + pg - s->data_start;
            for (uint64_t k = lo / GPU_PLAN_SEGMENT; k < nseg && k * GPU_PLAN_SEGMENT < hi; k++)
                seg[k] = GPU_SRC_DISK;
        }
    }
    free(vec);
    munmap(map, (size_t)map_len);
    return rc;
}

/* Appends [from, to) of shard i, on src, cut in pieces of at most chunk. */
static int emit(struct chunk_list *l, uint32_t i, enum gpu_src src, uint64_t from, uint64_t to,
                uint64_t chunk)
{
    for (uint64_t off = from; off < to; off += chunk) {
        struct gpu_chunk c = {.shard = i, .src = src, .off = off,
                              .len = to - off < chunk ? to - off : chunk};
        if (list_push(l, &c) < 0)
            return -ENOMEM;
    }
    return 0;
}

/* Plans shard i into the lists. seg is NULL when every segment is on
 * src_all; else seg[k] is the source of segment k. */
static int plan_shard(struct chunk_list lists[GPU_SRC_COUNT], uint32_t i, uint64_t size,
                      const unsigned char *seg, enum gpu_src src_all, uint64_t chunk)
{
    uint64_t run = 0;
    enum gpu_src run_src = seg ? (enum gpu_src)seg[0] : src_all;
    for (uint64_t k = 1; seg && k * GPU_PLAN_SEGMENT < size; k++) {
        enum gpu_src s = (enum gpu_src)seg[k];
        if (s == run_src)
            continue;
        if (emit(&lists[run_src], i, run_src, run, k * GPU_PLAN_SEGMENT, chunk) < 0)
            return -ENOMEM;
        run = k * GPU_PLAN_SEGMENT;
        run_src = s;
    }
    return emit(&lists[run_src], i, run_src, run, size, chunk);
}

/* Reorders l (shard by shard, file order) to take the shards in turn:
 * chunk 0 of every shard, then chunk 1, ... Returns 0 or -ENOMEM. */
static int interleave(struct chunk_list *l, size_t n_shards)
{
    size_t *next = calloc(n_shards + 1, sizeof(*next)), *end = calloc(n_shards + 1, sizeof(*end));
    struct gpu_chunk *v = malloc((l->n ? l->n : 1) * sizeof(*v));
    if (!next || !end || !v) {
        free(next);
        free(end);
        free(v);
        return -ENOMEM;
    }
    for (size_t k = 0; k < l->n; k++)
        end[l->v[k].shard]++;
    for (size_t i = 0, at = 0; i < n_shards; i++) { /* [next[i], end[i]): shard i's chunks */
        next[i] = at;
        at += end[i];
        end[i] = at;
    }
    for (size_t out = 0; out < l->n;)
        for (size_t i = 0; i < n_shards; i++)
            if (next[i] < end[i])
                v[out++] = l->v[next[i]++];
    free(l->v);
    l->v = v;
    l->cap = l->n ? l->n : 1;
    free(next);
    free(end);
    return 0;
}

/* seg[0..nseg) of a gated shard: upstream where the gate lacks a
 * segment's bytes, else what residency found (or the page cache, the
 * guess, where it could not tell). */
static void gate_segments(const struct gpu_plan_shard *s, const struct gpu_gate *gate,
                          unsigned char *seg, size_t nseg, int known)
{
    for (size_t k = 0; k < nseg; k++) {
        uint64_t off = (uint64_t)k * GPU_PLAN_SEGMENT;
        uint64_t len = s->size - off < GPU_PLAN_SEGMENT ? s->size - off : GPU_PLAN_SEGMENT;
        if (!gate->present(gate->arg, s->gate_file, s->data_start + off, len))
            seg[k] = GPU_SRC_UPSTREAM;
        else if (!known)
            seg[k] = GPU_SRC_PAGE_CACHE;
    }
}

int gpu_plan_build(struct gpu_plan *p, const struct gpu_plan_shard *shards, size_t n,
                   uint64_t chunk, int force, const struct gpu_gate *gate, struct st_error *err)
{
    struct chunk_list lists[GPU_SRC_COUNT] = {{0}};
    unsigned char *seg = NULL;
    int rc = 0;
    memset(p, 0, sizeof(*p));
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct gpu_plan_shard *s = &shards[i];
        if (s->size == 0)
            continue;
        size_t nseg = (size_t)((s->size + GPU_PLAN_SEGMENT - 1) / GPU_PLAN_SEGMENT);
        const unsigned char *known = NULL;
        int gated = force < 0 && gate && s->gate_file;
        if ((force < 0 && gpu_plan_mincore_trusted(s->fd)) || gated) {
            unsigned char *grown = realloc(seg, nseg);
            if (!grown) {
                rc = -ENOMEM;
                break;
            }
            seg = grown;
        }
        if (force < 0 && gpu_plan_mincore_trusted(s->fd) && shard_residency(s, seg, nseg) == 0)
            known = seg;
        if (force < 0 && !known)
            p->n_guessed++;
        if (gated) {
            gate_segments(s, gate, seg, nseg, known != NULL);
            known = seg;
        }
        enum gpu_src all = force >= 0 ? (enum gpu_src)force : GPU_SRC_PAGE_CACHE;
        rc = plan_shard(lists, (uint32_t)i, s->size, known, all, chunk);
    }
    free(seg);
    if (rc == 0)
        rc = interleave(&lists[GPU_SRC_PAGE_CACHE], n);
    if (rc == 0)
        rc = interleave(&lists[GPU_SRC_UPSTREAM], n);
    size_t total = 0;
    for (int s = 0; s < GPU_SRC_COUNT; s++)
        total += lists[s].n;
    if (rc == 0 && total) {
        p->chunks = malloc(total * sizeof(*p->chunks));
        if (!p->chunks)
            rc = -ENOMEM;
    }
    for (int s = 0; s < GPU_SRC_COUNT; s++) {
        if (rc == 0 && lists[s].n) {
            memcpy(p->chunks + p->n_chunks, lists[s].v, lists[s].n * sizeof(*p->chunks));
            p->n_chunks += lists[s].n;
            p->n_src[s] = lists[s].n;
            for (size_t k = 0; k < lists[s].n; k++)
                p->bytes[s] += lists[s].v[k].len;
        }
        free(lists[s].v);
    }
    if (rc < 0) {
        gpu_plan_free(p);
        return st_error_fail(err, ST_ERR_NO_MEMORY, "no memory for the preload's plan");
    }
    return 0;
}

void gpu_plan_free(struct gpu_plan *p)
{
    free(p->chunks);
    memset(p, 0, sizeof(*p));
}
