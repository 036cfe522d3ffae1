/* Fuzzes the fetch request parser (core/req/fetch_req.c) and the globs it
 * compiles (core/base/globpat.c). Checks: a request accepted here is JSON that
 * jansson accepts too (JSON_REJECT_DUPLICATES); every accepted string is
 * NUL-terminated at its length and lies in the arena; world >= 1 and
 * rank < world; every rule has a compiled glob, which matches a name equal
 * to its pattern when the pattern has no special characters, and "*" matches
 * every name; an error always has a message that fits the buffer. Names to
 * match come from the input's tail after a 0x00 byte (when there is one). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fetch_req.h"
#include "globpat.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int in_arena(const struct fetch_req *r, const char *s, size_t len, size_t cap)
{
    return s >= r->arena && s + len < r->arena + cap && s[len] == '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t len = nul ? (size_t)(nul - data) : size;
    const char *name = nul ? (const char *)nul + 1 : "x";
    size_t name_len = nul ? size - len - 1 : 1;

    struct fetch_limits lim = {.max_tensors = 1 + (size % 50)};
    struct fetch_req r;
    struct st_error err;
    memset(&err, 'z', sizeof(err));
    int st = fetch_req_parse(text, len, &lim, &r, &err);
    if (st != 0) {
        if (!err.message[0] || !memchr(err.message, 0, sizeof(err.message)) ||
            st != st_status_errno(err.code))
            abort();
        if (r.arena || r.items || r.rules)
            abort();
        return 0;
    }
    /* Accepted: it must be JSON (or empty) by jansson's rules too. */
    size_t ws = 0;
    while (ws < len && strchr(" \t\r\n", text[ws]))
        ws++;
    if (ws < len) {
        json_error_t je;
        json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
        if (!doc || !json_is_object(doc))
            abort();
        json_decref(doc);
    }
    if (r.n_items > lim.max_tensors || (r.all && r.n_items))
        abort();
    for (size_t i = 0; i < r.n_items; i++) {
        if (!in_arena(&r, r.items[i].name, r.items[i].name_len, len + 1))
            abort();
        if (r.items[i].slice && !in_arena(&r, r.items[i].slice, r.items[i].slice_len, len + 1))
            abort();
    }
    if (r.has_split && (r.world < 1 || r.rank >= r.world))
        abort();
    for (size_t i = 0; i < r.n_rules; i++) {
        const struct fetch_rule *ru = &r.rules[i];
        if (!ru->glob || !in_arena(&r, ru->match, ru->match_len, len + 1))
            abort();
        if (!strpbrk(ru->match, "*?[") && strlen(ru->match) == ru->match_len &&
            !globpat_match(ru->glob, ru->match, ru->match_len, NULL))
            abort(); /* a literal pattern matches itself */
        (void)globpat_match(ru->glob, name, name_len, NULL);
    }
    int exhausted;
    uint64_t budget = 1000;
    const struct fetch_rule *first = fetch_req_rule_for(&r, name, name_len, NULL, &exhausted);
    if (exhausted || (first && !globpat_match(first->glob, name, name_len, NULL)))
        abort();
    /* with a budget: the same rule, or out of budget with nothing left */
    const struct fetch_rule *b = fetch_req_rule_for(&r, name, name_len, &budget, &exhausted);
    if (exhausted ? (b != NULL || budget != 0) : b != first)
        abort();
    struct globpat *star = globpat_compile("*", 1);
    if (utf8_valid(name, name_len) && !globpat_match(star, name, name_len, NULL))
        abort();
    globpat_free(star);
    fetch_req_free(&r);
    return 0;
}
