/* nameset: linear probing over a power-of-two table kept at most half
 * full; growing recomputes each name's hash from the region (the slots keep
 * only its top bits). */
#include "nameset.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define OFFSET_BITS 40
#define OFFSET_MASK ((1ULL << OFFSET_BITS) - 1)
#define MIN_SLOTS 16

static size_t slots_for(size_t expected)
{
    size_t cap = MIN_SLOTS;
    while (cap / 2 < expected)
        cap *= 2;
    return cap;
}

int nameset_init(struct nameset *ns, size_t expected, const char *base)
{
    memset(ns, 0, sizeof(*ns));
    if (expected > SIZE_MAX / 4 / sizeof(*ns->slots))
        return -ENOMEM;
    size_t cap = slots_for(expected);
    ns->slots = calloc(cap, sizeof(*ns->slots));
    if (!ns->slots)
        return -ENOMEM;
    ns->mask = cap - 1;
    ns->base = base;
    ns->seed = hash_seed(ns);
    return 0;
}

void nameset_free(struct nameset *ns)
{
    free(ns->slots);
    ns->slots = NULL;
    ns->mask = ns->count = 0;
}

uint64_t nameset_hash(const struct nameset *ns, const char *s, size_t n)
{
    uint64_t h = ns->seed ^ (n * 0x9E3779B97F4A7C15ULL), w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

static void put_slot(uint64_t *slots, size_t mask, uint64_t h, uint64_t v)
{
    size_t i = (size_t)h & mask;
    while (slots[i])
        i = (i + 1) & mask;
    slots[i] = v;
}

static int grow(struct nameset *ns)
{
    size_t cap = (ns->mask + 1) * 2;
    uint64_t *slots = cap > ns->mask + 1 ? calloc(cap, sizeof(*slots)) : NULL;
    if (!slots)
        return -ENOMEM;
    for (size_t i = 0; i <= ns->mask; i++) {
        uint64_t v = ns->slots[i];
        if (!v)
            continue;
        const char *name = ns->base + (v & OFFSET_MASK) - 1;
        put_slot(slots, cap - 1, nameset_hash(ns, name, strlen(name)), v);
    }
    free(ns->slots);
    ns->slots = slots;
    ns->mask = cap - 1;
    return 0;
}

int nameset_add(struct nameset *ns, uint64_t h, const char *name, size_t len, const char **found)
{
    uint64_t tag = h & ~OFFSET_MASK;
    for (size_t i = (size_t)h & ns->mask;; i = (i + 1) & ns->mask) {
        uint64_t v = ns->slots[i];
        if (v == 0)
            break;
        const char *other = ns->base + (v & OFFSET_MASK) - 1;
        if ((v & ~OFFSET_MASK) == tag && memcmp(other, name, len) == 0 && other[len] == '\0') {
            if (found)
                *found = other;
            return -EEXIST;
        }
    }
    if ((ns->count + 1) * 2 > ns->mask + 1 && grow(ns) != 0)
        return -ENOMEM;
    put_slot(ns->slots, ns->mask, h, tag | (uint64_t)(name - ns->base + 1));
    ns->count++;
    return 0;
}
