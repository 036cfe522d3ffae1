/* gate: see gate.h. */
#include "gate.h"

#include <stdlib.h>

#include "mirror.h"
#include "util.h"

/* Two spans of one file closer than this are asked for as one range: a
 * gap shorter than the smallest block (mirror_block_bytes is at least
 * 64 KiB) holds no whole block, so no block is asked for in vain. */
#define GATE_JOIN (64u << 10)
/* Spans one gate_want walks at most: a slice of a billion one-byte runs
 * is asked for a window at a time as it is read (work in proportion to
 * the bytes sent), not all at once on the HTTP thread. */
#define GATE_WANT_SPANS 65536u

struct gate_file {
    int fd;                     /* as the body reads it */
    struct mirror_file *f;      /* a reference of the gate's */
    enum mirror_how how;
    uint64_t lo, hi;            /* bytes found readable by this gate_avail (asked again by the
                                 * next: a download that fails discards what it had) */
};

struct gate {
    struct mirror *m;
    size_t n;
    struct gate_file *files;
    struct gate_file *wait_file; /* where gate_avail stopped */
    uint64_t wait_off;
    struct mirror_waiter waiter;
};

struct gate *gate_new(struct mirror *m, const struct mirror_read *rd, size_t n, int body_fd,
                      int body_dup)
{
    struct gate *g = NULL;
    for (size_t i = 0; i < n; i++) {
        if (mirror_file_complete(m, rd[i].f))
            continue;
        if (!g) {
            g = xcalloc(1, sizeof(*g));
            g->m = m;
            g->files = xcalloc(n, sizeof(*g->files));
        }
        mirror_ref(m, rd[i].f);
        g->files[g->n++] = (struct gate_file){.fd = rd[i].fd == body_fd ? body_dup : rd[i].fd,
                                              .f = rd[i].f,
                                              .how = rd[i].parts ? MIRROR_PARTS : MIRROR_WHOLE};
    }
    return g;
}

void gate_free(struct gate *g)
{
    if (!g)
        return;
    mirror_unwait(g->m, &g->waiter); /* never called back once freed */
    for (size_t i = 0; i < g->n; i++)
        mirror_unref(g->m, g->files[i].f);
    free(g->files);
    free(g);
}

static struct gate_file *file_of(struct gate *g, int fd)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->files[i].fd == fd)
            return &g->files[i];
    return NULL;
}

/* ---- wanting ------------------------------------------------------------------ */

struct want_walk {
    struct gate *g;
    struct gate_file *cur;      /* the range being gathered: [lo, hi) of cur */
    uint64_t lo, hi;
    uint64_t hits, asked;
    unsigned spans;             /* walked */
    uint64_t reached;           /* the body offset past the last span walked */
};

static void want_flush(struct want_walk *w)
{
    if (w->cur && w->hi > w->lo) {
        w->hits += mirror_want(w->g->m, w->cur->f, w->lo, w->hi - w->lo, w->cur->how);
        w->asked += w->hi - w->lo;
    }
    w->cur = NULL;
}

static int want_span(void *arg, int fd, uint64_t file_off, uint64_t n, uint64_t body_off)
{
    struct want_walk *w = arg;
    if (w->spans++ == GATE_WANT_SPANS)
        return 1; /* the rest another time */
    w->reached = body_off + n;
    struct gate_file *gf = file_of(w->g, fd);
    if (!gf) { /* complete (or no mirror's): a hit */
        w->hits += n;
        w->asked += n;
        return 0;
    }
    if (gf == w->cur && file_off >= w->lo && file_off <= w->hi + GATE_JOIN) {
        w->hi = file_off + n > w->hi ? file_off + n : w->hi;
        return 0;
    }
    want_flush(w);
    w->cur = gf;
    w->lo = file_off;
    w->hi = file_off + n;
    return 0;
}

uint64_t gate_want(struct mirror *m, struct gate *g, const struct body *b, uint64_t off,
                   uint64_t len)
{
    if (!g) { /* every file complete: all hits, nothing to ask */
        mirror_count_asked(m, len, len);
        return off + len;
    }
    struct want_walk w = {.g = g};
    int stopped = body_each_span(b, off, len, want_span, &w);
    want_flush(&w);
    mirror_count_asked(m, w.asked, w.hits);
    return stopped ? w.reached : off + len;
}

/* ---- reading -------------------------------------------------------------------- */

struct avail_walk {
    struct gate *g;
    uint64_t stop;              /* the body offset reading stops at */
    int stopped, failed;
};

static int avail_span(void *arg, int fd, uint64_t file_off, uint64_t n, uint64_t body_off)
{
    struct avail_walk *w = arg;
    struct gate_file *gf = file_of(w->g, fd);
    if (!gf || (file_off >= gf->lo && file_off + n <= gf->hi))
        return 0;
    uint64_t size = mirror_file_size(gf->f);
    uint64_t ahead = size - file_off < GATE_AHEAD ? size - file_off : GATE_AHEAD;
    int64_t r = mirror_readable(w->g->m, gf->f, file_off, ahead > n ? ahead : n, gf->how, NULL);
    w->stop = body_off;
    if (r < 0) {
        w->failed = 1;
        return 1;
    }
    if (r > 0) {
        gf->lo = file_off;
        gf->hi = file_off + (uint64_t)r;
    }
    if ((uint64_t)r >= n)
        return 0;
    w->stop = body_off + (uint64_t)r;
    w->stopped = 1;
    w->g->wait_file = gf;
    w->g->wait_off = file_off + (uint64_t)r;
    return 1;
}

int64_t gate_avail(struct gate *g, const struct body *b, uint64_t off, uint64_t n)
{
    if (!g)
        return (int64_t)n;
    struct avail_walk w = {.g = g};
    g->wait_file = NULL;
    for (size_t i = 0; i < g->n; i++)
        g->files[i].lo = g->files[i].hi = 0;
    body_each_span(b, off, n, avail_span, &w);
    if (w.failed && w.stop == off)
        return -1;
    if (!w.stopped && !w.failed)
        return (int64_t)n;
    return (int64_t)(w.stop - off); /* the bytes before a failed span go out first */
}

int gate_wait(struct gate *g, void (*cb)(void *arg), void *arg)
{
    struct gate_file *gf = g->wait_file;
    if (!gf)
        return 1;
    /* The blocks were asked for ahead of the reader (gate_want); this one
     * again in case its download failed and was retried since, and
     * mirror_wait moves the fetchers to it. */
    mirror_want(g->m, gf->f, g->wait_off, 1, gf->how);
    g->waiter.cb = cb;
    g->waiter.how = gf->how;
    g->waiter.arg = arg;
    return mirror_wait(g->m, gf->f, g->wait_off, &g->waiter);
}
