/* strmap: linear-probing open addressing over a power-of-two table kept at
 * most half full, so a lookup touches a short run of slots. The full 64-bit
 * hash is stored per slot: probes compare it before touching the key bytes,
 * and growing never rehashes a key. */
#include "strmap.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct strmap_slot {
    const char *key;  /* NULL marks an empty slot */
    size_t len;
    uint64_t hash;
    void *value;
};

struct strmap {
    size_t cap;       /* power of two */
    size_t count;
    uint64_t seed;    /* random per map: names in a model file cannot be chosen to collide */
    struct strmap_slot *slots;
};

#define STRMAP_MIN_CAP 8

/* FNV-1a's low bits mix poorly for short keys that differ in their last
 * byte; a finalizer spreads every input bit over the bits used as index.
 * The seed is secret, so which names share a slot cannot be known offline:
 * a hostile file cannot turn 500,000 lookups into a quadratic probe. */
static uint64_t slot_hash(const struct strmap *m, const char *key, size_t len)
{
    uint64_t h = hash_fnv1a(key, len, m->seed);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static size_t cap_for(size_t expected)
{
    size_t cap = STRMAP_MIN_CAP;
    while (cap / 2 < expected)
        cap *= 2;
    return cap;
}

struct strmap *strmap_new(size_t expected)
{
    struct strmap *m = xmalloc(sizeof(*m));
    m->cap = cap_for(expected);
    m->count = 0;
    m->seed = hash_seed(m);
    m->slots = xcalloc(m->cap, sizeof(*m->slots));
    return m;
}

struct strmap *strmap_try_new(size_t expected)
{
    if (expected > SIZE_MAX / 4 / sizeof(struct strmap_slot))
        return NULL;
    struct strmap *m = malloc(sizeof(*m));
    if (!m)
        return NULL;
    m->cap = cap_for(expected);
    m->count = 0;
    m->seed = hash_seed(m);
    m->slots = calloc(m->cap, sizeof(*m->slots));
    if (!m->slots) {
        free(m);
        return NULL;
    }
    return m;
}

static void insert_slot(struct strmap_slot *slots, size_t cap, const struct strmap_slot *s)
{
    size_t mask = cap - 1;
    for (size_t i = (size_t)s->hash & mask;; i = (i + 1) & mask) {
        if (!slots[i].key) {
            slots[i] = *s;
            return;
        }
    }
}

/* Doubles the table; -1 (the map unchanged) when that cannot be allocated. */
static int grow(struct strmap *m)
{
    size_t ncap = m->cap * 2;
    struct strmap_slot *ns = ncap > m->cap ? calloc(ncap, sizeof(*ns)) : NULL;
    if (!ns)
        return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key)
            insert_slot(ns, ncap, &m->slots[i]);
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

static const struct strmap_slot *find(const struct strmap *m, const char *key, size_t len,
                                      uint64_t h)
{
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        const struct strmap_slot *s = &m->slots[i];
        if (!s->key)
            return NULL;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0)
            return s;
    }
}

int strmap_try_put(struct strmap *m, const char *key, size_t len, void *value)
{
    /* A NULL key would mark its slot empty; the empty key is "" instead. */
    if (!key)
        key = "";
    uint64_t h = slot_hash(m, key, len);
    if (find(m, key, len, h))
        return -EEXIST;
    if ((m->count + 1) * 2 > m->cap && grow(m) != 0)
        return -ENOMEM;
    struct strmap_slot s = { key, len, h, value };
    insert_slot(m->slots, m->cap, &s);
    m->count++;
    return 0;
}

int strmap_put(struct strmap *m, const char *key, size_t len, void *value)
{
    int rc = strmap_try_put(m, key, len, value);
    if (rc == -ENOMEM) {
        fprintf(stderr, "tensord: out of memory growing a %zu-entry map\n", m->count);
        abort();
    }
    return rc;
}

void *strmap_get(const struct strmap *m, const char *key, size_t len)
{
    if (!m)
        return NULL;
    if (!key)
        key = "";
    const struct strmap_slot *s = find(m, key, len, slot_hash(m, key, len));
    return s ? s->value : NULL;
}

void strmap_free(struct strmap *m)
{
    if (!m)
        return;
    free(m->slots);
    free(m);
}
