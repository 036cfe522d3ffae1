/* st_index: *.safetensors.index.json parsing, in one pass over json_scan's
 * tokens with no JSON tree (a 91 MB index took 820 MB and 8 s as a jansson
 * tree; now its names and 40 bytes an entry).
 *
 * Checks before the scan: size cap, UTF-8, nesting depth (so a deep
 * document cannot exhaust the stack), no NUL byte. The scan then accepts and rejects
 * what jansson's json_loadb(JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL |
 * JSON_DECODE_ANY) did, with its messages, and the checks of the index's
 * shape come after, in the order they were made on the tree: a JSON error
 * anywhere is reported before any of them, so they are set aside while the
 * rest of the text is read. Names are decoded straight into one string
 * region (a decoded string is never longer than its JSON text, so the
 * region is the text's size; pages never written stay virtual), equal shard
 * names once. "metadata" is re-encoded into a strbuf as it is read. Every
 * allocation is fallible: out of memory is ST_ERR_NO_MEMORY. */
#include "st_index.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json_scan.h"
#include "nameset.h"
#include "strbuf.h"
#include "util.h"

/* Copies at most SHOW_MAX bytes of s[0..n) into out for a message (users see
 * it inside JSON, so it must be UTF-8): control bytes and bytes that are not
 * well-formed UTF-8 become '?', and a cut never splits a sequence. */
#define SHOW_MAX 80
static const char *show(const char *s, size_t n, char out[SHOW_MAX + 4])
{
    size_t i = 0, j = 0;
    while (i < n) {
        size_t k = utf8_decode(s + i, n - i, NULL);
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
 * once it exceeds limit. Strings are skipped with their escapes. *keys2
 * gets the number of ':' at depth 2: weight_map's entries and a few more. */
static unsigned max_depth(const char *json, size_t len, unsigned limit, size_t *keys2)
{
    unsigned depth = 0, max = 0;
    int in_str = 0;
    *keys2 = 0;
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
        } else if (c == ':') {
            *keys2 += depth == 2;
        }
    }
    return max;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* One parse: the scanner, the string region's free end, what has been read,
 * and the first error of the index's shape, which waits for the JSON. */
struct reader {
    struct json_scan js;
    const char *file;
    char *str;                      /* next free byte of the string region */
    struct st_index_entry *entries;
    size_t n_entries, cap_entries;
    const char **shards;            /* distinct shard names, in order of appearance */
    size_t n_shards, cap_shards;
    struct nameset tensors, shard_names;
    struct strbuf meta;             /* "metadata", re-encoded */
    int not_object, has_meta, meta_not_object, has_map, map_not_object;
    struct st_error entry_err;      /* the first bad weight_map entry, in file order */
};

/* Decodes the current string, NUL-terminated, at the free end of the
 * string region without claiming it; keep() claims it. */
static char *peek_string(struct reader *r, size_t *len)
{
    *len = json_scan_decode(&r->js, r->str, r->js.str_len);
    r->str[*len] = '\0';
    return r->str;
}

static void keep(struct reader *r, size_t len)
{
    r->str += len + 1;
}

/* Appends one element to a growing array; -1 when it cannot grow. */
static int push(void **arr, size_t *n, size_t *cap, size_t size, const void *elem)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        void *p = c < SIZE_MAX / size ? realloc(*arr, c * size) : NULL;
        if (!p)
            return -1;
        *arr = p;
        *cap = c;
    }
    memcpy((char *)*arr + *n * size, elem, size);
    (*n)++;
    return 0;
}

static int copy_value(struct reader *r, unsigned depth);

/* An array of "metadata", from its '[' (the checks are json_scan_value's). */
static int copy_array(struct reader *r, unsigned depth)
{
    struct json_scan *js = &r->js;
    strbuf_putc(&r->meta, '[');
    if (json_scan_next(js) != ']') {
        for (;;) {
            if (js->tok == JSON_TOK_EOF)
                return json_scan_fail(js, JSON_ERR_ARRAY_END);
            if (copy_value(r, depth + 1) != 0)
                return -1;
            int more = json_scan_more(js, ']');
            if (more <= 0) {
                if (more < 0)
                    return -1;
                break;
            }
            strbuf_putc(&r->meta, ',');
        }
    }
    strbuf_putc(&r->meta, ']');
    return 0;
}

/* An object of "metadata", from its '{': keys in file order, each once. */
static int copy_object(struct reader *r, unsigned depth)
{
    struct json_scan *js = &r->js;
    struct json_scan_keys keys = JSON_SCAN_KEYS_INIT;
    int rc = -1;
    strbuf_putc(&r->meta, '{');
    if (json_scan_next(js) != '}') {
        for (;;) {
            size_t n;
            if (json_scan_key(js) != 0 || json_scan_keys_add(js, &keys) != 0)
                goto done;
            const char *key = peek_string(r, &n);
            strbuf_json_string(&r->meta, key, n);
            strbuf_putc(&r->meta, ':');
            if (json_scan_colon(js) != 0 || copy_value(r, depth + 1) != 0)
                goto done;
            int more = json_scan_more(js, '}');
            if (more < 0)
                goto done;
            if (!more)
                break;
            strbuf_putc(&r->meta, ',');
        }
    }
    strbuf_putc(&r->meta, '}');
    rc = 0;
done:
    json_scan_keys_free(&keys);
    return rc;
}

/* A value inside "metadata", at `depth` as jansson counted, written to
 * r->meta as json_dumps(JSON_COMPACT) writes it. */
static int copy_value(struct reader *r, unsigned depth)
{
    struct json_scan *js = &r->js;
    size_t n;
    if (depth > JSON_SCAN_MAX_DEPTH)
        return json_scan_fail(js, JSON_ERR_DEPTH);
    if (json_scan_value_start(js) != 0)
        return -1;
    switch (js->tok) {
    case JSON_TOK_STRING: {
        const char *str = peek_string(r, &n);
        strbuf_json_string(&r->meta, str, n);
        return 0;
    }
    case JSON_TOK_INTEGER: strbuf_json_int(&r->meta, js->integer); return 0;
    case JSON_TOK_REAL: strbuf_json_real(&r->meta, js->real); return 0;
    case JSON_TOK_TRUE: strbuf_puts(&r->meta, "true"); return 0;
    case JSON_TOK_FALSE: strbuf_puts(&r->meta, "false"); return 0;
    case JSON_TOK_NULL: strbuf_puts(&r->meta, "null"); return 0;
    case '[': return copy_array(r, depth);
    default: return copy_object(r, depth);
    }
}

/* The value of weight_map entry `name`, from its first token: a shard path
 * is checked, kept once per distinct name, and the entry recorded. */
static int read_entry(struct reader *r, const char *name, size_t nlen)
{
    struct json_scan *js = &r->js;
    char sa[SHOW_MAX + 4], sb[SHOW_MAX + 4];
    if (js->tok != JSON_TOK_STRING) {
        if (json_scan_value(js, 3, JSON_SCAN_MAX_DEPTH) != 0)
            return -1;
        if (r->entry_err.code == ST_OK)
            st_error_fail(&r->entry_err, ST_ERR_INDEX_SHAPE,
                          "%s: weight_map entry for tensor \"%s\" is not a string", r->file,
                          show(name, nlen, sa));
        return 0;
    }
    if (json_scan_value_start(js) != 0 || r->entry_err.code != ST_OK)
        return r->js.failed ? -1 : 0; /* after a bad entry only the JSON matters */
    size_t slen;
    const char *shard = peek_string(r, &slen), *same;
    const char *why = path_problem(shard, slen);
    if (why) {
        st_error_fail(&r->entry_err, ST_ERR_INDEX_SHARD_PATH,
                      "%s: shard path \"%s\" for tensor \"%s\" %s", r->file, show(shard, slen, sb),
                      show(name, nlen, sa), why);
        return 0;
    }
    /* A valid path holds no NUL, as the name set needs. */
    int added = nameset_add(&r->shard_names, nameset_hash(&r->shard_names, shard, slen), shard,
                            slen, &same);
    if (added == 0) {
        keep(r, slen);
        same = shard;
        if (push((void **)&r->shards, &r->n_shards, &r->cap_shards, sizeof(*r->shards), &same))
            return json_scan_fail(js, JSON_ERR_NO_MEMORY);
    } else if (added != -EEXIST) {
        return json_scan_fail(js, JSON_ERR_NO_MEMORY);
    }
    struct st_index_entry e = {name, same};
    if (push((void **)&r->entries, &r->n_entries, &r->cap_entries, sizeof(e), &e) != 0)
        return json_scan_fail(js, JSON_ERR_NO_MEMORY);
    return 0;
}

/* weight_map, from its '{'. Tensor names are keys, so they hold no NUL.
 * The name's slot in the (big) set is a cache miss: it is fetched at the
 * key and looked at after the value; a duplicate is still reported at its
 * key, before any error inside the value, as jansson did. */
static int read_map(struct reader *r)
{
    struct json_scan *js = &r->js;
    if (json_scan_next(js) == '}')
        return 0;
    for (;;) {
        size_t nlen;
        if (json_scan_key(js) != 0)
            return -1;
        size_t key_start = js->start, key_end = js->pos;
        const char *name = peek_string(r, &nlen);
        uint64_t h = nameset_hash(&r->tensors, name, nlen);
        nameset_prefetch(&r->tensors, h);
        keep(r, nlen);
        int bad = json_scan_colon(js) != 0 || read_entry(r, name, nlen) != 0;
        int added = nameset_add(&r->tensors, h, name, nlen, NULL);
        if (added == -EEXIST)
            return json_scan_fail_at(js, JSON_ERR_DUPLICATE_KEY, key_start, key_end);
        if (added != 0)
            return json_scan_fail(js, JSON_ERR_NO_MEMORY);
        if (bad)
            return -1;
        int more = json_scan_more(js, '}');
        if (more <= 0)
            return more;
    }
}

/* A member of the top-level object (ctx: the reader). */
static int root_member(struct json_scan *js, const char *key, unsigned depth, void *ctx)
{
    struct reader *r = ctx;
    int is_meta = strcmp(key, "metadata") == 0, is_map = strcmp(key, "weight_map") == 0;
    r->has_meta |= is_meta;
    r->has_map |= is_map;
    if (is_meta && js->tok == '{')
        return copy_value(r, depth);
    if (is_map && js->tok == '{')
        return read_map(r);
    r->meta_not_object |= is_meta;
    r->map_not_object |= is_map;
    return json_scan_value(js, depth, JSON_SCAN_MAX_DEPTH);
}

/* The whole text: any JSON value (JSON_DECODE_ANY), then only whitespace. */
static int read_document(struct reader *r)
{
    struct json_scan *js = &r->js;
    if (json_scan_next(js) == '{') {
        if (json_scan_each(js, 1, JSON_SCAN_MAX_DEPTH, root_member, r) != 0)
            return -1;
    } else {
        if (json_scan_value(js, 1, JSON_SCAN_MAX_DEPTH) != 0)
            return -1;
        r->not_object = 1;
    }
    if (json_scan_next(js) != JSON_TOK_EOF)
        return json_scan_fail(js, JSON_ERR_TRAILING);
    return 0;
}

/* The first error once the text is known to be JSON, in the order the
 * checks were made on the tree; 0 when there is none. */
static int shape_error(const struct reader *r, struct st_error *err)
{
    const char *file = r->file;
    if (r->not_object)
        return st_error_fail(err, ST_ERR_INDEX_SHAPE, "%s: top level is not a JSON object", file);
    if (r->meta_not_object)
        return st_error_fail(err, ST_ERR_INDEX_SHAPE, "%s: \"metadata\" is not an object", file);
    if (!r->has_map)
        return st_error_fail(err, ST_ERR_INDEX_SHAPE, "%s: \"weight_map\" is missing", file);
    if (r->map_not_object)
        return st_error_fail(err, ST_ERR_INDEX_SHAPE, "%s: \"weight_map\" is not an object", file);
    if (r->tensors.count == 0)
        return st_error_fail(err, ST_ERR_INDEX_EMPTY, "%s: \"weight_map\" has no entries", file);
    if (r->entry_err.code != ST_OK)
        return st_error_fail(err, r->entry_err.code, "%s", r->entry_err.message);
    return 0;
}

/* The checks on the raw bytes before any token is read: size, UTF-8,
 * nesting depth (which also counts the depth-2 keys into *keys2) and NUL. */
static int check_text(const char *json, size_t len, const char *file, size_t *keys2,
                      struct st_error *err)
{
    if (len > ST_INDEX_MAX_LEN)
        return st_error_fail(err, ST_ERR_INDEX_JSON,
                             "%s: index is %zu bytes, more than the %llu allowed",
                             file, len, (unsigned long long)ST_INDEX_MAX_LEN);
    if (!utf8_valid(json, len))
        return st_error_fail(err, ST_ERR_INDEX_JSON, "%s: index is not valid UTF-8", file);
    if (max_depth(json, len, ST_INDEX_MAX_DEPTH, keys2) > ST_INDEX_MAX_DEPTH)
        return st_error_fail(err, ST_ERR_INDEX_JSON, "%s: JSON nesting deeper than %d", file,
                             ST_INDEX_MAX_DEPTH);
    /* JSON has no raw NUL byte. jansson dropped one that followed a number
     * or a word (and so accepted "1\0}"); json_scan needs them gone. */
    const char *nul = memchr(json, '\0', len);
    if (nul)
        return st_error_fail(err, ST_ERR_INDEX_JSON, "%s: index has a NUL byte at offset %zu", file,
                             (size_t)(nul - json));
    return 0;
}

/* A reader over json[0..len) whose names go into `region` (len + 1 bytes).
 * Its tables are sized for the entries the pre-pass counted, as far as an
 * entry of 32 bytes (real ones are 60-100) would take: a file of tiny keys
 * elsewhere cannot make them much bigger than itself; past it, they grow.
 * -ENOMEM when memory ran out (reader_free takes what was made). */
static int reader_init(struct reader *r, const char *json, size_t len, size_t keys2,
                       const char *file, char *region)
{
    size_t expect = keys2 < len / 32 ? keys2 : len / 32;
    if (nameset_init(&r->tensors, expect, region) != 0 ||
        nameset_init(&r->shard_names, 0, region) != 0 ||
        (expect && !(r->entries = malloc(expect * sizeof(*r->entries)))))
        return -ENOMEM;
    r->cap_entries = expect;
    json_scan_init(&r->js, json, len);
    r->js.allow_nul = 1; /* "\u0000" in a shard path gets the path check's message */
    r->file = file;
    r->str = region;
    return 0;
}

static void reader_free(struct reader *r)
{
    if (!r)
        return;
    nameset_free(&r->tensors);
    nameset_free(&r->shard_names);
    strbuf_release(&r->meta);
    free(r->entries);
    free(r->shards);
    free(r);
}

/* Why read_document failed: memory, or the JSON error json_scan found. */
static int read_error(const struct reader *r, size_t len, struct st_error *err)
{
    char txt[SHOW_MAX + 4];
    if (r->js.no_memory || r->meta.failed)
        return st_error_fail(err, ST_ERR_NO_MEMORY,
                             "%s: not enough memory to read the %zu-byte index (at line %d)",
                             r->file, len, r->js.line);
    return st_error_fail(err, ST_ERR_INDEX_JSON, "%s: line %d column %d: %s", r->file,
                         r->js.line, r->js.column, show(r->js.text, strlen(r->js.text), txt));
}

/* Moves what the reader collected (and the region of names) into a new
 * index; on success the reader no longer owns its tables nor `*region`. */
static int index_take(struct reader *r, char **region, size_t len, struct st_index **out,
                      struct st_error *err)
{
    struct st_index *idx = calloc(1, sizeof(*idx));
    char *meta = r->has_meta ? strbuf_detach(&r->meta, NULL) : NULL;
    if (!idx || (r->has_meta && !meta)) {
        free(idx);
        free(meta);
        return st_error_fail(err, ST_ERR_NO_MEMORY,
                             "%s: not enough memory to read the %zu-byte index", r->file, len);
    }
    qsort(r->shards, r->n_shards, sizeof(*r->shards), cmp_str);
    idx->n_entries = r->n_entries;
    idx->entries = r->entries;
    idx->n_shards = r->n_shards;
    idx->shards = r->shards;
    idx->metadata_json = meta;
    idx->arena = *region;
    r->entries = NULL;
    r->shards = NULL;
    *region = NULL;
    *out = idx;
    return 0;
}

int st_index_parse(const char *json, size_t len, const char *file, struct st_index **out,
                   struct st_error *err)
{
    int rc;
    size_t keys2 = 0;

    *out = NULL;
    if (!file)
        file = "(index)";
    if ((rc = check_text(json, len, file, &keys2, err)) != 0)
        return rc;
    struct reader *r = calloc(1, sizeof(*r));
    char *region = malloc(len + 1);
    if (!r || !region || reader_init(r, json, len, keys2, file, region) != 0) {
        rc = st_error_fail(err, ST_ERR_NO_MEMORY,
                           "%s: not enough memory to read the %zu-byte index", file, len);
        goto done;
    }
    if (read_document(r) != 0 || r->js.failed || r->meta.failed) {
        rc = read_error(r, len, err);
        goto done;
    }
    if ((rc = shape_error(r, err)) != 0)
        goto done;
    rc = index_take(r, &region, len, out, err);
done:
    reader_free(r);
    free(region);
    if (rc == 0 && err)
        st_error_fail(err, ST_OK, "%s", "");
    return rc;
}

void st_index_free(struct st_index *idx)
{
    if (!idx)
        return;
    free(idx->metadata_json);
    free((void *)idx->entries);
    free((void *)idx->shards);
    free(idx->arena);
    free(idx);
}
