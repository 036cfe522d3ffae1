/* tjson: a small JSON reader for the client library, which links nothing
 * but libc (the daemon's answers are JSON; jansson stays on the daemon
 * side). Integers are kept exact up to 64 bits, strings are decoded to
 * UTF-8, nesting is limited to TJSON_MAX_DEPTH. */
#ifndef TENSORD_TJSON_H
#define TENSORD_TJSON_H

#include <stddef.h>
#include <stdint.h>

#define TJSON_MAX_DEPTH 32

enum tjson_type { TJ_NULL, TJ_BOOL, TJ_NUMBER, TJ_STRING, TJ_ARRAY, TJ_OBJECT };

struct tjson {
    enum tjson_type type;
    char *key;                 /* member name when inside an object, else NULL */
    char *str;                 /* TJ_STRING: decoded, NUL-terminated */
    size_t len;                /* TJ_STRING: bytes; TJ_ARRAY/TJ_OBJECT: members */
    struct tjson *items;       /* TJ_ARRAY/TJ_OBJECT members */
    int boolean;               /* TJ_BOOL */
    int is_uint;               /* TJ_NUMBER written as a non-negative integer that fits uint64 */
    uint64_t u;                /* ... its value */
    double num;                /* TJ_NUMBER as a double */
};

/* Parses s[0..len) (one value, whitespace around it). Returns a tree the
 * caller frees with tjson_free, or NULL with a message in err. */
struct tjson *tjson_parse(const char *s, size_t len, char *err, size_t errlen);
void tjson_free(struct tjson *v);

/* Member key of an object, or NULL (also when v is not an object). */
const struct tjson *tjson_get(const struct tjson *v, const char *key);
/* The string, or NULL when v is not a string. */
const char *tjson_str(const struct tjson *v);
/* Returns 0 and sets *out when v is a non-negative integer, else -1. */
int tjson_uint(const struct tjson *v, uint64_t *out);

#endif
