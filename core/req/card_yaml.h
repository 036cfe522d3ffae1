/* card_yaml: a model card's metadata, the Hub's "cardData": the YAML front
 * matter of a repo's README.md, read with libyaml and written as JSON.
 *
 * The front matter is the block huggingface_hub's REGEX_YAML_BLOCK finds:
 * at the very start of the text (after whitespace) a line "---", then the
 * YAML, up to the first line that is "---" (trailing blanks and tabs
 * allowed) ending in a line break or the end of the text.
 *
 * The YAML is one document whose top level is a mapping. Plain scalars are
 * resolved with the YAML 1.2 core schema (the Hub's server is JavaScript's
 * `yaml`): null, true/false, decimal, 0o and 0x integers, floats, with
 * .inf, .nan and numbers past a double's range written as JSON.stringify
 * writes them (null), integers beyond 64 bits as doubles; quoted scalars and
 * every other plain one are strings (dates too). The tags !!str, !!null,
 * !!bool, !!int and !!float are honoured (a value not of its tag is
 * refused), other tags make a string. Anchors and aliases are expanded. Refused (an
 * error, no cardData): a key that is not a scalar or holds a NUL character,
 * the same key twice in one
 * mapping, nesting deeper than CARD_YAML_MAX_DEPTH, output over
 * CARD_YAML_MAX_OUTPUT bytes (aliases included: no "billion laughs"), a
 * second document, and whatever libyaml refuses (not UTF-8, bad syntax). */
#ifndef TENSORD_CARD_YAML_H
#define TENSORD_CARD_YAML_H

#include <stddef.h>

#include "st_error.h"

#define CARD_YAML_MAX_DEPTH 30
#define CARD_YAML_MAX_OUTPUT (1u << 20)

/* Finds the front matter in text[0..len): sets *yaml and *yaml_len to the
 * YAML between the fences and returns 1, or returns 0 when there is none. */
int card_yaml_front_matter(const char *text, size_t len, const char **yaml, size_t *yaml_len);

/* The YAML document yaml[0..len) as one JSON object: returns 1 with *json
 * (NUL-terminated, the caller frees it) and *json_len, 0 when the document
 * is empty or its top level is not a mapping, or a negative errno with err
 * saying why (the line, and the column where libyaml gives one). */
int card_yaml_to_json(const char *yaml, size_t len, char **json, size_t *json_len,
                      struct st_error *err);

#endif
