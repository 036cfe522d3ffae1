/* strbuf: a growable text buffer, and the JSON writer on top of it.
 *
 * Documents whose size a file controls (a model with a million tensors
 * renders to a hundred megabytes) are built in one of these instead of a
 * tree: memory is the output and nothing else. Appending never aborts: the
 * first allocation that fails marks the buffer failed, later appends do
 * nothing, and strbuf_detach answers NULL, so a caller checks once, at the
 * end. Buffers start empty ({0} or STRBUF_INIT is a valid empty buffer). */
#ifndef TENSORD_STRBUF_H
#define TENSORD_STRBUF_H

#include <stddef.h>
#include <stdint.h>

struct strbuf {
    char *buf;      /* NUL-terminated whenever cap > 0 and not failed */
    size_t len;
    size_t cap;     /* bytes allocated, the NUL included */
    int failed;     /* an allocation failed: the text is incomplete */
};

#define STRBUF_INIT {NULL, 0, 0, 0}

/* Makes room for `more` bytes after len (and the NUL). Returns 0, or -ENOMEM
 * and marks the buffer failed. */
int strbuf_reserve(struct strbuf *sb, size_t more);
void strbuf_append(struct strbuf *sb, const void *p, size_t n);
void strbuf_puts(struct strbuf *sb, const char *s);
void strbuf_putc(struct strbuf *sb, char c);
void strbuf_printf(struct strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s[0..n) percent-encoded as RFC 3986 (and AWS's UriEncode) want it: every
 * byte but the unreserved A-Z a-z 0-9 - . _ ~ as %XX in upper case, '/'
 * kept when keep_slash. */
void strbuf_pct_encode(struct strbuf *sb, const char *s, size_t n, int keep_slash);

/* The text, NUL-terminated and trimmed to its length, now owned by the
 * caller (free it); *len (when not NULL) gets its length. NULL when the
 * buffer failed. Either way the buffer is empty again afterwards. */
char *strbuf_detach(struct strbuf *sb, size_t *len);
/* Frees the text and empties the buffer. */
void strbuf_release(struct strbuf *sb);

/* JSON values, written exactly as jansson's json_dumps(JSON_COMPACT) writes
 * them, so documents keep their bytes when they stop going through a tree. */

/* s[0..n) as a JSON string with its quotes: '"', '\\' and control characters
 * escaped (\b \f \n \r \t, else \u00XX), '/' and everything else, UTF-8
 * included, as is. s may hold NUL bytes (written \u0000). A byte that does
 * not start a well-formed UTF-8 sequence is written as U+FFFD, so the
 * output is always valid JSON (jansson refuses such strings instead). */
void strbuf_json_string(struct strbuf *sb, const char *s, size_t n);
/* The same with \u00xx in lower case, as the safetensors crate (serde_json)
 * writes a file's header: the safetensors answers' headers (tformat). */
void strbuf_json_string_lower(struct strbuf *sb, const char *s, size_t n);
void strbuf_json_cstr(struct strbuf *sb, const char *s);
void strbuf_json_int(struct strbuf *sb, int64_t v);
/* A double as jansson writes a real: "%.17g", with ".0" added when that
 * looks like an integer and the exponent without '+' or leading zeros. */
void strbuf_json_real(struct strbuf *sb, double v);

#endif
