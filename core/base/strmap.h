/* strmap: open-addressing hash map from byte strings to pointers. Built once
 * (snapshot construction), then read concurrently without locks. */
#ifndef TENSORD_STRMAP_H
#define TENSORD_STRMAP_H

#include <stddef.h>

struct strmap;

/* Returns a new empty map sized for about `expected` entries. */
struct strmap *strmap_new(size_t expected);
/* Keys are not copied: they must outlive the map. Returns 0, or -EEXIST when
 * the key is already present (the map is unchanged). */
int strmap_put(struct strmap *m, const char *key, size_t len, void *value);

/* For maps whose size a file controls (a tensor count): allocation failures
 * are answered, never aborted on. strmap_try_new returns NULL when out of
 * memory; up to `expected` entries then go in without allocating.
 * strmap_try_put returns 0, -EEXIST when the key is present, or -ENOMEM
 * when the table had to grow and could not (the map is unchanged). */
struct strmap *strmap_try_new(size_t expected);
int strmap_try_put(struct strmap *m, const char *key, size_t len, void *value);
/* Returns the value or NULL. */
void *strmap_get(const struct strmap *m, const char *key, size_t len);
void strmap_free(struct strmap *m);

#endif
