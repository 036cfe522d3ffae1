/* hashstore: an open-addressing table of identities under a read-write
 * lock.
 *
 * Entries are only ever appended or replaced in place, except by the end of
 * a save, which drops the ones it did not keep and rebuilds the index.
 * Saves are serialized, so the slot numbers a plan takes under the read lock
 * are still the same slots when its end takes the write lock. */
#include "hashstore.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define EMPTY UINT32_MAX

struct slot {
    struct hash_entry e;
    uint64_t used; /* last epoch that used it: saves keep the recent ones */
};

struct hashstore {
    pthread_rwlock_t lock;
    pthread_mutex_t save_lock; /* one save at a time */
    struct slot *slots;
    size_t n, cap;
    uint32_t *index; /* slot numbers, EMPTY where free; index_cap is a power of two */
    size_t index_cap;
    uint64_t seed;
    uint64_t version, saved_version; /* puts so far / at the last save */
};

void hash_id_from_stat(const struct fileio_stat *st, struct hash_id *id)
{
    *id = (struct hash_id){.dev = st->dev, .ino = st->ino, .size = st->size,
                           .mtime_ns = st->mtime_ns, .ctime_ns = st->ctime_ns};
}

void hash_id_from_sys_stat(const struct stat *sb, struct hash_id *id)
{
    struct fileio_stat st;
    fileio_stat_from(sb, &st);
    hash_id_from_stat(&st, id);
}

int hash_id_equal(const struct hash_id *a, const struct hash_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

static int cmp_id(const struct hash_id *a, const struct hash_id *b)
{
    const uint64_t x[5] = {a->dev, a->ino, a->size, (uint64_t)a->mtime_ns, (uint64_t)a->ctime_ns};
    const uint64_t y[5] = {b->dev, b->ino, b->size, (uint64_t)b->mtime_ns, (uint64_t)b->ctime_ns};
    for (int i = 0; i < 5; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

static size_t id_hash(const struct hashstore *s, const struct hash_id *id)
{
    uint64_t f[5] = {id->dev, id->ino, id->size, (uint64_t)id->mtime_ns, (uint64_t)id->ctime_ns};
    return (size_t)hash_fnv1a(f, sizeof(f), s->seed);
}

struct hashstore *hashstore_new(void)
{
    struct hashstore *s = xcalloc(1, sizeof(*s));
    pthread_rwlock_init(&s->lock, NULL);
    pthread_mutex_init(&s->save_lock, NULL);
    s->seed = hash_seed(s);
    return s;
}

void hashstore_free(struct hashstore *s)
{
    if (!s)
        return;
    pthread_rwlock_destroy(&s->lock);
    pthread_mutex_destroy(&s->save_lock);
    free(s->slots);
    free(s->index);
    free(s);
}

/* ---- the table (callers hold the lock) ---------------------------------- */

static size_t do_find(const struct hashstore *s, const struct hash_id *id)
{
    if (!s->index_cap)
        return SIZE_MAX;
    for (size_t i = id_hash(s, id) & (s->index_cap - 1);; i = (i + 1) & (s->index_cap - 1)) {
        uint32_t k = s->index[i];
        if (k == EMPTY)
            return SIZE_MAX;
        if (hash_id_equal(&s->slots[k].e.id, id))
            return k;
    }
}

/* Links slot k into the index, which has room. */
static void do_link(struct hashstore *s, size_t k)
{
    size_t i = id_hash(s, &s->slots[k].e.id) & (s->index_cap - 1);
    while (s->index[i] != EMPTY)
        i = (i + 1) & (s->index_cap - 1);
    s->index[i] = (uint32_t)k;
}

/* Rebuilds the index at cap slots (in place when the size stays); -ENOMEM
 * (the old one kept) when a bigger one cannot be had: the state file sizes
 * the store, so this never aborts. */
static int do_reindex(struct hashstore *s, size_t cap)
{
    uint32_t *index = s->index && cap == s->index_cap ? s->index : malloc(cap * sizeof(*index));
    if (!index)
        return -ENOMEM;
    if (index != s->index)
        free(s->index);
    s->index_cap = cap;
    s->index = index;
    memset(s->index, 0xff, cap * sizeof(*s->index));
    for (size_t k = 0; k < s->n; k++)
        do_link(s, k);
    return 0;
}

/* Returns 0, -ENOSPC when the identity is new and the store is full, or
 * -ENOMEM (nothing changed) when its tables could not grow. */
static int do_put(struct hashstore *s, const struct hash_entry *e, uint64_t used)
{
    size_t k = do_find(s, &e->id);
    if (k == SIZE_MAX) {
        if (s->n >= HASHSTORE_MAX_ENTRIES)
            return -ENOSPC;
        if (s->n == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 256;
            struct slot *slots = realloc(s->slots, cap * sizeof(*slots));
            if (!slots)
                return -ENOMEM;
            s->slots = slots;
            s->cap = cap;
        }
        /* The index grows before the entry goes in, so a failure leaves the
         * store as it was; the new entry then takes the next free index slot,
         * where a rebuild after it would have put it too. */
        if (2 * (s->n + 1) > s->index_cap &&
            do_reindex(s, s->index_cap ? s->index_cap * 2 : 512) != 0)
            return -ENOMEM;
        k = s->n++;
        s->slots[k].e.id = e->id;
        do_link(s, k);
    }
    s->slots[k].e = *e;
    s->slots[k].used = used;
    s->version++;
    return 0;
}

int hashstore_lookup(struct hashstore *s, const struct hash_id *id, struct hash_entry *out)
{
    pthread_rwlock_rdlock(&s->lock);
    size_t k = do_find(s, id);
    if (k != SIZE_MAX && out)
        *out = s->slots[k].e;
    pthread_rwlock_unlock(&s->lock);
    return k != SIZE_MAX;
}

int hashstore_touch(struct hashstore *s, const struct hash_id *id, uint64_t epoch,
                    struct hash_entry *out)
{
    pthread_rwlock_wrlock(&s->lock);
    size_t k = do_find(s, id);
    if (k != SIZE_MAX) {
        s->slots[k].used = epoch;
        if (out)
            *out = s->slots[k].e;
    }
    pthread_rwlock_unlock(&s->lock);
    return k != SIZE_MAX;
}

int hashstore_put(struct hashstore *s, const struct hash_entry *e, uint64_t epoch)
{
    pthread_rwlock_wrlock(&s->lock);
    int rc = do_put(s, e, epoch);
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

size_t hashstore_count(struct hashstore *s)
{
    pthread_rwlock_rdlock(&s->lock);
    size_t n = s->n;
    pthread_rwlock_unlock(&s->lock);
    return n;
}

void hashstore_loaded(struct hashstore *s, int ok)
{
    pthread_rwlock_wrlock(&s->lock);
    if (!ok) {
        s->n = 0;
        if (s->index)
            memset(s->index, 0xff, s->index_cap * sizeof(*s->index));
    }
    s->saved_version = s->version;
    pthread_rwlock_unlock(&s->lock);
}

/* ---- saving ------------------------------------------------------------- */

struct pick {
    size_t slot;
    uint64_t used;
};

struct hashstore_plan {
    uint64_t version;          /* of the store when the plan was made */
    struct hash_entry *kept;
    size_t n_kept;
    struct pick *drop;         /* slots not kept, with the epoch they had then */
    size_t n_drop;
};

static int cmp_entry(const void *a, const void *b)
{
    return cmp_id(&((const struct hash_entry *)a)->id, &((const struct hash_entry *)b)->id);
}

static int cmp_pick_recent(const void *a, const void *b)
{
    uint64_t x = ((const struct pick *)a)->used, y = ((const struct pick *)b)->used;
    return x > y ? -1 : x < y;
}

struct hashstore_plan *hashstore_plan_save(struct hashstore *s, uint64_t epoch,
                                           const struct hash_entry **kept, size_t *n_kept)
{
    pthread_mutex_lock(&s->save_lock);
    pthread_rwlock_rdlock(&s->lock);
    if (s->version == s->saved_version) {
        pthread_rwlock_unlock(&s->lock);
        pthread_mutex_unlock(&s->save_lock);
        return NULL;
    }
    struct hashstore_plan *p = xcalloc(1, sizeof(*p));
    size_t n_used = 0, n_others = 0, cap = s->n ? s->n : 1;
    p->version = s->version;
    p->kept = xmalloc(cap * sizeof(*p->kept));
    p->drop = xmalloc(cap * sizeof(*p->drop));
    for (size_t k = 0; k < s->n; k++) {
        if (s->slots[k].used == epoch)
            p->kept[n_used++] = s->slots[k].e;
        else
            p->drop[n_others++] = (struct pick){k, s->slots[k].used};
    }
    qsort(p->drop, n_others, sizeof(*p->drop), cmp_pick_recent);
    size_t spare = n_used > HASHSTORE_SPARE_MIN ? n_used : HASHSTORE_SPARE_MIN;
    if (spare > n_others)
        spare = n_others;
    for (size_t i = 0; i < spare; i++)
        p->kept[n_used + i] = s->slots[p->drop[i].slot].e;
    pthread_rwlock_unlock(&s->lock);
    p->n_kept = n_used + spare;
    p->n_drop = n_others - spare;
    memmove(p->drop, p->drop + spare, p->n_drop * sizeof(*p->drop));
    qsort(p->kept, p->n_kept, sizeof(*p->kept), cmp_entry);
    *kept = p->kept;
    *n_kept = p->n_kept;
    return p; /* save_lock stays held until hashstore_end_save */
}

void hashstore_end_save(struct hashstore *s, struct hashstore_plan *p, int ok)
{
    if (!p)
        return;
    if (ok) {
        pthread_rwlock_wrlock(&s->lock);
        /* Without memory for the marks nothing is dropped (the next save
         * tries again): the state file sizes this, so it never aborts. */
        uint8_t *gone = p->n_drop ? calloc(s->n ? s->n : 1, 1) : NULL;
        if (gone) {
            for (size_t i = 0; i < p->n_drop; i++) /* unless used again since the plan */
                if (p->drop[i].slot < s->n)
                    gone[p->drop[i].slot] = s->slots[p->drop[i].slot].used == p->drop[i].used;
            size_t out = 0;
            for (size_t k = 0; k < s->n; k++)
                if (!gone[k])
                    s->slots[out++] = s->slots[k];
            s->n = out;
            free(gone);
            do_reindex(s, s->index_cap); /* same size: in place, cannot fail */
        }
        if (s->saved_version < p->version)
            s->saved_version = p->version;
        pthread_rwlock_unlock(&s->lock);
    }
    free(p->kept);
    free(p->drop);
    free(p);
    pthread_mutex_unlock(&s->save_lock);
}
