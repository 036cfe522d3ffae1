/* jsonw: the daemon's one JSON writer, placing the commas on top of a
 * strbuf.
 *
 * strbuf writes JSON values; jsonw adds the structure (objects, arrays,
 * keys). Every document the daemon sends is written with it: the model
 * list, the GPU views, the Hugging Face endpoint's documents, error
 * documents, the lease socket's answers. Strings go through
 * strbuf_json_string (one escaper; bytes that are not UTF-8 become U+FFFD),
 * so the output is always valid JSON, and the bytes are the ones jansson's
 * json_dumps(JSON_COMPACT) wrote for the same values. Like a strbuf the
 * writer never aborts: a failed allocation makes jsonw_take answer NULL.
 *
 * Hand-written templates (fixed keys as literal text around strbuf's value
 * writers) remain where a document is rendered often or is as large as a
 * file makes it, for speed: the model descriptions and merged headers
 * (server/handlers/model_doc.c: one entry per tensor, millions in a big
 * model), a sliced answer's safetensors header (core/format/tformat.c), and
 * /v1/metrics (core/runtime/metrics_render.c, every scrape); and as constants, the
 * answers sent when no writer could allocate (server/http/respond.c,
 * server/lease/lease_frame.c) or with no time to (lease_access.c). Their
 * tests read them back with an independent parser (jansson, Python's json,
 * the safetensors library). */
#ifndef TENSORD_JSONW_H
#define TENSORD_JSONW_H

#include <stddef.h>
#include <stdint.h>

#include "strbuf.h"

#define JSONW_MAX_DEPTH 32

struct jsonw {
    struct strbuf sb;
    unsigned depth;
    unsigned char first[JSONW_MAX_DEPTH]; /* per open container: nothing written in it yet */
    int after_key;              /* a key was written: the next value needs no comma */
};

#define JSONW_INIT {STRBUF_INIT, 0, {0}, 0}

void jsonw_init(struct jsonw *w);
/* The text (caller frees) and its length; NULL when an allocation failed.
 * w is empty afterwards either way. */
char *jsonw_take(struct jsonw *w, size_t *len);
void jsonw_free(struct jsonw *w);
/* Marks w failed (a part that could not be made): jsonw_take answers NULL. */
void jsonw_fail(struct jsonw *w);

void jsonw_obj(struct jsonw *w);      /* { */
void jsonw_obj_end(struct jsonw *w);  /* } */
void jsonw_arr(struct jsonw *w);      /* [ */
void jsonw_arr_end(struct jsonw *w);  /* ] */
void jsonw_key(struct jsonw *w, const char *key);
void jsonw_keyn(struct jsonw *w, const char *key, size_t n); /* key[0..n), NULs allowed */
void jsonw_str(struct jsonw *w, const char *s);
void jsonw_strn(struct jsonw *w, const char *s, size_t n);
void jsonw_u64(struct jsonw *w, uint64_t v);
void jsonw_bool(struct jsonw *w, int v);
void jsonw_null(struct jsonw *w);
void jsonw_i64(struct jsonw *w, int64_t v);
/* A double as strbuf_json_real writes it (null when not finite). */
void jsonw_real(struct jsonw *w, double v);
/* A value that is JSON text already (one whole value, written by another
 * writer): copied as it is. */
void jsonw_raw(struct jsonw *w, const char *json, size_t n);

/* key: value shorthands; kobj and karr open the value's container. */
void jsonw_kobj(struct jsonw *w, const char *key);
void jsonw_karr(struct jsonw *w, const char *key);
void jsonw_kstr(struct jsonw *w, const char *key, const char *s);
void jsonw_ku64(struct jsonw *w, const char *key, uint64_t v);
void jsonw_kbool(struct jsonw *w, const char *key, int v);
void jsonw_ki64(struct jsonw *w, const char *key, int64_t v);
void jsonw_kreal(struct jsonw *w, const char *key, double v);

#endif
