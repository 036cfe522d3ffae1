/* respond: turns a representation (a body plus its validators) into an HTTP
 * answer: conditional requests (RFC 9110 §13, decided by conditional.c),
 * Range (§14) with multipart/byteranges, HEAD, and the body (built by
 * stream.c: sendfile, a small copied buffer or a streamed reader). Also JSON
 * documents and JSON errors. */
#ifndef TENSORD_RESPOND_H
#define TENSORD_RESPOND_H

#include <microhttpd.h>
#include <stdint.h>

#include "body.h"
#include "conditional.h"
#include "fileio.h"
#include "jsonw.h"
#include "registry.h"
#include "st_header.h"

struct request;
struct mirror_file;

struct representation {
    struct body body;            /* what to send; prefix/plan may point into the owned buffers below */
    char *prefix_buf;            /* owned: handed to the response or freed by respond_body */
    struct slice_plan *plan_buf; /* owned likewise */
    void *pieces_buf;            /* owned likewise: the pieces of a many-piece body (one
                                  * allocation); their fds belong to the model `pin` */
    void *src_buf;               /* owned likewise: body.src_ctx, freed with body.src->free */
    const char *mem;             /* body bytes [0, mem_len) already in memory (a file's validated
                                  * header), owned by the model `pin`; NULL when none */
    size_t mem_len;
    const struct reg_model *pin; /* the model that owns body.prefix (when prefix_buf is NULL), mem
                                  * and the pieces' fds; answers sent from them hold a reference
                                  * to it (to it alone: not to a whole snapshot) */
    const char *content_type;
    char etag[REG_ETAG_MAX + 40]; /* validator with quotes (W/ when weak), or "" for none */
    int64_t mtime;               /* Last-Modified in seconds since the epoch, or -1 */
    const struct fileio_stat *file_st; /* the snapshot's stat of body.fd: every copied block is
                                        * checked against it; NULL for in-memory bodies */
    const char *cache_control;   /* Cache-Control; NULL means "no-cache" (revalidate with the
                                  * validators before each reuse) */
    const char *disposition;     /* Content-Disposition (respond_disposition), or NULL */
    const char *const *extra;    /* more headers, name/value pairs ended by NULL, or NULL; sent
                                  * on 200, 206 and 304 */
    struct mirror_file *mirror;  /* the body is this mirrored file's bytes, which may still be
                                  * arriving (body.fd is its descriptor): read as they come,
                                  * the answer holding its own reference; NULL otherwise */
    int no_read;                 /* HEAD of a body nothing was opened for: headers only */
    const char *dtype;           /* X-Tensor-Dtype, or NULL when not a tensor */
    char shape[ST_MAX_NDIM * 21 + 1]; /* X-Tensor-Shape ("2,3"; "" for a scalar) */
};

/* Answers with rep, honouring the request's conditional and Range headers.
 * Takes ownership of rep->prefix_buf, rep->plan_buf, rep->pieces_buf and
 * rep->src_buf in every case. */
enum MHD_Result respond_body(struct MHD_Connection *conn, struct request *rq,
                             struct representation *rep);

/* For a method that acts (POST, DELETE) on a resource that exists and has
 * no validator: whether If-Match and If-None-Match let it go on. Evaluated
 * before acting (RFC 9110 §13.2.1); when they do not, answer 412. */
int respond_preconditions_hold(struct MHD_Connection *conn);

/* Every JSON answer ends with a newline (so `curl` output ends a line); the
 * exception is a file's own header bytes (GET .../files/NAME/header), sent
 * as stored. */

/* text (malloc'd, len bytes) with a '\n' appended unless it ends with one;
 * *len is updated. NULL (text freed) when out of memory. */
char *respond_json_line(char *text, size_t *len);

/* Answers status with the document w holds (taken: w is empty afterwards),
 * a 200 as a byte body so Range and conditional requests apply, with no
 * validator (the documents sent this way change without a reload). A
 * writer that ran out of memory answers 503 out_of_memory. */
enum MHD_Result respond_json(struct MHD_Connection *conn, struct request *rq, unsigned status,
                             struct jsonw *w);

/* Answers 503 file_changed: the file changed on disk since it was
 * validated. Asks the daemon to rescan (the watcher usually already is), so
 * the client's retry gets the new version. */
enum MHD_Result respond_file_changed(struct MHD_Connection *conn, struct request *rq);

/* Answers {"error": {"code": code, "message": ...}} with the given status. */
enum MHD_Result respond_error(struct MHD_Connection *conn, struct request *rq, unsigned status,
                              const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Answers in the Hugging Face Hub's dialect: {"error": message} with
 * X-Error-Message, X-Error-Code when code is not NULL (RepoNotFound,
 * RevisionNotFound, EntryNotFound: what clients branch on), and the
 * headers of extra (name/value pairs ended by NULL; may be NULL). A 503
 * carries Retry-After: retry_after seconds (at least 1). */
enum MHD_Result respond_hub_error(struct MHD_Connection *conn, struct request *rq, unsigned status,
                                  const char *code, const char *const *extra, unsigned retry_after,
                                  const char *fmt, ...) __attribute__((format(printf, 7, 8)));

/* Answers status with text (malloc'd, len bytes, taken over in every case)
 * as the whole body: no Range, no preconditions. For documents in another
 * dialect than tensord's JSON (the S3 API's XML listings and errors);
 * extra holds header name/value pairs ended by NULL (may be NULL);
 * error_code, when not NULL, is what the access log names. */
enum MHD_Result respond_doc(struct MHD_Connection *conn, struct request *rq, unsigned status,
                            const char *content_type, char *text, size_t len,
                            const char *const *extra, const char *error_code);

/* Answers status (a 3xx) with Location: location (a path on this server,
 * already percent-encoded) and the extra headers. */
enum MHD_Result respond_redirect(struct MHD_Connection *conn, struct request *rq, unsigned status,
                                 const char *location, const char *const *extra);

/* Answers a CORS preflight: 204 with the CORS headers (server/cors.h),
 * methods the route's. */
enum MHD_Result respond_preflight(struct MHD_Connection *conn, struct request *rq,
                                  const char *methods);

/* Writes a Content-Disposition value for a file named name[0..n) (UTF-8)
 * into out: type (attachment or inline), then filename="..." with an ASCII
 * stand-in ('_' for bytes outside printable ASCII, '"', '\\' and '/'), then
 * filename*=UTF-8''<percent-encoded name> (RFC 6266 and 8187), which
 * clients that know it prefer. '/' in the name becomes '_'. Returns out, or
 * NULL when it would not fit in len bytes. */
char *respond_disposition(char *out, size_t len, const char *type, const char *name, size_t n);

/* The Content-Type served for a file name (".json" -> application/json, ...). */
const char *respond_content_type(const char *name);

/* Writes an error answer straight to socket fd and returns MHD_NO, so
 * libmicrohttpd closes the connection. Only for refusing, on a plain-HTTP
 * connection, a request that reached the edge of libmicrohttpd's
 * per-connection memory: building the answer there needs room the request
 * has used up, and libmicrohttpd would close the connection without a word. */
enum MHD_Result respond_refusal_raw(struct request *rq, int fd, unsigned status,
                                    const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
