/* mirror_repo: the upstream's repos as the mirror knows them: a repo's
 * document (/api/models/{repo}/revision/{rev}: its commit and files, each
 * with its size and hash), read with a bounded parser; asked of the
 * upstream by the mirror's own routes (the /v1 models, the S3 buckets,
 * the preloads) with upstream_token_file's token, and the last answer
 * served when the upstream cannot be reached (mirror_names.h). The repos
 * it tells of are learnt by the table of known repos (mirror_repos.h). */
#ifndef TENSORD_MIRROR_REPO_H
#define TENSORD_MIRROR_REPO_H

#include <stddef.h>
#include <stdint.h>

#include "mirror_store.h"
#include "st_error.h"

struct mirror;
struct upstream_conn;

#define MIRROR_REPO_FILES_MAX 100000 /* files of one repo document */

struct mirror_repo_file {
    char *name;                /* the path in the repo: '/'-separated, no empty, "." or ".."
                                * component */
    struct mirror_id id;       /* when has_id: its content (sha256 for LFS files, else the git
                                * blob id) and size */
    int has_id;
    int lfs;
    uint64_t size;             /* when has_size (a document without blobs has none) */
    int has_size;
};

struct mirror_repo {
    char commit[41];           /* 40 lowercase hex digits */
    struct mirror_repo_file *files; /* sorted by name (bytes) */
    size_t n;
};

/* Reads a repo document buf[0..len): its commit ("sha") and files
 * ("siblings"). Returns 0, or -EINVAL (ST_ERR_INVALID_ARGUMENT: not the
 * JSON a Hub sends, no commit, a file name that is not a path in a repo
 * or given twice) or -E2BIG (ST_ERR_LIMIT: more than MIRROR_REPO_FILES_MAX
 * files) with err. Free with mirror_repo_clear. (For the tests and the
 * fuzzer too.) */
int mirror_repo_parse(const char *buf, size_t len, struct mirror_repo *out, struct st_error *err);
void mirror_repo_clear(struct mirror_repo *r);
/* The file at name, or NULL. */
const struct mirror_repo_file *mirror_repo_find(const struct mirror_repo *r, const char *name);
/* Whether a file name is a model's weight file: *.safetensors or
 * *.safetensors.index.json. */
int mirror_repo_is_weight(const char *name);

/* Asks the upstream for repo's document at rev, with the mirror's own
 * token, on a job thread (connection c). Returns 0 with *out and *age: -1
 * for the upstream's answer now, else the seconds since it gave the one
 * kept (it failed, mirror_offline = serve-cached); or -errno with err:
 * ST_ERR_NOT_FOUND (the upstream has no such repo or revision, or refuses
 * the mirror's token), ST_ERR_INVALID_ARGUMENT (its answer is not a repo
 * document), ST_ERR_IO (it answered an error; -EHOSTUNREACH: it cannot be
 * reached, and nothing is kept). */
int mirror_repo_fetch(struct mirror *m, struct upstream_conn *c, const char *repo,
                      const char *rev, struct mirror_repo *out, int64_t *age,
                      struct st_error *err);

#endif
