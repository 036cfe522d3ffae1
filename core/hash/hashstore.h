/* hashstore: content hashes keyed by file identity, in memory and in a
 * state file.
 *
 * An identity is (device, inode, size, mtime ns, ctime ns): a hash is known
 * for exactly that identity and never for another, so a file that is
 * replaced, rewritten, truncated or touched is simply not found and gets
 * hashed again. ctime is in the key because it cannot be set from user
 * space: a writer that restores mtime (rsync -t, cp -p, utimensat) still
 * moves it.
 *
 * The store is the in-memory half; hashfile.h is the state file that
 * persists it across restarts. */
#ifndef TENSORD_HASHSTORE_H
#define TENSORD_HASHSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "digest.h"
#include "fileio.h"

/* Most entries a state file may hold and the store keeps. One descriptor
 * per served file bounds a snapshot well below it. */
#define HASHSTORE_MAX_ENTRIES (1u << 20)
/* Entries not in use by the current snapshot that a save keeps (at least
 * this many, at most as many as are in use), most recently used first: a
 * model moved out and back, or a reload in the middle of a copy, need no
 * re-hash. */
#define HASHSTORE_SPARE_MIN 4096

struct hash_id {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
};

struct hash_entry {
    struct hash_id id;
    uint8_t sha256[DIGEST_SHA256_LEN];
    uint8_t git_sha1[DIGEST_SHA1_LEN]; /* valid when has_git_sha1 */
    uint8_t has_git_sha1;
};

void hash_id_from_stat(const struct fileio_stat *st, struct hash_id *id);
/* The identity of the file a stat(2) result describes. */
void hash_id_from_sys_stat(const struct stat *sb, struct hash_id *id);
int hash_id_equal(const struct hash_id *a, const struct hash_id *b);

struct hashstore;

/* An empty store. Free with hashstore_free. */
struct hashstore *hashstore_new(void);
void hashstore_free(struct hashstore *s);

/* Returns 1 and copies the entry into *out (out may be NULL) when id's
 * hashes are known, else 0. Safe from any thread, never waits for I/O: a
 * read lock around one table probe. */
int hashstore_lookup(struct hashstore *s, const struct hash_id *id, struct hash_entry *out);
/* Like lookup, and marks the entry as used by epoch (see hashstore_plan_save). */
int hashstore_touch(struct hashstore *s, const struct hash_id *id, uint64_t epoch,
                    struct hash_entry *out);
/* Records e, replacing the entry with the same identity, used by epoch.
 * Returns 0; beyond HASHSTORE_MAX_ENTRIES the entry is not recorded
 * (-ENOSPC), nor when memory for it is short (-ENOMEM). */
int hashstore_put(struct hashstore *s, const struct hash_entry *e, uint64_t epoch);
size_t hashstore_count(struct hashstore *s);

/* Counts everything in the store as saved (just loaded from the file),
 * first forgetting every entry unless ok (it failed to load half-way). */
void hashstore_loaded(struct hashstore *s, int ok);

/* A save in two steps, so the file is written without any lock held:
 * hashstore_plan_save picks the entries to keep (those used by epoch, then
 * up to max(HASHSTORE_SPARE_MIN, that many) others, most recently used
 * first), sorted by identity, into *kept (owned by the plan); it returns NULL
 * when nothing was put since the last save. hashstore_end_save then, when
 * the file was written (ok), drops from memory the entries the plan did not
 * keep and nobody used since, and counts the store as saved. Either way it
 * frees the plan. One save at a time: the plan holds a mutex. */
struct hashstore_plan;
struct hashstore_plan *hashstore_plan_save(struct hashstore *s, uint64_t epoch,
                                           const struct hash_entry **kept, size_t *n_kept);
void hashstore_end_save(struct hashstore *s, struct hashstore_plan *plan, int ok);

#endif
