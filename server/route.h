/* route: maps a raw (still percent-encoded) request path to an endpoint.
 *
 * The path is split on '/' before decoding, so "%2F" inside a model or
 * tensor name never acts as a separator; each segment is decoded exactly
 * once. Segments that decode to "", "." or "..", or contain NUL, are refused:
 * names are only ever looked up in the registry snapshot, never joined onto a
 * filesystem path, but refusing them early gives a clear 400. */
#ifndef TENSORD_ROUTE_H
#define TENSORD_ROUTE_H

#include <stddef.h>

enum route_kind {
    ROUTE_NOT_FOUND,    /* no such endpoint */
    ROUTE_BAD_PATH,     /* malformed encoding or a refused segment; message in err */
    ROUTE_HEALTHZ,      /* /healthz */
    ROUTE_READYZ,       /* /readyz */
    ROUTE_METRICS_TEXT, /* /metrics */
    ROUTE_METRICS,      /* /v1/metrics */
    ROUTE_MODELS,       /* /v1/models */
    ROUTE_MODEL,        /* /v1/models/{model} */
    ROUTE_MODEL_HEADER, /* /v1/models/{model}/header */
    ROUTE_FILE,         /* /v1/models/{model}/files/{file} */
    ROUTE_FILE_HEADER,  /* /v1/models/{model}/files/{file}/header */
    ROUTE_TENSOR,       /* /v1/models/{model}/tensors/{tensor} */
    ROUTE_GPU,          /* /v1/models/{model}/gpu */
    ROUTE_FETCH,        /* /v1/models/{model}/fetch */
};

struct route {
    enum route_kind kind;
    char *model;        /* decoded, '/'-joined; owned, NULL when absent */
    size_t model_len;
    char *name;         /* decoded tensor or file name; owned, NULL when absent */
    size_t name_len;
};

/* Parses path (no query string). Returns r->kind; on ROUTE_BAD_PATH err holds
 * the reason. Free with route_free. */
enum route_kind route_parse(const char *path, struct route *r, char *err, size_t errlen);
void route_free(struct route *r);

/* Percent-decodes s[0..len) into a new NUL-terminated string (caller frees).
 * '+' is kept literally. Returns NULL on a bad escape or a decoded NUL; *out_len
 * gets the decoded length. */
char *route_decode(const char *s, size_t len, size_t *out_len);

/* Methods each endpoint accepts, for 405 answers (an "Allow" header value). */
const char *route_allowed_methods(enum route_kind kind);

#endif
