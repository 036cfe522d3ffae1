/* hub_doc: the Hugging Face endpoint's documents of a repo that are made
 * once per repo and shared (API.md "Hugging Face endpoint"): the repo's own
 * document, and its listing, every entry of its tree once, from which each
 * tree and paths-info answer is a view (core/body/shared_doc.h). A repo never
 * changes (a new version of a file makes a new repo), so neither do they.
 * server/handlers/doc_cache renders them on its thread and keeps them in
 * the repo (core/registry/reg_repo.h), server/handlers/h_hub_api answers from them:
 * no HTTP thread renders a repo's documents, and a connection that does not
 * read holds a reference, never a copy.
 *
 * The listing's text is two runs of the same entries, each entry preceded
 * by a ',': first every entry in the order of a recursive tree of the
 * repo's root (each folder before its contents, files in path order), so
 * that everything below a folder is the run that follows its own entry;
 * then each folder's children, folder after folder, so that a folder's
 * non-recursive tree is one run too. A tree answer is "[", one run less its
 * first ',', "]\n"; its hash (the answer's ETag) is computed with the
 * listing. */
#ifndef TENSORD_HUB_DOC_H
#define TENSORD_HUB_DOC_H

#include <stddef.h>
#include <stdint.h>

#include "jsonw.h"
#include "reg_repo.h"
#include "registry.h"
#include "shared_doc.h"

/* The date of every revision. A commit id names content alone, and what it
 * addresses must be the same on every replica of the same files (copies
 * have other mtimes), so no file time may show: the content has no date of
 * its own, and the Unix epoch says so. */
#define HUB_REVISION_DATE "1970-01-01T00:00:00.000Z"
/* The title of a revision's one commit (the commits route, and an entry's
 * lastCommit). */
#define HUB_COMMIT_TITLE "Content as served by tensord"

/* README.md's card of r as JSON (empty: none), read and converted once per
 * repo (core/registry/reg_repo.h), into *out (NULL when the repo has no README.md,
 * or it could not be read: logged). Returns 0, or -ESTALE when README.md
 * changed since it was hashed (the caller answers 503). */
int hub_doc_card(const struct reg_repo *r, const struct shared_doc **out);

/* The fields a repo has in both the repo list and its own document. */
void hub_doc_repo_summary(struct jsonw *w, const struct reg_repo *r,
                          const struct reg_repo_rev *rev);

/* The repo's document (with its trailing newline), m its /v1 model (the
 * model in the repo's directory) or NULL; reads README.md's card (once per
 * repo: REG_REPO_DOC_CARD). Returns it with one reference, or NULL with
 * *rc: -ESTALE when README.md changed since it was hashed (the card would
 * not be the commit's), -ENOMEM. */
struct shared_doc *hub_doc_info(const struct reg_repo *r, const struct reg_repo_rev *rev,
                                const struct reg_model *m, int *rc);

/* The repo's listing, with one reference; NULL when out of memory. With
 * expand, each entry has its lastCommit (the revision's one commit): the
 * listing of list_repo_tree and get_paths_info with expand=True. */
struct shared_doc *hub_doc_listing(const struct reg_repo *r, const struct reg_repo_rev *rev,
                                   int expand);

/* A tree answer of folder d of the listing's repo (recursive: everything
 * below it): *run is what goes between "[" and "]\n" (no leading ','),
 * *hash the whole answer's FNV-1a. */
void hub_doc_tree(const struct shared_doc *listing, const struct reg_repo_rev *rev,
                  const struct reg_repo_dir *d, int recursive, struct shared_doc_range *run,
                  uint64_t *hash);
/* The entry of file i (of the repo's files) or folder d, with its leading
 * ',' (a paths-info answer is a run of them). */
struct shared_doc_range hub_doc_file_entry(const struct shared_doc *listing, size_t i);
struct shared_doc_range hub_doc_dir_entry(const struct shared_doc *listing,
                                          const struct reg_repo_rev *rev,
                                          const struct reg_repo_dir *d);

#endif
