/* reg_model: building one model from the files of its directory; the
 * registry's walk decides which directories are models and when a model can
 * be reused. Internal to the registry (core/registry.c, core/reg_model.c). */
#ifndef TENSORD_REG_MODEL_H
#define TENSORD_REG_MODEL_H

#include "reg_common.h"
#include "registry.h"

/* Builds model `name` from the entries ids[0..n) of its directory `dir`
 * (relative to the root; "" for a file directly in it): each is opened below
 * root, .safetensors headers are validated, the index is read and checked.
 * With `forced` set the model is invalid for that reason whatever its files
 * say. Returns a model with one reference, never NULL. */
struct reg_model *reg_model_build(struct reg_root *root, const char *name, const char *dir,
                                  const struct reg_entry_id *ids, size_t n_ids,
                                  const struct st_error *forced);

/* Whether m was built from exactly these entries (ids sorted by name): the
 * same names, each the same version of the same file. A model built with an
 * I/O or resource error never is. */
int reg_model_unchanged(const struct reg_model *m, const struct reg_entry_id *ids, size_t n_ids);

/* Whether m has a .safetensors file (one that opened below the root). */
int reg_model_has_safetensors(const struct reg_model *m);

/* Descriptors m holds open. */
size_t reg_model_open_fds(const struct reg_model *m);

#endif
