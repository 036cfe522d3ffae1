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

/* Each returns a new NUL-terminated document the caller frees (the shape
 * reg_model_doc's render callback has), or NULL when memory ran out:
 * they never abort, whatever the model's files hold. */
char *model_doc_description(const struct reg_model *m);
char *model_doc_header(const struct reg_model *m);

#endif
