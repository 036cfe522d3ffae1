/* mirror_model: a model of the upstream made ready for a preload
 * (POST /v1/models/{repo}/gpu on a mirror; the design is in mirror.h).
 *
 * A job resolves the revision to its commit first (GET
 * /api/models/{repo}/revision/{rev}?blobs=true, with upstream_token_file's
 * token), opens the cache's files of the repo's top-level .safetensors
 * files and index (by the hashes the document names), fetches the index
 * whole and each file's header, asks for every other block, and builds a
 * registry model (core/reg_model, with every check a local model gets)
 * over symlinks to the cache's files in models/<n>/. The model holds a
 * reference to each file until it is freed, which the GPU instance does
 * when it goes (its last lease): a file under a preload or a lease is
 * never evicted. The preload then reads each chunk once the mirror has it
 * (mirror_model_wait), so it ends shortly after the last byte arrives; the
 * last byte of each file waits for its hash. */
#ifndef TENSORD_MIRROR_MODEL_H
#define TENSORD_MIRROR_MODEL_H

#include <stdatomic.h>
#include <stdint.h>

#include "mirror.h"
#include "registry.h"
#include "st_error.h"

struct mirror_job;
struct mirror_model;

/* A job preparing repo at rev (main, a branch, or a commit) for client;
 * cb as for mirror_job_submit. NULL with *why as mirror_job_submit. */
struct mirror_job *mirror_job_model(struct mirror *m, uint64_t client, const char *repo,
                                    const char *rev, void (*cb)(void *arg), void *arg, int *why);
/* The job's outcome: 0 and the model (the caller takes it over), or
 * -errno with err (ST_ERR_NOT_FOUND when the upstream has no such repo or
 * revision, ST_ERR_INVALID_ARGUMENT when its files are not a valid model). */
int mirror_job_model_take(struct mirror_job *j, struct mirror_model **out, struct st_error *err);

/* The registry model over the cache's files (valid while mm lives). */
const struct reg_model *mirror_model_reg(const struct mirror_model *mm);
/* Whether bytes [off, off + len) of file rf (one of the model's) are
 * readable now. */
int mirror_model_present(struct mirror_model *mm, const struct reg_file *rf, uint64_t off,
                         uint64_t len);
/* Blocks until they are, the download failed or *cancel is set
 * (mirror_wait_range). */
int mirror_model_wait(struct mirror_model *mm, const struct reg_file *rf, uint64_t off,
                      uint64_t len, const atomic_int *cancel, struct st_error *err);
/* Releases the files, the registry model and its directory. */
void mirror_model_free(struct mirror_model *mm);

/* The top-level files of a repo document (/api/models/{repo}/revision/...)
 * a model is made of: *.safetensors and *.safetensors.index.json. */
struct mirror_repo_file {
    char *name;
    struct mirror_id id;
};
/* Reads the document buf[0..len): its commit (sha) and those files (each
 * with its LFS sha256 and size, or its blob id and size). Returns the
 * count, or -EINVAL with err. Free with mirror_repo_files_free. (Exposed
 * for tests and the fuzzer.) */
int mirror_repo_doc_parse(const char *buf, size_t len, char commit[41],
                          struct mirror_repo_file **files, struct st_error *err);
void mirror_repo_files_free(struct mirror_repo_file *files, size_t n);

#endif
