/* shared_doc: a rendered document (a model's description or merged header)
 * shared by reference between the model that caches it and every answer
 * that sends it. It is immutable once made and freed by its last
 * shared_doc_unref, so a connection that reads slowly holds a reference,
 * never a copy, and a newer rendering can replace it in the cache at any
 * time.
 *
 * Its bytes are one text, or three segments: a head and a tail of its own
 * around the middle of another shared_doc that it holds a reference to. A
 * model's description is made that way while its content hashes come in:
 * the files and the hash progress change, the tensors (the bulk of it) do
 * not, so each new state costs its head and tail, not another copy of the
 * tensors.
 *
 * A view is a head and a tail of its own around any number of ranges of
 * another document (a Hub listing's entries: a tree of a directory, the
 * paths-info of a few paths), so an answer that is a selection of a large
 * document costs a few bytes per range, never a copy of the entries. */
#ifndef TENSORD_SHARED_DOC_H
#define TENSORD_SHARED_DOC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "body.h"

struct shared_doc_seg {
    const char *p;
    size_t n;
};

struct shared_doc {
    atomic_uint refs;
    size_t len;                  /* bytes in all segments */
    uint64_t hash;               /* FNV-1a of the bytes (HASH_FNV_SEED): a model document's ETag */
    uint64_t key;                /* what it was made from (a description: the hashes it shows) */
    uint64_t made_ns;            /* when it was made (monotonic) */
    unsigned n_segs;             /* 1 or 3; a view's: its ranges and two */
    struct shared_doc_seg seg[3];
    struct shared_doc_seg *segs; /* the segments in order: seg, or a view's own array */
    struct shared_doc *middle;   /* the document seg[1] (a view's ranges) lies in (held), or NULL */
    char *own;                   /* the text this document owns */
    char *gzip;                  /* its bytes as one gzip member (shared_doc_compress), or
                                  * NULL; owned, set before the document is shared */
    size_t gzip_len;
    void *index;                 /* what its maker keeps with it (a listing's offsets), or NULL */
    void (*index_free)(void *index); /* frees index with the document */
};

/* Bytes [off, off + len) of a document's one text. */
struct shared_doc_range {
    size_t off, len;
};

/* A document holding text[0..len) (taken over: freed with it), with one
 * reference. Never NULL. */
struct shared_doc *shared_doc_new(char *text, size_t len, uint64_t key);
/* A document of head[0..head_len), all of middle's bytes and tail[0..tail_len)
 * (head and tail copied; middle referenced), with one reference. NULL when
 * memory ran out. */
struct shared_doc *shared_doc_join(const char *head, size_t head_len, struct shared_doc *middle,
                                   const char *tail, size_t tail_len, uint64_t key);
/* Makes d's gzip form (core/body/encoding.h, ENCODING_LEVEL_KEPT) when d is at
 * least ENCODING_MIN_BYTES long, so that every answer that sends it
 * compressed shares one compression. Call before d is shared (it writes
 * d->gzip unlocked). Out of memory leaves d without one. */
void shared_doc_compress(struct shared_doc *d);
/* A view: head[0..head_len), the n ranges of base's one text, then
 * tail[0..tail_len) (head and tail copied, base referenced), with one
 * reference. Its hash is `hash`, not computed: the maker names the
 * selection (a view of a commit-addressed document is a function of what
 * was selected). NULL when memory ran out. */
struct shared_doc *shared_doc_view(const char *head, size_t head_len, struct shared_doc *base,
                                   const struct shared_doc_range *ranges, size_t n,
                                   const char *tail, size_t tail_len, uint64_t hash);
/* Another reference to d (may be NULL). */
struct shared_doc *shared_doc_ref(struct shared_doc *d);
/* Drops a reference (d may be NULL); the last one frees d. Any thread. */
void shared_doc_unref(struct shared_doc *d);

/* A body (core/body/body.h) over a shared document: ctx is the document, which
 * must outlive the body (hold a reference). Its pieces of memory are given
 * (body_source.mem) when at most three hold the bytes asked for. */
extern const struct body_source shared_doc_source;

#endif
