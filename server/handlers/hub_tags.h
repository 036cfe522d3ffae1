/* hub_tags: what /api/models filters on (huggingface_hub's list_models
 * filter=, pipeline_tag=, gated=), from what tensord knows of a repo: the
 * tags the Hub derives from its files (safetensors, pytorch, gguf, onnx,
 * tf, jax, ...) and those of its model card (tags, library_name,
 * pipeline_tag, license:X, its languages, dataset:X, base_model:X).
 *
 * A filter or parameter the Hub answers from data tensord does not have
 * (the regions and deployments it runs, arXiv links it parsed, inference
 * providers, apps) is refused by name, never ignored: ignoring one would
 * list every repo for a question whose answer is "none". */
#ifndef TENSORD_HUB_TAGS_H
#define TENSORD_HUB_TAGS_H

#include <stddef.h>

#include "h_answer.h"
#include "registry.h"

struct hub_filters {
    size_t n;
    char **tags;            /* every tag a listed repo must have; owned */
    char *pipeline_tag;     /* its card's pipeline_tag must be this, or NULL; owned */
    int gated;              /* 1: only gated repos (none are), 0: not gated (all), -1: any */
};

/* Reads the request's filters: every `filter` parameter (repeated, or
 * comma-separated), `pipeline_tag` and `gated`. Returns 0, or -1 with why
 * in err (a filter or parameter tensord cannot apply, a malformed escape).
 * Free with hub_filters_free either way. */
int hub_filters_read(const struct request_view *v, struct hub_filters *f, char *err,
                     size_t errlen);
void hub_filters_free(struct hub_filters *f);

/* Whether f asks for anything (else every repo matches without its card). */
int hub_filters_any(const struct hub_filters *f);

/* Whether repo r, whose card (cardData as JSON, card_len bytes; NULL when
 * it has none) is given, has every tag of f and its pipeline_tag. */
int hub_filters_match(const struct hub_filters *f, const struct reg_repo *r, const char *card,
                      size_t card_len);

#endif
