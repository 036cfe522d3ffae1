/* model_doc: the two JSON documents derived from one model, the description
 * (GET /v1/models/{model}) and the merged header (GET .../header).
 *
 * They are written straight into one growing buffer, with no JSON tree: a
 * model with a million tensors renders to about 130 MB, and that is all the
 * memory rendering takes (a tree of it took 30 times more). The bytes are
 * the ones jansson's json_dumps(JSON_COMPACT) wrote when the documents were
 * built as trees (tests/unit/test_model_doc.c compares them). */
#ifndef TENSORD_MODEL_DOC_H
#define TENSORD_MODEL_DOC_H

#include "registry.h"

struct jsonw;

/* Each returns a new NUL-terminated text the caller frees, or NULL when
 * memory ran out: they never abort, whatever the model's files hold. */
char *model_doc_header(const struct reg_model *m);

/* The description in the parts server/handlers/doc_cache keeps: its middle
 * (metadata, tensors, index, error: the bulk, which hashes never change;
 * *len its length), and its ends as of the hashes known now: the head
 * (name, state, counts, files) in [0, *head_len), the tail (the "hashes"
 * progress) after it up to *len, *known the files whose hash they show.
 * head + middle + tail is the description. */
char *model_doc_description_middle(const struct reg_model *m, size_t *len);
char *model_doc_description_ends(const struct reg_model *m, size_t *head_len, size_t *len,
                                 size_t *known);

/* The files of m whose content hash is known. */
size_t model_doc_hashes_known(const struct reg_model *m);
/* Writes "parameters" into w: the elements of m's tensors by dtype, as the
 * Hub's "safetensors.parameters" counts them ({} when there are none).
 * Returns their total. */
uint64_t model_doc_parameters(struct jsonw *w, const struct reg_model *m);

#endif
