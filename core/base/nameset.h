/* nameset: a set of names that live in one region of the caller's (a
 * parser's arena), for finding duplicates and sharing equal strings among
 * millions of names at 8 bytes a slot.
 *
 * A slot holds the top bits of the name's hash and its offset in the region
 * plus one (0 is a free slot); a strmap slot takes 32 bytes, which for
 * 500,000 names was a quarter of a header parse's memory and most of its
 * cache misses. The hash is seeded per set, so no file can be made of names
 * that all land in one run of slots. Every allocation is fallible: the
 * number of names is the file's to choose. */
#ifndef TENSORD_NAMESET_H
#define TENSORD_NAMESET_H

#include <stddef.h>
#include <stdint.h>

#define NAMESET_MAX_OFFSET ((1ULL << 40) - 2) /* names must start within 1 TiB of base */

struct nameset {
    uint64_t *slots;
    size_t mask;          /* slots - 1, a power of two minus one */
    size_t count;
    uint64_t seed;
    const char *base;     /* the region names are in; must not move while the set lives */
};

/* An empty set with room for `expected` names before it grows. Returns 0 or
 * -ENOMEM. */
int nameset_init(struct nameset *ns, size_t expected, const char *base);
void nameset_free(struct nameset *ns);

uint64_t nameset_hash(const struct nameset *ns, const char *name, size_t len);

/* The slot a name of hash h starts its probe at: prefetch it early when
 * the table is bigger than the cache. */
static inline void nameset_prefetch(const struct nameset *ns, uint64_t h)
{
    __builtin_prefetch(&ns->slots[h & ns->mask], 1);
}

/* Adds name[0..len), NUL-terminated inside the region, with h from
 * nameset_hash. Returns 0 when added; -EEXIST when an equal name is already
 * there (*found, when not NULL, gets it); -ENOMEM when the table had to
 * grow and could not (the set is unchanged). Names must hold no NUL byte
 * (growing finds their lengths with strlen). */
int nameset_add(struct nameset *ns, uint64_t h, const char *name, size_t len, const char **found);

#endif
