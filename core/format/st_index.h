/* st_index: sharded-model index (*.safetensors.index.json) parsing.
 *
 * Checks the index on its own (shape of the JSON, shard names that stay in
 * the model directory); the registry cross-checks it against the shards. */
#ifndef TENSORD_ST_INDEX_H
#define TENSORD_ST_INDEX_H

#include <stddef.h>

#include "st_error.h"

#define ST_INDEX_MAX_LEN 100000000ULL
#define ST_INDEX_MAX_DEPTH 16 /* JSON nesting cap (the top object is depth 1), checked before parsing */

struct st_index_entry {
    const char *tensor; /* owned by the index */
    const char *shard;  /* owned by the index; equal names share one pointer */
};

struct st_index {
    size_t n_entries;
    struct st_index_entry *entries; /* in file order */
    size_t n_shards;
    const char **shards;            /* distinct shard names, sorted */
    char *metadata_json;            /* the "metadata" object re-encoded compactly (as jansson's
                                     * json_dumps(JSON_COMPACT) writes it), or NULL */
    void *arena;                    /* the names' storage */
};

/* Parses json[0..len); `file` labels messages. 0 and a new index in *out
 * (caller frees with st_index_free), or -EINVAL with an ST_ERR_INDEX_* code
 * in err, or -ENOMEM (ST_ERR_NO_MEMORY) when the index could not be held
 * (the memory it takes is its names, about its own size, plus 40 bytes an
 * entry). */
int st_index_parse(const char *json, size_t len, const char *file, struct st_index **out,
                   struct st_error *err);
void st_index_free(struct st_index *idx);

/* Tests and tests/fuzz only (the index parser checks each shard's path the
 * same way). Returns 1 when `path` is a safe relative path that stays
 * inside the model directory. Shards must sit directly in the model
 * directory, so besides the general rules (non-empty, relative, no "", "."
 * or ".." component, no backslash, no control character) a '/' is refused
 * too: "sub/x.safetensors" would make a subdirectory, possibly a model of
 * its own, part of this one. */
int st_index_path_ok(const char *path);

#endif
