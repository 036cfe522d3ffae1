/* Fuzzes json_scan against jansson, which it replaces in st_header and must
 * match: json_scan_document must accept exactly what json_loadb accepts with
 * JSON_REJECT_DUPLICATES, fail with the same text, line, column and position
 * (and the duplicate-key flag where jansson says json_error_duplicate_key),
 * and on success every string, integer and real token, read in document
 * order and decoded, must equal jansson's value (whole and cut short).
 *
 * Only inputs that are UTF-8 without NUL bytes are compared: json_scan's
 * callers reject the others first, and jansson reports them its own way. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json_scan.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The scalars of the document, in order, from a second scanner. */
static struct json_scan tokens;

static int next_scalar(void)
{
    for (;;) {
        int t = json_scan_next(&tokens);
        if (t == JSON_TOK_STRING || t == JSON_TOK_INTEGER || t == JSON_TOK_REAL ||
            t == JSON_TOK_EOF || t == JSON_TOK_INVALID)
            return t;
    }
}

static void check_string(const char *v, size_t n)
{
    if (next_scalar() != JSON_TOK_STRING || tokens.str_len != n)
        abort();
    char *buf = xmalloc(n + 1);
    if (json_scan_decode(&tokens, buf, n) != n || memcmp(buf, v, n) != 0)
        abort();
    /* Cut short: the first bytes, nothing past cap. */
    size_t cap = n / 2;
    memset(buf, 0x5a, n + 1);
    if (json_scan_decode(&tokens, buf, cap) != n || memcmp(buf, v, cap) != 0 || buf[cap] != 0x5a)
        abort();
    free(buf);
}

static void walk(json_t *j)
{
    const char *key;
    size_t klen, i;
    json_t *v;
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        json_object_keylen_foreach(j, key, klen, v)
        {
            check_string(key, klen);
            walk(v);
        }
        break;
    case JSON_ARRAY:
        json_array_foreach(j, i, v) walk(v);
        break;
    case JSON_STRING:
        check_string(json_string_value(j), json_string_length(j));
        break;
    case JSON_INTEGER:
        if (next_scalar() != JSON_TOK_INTEGER || tokens.integer != json_integer_value(j))
            abort();
        break;
    case JSON_REAL: {
        double r = json_real_value(j);
        if (next_scalar() != JSON_TOK_REAL || memcmp(&tokens.real, &r, sizeof(r)) != 0)
            abort();
        break;
    }
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct json_scan s;
    json_scan_init(&s, (const char *)data, size);
    int rc = json_scan_document(&s);
    if ((rc == 0) == (s.failed != 0))
        abort();
    if (!utf8_valid((const char *)data, size) || memchr(data, 0, size))
        return 0;
    json_error_t e;
    json_t *j = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &e);
    if ((rc == 0) != (j != NULL))
        abort();
    if (j) {
        json_scan_init(&tokens, (const char *)data, size);
        walk(j);
        if (next_scalar() != JSON_TOK_EOF)
            abort();
        json_decref(j);
        return 0;
    }
    if (strcmp(s.text, e.text) != 0 || s.line != e.line || s.column != e.column ||
        s.position != (size_t)e.position ||
        s.duplicate != (json_error_code(&e) == json_error_duplicate_key))
        abort();
    return 0;
}
