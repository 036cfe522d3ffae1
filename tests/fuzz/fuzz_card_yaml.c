/* Fuzzes the model card reader (core/req/card_yaml.c): a README's front matter
 * found and read with libyaml into JSON. The first byte picks what the rest
 * is: a whole README (odd) or the YAML alone (even). Checks:
 *  - the YAML found lies inside the text, after "---" and a line break;
 *  - an error has a code of the documented set and a message, and leaves
 *    no text;
 *  - the JSON is one object that jansson reads (duplicate keys refused; NUL
 *    characters in values, which YAML's "\0" writes),
 *    and that jansson writes back byte for byte (JSON_COMPACT): escapes and
 *    numbers as jansson writes them;
 *  - it is at most CARD_YAML_MAX_OUTPUT bytes;
 *  - JSON is YAML: the output read again as YAML gives the same bytes (a
 *    fixed point), unless it has a key of over 1,000 bytes (YAML's limit
 *    on an implicit key is 1,024 characters) or a character that YAML
 *    escapes only could write (C1 controls, BOM, U+FFFE/U+FFFF) or reads
 *    as a line break (NEL, U+2028, U+2029), which JSON writes as it is. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "card_yaml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(int rc, const struct st_error *err, const char *json)
{
    if (json || !err->message[0] || !memchr(err->message, 0, sizeof(err->message)) ||
        rc != st_status_errno(err->code))
        abort();
    switch (err->code) {
    case ST_ERR_INVALID_ARGUMENT:
    case ST_ERR_DUPLICATE_KEY:
    case ST_ERR_DEPTH:
    case ST_ERR_LIMIT:
    case ST_ERR_NO_MEMORY:
        return;
    default:
        abort();
    }
}

/* Whether an object or array below v has a key longer than 1,000 bytes. */
static int has_long_key(json_t *v)
{
    const char *k;
    json_t *x;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach(v, k, x) if (strlen(k) > 1000 || has_long_key(x)) return 1;
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, x) if (has_long_key(x)) return 1;
    }
    return 0;
}

/* Whether UTF-8 text s[0..n) has a character YAML 1.1 does not read back
 * as itself (see above). */
static int has_yaml_special(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == 0xc2 && i + 1 < n && s[i + 1] >= 0x80 && s[i + 1] <= 0x9f)
            return 1; /* U+0080..U+009F */
        if (s[i] == 0xe2 && i + 2 < n && s[i + 1] == 0x80 && (s[i + 2] == 0xa8 || s[i + 2] == 0xa9))
            return 1; /* U+2028, U+2029 */
        if (s[i] == 0xef && i + 2 < n && ((s[i + 1] == 0xbb && s[i + 2] == 0xbf) ||
                                          (s[i + 1] == 0xbf && s[i + 2] >= 0xbe)))
            return 1; /* U+FEFF, U+FFFE, U+FFFF */
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *text = (const char *)data + 1, *yaml = text;
    size_t len = size - 1, yaml_len = len;
    if ((data[0] & 1) && !card_yaml_front_matter(text, len, &yaml, &yaml_len))
        return 0;
    if (yaml < text || yaml + yaml_len > text + len)
        abort();
    if (data[0] & 1) {
        /* "---" and a line break before the YAML, a line break and "---" after */
        const char *p = yaml, *e = yaml + yaml_len;
        p -= p > text && p[-1] == '\n';
        p -= p > text && p[-1] == '\r';
        if (p == yaml || p - text < 3 || memcmp(p - 3, "---", 3) != 0)
            abort();
        e += e < text + len && *e == '\r';
        e += e < text + len && *e == '\n';
        if (e == yaml + yaml_len || text + len - e < 3 || memcmp(e, "---", 3) != 0)
            abort();
    }
    char *json = NULL, *again = NULL;
    size_t n = 0, n2 = 0;
    struct st_error err;
    memset(&err, 'z', sizeof(err));
    int rc = card_yaml_to_json(yaml, yaml_len, &json, &n, &err);
    if (rc < 0) {
        check_error(rc, &err, json);
        return 0;
    }
    if (rc == 0) {
        if (json)
            abort();
        return 0;
    }
    if (rc != 1 || !json || strlen(json) != n || n > CARD_YAML_MAX_OUTPUT)
        abort();
    json_error_t je;
    json_t *doc = json_loadb(json, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!doc || !json_is_object(doc))
        abort();
    char *dumped = json_dumps(doc, JSON_COMPACT);
    if (!dumped || strcmp(dumped, json) != 0)
        abort();
    free(dumped);
    if (!has_long_key(doc) && !has_yaml_special((const unsigned char *)json, n)) {
        memset(&err, 'z', sizeof(err));
        if (card_yaml_to_json(json, n, &again, &n2, &err) != 1 || n2 != n ||
            memcmp(again, json, n) != 0)
            abort();
    }
    json_decref(doc);
    free(again);
    free(json);
    return 0;
}
