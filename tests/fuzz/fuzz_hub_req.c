/* Fuzzes the paths-info body parser (core/req/hub_req.c) in both spellings.
 * The first byte picks JSON (odd) or a form (even). Checks: every path
 * accepted is NUL-terminated UTF-8 of at most HUB_PATH_MAX bytes, with no
 * NUL inside; at most HUB_PATHS_MAX of them; a JSON body accepted here is
 * one jansson accepts too (JSON_REJECT_DUPLICATES); an error has a message
 * that fits the buffer and leaves nothing allocated. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hub_req.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int json = data[0] & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    struct hub_paths p;
    struct st_error err;
    memset(&err, 'z', sizeof(err));
    int st = hub_paths_parse(text, len, json, &p, &err);
    if (st != 0) {
        if (!err.message[0] || !memchr(err.message, 0, sizeof(err.message)) || p.n || p.paths ||
            st != st_status_errno(err.code) ||
            (err.code != ST_ERR_INVALID_ARGUMENT && err.code != ST_ERR_LIMIT))
            abort();
        return 0;
    }
    if (p.n > HUB_PATHS_MAX)
        abort();
    for (size_t i = 0; i < p.n; i++) {
        size_t n = strlen(p.paths[i]);
        if (n > HUB_PATH_MAX || !utf8_valid(p.paths[i], n))
            abort();
    }
    if (json) {
        json_error_t je;
        json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
        if (!doc || !json_is_object(doc))
            abort();
        json_decref(doc);
    }
    hub_paths_free(&p);
    return 0;
}
