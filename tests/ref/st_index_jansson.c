/* The index parser as it was while it built a jansson tree (core/format/st_index.c
 * at 49d70a4), kept as the oracle that the tree-less parser is compared
 * with: the fuzz target and test_st_index feed both the same bytes and
 * require the same status, message, entries, shards and metadata.
 *
 * Not compiled on its own: a test includes it after "st_index.h", and its
 * functions get a ref_ prefix. Its index shares struct st_index but keeps
 * everything in one arena, so only ref_st_index_free may free it. */
enum st_status ref_st_index_parse(const char *json, size_t len, const char *file,
                                  struct st_index **out, struct st_error *err);
void ref_st_index_free(struct st_index *idx);
int ref_st_index_path_ok(const char *path);

#define st_index_parse ref_st_index_parse
#define st_index_free ref_st_index_free
#define st_index_path_ok ref_st_index_path_ok

#include "st_index.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strmap.h"
#include "util.h"

/* Fills err and returns code: this parser's own convention, kept as it was. */
static enum st_status ref_set(struct st_error *err, enum st_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum st_status ref_set(struct st_error *err, enum st_status code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Length of the well-formed UTF-8 sequence at s[0..n), or 0. */
static size_t utf8_seq(const char *s, size_t n)
{
    for (size_t k = 1; k <= 4 && k <= n; k++)
        if (utf8_valid(s, k))
            return k;
    return 0;
}

/* Copies at most SHOW_MAX bytes of s[0..n) into out for a message (users see
 * it inside JSON, so it must be UTF-8): control bytes and bytes that are not
 * well-formed UTF-8 become '?', and a cut never splits a sequence. */
#define SHOW_MAX 80
static const char *show(const char *s, size_t n, char out[SHOW_MAX + 4])
{
    size_t i = 0, j = 0;
    while (i < n) {
        size_t k = utf8_seq(s + i, n - i);
        if (j + (k ? k : 1) > SHOW_MAX)
            break;
        unsigned char c = (unsigned char)s[i];
        if (k == 0 || (k == 1 && (c < 0x20 || c == 0x7f))) {
            out[j++] = '?';
            i++;
        } else {
            memcpy(out + j, s + i, k);
            j += k;
            i += k;
        }
    }
    if (i < n) {
        memcpy(out + j, "...", 3);
        j += 3;
    }
    out[j] = '\0';
    return out;
}

/* Why path[0..n) is not an acceptable shard name, or NULL when it is. */
static const char *path_problem(const char *path, size_t n)
{
    if (n == 0)
        return "is empty";
    if (path[0] == '/')
        return "is absolute";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)path[i];
        if (c == '\0')
            return "contains NUL";
        if (c < 0x20 || c == 0x7f)
            return "contains a control character";
        if (c == '\\')
            return "contains a backslash";
    }
    /* Component rules first, so "../x" and "a//b" get the precise reason. */
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && path[i] != '/')
            continue;
        size_t len = i - start;
        if (len == 0)
            return "has an empty component";
        if (len == 1 && path[start] == '.')
            return "has a \".\" component";
        if (len == 2 && path[start] == '.' && path[start + 1] == '.')
            return "has a \"..\" component";
        start = i + 1;
    }
    if (memchr(path, '/', n))
        return "names a subdirectory (shards must be directly in the model directory)";
    return NULL;
}

int st_index_path_ok(const char *path)
{
    return path && path_problem(path, strlen(path)) == NULL;
}

/* Largest nesting depth of arrays/objects in json[0..len), stopping early
 * once it exceeds limit. Strings are skipped with their escapes. */
static unsigned max_depth(const char *json, size_t len, unsigned limit)
{
    unsigned depth = 0, max = 0;
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char c = json[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > max) {
                max = depth;
                if (max > limit)
                    break;
            }
        } else if ((c == '}' || c == ']') && depth > 0) {
            depth--;
        }
    }
    return max;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

enum st_status st_index_parse(const char *json, size_t len, const char *file,
                              struct st_index **out, struct st_error *err)
{
    enum st_status rc = ST_OK;
    json_t *root = NULL;
    char *meta = NULL;
    struct strmap *distinct = NULL;
    const char **uniq = NULL; /* distinct shard strings, owned by root */
    struct st_index *idx = NULL;
    char sa[SHOW_MAX + 4], sb[SHOW_MAX + 4];

    *out = NULL;
    if (!file)
        file = "(index)";
    if (len > ST_INDEX_MAX_LEN)
        return ref_set(err, ST_ERR_INDEX_JSON, "%s: index is %zu bytes, more than the %llu allowed",
                            file, len, (unsigned long long)ST_INDEX_MAX_LEN);
    if (!utf8_valid(json, len))
        return ref_set(err, ST_ERR_INDEX_JSON, "%s: index is not valid UTF-8", file);
    if (max_depth(json, len, ST_INDEX_MAX_DEPTH) > ST_INDEX_MAX_DEPTH)
        return ref_set(err, ST_ERR_INDEX_JSON, "%s: JSON nesting deeper than %d", file,
                            ST_INDEX_MAX_DEPTH);

    /* JSON_ALLOW_NUL lets "\u0000" in a shard path reach the path check and
     * its precise message; jansson still refuses NUL in keys (tensor names). */
    json_error_t jerr;
    root = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (!root) {
        /* jansson quotes the input near the error, possibly cut mid-sequence */
        rc = ref_set(err, ST_ERR_INDEX_JSON, "%s: line %d column %d: %s", file, jerr.line,
                          jerr.column, show(jerr.text, strlen(jerr.text), sa));
        goto done;
    }
    if (!json_is_object(root)) {
        rc = ref_set(err, ST_ERR_INDEX_SHAPE, "%s: top level is not a JSON object", file);
        goto done;
    }
    json_t *meta_v = json_object_get(root, "metadata");
    if (meta_v) {
        if (!json_is_object(meta_v)) {
            rc = ref_set(err, ST_ERR_INDEX_SHAPE, "%s: \"metadata\" is not an object", file);
            goto done;
        }
        meta = json_dumps(meta_v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!meta)
            abort(); /* only fails on allocation */
    }
    json_t *map = json_object_get(root, "weight_map");
    if (!map) {
        rc = ref_set(err, ST_ERR_INDEX_SHAPE, "%s: \"weight_map\" is missing", file);
        goto done;
    }
    if (!json_is_object(map)) {
        rc = ref_set(err, ST_ERR_INDEX_SHAPE, "%s: \"weight_map\" is not an object", file);
        goto done;
    }
    size_t n = json_object_size(map);
    if (n == 0) {
        rc = ref_set(err, ST_ERR_INDEX_EMPTY, "%s: \"weight_map\" has no entries", file);
        goto done;
    }

    /* Pass 1: check every entry, count bytes and distinct shards. */
    distinct = strmap_new(16);
    uniq = xmalloc(n * sizeof(*uniq));
    size_t n_uniq = 0, bytes = 0;
    const char *key;
    size_t klen;
    json_t *val;
    json_object_keylen_foreach(map, key, klen, val)
    {
        if (!json_is_string(val)) {
            rc = ref_set(err, ST_ERR_INDEX_SHAPE,
                              "%s: weight_map entry for tensor \"%s\" is not a string", file,
                              show(key, klen, sa));
            goto done;
        }
        const char *shard = json_string_value(val);
        size_t slen = json_string_length(val);
        const char *why = path_problem(shard, slen);
        if (why) {
            rc = ref_set(err, ST_ERR_INDEX_SHARD_PATH,
                              "%s: shard path \"%s\" for tensor \"%s\" %s", file,
                              show(shard, slen, sb), show(key, klen, sa), why);
            goto done;
        }
        bytes += klen + 1;
        if (strmap_put(distinct, shard, slen, NULL) == 0) {
            uniq[n_uniq++] = shard;
            bytes += slen + 1;
        }
    }

    /* Pass 2: one arena, [entries][shard pointers][strings]. */
    size_t hdr = n * sizeof(struct st_index_entry) + n_uniq * sizeof(const char *);
    char *arena = xmalloc(hdr + bytes);
    idx = xcalloc(1, sizeof(*idx));
    idx->arena = arena;
    idx->entries = (struct st_index_entry *)(void *)arena;
    idx->shards = (const char **)(void *)(arena + n * sizeof(struct st_index_entry));
    idx->n_entries = n;
    idx->n_shards = n_uniq;
    char *sp = arena + hdr;
    struct strmap *interned = strmap_new(n_uniq);
    for (size_t i = 0; i < n_uniq; i++) {
        size_t slen = strlen(uniq[i]);
        memcpy(sp, uniq[i], slen + 1);
        idx->shards[i] = sp;
        strmap_put(interned, sp, slen, sp);
        sp += slen + 1;
    }
    qsort(idx->shards, n_uniq, sizeof(*idx->shards), cmp_str);
    size_t i = 0;
    json_object_keylen_foreach(map, key, klen, val)
    {
        memcpy(sp, key, klen);
        sp[klen] = '\0';
        idx->entries[i].tensor = sp;
        sp += klen + 1;
        idx->entries[i].shard =
            strmap_get(interned, json_string_value(val), json_string_length(val));
        i++;
    }
    strmap_free(interned);
    if (meta) {
        idx->metadata_json = xstrdup(meta);
    }
    *out = idx;
    idx = NULL;
done:
    free(meta);
    free(uniq);
    strmap_free(distinct);
    json_decref(root);
    st_index_free(idx);
    if (rc == ST_OK && err)
        ref_set(err, ST_OK, "%s", "");
    return rc;
}

void st_index_free(struct st_index *idx)
{
    if (!idx)
        return;
    free(idx->metadata_json);
    free(idx->arena);
    free(idx);
}

#undef st_index_parse
#undef st_index_free
#undef st_index_path_ok
