/* shared_doc: see shared_doc.h. */
#include "shared_doc.h"

#include <stdlib.h>
#include <string.h>

#include "encoding.h"
#include "util.h"

struct shared_doc *shared_doc_new(char *text, size_t len, uint64_t key)
{
    struct shared_doc *d = xcalloc(1, sizeof(*d));
    atomic_init(&d->refs, 1);
    d->own = text;
    d->len = len;
    d->n_segs = 1;
    d->seg[0] = (struct shared_doc_seg){text, len};
    d->segs = d->seg;
    d->hash = hash_fnv1a(text, len, HASH_FNV_SEED);
    d->key = key;
    d->made_ns = time_mono_ns();
    return d;
}

struct shared_doc *shared_doc_join(const char *head, size_t head_len, struct shared_doc *middle,
                                   const char *tail, size_t tail_len, uint64_t key)
{
    /* A view of all of middle's one text. FNV-1a runs byte after byte: the
     * segments' hash is the whole text's. */
    struct shared_doc_range all = {0, middle->len};
    uint64_t h = hash_fnv1a(head, head_len, HASH_FNV_SEED);
    h = hash_fnv1a(middle->seg[0].p, middle->len, h);
    h = hash_fnv1a(tail, tail_len, h);
    struct shared_doc *d = shared_doc_view(head, head_len, middle, &all, 1, tail, tail_len, h);
    if (d)
        d->key = key;
    return d;
}

void shared_doc_compress(struct shared_doc *d)
{
    if (d->len < ENCODING_MIN_BYTES || d->gzip)
        return;
    struct encoding_piece *pieces = calloc(d->n_segs, sizeof(*pieces));
    if (!pieces)
        return;
    for (unsigned i = 0; i < d->n_segs; i++)
        pieces[i] = (struct encoding_piece){d->segs[i].p, d->segs[i].n};
    if (encoding_gzip(pieces, d->n_segs, ENCODING_LEVEL_KEPT, &d->gzip, &d->gzip_len) != 0)
        d->gzip = NULL;
    free(pieces);
}

struct shared_doc *shared_doc_view(const char *head, size_t head_len, struct shared_doc *base,
                                   const struct shared_doc_range *ranges, size_t n,
                                   const char *tail, size_t tail_len, uint64_t hash)
{
    struct shared_doc *d = calloc(1, sizeof(*d));
    char *own = malloc(head_len + tail_len + 1);
    struct shared_doc_seg *segs = n + 2 <= 3 ? NULL : calloc(n + 2, sizeof(*segs));
    if (!d || !own || (n + 2 > 3 && !segs)) {
        free(d);
        free(own);
        free(segs);
        return NULL;
    }
    d->segs = segs ? segs : d->seg;
    memcpy(own, head, head_len);
    memcpy(own + head_len, tail, tail_len);
    atomic_init(&d->refs, 1);
    d->own = own;
    d->middle = shared_doc_ref(base);
    d->segs[0] = (struct shared_doc_seg){own, head_len};
    d->len = head_len + tail_len;
    for (size_t i = 0; i < n; i++) {
        d->segs[i + 1] = (struct shared_doc_seg){base->seg[0].p + ranges[i].off, ranges[i].len};
        d->len += ranges[i].len;
    }
    d->segs[n + 1] = (struct shared_doc_seg){own + head_len, tail_len};
    d->n_segs = (unsigned)(n + 2);
    d->hash = hash;
    d->made_ns = time_mono_ns();
    return d;
}

struct shared_doc *shared_doc_ref(struct shared_doc *d)
{
    if (d)
        atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed);
    return d;
}

void shared_doc_unref(struct shared_doc *d)
{
    if (!d || atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) != 1)
        return;
    shared_doc_unref(d->middle);
    if (d->index_free)
        d->index_free(d->index);
    if (d->segs != d->seg)
        free(d->segs);
    free(d->own);
    free(d->gzip);
    free(d);
}

/* The pieces of memory holding bytes [off, off + len) of document ctx in
 * order, into p and n (3 each); returns how many. */
static unsigned source_mem(void *ctx, uint64_t off, uint64_t len, const void *p[3], size_t n[3])
{
    const struct shared_doc *d = ctx;
    unsigned k = 0;
    for (unsigned i = 0; i < d->n_segs && len; i++) {
        const struct shared_doc_seg *s = &d->segs[i];
        if (off >= s->n) {
            off -= s->n;
            continue;
        }
        if (k == 3)
            return 0; /* more pieces than a caller takes: copied instead (source_read) */
        size_t take = s->n - off < len ? (size_t)(s->n - off) : (size_t)len;
        p[k] = s->p + off;
        n[k++] = take;
        len -= take;
        off = 0;
    }
    return k;
}

/* Copies bytes [off, off + len) (inside the document) into buf. */
static int source_read(void *ctx, uint64_t off, void *buf, size_t len)
{
    const struct shared_doc *d = ctx;
    char *out = buf;
    for (unsigned i = 0; i < d->n_segs && len; i++) {
        const struct shared_doc_seg *s = &d->segs[i];
        if (off >= s->n) {
            off -= s->n;
            continue;
        }
        size_t take = s->n - off < len ? (size_t)(s->n - off) : (size_t)len;
        memcpy(out, s->p + off, take);
        out += take;
        len -= take;
        off = 0;
    }
    return 0;
}

const struct body_source shared_doc_source = {
    .read = source_read, .mem = source_mem,
};
