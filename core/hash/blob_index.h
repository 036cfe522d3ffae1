/* blob_index: which served file has a given SHA-256, for the by-digest
 * route (GET /v1/blobs/sha256:{hex}).
 *
 * Content hashes arrive in the background (core/hash/hasher), after a snapshot
 * is built, so an index of a snapshot is never final while hashing goes
 * on. The index keeps, beside its map from digest to file, the files that
 * were not hashed yet when it last looked; a lookup that misses walks only
 * those (moving the newly hashed ones into the map), so a miss costs the
 * number of files still being hashed, and nothing once hashing is done. A
 * new snapshot (another generation) starts the index over. One mutex
 * guards it; it is held for a lookup and never across I/O. */
#ifndef TENSORD_BLOB_INDEX_H
#define TENSORD_BLOB_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "registry.h"

struct blob_index;

struct blob_index *blob_index_new(void);
void blob_index_free(struct blob_index *bi);

/* A file of snap (which the caller holds) whose content has this SHA-256,
 * or NULL; *root gets the root to open it below. The file and root live as
 * long as snap. Any thread. */
const struct reg_file *blob_index_find(struct blob_index *bi, const struct reg_snapshot *snap,
                                       const uint8_t digest[32], const struct reg_root **root);

/* Parses "sha256:<64 lowercase hex digits>" (len bytes) into digest.
 * Returns 0, -EINVAL when malformed, -ENOTSUP for another algorithm
 * ("sha512:..."). */
int blob_digest_parse(const char *s, size_t len, uint8_t digest[32]);

#endif
