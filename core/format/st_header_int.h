/* st_header_int: st_header's private half, the entry reader. st_entries.c
 * reads the JSON text of a safetensors header into a struct st_header,
 * checking each entry (tensor or __metadata__) as it is read and writing it
 * straight into the header's one arena: no JSON tree is built.
 *
 * st_header.c calls it after its pre-pass, so the text is known to be UTF-8
 * with no NUL byte outside an escape, to start with '{' and to nest at most
 * ST_MAX_DEPTH deep; the pre-pass also counts what the arena must hold. The
 * offset walk (sizes, contiguity) is st_header's, over the result. */
#ifndef TENSORD_ST_HEADER_INT_H
#define TENSORD_ST_HEADER_INT_H

#include <stddef.h>

#include "st_error.h"
#include "st_header.h"

/* Bounds from the pre-pass (exact for a valid header), that size the arena. */
struct st_entries_room {
    size_t entries;  /* top-level keys: tensors and __metadata__ */
    size_t metadata; /* keys one level down: bounds __metadata__'s entries */
    size_t dims;     /* array elements two levels down: bounds all shapes' dimensions */
};

/* Reads json[0..len) into h: allocates h->arena and fills tensors (in file
 * order, not yet sorted, nelems 0), metadata and has_metadata. `file` is the
 * label messages start with. The first error is returned in the order the
 * rules were always checked: a JSON error anywhere (ST_ERR_JSON, or
 * ST_ERR_DUPLICATE_KEY) before any entry's; __metadata__'s before the
 * tensors'; then the first bad tensor in file order. On error h may hold a
 * partial arena, which st_header_free releases. */
int st_entries_read(const char *json, size_t len, const struct st_entries_room *room,
                    const char *file, struct st_header *h, struct st_error *err);

#endif
