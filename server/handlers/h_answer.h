/* h_answer: what a handler reads and what it returns, with no HTTP library in
 * either.
 *
 * A handler takes a view of the request (struct request_view: method,
 * target, header and query getters, body, the daemon's state, and how a
 * wait ended when it is dispatched again) and fills an answer: a
 * representation (bytes with their validators, which the front filters
 * through the request's preconditions and Range), an error in tensord's
 * dialect ({"error": {"code", "message"}}) or the Hub's ({"error": msg}
 * with X-Error-Code), a document sent as it is (S3's XML, an upstream's
 * answer), a redirect, or "wait for this" (the Hub's and S3's hash waits,
 * a model document's render, a mirror's upstream job): the front suspends
 * the request, starts the wait, and dispatches it again when the wait
 * ends. Handlers never call up into the front: what it must do besides
 * sending (ask for a rescan) is a field of the answer.
 *
 * Memory: everything an answer points to lives in its arena (answer_alloc,
 * answer_strdup, answer_printf), in what the arena holds (answer_defer:
 * a model reference, a shared document, a malloc'd text), or in static
 * memory, until the request ends (answer_free). The libmicrohttpd response
 * that sends it only borrows that memory. Two things are held only until
 * the answer is rendered (answer_rendered): the registry snapshot the
 * request was answered from, and a descriptor the handler opened (the
 * response keeps its own duplicate). */
#ifndef TENSORD_H_ANSWER_H
#define TENSORD_H_ANSWER_H

#include <stddef.h>
#include <stdint.h>

#include "body.h"
#include "doc_cache.h"
#include "fileio.h"
#include "registry.h"

struct server;
struct mirror_file;
struct jsonw;

/* The statuses the handlers answer (RFC 9110 numbers). */
enum http_status {
    HTTP_OK = 200,
    HTTP_NO_CONTENT = 204,
    HTTP_PARTIAL_CONTENT = 206,
    HTTP_MOVED_PERMANENTLY = 301,
    HTTP_FOUND = 302,
    HTTP_NOT_MODIFIED = 304,
    HTTP_BAD_REQUEST = 400,
    HTTP_UNAUTHORIZED = 401,
    HTTP_FORBIDDEN = 403,
    HTTP_NOT_FOUND = 404,
    HTTP_METHOD_NOT_ALLOWED = 405,
    HTTP_CONFLICT = 409,
    HTTP_PRECONDITION_FAILED = 412,
    HTTP_CONTENT_TOO_LARGE = 413,
    HTTP_RANGE_NOT_SATISFIABLE = 416,
    HTTP_INTERNAL_SERVER_ERROR = 500,
    HTTP_BAD_GATEWAY = 502,
    HTTP_SERVICE_UNAVAILABLE = 503,
    HTTP_GATEWAY_TIMEOUT = 504,
};

/* A request as a handler sees it. The front (server/http/http_answer.c) makes one from
 * libmicrohttpd's request; the unit tests' loopback driver from a literal. */
struct request_view {
    struct server *srv;             /* the daemon's state (server/handlers/server.h) */
    const char *method;             /* as sent ("GET", "POST", ...) */
    int is_head;
    const char *path;               /* the target's path, still percent-encoded */
    const char *target;             /* the whole target as sent (path and query) */
    const char *body;               /* the request's body, NUL-terminated; NULL when none */
    size_t body_len;
    int tls;                        /* it came over TLS */
    uint64_t client;                /* who asks: a hash of its address (0 when unknown), by which
                                     * a mirror's upstream queue takes clients in turn */
    uint64_t start_ns;              /* when it began (the monotonic clock) */
    /* The value of header `name` (case-insensitive), or NULL. */
    const char *(*header)(const struct request_view *v, const char *name);
    /* The value of query parameter `key` as sent (still percent-encoded),
     * or NULL when absent or given without '='. */
    const char *(*query)(const struct request_view *v, const char *key);
    /* Calls fn(arg, key, value) for each query parameter in order until it
     * returns nonzero. */
    void (*each_query)(const struct request_view *v,
                       int (*fn)(void *arg, const char *key, const char *value), void *arg);
    void *ctx;                      /* the getters' (the front's connection) */
    /* Dispatched again after its answer waited: */
    int waited;                     /* it waited once (it never waits twice) */
    int wait_result;                /* what the wait ended with (the waiter's enum) */
    void *wait_job;                 /* what the wait's start returned (a mirror's job), or NULL */
};

/* A mirrored file a body reads (server/handlers/h_mirror*.c), through
 * descriptor fd, whose bytes may still be arriving. */
struct mirror_read {
    int fd;
    struct mirror_file *f;
    int parts;                   /* the body sends parts of the file (a tensor, a slice), not the
                                  * file: its last byte need not wait for the file's hash
                                  * (mirror/mirror.h, MIRROR_PARTS) */
    int complete;                /* every byte of it was there, checked, when it was opened */
};

/* A body and its validators. Every byte it points to in memory (the
 * prefix, `mem`, a source's context, the pieces) lives as long as the
 * answer: in its arena, in a model the arena holds, or in static memory. */
struct representation {
    struct body body;            /* what to send */
    const char *mem;             /* body bytes [0, mem_len) already in memory (a file's validated
                                  * header, in a model the arena holds); NULL when none */
    size_t mem_len;
    const char *content_type;
    char etag[REG_ETAG_MAX + 40]; /* validator with quotes (W/ when weak), or "" for none */
    int64_t mtime;               /* Last-Modified in seconds since the epoch, or -1 */
    const struct fileio_stat *file_st; /* the snapshot's stat of body.fd: every copied block is
                                        * checked against it; NULL for in-memory bodies */
    const char *cache_control;   /* Cache-Control; NULL means "no-cache" (revalidate with the
                                  * validators before each reuse) */
    const char *disposition;     /* Content-Disposition (answer_disposition), or NULL */
    /* The mirrored files the body reads, mirror[0..n_mirror), whose bytes may
     * still be arriving: the front asks the mirror for the blocks it sends
     * and reads each span once they are there (server/http/gate.h). The
     * answer holds a reference to each (mirror_answer_hold). */
    const struct mirror_read *mirror;
    size_t n_mirror;
    int arriving;                /* one of them was not complete when answered: its bytes are
                                  * read as they come, never from memory or at once */
    int no_read;                 /* HEAD of a body nothing was opened for: headers only */
    int document;                /* a document the daemon wrote (JSON, XML, text): sent
                                  * compressed to a client that accepts it (core/body/encoding.h);
                                  * never a byte body, which goes out as stored */
    const char *gzip;            /* the document's gzip form made already (kept with it, in
                                  * memory that lives as long as the answer), or NULL: made
                                  * for the answer when one is sent */
    size_t gzip_len;
    const char *content_encoding; /* set by the front when it sends the gzip form */
    const char *dtype;           /* X-Tensor-Dtype, or NULL when not a tensor */
    const char *shape;           /* X-Tensor-Shape ("2,3"; "" for a scalar), with dtype; in the
                                  * arena (answer_shape) */
};

enum answer_kind {
    ANSWER_NONE,                 /* nothing yet (the front answers 500) */
    ANSWER_BODY,                 /* `rep`, through the preconditions and Range */
    ANSWER_ERROR,                /* `error`, in its dialect */
    ANSWER_DOC,                  /* `text` as it is, with its status: no Range, no preconditions */
    ANSWER_REDIRECT,             /* `location` with a 3xx status */
    ANSWER_PREFLIGHT,            /* a CORS preflight's 204 */
    ANSWER_WAIT,                 /* `wait`: dispatched again when it ends */
};

struct answer;

/* What an answer waits for. start runs on the HTTP thread once the front
 * has suspended the request, the snapshot still held; it arranges for
 * answer_resume(a, result) to be called once, from any thread, possibly
 * before it returns, and returns what the handler reads back as
 * v->wait_job (or NULL), which release (may be NULL) gives back when the
 * request ends. */
struct answer_wait {
    void *(*start)(struct answer *a);
    void (*release)(void *job);
    void *ctx;                   /* the handler's, in the arena */
    void (*done)(void *arg, int result); /* the front's */
    void *done_arg;
};

/* rep reads the mirrored files rd[0..n) (in the answer's arena, each held
 * by it): the front asks the mirror for what the answer sends, and reads
 * them as their bytes arrive when one was not complete yet
 * (server/http/gate.h). */
void answer_reads_mirrored(struct representation *rep, const struct mirror_read *rd, size_t n);

/* The longest error message an answer keeps (longer ones are cut). */
#define ANSWER_MESSAGE_MAX 1023

/* An error answer: the document and its headers are the front's to write. */
struct answer_error {
    int hub;                     /* the Hub's dialect: {"error": msg}, code in X-Error-Code */
    int s3;                      /* code is S3's own (the S3 handler's), not tensord's */
    const char *code;            /* tensord's code, the Hub's X-Error-Code (may be NULL), or S3's */
    const char *resource;        /* the <Resource> an S3 error names, or NULL */
    unsigned retry_after;        /* a 503's Retry-After (at least 1; an S3 error's: none if 0) */
    const char *allow;           /* a 405's Allow */
    const char *content_range;   /* a 416's Content-Range */
    const char *message;         /* in the arena, at most ANSWER_MESSAGE_MAX bytes */
};

/* Headers an answer adds (name/value pairs): its representation's after
 * Content-Disposition, an error's after X-Error-Message, a document's
 * after Content-Type, a redirect's after Location. */
#define ANSWER_MAX_EXTRA 8

struct answer_chunk;
struct answer_cleanup;

struct answer {
    enum answer_kind kind;
    unsigned status;
    struct representation rep;   /* ANSWER_BODY */
    struct answer_error error;   /* ANSWER_ERROR */
    const char *content_type;    /* ANSWER_DOC: of text (a document, as representation.document
                                  * says: sent compressed when accepted) */
    const char *text;            /* ANSWER_DOC */
    size_t text_len;
    const char *location;        /* ANSWER_REDIRECT: a path on this server, percent-encoded */
    struct answer_wait wait;     /* ANSWER_WAIT */
    const char *extra[2 * ANSWER_MAX_EXTRA + 1];
    size_t n_extra;              /* pairs in extra */
    /* What the dispatcher decided for the request, and what the front must
     * do besides sending. */
    int endpoint;                /* enum metrics_ep it counts under */
    int reads_only;              /* GET, HEAD, or a POST that only reads (a fetch): preconditions
                                  * and Range apply to its representation */
    int close;                   /* answer with Connection: close */
    int s3;                      /* an S3 API path: every error is S3's XML document, whoever
                                  * answers it (the front maps tensord's codes: respond.c) */
    const char *cors_methods;    /* ANSWER_PREFLIGHT: the route's methods */
    const char *cors_headers;    /* ANSWER_PREFLIGHT: the request headers a script may send */
    int rescan;                  /* a file changed since its snapshot validated it: rescan */
    /* Held until rendered. */
    struct reg_snapshot *snapshot;
    int fd;                      /* a descriptor the handler opened, or -1 */
    /* Held until the request ends. */
    struct answer_chunk *chunks;
    struct answer_cleanup *cleanups;
};

void answer_init(struct answer *a);
/* Drops the snapshot and closes the handler's descriptor: the response was
 * built (its body holds what it reads: duplicated descriptors, references). */
void answer_rendered(struct answer *a);
/* answer_rendered, then frees the arena and runs its cleanups (last first);
 * a is empty (answer_init) afterwards. */
void answer_free(struct answer *a);

/* Arena memory, zeroed, freed with the answer. Aborts when out of memory
 * (small allocations; a large body is never allocated). */
void *answer_alloc(struct answer *a, size_t n);
char *answer_strdup(struct answer *a, const char *s);
char *answer_printf(struct answer *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A tensor shape as X-Tensor-Shape writes it ("2,3"; "" for a scalar), in
 * the arena. */
const char *answer_shape(struct answer *a, const uint64_t *shape, uint32_t ndim);
/* fn(arg) runs when the answer is freed (after the ones deferred later). */
void answer_defer(struct answer *a, void (*fn)(void *), void *arg);
/* The answer keeps a reference to model m (NULL: nothing) until it is freed. */
void answer_hold_model(struct answer *a, const struct reg_model *m);

/* Adds header name: value (value copied into the arena). */
void answer_header(struct answer *a, const char *name, const char *value);
/* Adds pairs (name/value, NULL-ended; static) by reference. */
void answer_headers(struct answer *a, const char *const *pairs);

/* Constructors: each sets the answer's kind and returns a. */
/* 200 with rep (copied), through the preconditions and Range. */
struct answer *answer_body(struct answer *a, const struct representation *rep);
/* {"error": {"code": code, "message": ...}}. */
struct answer *answer_error(struct answer *a, unsigned status, const char *code, const char *fmt,
                            ...) __attribute__((format(printf, 4, 5)));
/* The Hub's dialect: {"error": message}, X-Error-Message, X-Error-Code
 * when code is not NULL (RepoNotFound, RevisionNotFound, EntryNotFound:
 * what clients branch on). A 503 carries Retry-After: retry_after seconds
 * (at least 1). */
struct answer *answer_hub_error(struct answer *a, unsigned status, const char *code,
                                unsigned retry_after, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* S3's dialect: <Error> with S3's code (NoSuchKey, SlowDown, ...), the
 * message, resource when not NULL, as application/xml (the front writes it,
 * as it writes tensord's errors on S3 paths). */
struct answer *answer_s3_error(struct answer *a, unsigned status, const char *code,
                               const char *resource, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* 503 file_changed: the file changed on disk since it was validated; asks
 * for a rescan, so the client's retry gets the new version. */
struct answer *answer_file_changed(struct answer *a);
/* status with text (len bytes, held by the answer: see answer_defer) as
 * the whole body, no Range, no preconditions. */
struct answer *answer_doc(struct answer *a, unsigned status, const char *content_type,
                          const char *text, size_t len);
/* The JSON document w holds (taken: w is empty afterwards; a newline
 * added): a 200 as a byte body with no validator (the documents written
 * this way change without a reload), so Range requests apply; another
 * status as a document. A writer that ran out of memory answers 503
 * out_of_memory. */
struct answer *answer_jsonw(struct answer *a, unsigned status, struct jsonw *w);
/* status (a 3xx) to location (a path on this server, percent-encoded). */
struct answer *answer_redirect(struct answer *a, unsigned status, const char *location);
/* A CORS preflight's 204 (server/http/cors.h), methods the route's,
 * headers (copied) the request headers it allows. */
struct answer *answer_preflight(struct answer *a, const char *methods, const char *headers);
/* Waits (see struct answer_wait); ctx is the handler's, in the arena. */
struct answer *answer_wait(struct answer *a, void *(*start)(struct answer *a),
                           void (*release)(void *job), void *ctx);
/* Called once by what the answer waits for: the wait is over. */
void answer_resume(struct answer *a, int result);
/* When the request may still wait (it has not yet, hash_wait is set, there
 * is a hasher): waits for the hashes of files[0..n) (of the snapshot the
 * request holds; the array lives in the arena), at most hash_wait seconds,
 * the files moved to the front of the hasher's queue, and returns 1; the
 * request is dispatched again with v->wait_result the hasher's result
 * (HASHER_GONE when a file will not be hashed). Else returns 0. */
int answer_wait_hashes(const struct request_view *v, struct answer *a,
                       const struct reg_file **files, size_t n);
/* Waits for document `kind` of model m (r NULL) or of repo r, in the
 * snapshot the request holds, to be rendered (server/handlers/doc_cache.h):
 * the request is dispatched again with v->wait_result the renderer's enum
 * doc_result. */
struct answer *answer_wait_doc(const struct request_view *v, struct answer *a,
                               const struct reg_model *m, const struct reg_repo *r,
                               enum doc_kind kind);

/* text (malloc'd, len bytes) with a '\n' appended unless it ends with one;
 * *len is updated. NULL (text freed) when out of memory. Every JSON
 * answer ends with a newline (so `curl` output ends a line); the exception
 * is a file's own header bytes, sent as stored. */
char *answer_json_line(char *text, size_t *len);

/* Writes a Content-Disposition value for a file named name[0..n) (UTF-8)
 * into the arena: type (attachment or inline), then filename="..." with
 * an ASCII stand-in ('_' for bytes outside printable ASCII, '"', '\\' and
 * '/'), then filename*=UTF-8''<percent-encoded name> (RFC 6266 and 8187),
 * which clients that know it prefer. '/' in the name becomes '_'. */
const char *answer_disposition(struct answer *a, const char *type, const char *name, size_t n);
/* The Content-Type served for a file name (".json" -> application/json, ...). */
const char *answer_content_type(const char *name);

/* For a method that acts (POST, DELETE) on a resource that exists and has
 * no validator: whether the request's If-Match and If-None-Match let it
 * go on (RFC 9110 §13.2.1); when they do not, answer 412. */
int view_preconditions_hold(const struct request_view *v);
/* The request's header name, or NULL. */
const char *view_header(const struct request_view *v, const char *name);
/* The decoded value of query parameter key (percent-escapes; '+' a space
 * when form is set), NULL when absent; *bad is set when it is malformed;
 * *len (may be NULL) gets its length. Caller frees. */
char *view_query(const struct request_view *v, const char *key, int form, size_t *len, int *bad);

#endif
