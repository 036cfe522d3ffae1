/* h_hub_int: what the Hugging Face endpoint's two files share. h_hub.c
 * waits for a repo's hashes, checks the revision asked for, answers files
 * and routes every Hub request; h_hub_api.c renders the /api documents, and
 * holds the errors and parts of a file's answer both use (and a mirror's,
 * h_mirror.c).
 * h_hub.c calls h_hub_api.c, never the other way. */
#ifndef TENSORD_H_HUB_INT_H
#define TENSORD_H_HUB_INT_H

#include "h_answer.h"
#include "reg_repo.h"

struct route;

/* Commit-addressed answers never change: a cache may keep them a year. */
#define HUB_CACHE_IMMUTABLE "public, max-age=31536000, immutable"

/* An LFS file's answer says what the Hub's 302 to its CDN says (where
 * huggingface_hub stops and takes the file's metadata from): the linked
 * file's ETag and size. */
void hub_linked(struct answer *a, int lfs, const char *etag, uint64_t size);
/* Fills in a file's representation as the Hub serves it (its body aside):
 * the content type, no Last-Modified (HUB_REVISION_DATE), immutable, the
 * ETag, inline (raw) or as an attachment named after path's last part. */
void hub_file_rep(struct answer *a, struct representation *rep, const char *path, int raw,
                  const char *etag);
/* A file asked for by a branch name: a 302 to its commit's URL, so that a
 * client's metadata request and its download read one version
 * (huggingface_hub downloads from where its HEAD request ended), and caches
 * keep the bytes under a URL that never changes meaning. */
struct answer *hub_redirect_to_commit(struct answer *a, const char *repo, int raw,
                                      const char *commit, const char *path, int lfs,
                                      const char *etag, uint64_t size);

/* 404 EntryNotFound for path in r at rev (with X-Repo-Commit). */
struct answer *hub_entry_not_found(struct answer *a, const struct reg_repo *r,
                                   const struct reg_repo_rev *rev, const char *path);

/* The documents, once the request's revision is known to name the repo's
 * current one (by_commit: by its commit id, an immutable URL). */
struct answer *hub_info(const struct request_view *v, struct answer *a,
                        const struct reg_snapshot *reg, const struct reg_repo *r,
                        const struct reg_repo_rev *rev, int by_commit);
struct answer *hub_tree(const struct request_view *v, struct answer *a, const struct reg_repo *r,
                        const struct reg_repo_rev *rev, const struct route *rt, int by_commit);
struct answer *hub_paths_info(const struct request_view *v, struct answer *a,
                              const struct reg_repo *r, const struct reg_repo_rev *rev);
struct answer *hub_refs(struct answer *a, const struct reg_repo_rev *rev);
struct answer *hub_commits(struct answer *a, const struct reg_repo *r,
                           const struct reg_repo_rev *rev, int by_commit);
/* /api/datasets, /api/spaces: tensord has none, "[]". */
struct answer *hub_no_repos(struct answer *a);
/* /api/models: the repo list (never waits for hashes). */
struct answer *hub_models(const struct request_view *v, struct answer *a,
                          const struct reg_snapshot *reg);

#endif
