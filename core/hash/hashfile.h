/* hashfile: the state file that keeps content hashes across restarts.
 *
 * STATE_DIR/hashes (docs/OPERATIONS.md "Content hashes"):
 *
 *   tensord-hashes 1
 *   DEV INO SIZE MTIME_NS CTIME_NS SHA256 GIT_SHA1      one line per file
 *   end COUNT SHA256-OF-EVERYTHING-ABOVE
 *
 * Numbers in decimal without leading zeros (the two times may be negative),
 * digests in lowercase hex, GIT_SHA1 "-" exactly for files over
 * DIGEST_GIT_SHA1_MAX, one space between fields, '\n' after every line.
 *
 * The file is input like any other: it is read in blocks through a parser
 * with bounded lines and a bounded entry count, and accepted all or
 * nothing. A torn, corrupt, foreign or newer-version file costs a re-hash,
 * never a wrong hash. It is replaced crash-safely: a temporary file, fsync,
 * rename, fsync of the directory, under an flock of the directory (another
 * tensord, or `tensord verify`, may share it).
 *
 * Whoever can write the state directory can make tensord report a wrong
 * hash, as they could by changing the models; `tensord verify` finds it. */
#ifndef TENSORD_HASHFILE_H
#define TENSORD_HASHFILE_H

#include <stddef.h>

#include "hashstore.h"
#include "st_error.h"

#define HASHFILE_NAME "hashes"

/* Receives each entry as it is parsed: returns 0 when taken, 1 when an
 * entry with that identity was already taken (the file is then invalid),
 * -1 when no more fit. */
typedef int (*hashfile_add_fn)(void *ctx, const struct hash_entry *e);

/* Tests and tests/fuzz only (the daemon reads in blocks: hashfile_read).
 * Parses a state file's bytes buf[0..len) (label names it in messages).
 * Entries go to add as they are read; on an error the caller discards them.
 * Returns 0 or a negative errno, with err (optional) saying why as
 * "LABEL:LINE: reason": ST_ERR_IO (the file could not be read),
 * ST_ERR_STATE_FORMAT (a line is not what the format says),
 * ST_ERR_STATE_VERSION (a newer tensord's format), ST_ERR_STATE_TORN (no end
 * line, or its count or digest does not match), ST_ERR_LIMIT (more than
 * HASHSTORE_MAX_ENTRIES entries, or too many bytes). */
int hashfile_parse(const char *buf, size_t len, const char *label, hashfile_add_fn add, void *ctx,
                   struct st_error *err);
/* Reads dirfd/name the same way, in blocks (never all of it at once). A
 * missing file is 0 with *found = 0. */
int hashfile_read(int dirfd, const char *name, const char *label, hashfile_add_fn add, void *ctx,
                  int *found, struct st_error *err);

/* Tests and tests/fuzz only (the daemon writes with hashfile_replace).
 * The text of a state file holding e[0..n) in that order. Caller frees;
 * *len gets the length (the text is also NUL-terminated). */
char *hashfile_format(const struct hash_entry *e, size_t n, size_t *len);
/* Replaces dirfd/name with that text crash-safely, under an flock of
 * dirfd that is only tried. Returns 0, -EWOULDBLOCK when another holder has
 * that lock (try again later), or another negative errno (the old file is
 * then untouched). */
int hashfile_replace(int dirfd, const char *name, const struct hash_entry *e, size_t n);

/* Loads dirfd/name into s (which should be empty), all or nothing, and
 * counts it as saved. */
int hashfile_load_store(struct hashstore *s, int dirfd, const char *name, const char *label,
                        struct st_error *err);
/* Saves s (see hashstore_plan_save) to dirfd/name. Returns 0 (also when
 * there was nothing to save), -EWOULDBLOCK (the directory is locked: s is
 * still unsaved) or another negative errno. */
int hashfile_save_store(struct hashstore *s, uint64_t epoch, int dirfd, const char *name);

#endif
