/* reg_common: what the registry's models (reg_model), repos (reg_repo) and
 * walk (registry) share: the refcounted root directory, the entries of a
 * directory as a model or repo was built from them, freeing its files, and
 * which errors are worth a rescan. Internal to the registry. */
#ifndef TENSORD_REG_COMMON_H
#define TENSORD_REG_COMMON_H

#include <stddef.h>

#include "registry.h"

/* Whether errno e is an I/O or resource error (a later attempt may succeed)
 * rather than something the files or their permissions say. */
int reg_errno_transient(int e);

/* The models root at `root`, opened: prev (the previous snapshot's root,
 * may be NULL) with a new reference when it is still the same directory,
 * so models built in different scans share one root; NULL with err filled
 * when it cannot be opened. */
struct reg_root *reg_root_open(const char *root, const struct reg_root *prev,
                               struct st_error *err);
struct reg_root *reg_root_ref(struct reg_root *r);
void reg_root_unref(struct reg_root *r);

/* A copy of the entries ids[0..n) (names duplicated) sorted by name, NULL
 * when memory is short (a directory's size is not ours to choose), and
 * freeing it; freeing files[0..n) and what each owns (its descriptor,
 * header, name and path). */
struct reg_entry_id *reg_ids_sorted_copy(const struct reg_entry_id *ids, size_t n);
void reg_ids_free(struct reg_entry_id *ids, size_t n);
void reg_files_free(struct reg_file *files, size_t n);

#endif
