/* mirror_model: a model of the upstream built over the mirror's cache: a
 * registry model (core/registry/reg_model, with every check a local model gets)
 * made of a repo's weight files at one commit (the .safetensors files and
 * the index of one directory of the repo), from their headers alone.
 *
 * mirror_model_build opens the cache's files of the model (by the hashes
 * the repo document names), waits for the bytes a build reads (an index
 * whole, each file's length prefix and header), and builds the model over
 * a directory of symlinks to them, models/<n>/. Two uses:
 *   - a preload (POST /v1/models/{repo}/gpu on a mirror: the model keeps
 *     a reference to each file, its descriptors and the directory until it
 *     is freed, which the GPU instance does when it goes (its last lease);
 *     every block is wanted, the preload reads each chunk once the mirror
 *     has it (mirror_model_wait), and the last byte of each file waits for
 *     its hash;
 *   - the /v1 routes (mirror/mirror_view.h): the model keeps nothing of the
 *     cache (its descriptors closed, the directory removed, the files
 *     released), only what the headers said; each answer opens the files it
 *     reads (mirror_model_open), so a model nobody reads holds no cache
 *     space and no disk space of an evicted file.
 * Hashes: every file's SHA-256 is known (the upstream's for LFS files, and
 * computed from the cache for the index, which the build fetched whole). */
#ifndef TENSORD_MIRROR_MODEL_H
#define TENSORD_MIRROR_MODEL_H

#include <stdatomic.h>
#include <stdint.h>

#include "mirror.h"
#include "mirror_repo.h"
#include "registry.h"
#include "st_error.h"

struct mirror_job;
struct mirror_model;

/* Builds the model `name` of the weight files of repo at commit in
 * directory dir ("" for the repo's top; doc is the repo's document at
 * commit), fetching them with the mirror's own token; keep says
 * whether it keeps the files (a preload) or nothing of the cache (a /v1
 * model). On a job thread: it waits for the fetchers, until *cancel (may
 * be NULL) is set. Returns 0 with *out, or -errno with err:
 * ST_ERR_NOT_FOUND (no .safetensors file there, with a hash the mirror can
 * check), ST_ERR_INVALID_ARGUMENT (the files are not a valid model),
 * ST_ERR_LIMIT (the document lists an index over
 * ST_INDEX_MAX_LEN: refused before a byte of it is fetched), -ECANCELED,
 * another code for the cache or the upstream. */
int mirror_model_build(struct mirror *m, const char *name, const char *repo,
                       const struct mirror_repo *doc, const char *dir, int keep,
                       const atomic_int *cancel, struct mirror_model **out, struct st_error *err);
void mirror_model_free(struct mirror_model *mm);

/* The registry model (valid while mm lives). */
const struct reg_model *mirror_model_reg(const struct mirror_model *mm);
/* The commit it was built at. */
const char *mirror_model_commit(const struct mirror_model *mm);
/* Whether what its headers said still stands: a model whose headers were
 * read from a file the hash had not confirmed yet is built again once
 * bytes no hash confirmed have left the cache since (a file discarded
 * because the upstream's bytes did not match their hash, a partial file
 * evicted): the file fetched again may differ, and a tensor's offsets from
 * the old header would name other bytes of it. */
int mirror_model_current(const struct mirror_model *mm);
/* The cache's file of rf for one reader, with a reference the caller
 * releases (mirror_unref), made anew (fetched from the upstream with auth)
 * when it was evicted since. NULL with err as mirror_open. */
struct mirror_file *mirror_model_open(struct mirror_model *mm, const struct reg_file *rf,
                                      const char *auth, struct st_error *err);

/* A preload's model: a job preparing repo at rev (main, a branch, or a
 * commit) for client with the mirror's own token; cb as for
 * mirror_job_submit. NULL with *why as mirror_job_submit. */
struct mirror_job *mirror_job_model(struct mirror *m, uint64_t client, const char *repo,
                                    const char *rev, void (*cb)(void *arg), void *arg, int *why);
/* The job's outcome: 0 and the model (the caller takes it over), or
 * -errno with err (ST_ERR_NOT_FOUND when the upstream has no such repo or
 * revision, ST_ERR_INVALID_ARGUMENT when its files are not a valid model). */
int mirror_job_model_take(struct mirror_job *j, struct mirror_model **out, struct st_error *err);

/* Whether bytes [off, off + len) of file rf (one of a kept model's) are
 * readable now. */
int mirror_model_present(struct mirror_model *mm, const struct reg_file *rf, uint64_t off,
                         uint64_t len);
/* Blocks until they are, the download failed or *cancel is set
 * (mirror_wait_range). */
int mirror_model_wait(struct mirror_model *mm, const struct reg_file *rf, uint64_t off,
                      uint64_t len, const atomic_int *cancel, struct st_error *err);

#endif
