/* json_scan: a strict JSON (RFC 8259) tokenizer over a buffer in memory, for
 * parsers that validate as they read and build no tree.
 *
 * It accepts and rejects exactly what jansson's json_loadb does with
 * JSON_REJECT_DUPLICATES (no NaN, no leading zeros, no trailing commas, no
 * control bytes or \u0000 in strings, no unpaired surrogates, integers that
 * fit in int64_t), and its first error carries jansson's text, line and
 * column, so messages read the same as before the parsers stopped using it.
 * The input must already be valid UTF-8 without NUL bytes (callers check that
 * in their own pre-pass: jansson refused those with texts of its own, or, for
 * a NUL outside strings, quirkily). A NUL right after a backslash, which such
 * a pre-pass may skip as escaped, is an invalid escape, as it was in jansson. */
#ifndef TENSORD_JSON_SCAN_H
#define TENSORD_JSON_SCAN_H

#include <stddef.h>
#include <stdint.h>

/* Tokens: the six structural characters are their own value ('{', ':' ...). */
enum {
    JSON_TOK_INVALID = -1, /* bad token; s->failed says whether the lexer saw why */
    JSON_TOK_EOF = 0,
    JSON_TOK_STRING = 256,
    JSON_TOK_INTEGER,
    JSON_TOK_REAL,
    JSON_TOK_TRUE,
    JSON_TOK_FALSE,
    JSON_TOK_NULL,
};

/* The parser-side errors, each with jansson's text. */
enum json_scan_err {
    JSON_ERR_VALUE,         /* "invalid token" / "unexpected token" where a value must start */
    JSON_ERR_KEY,           /* "string or '}' expected" */
    JSON_ERR_COLON,         /* "':' expected" */
    JSON_ERR_OBJECT_END,    /* "'}' expected" */
    JSON_ERR_ARRAY_END,     /* "']' expected" */
    JSON_ERR_TRAILING,      /* "end of file expected" */
    JSON_ERR_DOCUMENT,      /* "'[' or '{' expected" */
    JSON_ERR_DUPLICATE_KEY, /* "duplicate object key" */
    JSON_ERR_KEY_NUL,       /* "NUL byte in object key not supported" */
    JSON_ERR_VALUE_NUL,     /* "\u0000 is not allowed without JSON_ALLOW_NUL" */
    JSON_ERR_DEPTH,         /* "maximum parsing depth reached" */
    JSON_ERR_NO_MEMORY,     /* "out of memory": what the text holds needed more than there is */
};

#define JSON_SCAN_TEXT_MAX 160 /* jansson's JSON_ERROR_TEXT_LENGTH */
#define JSON_SCAN_MAX_DEPTH 2048 /* jansson's JSON_PARSER_MAX_DEPTH */

struct json_scan {
    const char *buf;
    size_t len;
    size_t pos;             /* next byte to read */
    size_t start;           /* first byte of the current token */
    int tok;                /* the current token */
    /* JSON_TOK_STRING: the raw text is buf[start + 1 .. pos - 1) */
    size_t str_len;         /* length once decoded */
    int str_escaped;        /* the raw text holds escapes, so it differs from the decoded one */
    int str_nul;            /* it decodes to a string holding a NUL (\u0000) */
    int64_t integer;        /* JSON_TOK_INTEGER */
    double real;            /* JSON_TOK_REAL */
    int allow_nul;          /* set by the caller: string values may hold \u0000 (jansson's
                             * JSON_ALLOW_NUL); keys never may */
    /* The first error; every later call then answers JSON_TOK_INVALID / -1. */
    int failed;
    int duplicate;          /* the error is a duplicate key */
    int no_memory;          /* the error is JSON_ERR_NO_MEMORY: the text may well be valid */
    int line, column;       /* jansson's: 1-based line, characters since its start */
    size_t position;        /* bytes read when it happened */
    char text[JSON_SCAN_TEXT_MAX]; /* e.g. "'}' expected near ']'" */
};

void json_scan_init(struct json_scan *s, const char *buf, size_t len);

/* Reads the next token into s->tok and returns it. */
int json_scan_next(struct json_scan *s);

/* Records a parser error at the current token (a later one is ignored: the
 * first error wins, as the lexer's own do). Returns -1. */
int json_scan_fail(struct json_scan *s, enum json_scan_err e);

/* Records error e (not JSON_ERR_VALUE) at an earlier token, buf[start..end),
 * as if found there: it replaces an error found further on, since the first
 * error in the text wins. For a check done after reading past its token. */
int json_scan_fail_at(struct json_scan *s, enum json_scan_err e, size_t start, size_t end);

/* Copies at most cap bytes of the current string, decoded, to dst (no NUL
 * added) and returns the whole decoded length. */
size_t json_scan_decode(const struct json_scan *s, char *dst, size_t cap);

/* Checks that the current token may start a value (and, for a string, that
 * it holds no NUL unless allow_nul). Returns 0 or -1. */
int json_scan_value_start(struct json_scan *s);

/* Checks that the current token is a key (a string without NUL). */
int json_scan_key(struct json_scan *s);

/* Reads ':' and the token after it. */
int json_scan_colon(struct json_scan *s);

/* After a member or element: reads ',' or the closing `close` ('}' or ']').
 * Returns 1 after ',' (with the next token read), 0 at the close, or -1. */
int json_scan_more(struct json_scan *s, int close);

/* The keys of one object being read, to find a duplicate: keys without
 * escapes are compared in place, the others decoded into copies kept until
 * json_scan_keys_free. Memory grows with the object, so it is fallible. */
struct json_scan_keys {
    struct strmap *map;     /* created at the first key */
    char **copies;
    size_t n_copies, cap_copies;
};

#define JSON_SCAN_KEYS_INIT {NULL, NULL, 0, 0}

/* Adds the current token, a key already checked with json_scan_key. Returns
 * 0, or -1 with the error set: JSON_ERR_DUPLICATE_KEY, or JSON_ERR_NO_MEMORY. */
int json_scan_keys_add(struct json_scan *s, struct json_scan_keys *k);
void json_scan_keys_free(struct json_scan_keys *k);

/* Reads the whole value starting at the current token, rejecting duplicate
 * keys in its objects and nesting past max_depth (the value itself is at
 * `depth`). Leaves the scanner on the value's last token. Returns 0 or -1;
 * it allocates only for objects' keys, and running out of memory is an
 * error (JSON_ERR_NO_MEMORY), never an abort. */
int json_scan_value(struct json_scan *s, unsigned depth, unsigned max_depth);

/* Called by json_scan_each for each member of an object (key: its name,
 * decoded; "" when it has JSON_SCAN_KEY_MAX bytes or more) or element of an
 * array (key NULL), with the scanner on the value's first token, already
 * checked with json_scan_value_start; it must leave the scanner on the
 * value's last token. depth is the value's. Returns 0 or -1 (error set). */
#define JSON_SCAN_KEY_MAX 32
typedef int (*json_scan_fn)(struct json_scan *s, const char *key, unsigned depth, void *ctx);

/* Reads the object or array whose '{' or '[' is the current token (at
 * depth), calling fn for each member or element: duplicate keys and values
 * nested past max_depth are errors. Returns 0 or -1; allocates as
 * json_scan_value does. */
int json_scan_each(struct json_scan *s, unsigned depth, unsigned max_depth, json_scan_fn fn,
                   void *ctx);

/* Validates a whole document like json_loadb(JSON_REJECT_DUPLICATES): one
 * object or array, then only whitespace. Returns 0 or -1. */
int json_scan_document(struct json_scan *s);

#endif
