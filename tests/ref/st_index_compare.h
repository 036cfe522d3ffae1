/* st_index_compare: one input through the index parser and through the
 * jansson-based one it replaced (tests/ref/st_index_jansson.c); they must
 * agree on the status, the whole message and everything a parsed index
 * holds. For the fuzz target and test_st_index. Include after st_index.h. */
#ifndef TENSORD_ST_INDEX_COMPARE_H
#define TENSORD_ST_INDEX_COMPARE_H

#include <stdio.h>
#include <string.h>

#include "st_index_jansson.c"

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Returns 0 when both parsers agree on json[0..len), else 1 with what
 * differs in why. */
static int st_index_compare(const char *json, size_t len, char *why, size_t whylen)
{
    struct st_index *a = NULL, *b = NULL;
    struct st_error ea, eb;
    enum st_status ra = st_index_parse(json, len, "cmp.index.json", &a, &ea) == 0 ? ST_OK : ea.code;
    enum st_status rb = ref_st_index_parse(json, len, "cmp.index.json", &b, &eb);
    int bad = 1;
    /* The one intended difference: a raw NUL byte is refused before the
     * JSON is read (jansson dropped one after a number or a word). */
    if (ra == ST_ERR_INDEX_JSON && strstr(ea.message, ": index has a NUL byte at offset ") &&
        memchr(json, '\0', len)) {
        bad = 0;
        goto done;
    }
    if (ra != rb || strcmp(ea.message, eb.message) != 0) {
        snprintf(why, whylen, "new %s \"%.200s\", reference %s \"%.200s\"", st_status_name(ra),
                 ea.message, st_status_name(rb), eb.message);
        goto done;
    }
    if (ra == ST_OK) {
        if (a->n_entries != b->n_entries || a->n_shards != b->n_shards) {
            snprintf(why, whylen, "new %zu entries %zu shards, reference %zu and %zu",
                     a->n_entries, a->n_shards, b->n_entries, b->n_shards);
            goto done;
        }
        for (size_t i = 0; i < a->n_entries; i++)
            if (!same_str(a->entries[i].tensor, b->entries[i].tensor) ||
                !same_str(a->entries[i].shard, b->entries[i].shard)) {
                snprintf(why, whylen, "entry %zu: new \"%s\" -> \"%s\", reference \"%s\" -> \"%s\"",
                         i, a->entries[i].tensor, a->entries[i].shard, b->entries[i].tensor,
                         b->entries[i].shard);
                goto done;
            }
        for (size_t i = 0; i < a->n_shards; i++)
            if (!same_str(a->shards[i], b->shards[i])) {
                snprintf(why, whylen, "shard %zu: new \"%s\", reference \"%s\"", i, a->shards[i],
                         b->shards[i]);
                goto done;
            }
        if (!same_str(a->metadata_json, b->metadata_json)) {
            snprintf(why, whylen, "metadata: new %.200s, reference %.200s",
                     a->metadata_json ? a->metadata_json : "(none)",
                     b->metadata_json ? b->metadata_json : "(none)");
            goto done;
        }
    }
    bad = 0;
done:
    st_index_free(a);
    ref_st_index_free(b);
    return bad;
}

#endif
