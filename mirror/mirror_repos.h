/* mirror_repos: the table of the repos the mirror knows, which the
 * console and /v1/models list with what the cache holds of each.
 *
 * A repo is known once the upstream answered the mirror's own question
 * about it (mirror_repo_fetch), or a caller's without a token (a document
 * passed through, a file's metadata): what it told one caller in
 * confidence is never listed to others. The table keeps each repo's latest
 * commit and files (a file whose hash a document left out is filled in by
 * its metadata later), at most MIRROR_REPOS_MAX repos and
 * MIRROR_REPOS_FILES files, the least recently heard of going first. Its
 * lock is a leaf: what the cache holds is asked of the cache after it is
 * released. */
#ifndef TENSORD_MIRROR_REPOS_H
#define TENSORD_MIRROR_REPOS_H

#include <stdint.h>

#include "mirror_repo.h"

#define MIRROR_REPOS_MAX 1024
#define MIRROR_REPOS_FILES 1000000 /* their files, in all */

struct mirror;
struct mirror_repos;

struct mirror_repos *mirror_repos_new(void);
void mirror_repos_free(struct mirror_repos *t);

/* What the upstream said of repo at `at` (unix seconds): its commit and
 * files, with their hashes when it gave them ... */
void mirror_repos_learn(struct mirror *m, const char *repo, const struct mirror_repo *doc,
                        int64_t at);
/* ... and a file's content, learnt from its metadata at commit. */
void mirror_repos_learn_file(struct mirror *m, const char *repo, const char *commit,
                             const char *path, const struct mirror_id *id, int lfs);

/* ... and a document the upstream gave a request without a token, to
 * target: what it tells when it is a repo's as it is now (/api/models/{repo}
 * or /api/models/{repo}/revision/main; another revision's is not). */
void mirror_repos_learn_doc(struct mirror *m, const char *target, const char *body, size_t len);

/* What the cache holds of a known repo. */
struct mirror_repo_state {
    char commit[41];
    int64_t at;                /* when the upstream last told of it (unix seconds) */
    uint64_t files, files_known; /* its files; those whose content the mirror knows */
    uint64_t bytes;            /* the sizes of its files, where known */
    uint64_t cached;           /* of those, the bytes the cache holds */
    uint64_t files_complete;   /* files complete in the cache */
};
/* Calls fn for each known repo, most recently heard of first, without the
 * table's lock held. */
void mirror_repos_each(struct mirror *m,
                       void (*fn)(void *arg, const char *repo, const struct mirror_repo_state *s),
                       void *arg);

#endif
