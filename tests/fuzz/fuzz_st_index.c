/* libFuzzer target for the sharded-model index parser: arbitrary bytes
 * through st_index_parse must never crash, leak or read out of bounds. A
 * parsed index must satisfy its documented invariants (shards sorted,
 * distinct, safe, shared by pointer with the entries; metadata re-encoded as
 * a JSON object), and every error must be an index code with a UTF-8 message
 * (users see it verbatim inside JSON responses). And it is differential: the
 * jansson-based parser it replaced (tests/ref/) must give the same status,
 * message, entries, shards and metadata for every input. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_index.h"
#include "util.h"

#include "../ref/st_index_compare.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "invariant broken: %s\n", what);
    abort();
}

static void check_index(const struct st_index *idx)
{
    if (idx->n_entries == 0 || idx->n_shards == 0 || idx->n_shards > idx->n_entries)
        fail("counts");
    for (size_t i = 0; i < idx->n_shards; i++) {
        if (!st_index_path_ok(idx->shards[i]))
            fail("unsafe shard path accepted");
        if (i > 0 && strcmp(idx->shards[i - 1], idx->shards[i]) >= 0)
            fail("shards not sorted and distinct");
    }
    for (size_t i = 0; i < idx->n_entries; i++) {
        const char *sh = idx->entries[i].shard;
        size_t lo = 0, hi = idx->n_shards;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            int c = strcmp(idx->shards[mid], sh);
            if (c == 0) {
                lo = mid;
                break;
            }
            if (c < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo >= idx->n_shards || idx->shards[lo] != sh)
            fail("entry shard is not one of shards[]");
        if (!utf8_valid(idx->entries[i].tensor, strlen(idx->entries[i].tensor)))
            fail("tensor name not UTF-8");
    }
    if (idx->metadata_json) {
        json_error_t e;
        /* "\u0000" inside metadata strings is valid JSON and kept as such */
        json_t *m = json_loads(idx->metadata_json, JSON_ALLOW_NUL, &e);
        if (!m || !json_is_object(m))
            fail("metadata_json is not a JSON object");
        json_decref(m);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[1024];
    if (st_index_compare((const char *)data, size, why, sizeof(why)) != 0) {
        fprintf(stderr, "differs from the jansson parser: %s\n", why);
        abort();
    }
    struct st_index *idx = NULL;
    struct st_error err;
    int ret = st_index_parse((const char *)data, size, "fuzz.index.json", &idx, &err);
    if (ret == 0) {
        if (!idx)
            fail("success without an index");
        check_index(idx);
        st_index_free(idx);
        return 0;
    }
    if (idx)
        fail("index returned with an error");
    enum st_status rc = err.code;
    if (ret != st_status_errno(rc))
        fail("the errno does not go with the code");
    if (rc != ST_ERR_INDEX_JSON && rc != ST_ERR_INDEX_SHAPE && rc != ST_ERR_INDEX_SHARD_PATH &&
        rc != ST_ERR_INDEX_EMPTY)
        fail("not an index error code");
    if (!err.message[0] || !strstr(err.message, "fuzz.index.json"))
        fail("error message");
    if (!utf8_valid(err.message, strlen(err.message)))
        fail("error message not UTF-8");
    return 0;
}
