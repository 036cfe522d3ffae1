/* xmlw: the one writer of the XML documents the daemon sends (the S3 API's
 * listings and errors), on a strbuf: elements opened and closed by name,
 * text always escaped, so no caller ever writes markup by hand and no
 * value (a file name, a prefix a client sent) can end an element early.
 *
 * XML 1.0 cannot carry most control characters even as references: a
 * byte below 0x20 other than tab, line feed and carriage return, the
 * noncharacters U+FFFE and U+FFFF, and invalid UTF-8, are written as
 * U+FFFD. S3 clients that list names with
 * such bytes ask for encoding-type=url, whose values xmlw_url_text writes
 * percent-encoded (and so exact). */
#ifndef TENSORD_XMLW_H
#define TENSORD_XMLW_H

#include <stddef.h>
#include <stdint.h>

#include "strbuf.h"

struct xmlw {
    struct strbuf sb;
};

/* Starts a document with the XML declaration. */
void xmlw_init(struct xmlw *w);
/* <name> or <name xmlns="ns"> (ns may be NULL). */
void xmlw_open(struct xmlw *w, const char *name, const char *ns);
void xmlw_close(struct xmlw *w, const char *name);
/* <name>text</name>, text[0..n) escaped. */
void xmlw_text(struct xmlw *w, const char *name, const char *text, size_t n);
void xmlw_cstr(struct xmlw *w, const char *name, const char *text);
void xmlw_u64(struct xmlw *w, const char *name, uint64_t v);
void xmlw_bool(struct xmlw *w, const char *name, int v);
/* <name>text percent-encoded</name>: every byte but A-Z a-z 0-9 - _ . ~ /
 * as %XX (what S3 sends for encoding-type=url, decoded by its clients). */
void xmlw_url_text(struct xmlw *w, const char *name, const char *text, size_t n);
/* The document (NUL-terminated; the caller frees), or NULL when memory ran
 * out while writing it. */
char *xmlw_take(struct xmlw *w, size_t *len);

#endif
