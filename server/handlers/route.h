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
    ROUTE_ROOT,         /* / (browsers are sent to the console) */
    ROUTE_HEALTHZ,      /* /healthz */
    ROUTE_READYZ,       /* /readyz */
    ROUTE_METRICS_TEXT, /* /metrics */
    ROUTE_METRICS,      /* /v1/metrics */
    ROUTE_OPENAPI,      /* /v1/openapi.json */
    ROUTE_UI,           /* /ui/{asset} (name: the asset, "" for the page); /ui alone too */
    ROUTE_MODELS,       /* /v1/models */
    ROUTE_MODEL,        /* /v1/models/{model} */
    ROUTE_MODEL_HEADER, /* /v1/models/{model}/header */
    ROUTE_FILE,         /* /v1/models/{model}/files/{file} */
    ROUTE_FILE_HEADER,  /* /v1/models/{model}/files/{file}/header */
    ROUTE_TENSOR,       /* /v1/models/{model}/tensors/{tensor} */
    ROUTE_GPU,          /* /v1/models/{model}/gpu */
    ROUTE_FETCH,        /* /v1/models/{model}/fetch */
    /* The Hugging Face endpoint: model is the repo id, rev the revision
     * (decoded), name the path in the repo (NULL for the root). */
    ROUTE_HUB_FILE,     /* /{repo}/resolve/{rev}/{path}, /{repo}/raw/{rev}/{path} (raw set) */
    ROUTE_HUB_MODELS,   /* /api/models */
    ROUTE_HUB_INFO,     /* /api/models/{repo}, /api/models/{repo}/revision/{rev} */
    ROUTE_HUB_TREE,     /* /api/models/{repo}/tree/{rev}[/{path}] */
    ROUTE_HUB_PATHS_INFO, /* /api/models/{repo}/paths-info/{rev} */
    ROUTE_HUB_REFS,     /* /api/models/{repo}/refs */
    ROUTE_HUB_COMMITS,  /* /api/models/{repo}/commits/{rev} */
    ROUTE_HUB_NO_REPO,  /* a dataset's or a space's routes (model is its id, as far as the path
                         * tells): tensord serves models only */
    ROUTE_HUB_NO_REPOS, /* /api/datasets, /api/spaces: the lists, empty */
    ROUTE_HUB_NOT_FOUND, /* no such endpoint under /api/ (answered in the Hub's dialect) */
    ROUTE_HUB_WHOAMI,   /* /api/whoami-v2: who the bearer token is */
    /* Content by digest (server/handlers/h_blob.c): name is the digest as sent. */
    ROUTE_BLOB,         /* /v1/blobs/{digest} */
    /* The S3 API (server/handlers/h_s3.c): model is the bucket (NULL for ListBuckets),
     * name the key (decoded segments joined with '/', any components; NULL
     * for the bucket itself). */
    ROUTE_S3,           /* /s3/, /s3/{bucket}, /s3/{bucket}/{key...} */
    ROUTE_KINDS         /* how many kinds there are (tests/unit/test_openapi.c checks the
                         * OpenAPI description covers each) */
};

struct route {
    enum route_kind kind;
    char *model;        /* decoded, '/'-joined; owned, NULL when absent */
    size_t model_len;
    char *name;         /* decoded tensor or file name; owned, NULL when absent */
    size_t name_len;
    char *rev;          /* hub routes: the revision, decoded; owned, NULL when absent */
    size_t rev_len;
    int raw;            /* ROUTE_HUB_FILE: /raw/ rather than /resolve/ */
};

/* Whether a repo with this id exists, for telling "name" from "org/name"
 * in a Hub path (a depth-1 directory is a repo or an org, never both). */
typedef int (*route_repo_exists)(void *ctx, const char *id, size_t len);

/* Parses path (no query string). Returns r->kind; on ROUTE_BAD_PATH err holds
 * the reason. Free with route_free. For a daemon that serves repos, a Hub
 * path whose repo id could be one or two segments is read the way that names
 * an existing repo (exists may be NULL: the one-segment reading wins). */
enum route_kind route_parse(const char *path, route_repo_exists exists, void *ctx,
                            struct route *r, char *err, size_t errlen);
void route_free(struct route *r);

/* The origin-form of a request target: past "http://authority" or
 * "https://authority" when the target is in absolute-form (RFC 9112 §3.2.2,
 * which AWS's CRT S3 client sends), else target itself. */
const char *route_origin_form(const char *target);

/* Methods each endpoint accepts, for 405 answers (an "Allow" header value). */
const char *route_allowed_methods(enum route_kind kind);

#endif
