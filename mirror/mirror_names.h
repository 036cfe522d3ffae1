/* mirror_names: the last answers the upstream gave about names, kept so the
 * mirror can give them while the upstream cannot be reached
 * (mirror_offline = serve-cached), marked stale, like an HTTP cache's
 * stale-if-error (RFC 5861). A name is what can change upstream: a branch
 * (what `main` is now), a repo's document, a listing, the tree; what a
 * commit names never changes, and is kept the same way.
 *
 * An answer is kept under its question (the caller's key: a file's
 * metadata, a document's request) and whom the upstream gave it to:
 *   - nobody in particular (no Authorization): served to every caller, for
 *     mirror_stale_max_age seconds after the upstream gave it (a repo the
 *     upstream served without a token stays served without one);
 *   - the mirror itself (upstream_token_file: the /v1 and S3 routes, the
 *     preloads): served to the mirror's own questions, for as long;
 *   - a caller's token (a SHA-256 of the Authorization value, never the
 *     value): served to that token only, for mirror_auth_ttl seconds after
 *     the upstream accepted it (a token the upstream may have revoked since
 *     opens nothing for longer than it would have anyway).
 * The first two are also kept on disk (mirror_cache_dir/names/, one file
 * per answer, its mtime when the upstream gave it), so a mirror restarted
 * during an outage still has them; a caller's are in memory only. Both are
 * bounded (the oldest go first): NAMES_MEM_MAX bytes in memory,
 * NAMES_DISK_MAX bytes and NAMES_DISK_FILES files on disk, of which the
 * mirror's own answers have NAMES_DISK_OWN_MAX and NAMES_DISK_OWN_FILES and
 * callers' the rest: a client asking many questions (a listing's query
 * varies without end) pushes out other callers' oldest answers, never
 * those the /v1 and S3 routes serve in an outage. Its lock is a leaf;
 * files are read and written without it (on the job threads). */
#ifndef TENSORD_MIRROR_NAMES_H
#define TENSORD_MIRROR_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"

struct mirror;
struct mirror_names;

#define NAMES_MEM_MAX (64u << 20)
#define NAMES_DISK_MAX (256ull << 20)
#define NAMES_DISK_FILES 16384u
#define NAMES_DISK_OWN_MAX (NAMES_DISK_MAX / 4)
#define NAMES_DISK_OWN_FILES (NAMES_DISK_FILES / 4)

/* The store over dirfd's names/ (made when missing), with what a previous
 * run left there. NULL with err when the directory cannot be made. */
struct mirror_names *mirror_names_new(int dirfd, struct st_error *err);
void mirror_names_free(struct mirror_names *n);

/* Whom a question was asked for: a caller (its Authorization value, NULL
 * for none), or the mirror itself (own set: its upstream_token_file's). */
struct mirror_asker {
    const char *auth;
    int own;
};

/* Keeps data[0..len) as the upstream's answer to key, given now to a
 * request of asker. */
void mirror_names_put(struct mirror *m, const char *key, const struct mirror_asker *asker,
                      const void *data, size_t len);
/* The answer kept for key that asker may be given (see above): 1 with
 * *data (malloc'd, NUL-terminated; the caller frees it), *len and *age
 * (seconds since the upstream gave it); 0 when there is none young
 * enough. */
int mirror_names_get(struct mirror *m, const char *key, const struct mirror_asker *asker,
                     char **data, size_t *len, int64_t *age);

/* A file of names/ read back (exposed for the fuzzer: another program may
 * have written it): when buf[0..size) is the answer kept for key, 0 and
 * the answer at buf + *off, *len bytes; else -EINVAL. */
int mirror_names_parse(const char *buf, size_t size, const char *key, size_t *off, size_t *len);

#endif
