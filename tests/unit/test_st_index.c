/* st_index: a valid index in all its parts, then one test per error code
 * and per shard path rule, checking the message names file, tensor, value. */
#include <stdlib.h>
#include <sys/resource.h>

#include "st_index.h"
#include "test.h"
#include "util.h"

#include "../ref/st_index_compare.h"

static enum st_status parse(const char *json, struct st_index **idx, struct st_error *err)
{
    return ST_CODE(st_index_parse(json, strlen(json), "m.safetensors.index.json", idx, err), err);
}

/* Expects code and a message containing each non-NULL needle. */
static void expect(const char *json, enum st_status code, const char *n1, const char *n2)
{
    struct st_index *idx = (struct st_index *)1;
    struct st_error err;
    enum st_status rc = parse(json, &idx, &err);
    if (rc != code)
        fprintf(stderr, "  for %s: got %s (%s)\n", json, st_status_name(rc), err.message);
    CHECK(rc == code);
    CHECK(err.code == code);
    CHECK(idx == NULL);
    CHECK_CONTAINS(err.message, "m.safetensors.index.json");
    if (n1)
        CHECK_CONTAINS(err.message, n1);
    if (n2)
        CHECK_CONTAINS(err.message, n2);
    st_index_free(idx);
}

TEST(valid)
{
    const char *j = " {\"metadata\": {\"total_size\": 24, \"nested\": {\"a\": [1, 2, null]}},"
                    " \"weight_map\": {\"w.b\": \"model-00002.safetensors\","
                    " \"w.a\": \"model-00001.safetensors\", \"w.c\": \"model-00002.safetensors\"},"
                    " \"other\": [1, {\"x\": true}]}\n";
    struct st_index *idx;
    struct st_error err;
    CHECK(parse(j, &idx, &err) == ST_OK);
    CHECK(err.code == ST_OK);
    CHECK_EQ_U64(idx->n_entries, 3);
    CHECK_STR(idx->entries[0].tensor, "w.b");
    CHECK_STR(idx->entries[1].tensor, "w.a");
    CHECK_STR(idx->entries[2].tensor, "w.c");
    CHECK_EQ_U64(idx->n_shards, 2);
    CHECK_STR(idx->shards[0], "model-00001.safetensors");
    CHECK_STR(idx->shards[1], "model-00002.safetensors");
    /* equal names share one pointer, which is one of shards[] */
    CHECK(idx->entries[0].shard == idx->entries[2].shard);
    CHECK(idx->entries[0].shard == idx->shards[1]);
    CHECK(idx->entries[1].shard == idx->shards[0]);
    CHECK_STR(idx->metadata_json, "{\"total_size\":24,\"nested\":{\"a\":[1,2,null]}}");
    st_index_free(idx);
}

TEST(valid_without_metadata)
{
    struct st_index *idx;
    struct st_error err;
    CHECK(parse("{\"weight_map\":{\"\":\"x.safetensors\",\"caf\\u00e9\":\"x.safetensors\"}}",
                &idx, &err) == ST_OK);
    CHECK(idx->metadata_json == NULL);
    CHECK_EQ_U64(idx->n_entries, 2);
    CHECK_STR(idx->entries[0].tensor, "");
    CHECK_STR(idx->entries[1].tensor, "caf\xc3\xa9");
    CHECK_EQ_U64(idx->n_shards, 1);
    st_index_free(idx);
    st_index_free(NULL);
}

TEST(json_errors)
{
    expect("", ST_ERR_INDEX_JSON, NULL, NULL);
    expect("{", ST_ERR_INDEX_JSON, NULL, NULL);
    expect("{\"weight_map\":{\"a\":\"x\"}} x", ST_ERR_INDEX_JSON, NULL, NULL);
    expect("{\"weight_map\":{\"a\":\"x\",\"a\":\"y\"}}", ST_ERR_INDEX_JSON, "duplicate", NULL);
    /* Regression (fuzz_st_index): a duplicate key the text ends right after
     * is the duplicate, as jansson says, not "':' expected". */
    expect("{\"weight_map\":{\"a\":\"x\",\"a\"", ST_ERR_INDEX_JSON, "duplicate object key",
           NULL);
    expect("{\"weight_map\":{\"a\":\"x\"},\"weight_map\":{\"b\":\"x\"}}", ST_ERR_INDEX_JSON,
           "duplicate", NULL);
    expect("{\"weight_map\":{\"a\":\"x\xff\"}}", ST_ERR_INDEX_JSON, "UTF-8", NULL);
    expect("{\"weight_map\":{\"a\":\"\xed\xa0\x80\"}}", ST_ERR_INDEX_JSON, "UTF-8", NULL);
    expect("{\"weight_map\":{\"a\":\"\\ud800\"}}", ST_ERR_INDEX_JSON, NULL, NULL);
}

static char *nested(int depth)
{
    /* {"weight_map":{"a":"x"},"metadata":[[...]]} with depth levels in all */
    char *s = xmalloc((size_t)depth * 2 + 64);
    int n = sprintf(s, "{\"weight_map\":{\"a\":\"x\"},\"metadata\":{\"k\":");
    for (int i = 0; i < depth - 2; i++)
        s[n++] = '[';
    s[n++] = '1';
    for (int i = 0; i < depth - 2; i++)
        s[n++] = ']';
    strcpy(s + n, "}}");
    return s;
}

TEST(depth)
{
    char *ok = nested(ST_INDEX_MAX_DEPTH), *deep = nested(ST_INDEX_MAX_DEPTH + 1);
    struct st_index *idx;
    struct st_error err;
    CHECK(parse(ok, &idx, &err) == ST_OK);
    st_index_free(idx);
    expect(deep, ST_ERR_INDEX_JSON, "nesting", "16");
    /* brackets inside strings do not count */
    CHECK(parse("{\"weight_map\":{\"[[[[[[[[[[[[[[[[[[[[\\\"{{{{{{{{{{{{{{{{{{{{\":\"x\"}}", &idx,
                &err) == ST_OK);
    st_index_free(idx);
    free(ok);
    free(deep);
    /* 100k '[' must be refused before the parser recurses */
    size_t n = 100000;
    char *bomb = xmalloc(n + 1);
    memset(bomb, '[', n);
    bomb[n] = '\0';
    expect(bomb, ST_ERR_INDEX_JSON, "nesting", NULL);
    free(bomb);
}

TEST(too_large)
{
    struct st_index *idx;
    struct st_error err;
    /* the size is checked before a byte is read */
    CHECK(ST_CODE(st_index_parse("{}", ST_INDEX_MAX_LEN + 1, "m.safetensors.index.json", &idx,
                                 &err),
                  &err) ==
          ST_ERR_INDEX_JSON);
    CHECK(idx == NULL);
    CHECK_CONTAINS(err.message, "100000001");
}

TEST(shape_errors)
{
    expect("[]", ST_ERR_INDEX_SHAPE, "not a JSON object", NULL);
    expect("\"x\"", ST_ERR_INDEX_SHAPE, NULL, NULL);
    expect("{}", ST_ERR_INDEX_SHAPE, "weight_map", "missing");
    expect("{\"metadata\":{}}", ST_ERR_INDEX_SHAPE, "weight_map", "missing");
    expect("{\"weight_map\":[]}", ST_ERR_INDEX_SHAPE, "weight_map", "not an object");
    expect("{\"weight_map\":null}", ST_ERR_INDEX_SHAPE, "weight_map", NULL);
    expect("{\"weight_map\":{\"t.w\":1}}", ST_ERR_INDEX_SHAPE, "t.w", "not a string");
    expect("{\"weight_map\":{\"t.w\":null}}", ST_ERR_INDEX_SHAPE, "t.w", NULL);
    expect("{\"weight_map\":{\"a\":\"x\"},\"metadata\":[]}", ST_ERR_INDEX_SHAPE, "metadata", NULL);
    expect("{\"weight_map\":{\"a\":\"x\"},\"metadata\":\"s\"}", ST_ERR_INDEX_SHAPE, "metadata", NULL);
    expect("{\"weight_map\":{\"a\\u0000b\":\"x\"}}", ST_ERR_INDEX_JSON, "NUL", NULL);
}

TEST(empty)
{
    expect("{\"weight_map\":{}}", ST_ERR_INDEX_EMPTY, "no entries", NULL);
}

TEST(shard_paths)
{
    static const struct {
        const char *json_value, *shown, *why;
    } bad[] = {
        {"../x.safetensors", "../x.safetensors", "\"..\""},
        {"..", "..", "\"..\""},
        {"/abs/x.safetensors", "/abs/x.safetensors", "absolute"},
        {"a//b", "a//b", "empty component"},
        {"./x", "./x", "\".\""},
        {"x/.", "x/.", "\".\""},
        {"x/", "x/", "empty component"},
        {"x\\\\y", "x\\y", "backslash"},
        {"", "", "empty"},
        {"x\\u0000y", "x?y", "NUL"},
        {"x\\ny", "x?y", "control"},
        {"sub/x.safetensors", "sub/x.safetensors", "subdirectory"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        char *j = xasprintf("{\"weight_map\":{\"ok\":\"a.safetensors\",\"layer.%zu\":\"%s\"}}", i,
                            bad[i].json_value);
        char t[32];
        snprintf(t, sizeof(t), "layer.%zu", i);
        expect(j, ST_ERR_INDEX_SHARD_PATH, t, bad[i].why);
        struct st_index *idx;
        struct st_error err;
        parse(j, &idx, &err);
        char shown[64];
        snprintf(shown, sizeof(shown), "\"%s\"", bad[i].shown);
        CHECK_CONTAINS(err.message, shown);
        free(j);
    }
}

TEST(path_ok)
{
    CHECK(st_index_path_ok("model-00001-of-00002.safetensors"));
    CHECK(st_index_path_ok("x"));
    CHECK(st_index_path_ok("...x"));
    CHECK(st_index_path_ok("..x"));
    CHECK(st_index_path_ok(".hidden"));
    CHECK(!st_index_path_ok(NULL));
    CHECK(!st_index_path_ok(""));
    CHECK(!st_index_path_ok("../x"));
    CHECK(!st_index_path_ok("a/../x"));
    CHECK(!st_index_path_ok("/abs"));
    CHECK(!st_index_path_ok("a//b"));
    CHECK(!st_index_path_ok("./x"));
    CHECK(!st_index_path_ok("x\\y"));
    CHECK(!st_index_path_ok("."));
    CHECK(!st_index_path_ok("sub/x.safetensors"));
    CHECK(!st_index_path_ok("x\ty"));
}

TEST(long_names_in_messages)
{
    /* a 1000-byte tensor name is cut (at a UTF-8 boundary) to keep the message whole */
    char *name = xmalloc(1001);
    for (int i = 0; i < 1000; i += 2)
        memcpy(name + i, "\xc3\xa9", 2);
    name[1000] = '\0';
    char *j = xasprintf("{\"weight_map\":{\"%s\":\"../x\"}}", name);
    struct st_index *idx;
    struct st_error err;
    CHECK(parse(j, &idx, &err) == ST_ERR_INDEX_SHARD_PATH);
    CHECK(utf8_valid(err.message, strlen(err.message)));
    CHECK_CONTAINS(err.message, "...");
    CHECK_CONTAINS(err.message, "\"..\"");
    free(j);
    free(name);
}

TEST(large_index)
{
    /* 200k entries over 50 shards parse quickly */
    size_t n = 200000, cap = n * 64 + 64, len = 0;
    char *j = xmalloc(cap);
    len += (size_t)sprintf(j, "{\"weight_map\":{");
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(j + len, "%s\"model.layers.%zu.w\":\"model-%05zu.safetensors\"",
                               i ? "," : "", i, i % 50);
    len += (size_t)sprintf(j + len, "}}");
    struct st_index *idx;
    struct st_error err;
    uint64_t t0 = time_mono_ns();
    CHECK(ST_CODE(st_index_parse(j, len, "big.index.json", &idx, &err), &err) == ST_OK);
    double dt = (double)(time_mono_ns() - t0) / 1e9;
    printf("  200k-entry index: %.3f s\n", dt);
    CHECK(dt < 3.0);
    CHECK_EQ_U64(idx->n_entries, n);
    CHECK_EQ_U64(idx->n_shards, 50);
    CHECK_STR(idx->shards[49], "model-00049.safetensors");
    CHECK_STR(idx->entries[n - 1].tensor, "model.layers.199999.w");
    st_index_free(idx);
    free(j);
}

TEST(raw_nul_byte)
{
    /* jansson dropped a NUL after a number and accepted this */
    const char j[] = "{\"weight_map\":{\"a\":\"x\"},\"n\":1\0}";
    struct st_index *idx = NULL;
    struct st_error err;
    CHECK(ST_CODE(st_index_parse(j, sizeof(j) - 1, "m.safetensors.index.json", &idx, &err),
                  &err) ==
          ST_ERR_INDEX_JSON);
    CHECK(idx == NULL);
    CHECK_CONTAINS(err.message, "NUL byte at offset 29");
}

TEST(metadata_reencoded_as_jansson_writes_it)
{
    struct st_index *idx;
    struct st_error err;
    CHECK(parse("{\"metadata\":{\"r\":1E+5,\"z\":-0,\"s\":\"\\u00e9\\/\\u0000\\ud83d\\ude00\","
                "\"e\":{},\"a\":[ ]},\"weight_map\":{\"t\":\"x\"}}", &idx, &err) == ST_OK);
    CHECK_STR(idx->metadata_json,
              "{\"r\":100000.0,\"z\":0,\"s\":\"\xc3\xa9/\\u0000\xf0\x9f\x98\x80\",\"e\":{},\"a\":[]}");
    st_index_free(idx);
}

TEST(out_of_memory_is_reported)
{
#if defined(__SANITIZE_ADDRESS__)
    printf("  SKIP: ASan needs its address space, no RLIMIT_AS test\n");
    return;
#endif
    size_t n = 300000, cap = n * 64 + 64, len = 0;
    char *j = xmalloc(cap);
    len += (size_t)sprintf(j, "{\"weight_map\":{");
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(j + len, "%s\"model.layers.%zu.w\":\"model-%05zu.safetensors\"",
                               i ? "," : "", i, i % 7);
    len += (size_t)sprintf(j + len, "}}");
    struct rlimit old, tight;
    CHECK(getrlimit(RLIMIT_AS, &old) == 0);
    /* a few MB: the index needs about 25 */
    for (size_t room = 1 << 20; room <= (8u << 20); room *= 2) {
        tight = old;
        tight.rlim_cur = vm_size_bytes() + room;
        CHECK(setrlimit(RLIMIT_AS, &tight) == 0);
        struct st_index *idx = (struct st_index *)1;
        struct st_error err;
        enum st_status rc = ST_CODE(st_index_parse(j, len, "big.index.json", &idx, &err), &err);
        CHECK(setrlimit(RLIMIT_AS, &old) == 0);
        CHECK(rc == ST_ERR_NO_MEMORY);
        CHECK(idx == NULL);
        CHECK_CONTAINS(err.message, "big.index.json: not enough memory");
    }
    struct st_index *idx;
    struct st_error err;
    CHECK(ST_CODE(st_index_parse(j, len, "big.index.json", &idx, &err), &err) == ST_OK);
    CHECK_EQ_U64(idx->n_entries, n);
    st_index_free(idx);
    free(j);
}

/* ---- against the jansson-based parser it replaced ---- */

static unsigned rnd(unsigned *seed, unsigned n)
{
    return (unsigned)rand_r(seed) % n;
}

static const char *const NAME_PARTS[] = {
    "model", ".layers.", "0", "17", ".weight", "caf\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80",
    "\\\"", "\\\\", "\\n", "\\u00e9", "\\ud83d\\ude00", "\\/", "a/b", " ", "\\u0041", "\\t",
};
static const char *const SHARDS[] = {
    "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "x.safetensors",
    "caf\xc3\xa9.safetensors", "a\\u002fb", "../up", "", "a\\u0000b", "sub/x", "\\\\", ".", "x\\ny",
};
static const char *const META_VALUES[] = {
    "24", "-0", "1.5", "1e5", "1E-7", "-2.5e300", "0.1", "true", "false", "null", "\"s\"",
    "\"\\u0000\"", "\"\\ud83d\\ude00\\/\\u001f\"", "[]", "{}", "[1,[2,[3]],{\"k\":\"v\"}]",
    "{\"a\":{\"b\":[null,1.0,\"x\"]}}", "9223372036854775807", "-9223372036854775808", "1e-400",
};

/* A random index, valid or nearly: names with escapes, every kind of
 * metadata value, sometimes other keys, sometimes odd whitespace. */
static size_t gen_index(unsigned *seed, char *out, size_t cap)
{
    size_t n = 0;
#define PUT(...) (n += (size_t)snprintf(out + n, cap > n ? cap - n : 0, __VA_ARGS__))
    const char *ws = rnd(seed, 3) ? "" : " \n\t";
    PUT("%s{", ws);
    int parts = 0;
    if (rnd(seed, 2)) {
        PUT("\"metadata\":%s{", ws);
        int k = (int)rnd(seed, 4);
        for (int i = 0; i < k; i++)
            PUT("%s\"k%d%s\":%s", i ? "," : "", i, rnd(seed, 4) ? "" : "\\u00e9",
                META_VALUES[rnd(seed, ARRAY_LEN(META_VALUES))]);
        PUT("}");
        parts++;
    }
    if (rnd(seed, 5) == 0)
        PUT("%s\"other\":[1,{\"x\":true}]", parts++ ? "," : "");
    PUT("%s\"weight_map\":{", parts++ ? "," : "");
    int entries = (int)rnd(seed, 6);
    for (int i = 0; i < entries; i++) {
        PUT("%s\"t%d", i ? "," : "", i);
        for (int p = (int)rnd(seed, 3); p > 0; p--)
            PUT("%s", NAME_PARTS[rnd(seed, ARRAY_LEN(NAME_PARTS))]);
        unsigned sh = rnd(seed, 10) ? rnd(seed, 4) : rnd(seed, ARRAY_LEN(SHARDS));
        PUT("\":%s\"%s\"", ws, SHARDS[sh]);
    }
    PUT("}}%s", ws);
#undef PUT
    return n < cap ? n : cap - 1;
}

static const char *const INSERTS[] = {
    "{", "}", "[", "]", ":", ",", "\"", "\\", " ", "-", "0", "1", "e", ".", "true", "null", "\x01",
    "\xc3\xa9", "\xff", "\xed\xa0\x80", "\\u0000", "\\ud800", "\"weight_map\":{}", "\"metadata\":1",
    "\"t0\":\"x\"", "1e999", "99999999999999999999", "\t", "\n", "/", "\x7f",
};

/* One random edit of buf[0..n) (capacity cap): delete, insert or replace. */
static size_t mutate(unsigned *seed, char *buf, size_t n, size_t cap)
{
    size_t at = n ? rnd(seed, (unsigned)n + 1) : 0;
    switch (rnd(seed, 3)) {
    case 0: { /* delete 1-3 bytes */
        size_t k = 1 + rnd(seed, 3);
        if (at + k > n)
            k = n - at;
        memmove(buf + at, buf + at + k, n - at - k);
        return n - k;
    }
    case 1: { /* insert a token */
        const char *t = INSERTS[rnd(seed, ARRAY_LEN(INSERTS))];
        size_t k = strlen(t);
        if (n + k >= cap)
            return n;
        memmove(buf + at + k, buf + at, n - at);
        memcpy(buf + at, t, k);
        return n + k;
    }
    default: /* replace a byte */
        if (at < n)
            buf[at] = (char)rnd(seed, 256);
        return n;
    }
}

TEST(agrees_with_the_jansson_parser)
{
    unsigned seed = 20240611;
    char buf[4096], why[1024];
    int cases = 0, valid = 0, differ = 0;
    for (int i = 0; i < 30000; i++) {
        size_t n = gen_index(&seed, buf, sizeof(buf));
        for (int m = (int)rnd(&seed, 4); m > 0; m--)
            n = mutate(&seed, buf, n, sizeof(buf));
        cases++;
        struct st_index *idx = NULL;
        struct st_error e;
        valid += st_index_parse(buf, n, "x", &idx, &e) == 0;
        st_index_free(idx);
        if (st_index_compare(buf, n, why, sizeof(why)) != 0) {
            if (++differ <= 10)
                fprintf(stderr, "  input %.*s\n    %s\n", (int)n, buf, why);
        }
    }
    printf("  %d cases against the jansson parser (%d valid), %d differ\n", cases, valid, differ);
    CHECK(differ == 0);
    CHECK(valid > 3000);
}

int main(void)
{
    RUN(valid);
    RUN(valid_without_metadata);
    RUN(json_errors);
    RUN(depth);
    RUN(too_large);
    RUN(shape_errors);
    RUN(empty);
    RUN(shard_paths);
    RUN(path_ok);
    RUN(long_names_in_messages);
    RUN(large_index);
    RUN(raw_nul_byte);
    RUN(metadata_reencoded_as_jansson_writes_it);
    RUN(out_of_memory_is_reported);
    RUN(agrees_with_the_jansson_parser);
    return TEST_SUMMARY();
}
