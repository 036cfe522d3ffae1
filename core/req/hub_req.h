/* hub_req: the body of POST /api/models/{repo}/paths-info/{rev}, the one
 * Hugging Face request with a body, parsed and bounded.
 *
 * Two spellings reach it: huggingface_hub sends a form
 * (application/x-www-form-urlencoded: paths=a&paths=b&expand=False, '+'
 * meaning a space), huggingface.js JSON ({"paths": ["a", "b"], "expand":
 * false}, "paths" also as a single string). Other keys are ignored, as the
 * Hub ignores them; "expand" (true, or a form's "True"/"true"/"1") asks
 * for each entry's last commit. JSON goes through json_scan (strict, duplicate
 * keys refused); a form's escapes must be well formed. At most
 * HUB_PATHS_MAX paths of at most HUB_PATH_MAX bytes each; a path that is
 * not UTF-8 or holds a NUL is refused. */
#ifndef TENSORD_HUB_REQ_H
#define TENSORD_HUB_REQ_H

#include <stddef.h>

#include "st_error.h"

#define HUB_PATHS_MAX 10000
#define HUB_PATH_MAX 4096

struct hub_paths {
    size_t n;
    char **paths;            /* decoded, NUL-terminated, in request order; owned */
    int expand;              /* "expand" was true: entries carry their last commit */
};

/* Parses text[0..len) as JSON when `json` is set, else as a form. Returns 0,
 * or a negative errno with out empty and err (optional) saying why:
 * ST_ERR_INVALID_ARGUMENT (not a paths-info body) or ST_ERR_LIMIT (more than
 * HUB_PATHS_MAX paths, or one longer than HUB_PATH_MAX). Free out with
 * hub_paths_free. */
int hub_paths_parse(const char *text, size_t len, int json, struct hub_paths *out,
                    struct st_error *err);
void hub_paths_free(struct hub_paths *p);

#endif
