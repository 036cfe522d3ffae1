/* respond: see respond.h. */
#include "respond.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conditional.h"
#include "cors.h"
#include "encoding.h"
#include "gate.h"
#include "jsonw.h"
#include "metrics.h"
#include "range.h"
#include "server.h"
#include "util.h"
#include "xmlw.h"

/* Most parts one multipart answer can have, whatever max_ranges says. */
#define RANGE_LIMIT 256

static void header(struct reply *r, const char *name, const char *value)
{
    if (r->n_headers == REPLY_MAX_HEADERS)
        return; /* the answers' headers are a fixed set: never reached */
    r->headers[2 * r->n_headers] = name;
    r->headers[2 * r->n_headers + 1] = value;
    r->headers[2 * ++r->n_headers] = NULL;
}

static void extra_headers(struct reply *r, const struct answer *a)
{
    for (size_t i = 0; i < a->n_extra; i++)
        header(r, a->extra[2 * i], a->extra[2 * i + 1]);
}

/* The body is mem[0, len): one piece. */
static void memory_body(struct answer *a, struct reply *r, const char *mem, uint64_t len)
{
    struct reply_piece *p = answer_alloc(a, sizeof(*p));
    *p = (struct reply_piece){.mem = mem, .len = len};
    r->pieces = p;
    r->n_pieces = 1;
    r->length = len;
}

/* Appends v in decimal at p; returns the end. For the headers written on
 * every answer, where snprintf's format parsing was a measurable cost. */
static char *put_u64(char *p, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

/* Adds token to the reply's Vary, as one header. */
static void vary(struct answer *a, struct reply *r, const char *token)
{
    for (size_t i = 0; i < r->n_headers; i++) {
        if (strcmp(r->headers[2 * i], "Vary") == 0) {
            r->headers[2 * i + 1] = answer_printf(a, "%s, %s", r->headers[2 * i + 1], token);
            return;
        }
    }
    header(r, "Vary", token);
}

/* ---- compressed documents ------------------------------------------------------ */

/* The ETag of a document's compressed form: its own, with "-CODING" before
 * the closing quote ("\"m12\"" -> "\"m12-gzip\"", weak ones stay weak), in
 * the arena; so no validator names two forms, and a 304 is only ever given
 * for the form the client holds. */
static const char *etag_of_form(struct answer *a, const char *etag, const char *coding)
{
    size_t n = strlen(etag);
    if (n < 2 || etag[n - 1] != '"')
        return etag;
    return answer_printf(a, "%.*s-%s\"", (int)(n - 1), etag, coding);
}

/* The coding a document of len bytes goes out in to request v
 * (core/body/encoding.h): compressed when the client accepts it, the document
 * is large enough and the whole of it is asked for (a Range reads the
 * stored bytes, whose offsets do not move with the coding). *varies: the
 * answer depends on Accept-Encoding. */
static enum encoding document_encoding(const struct request_view *v, uint64_t len, int *varies)
{
    *varies = len >= ENCODING_MIN_BYTES;
    if (!*varies || view_header(v, "Range"))
        return ENCODING_IDENTITY;
    return encoding_choose(view_header(v, "Accept-Encoding"));
}

/* Compresses pieces[0..n) for this answer (ENCODING_LEVEL_ANSWER) into
 * memory the answer holds; NULL when out of memory (sent as it is then). */
static const char *gzip_for_answer(struct answer *a, const struct encoding_piece *pieces,
                                   size_t n, size_t *len)
{
    char *out;
    if (encoding_gzip(pieces, n, ENCODING_LEVEL_ANSWER, &out, len) != 0)
        return NULL;
    answer_defer(a, free, out);
    return out;
}

/* A representation that is a document, turned into its gzip form when the
 * request takes it: the body becomes the compressed bytes and the ETag the
 * form's own ("...-gzip", so a validator never names two forms), before
 * the preconditions see it. Returns whether the answer varies by
 * Accept-Encoding. */
static int encode_representation(const struct request_view *v, struct answer *a)
{
    struct representation *rep = &a->rep;
    int varies = 0;
    uint64_t size = body_size(&rep->body);
    if (!rep->document || document_encoding(v, size, &varies) != ENCODING_GZIP)
        return rep->document && varies;
    const char *gz = rep->gzip;
    size_t gz_len = rep->gzip_len;
    if (!gz && size > ENCODING_ANSWER_MAX)
        return 1; /* not compressed on an HTTP thread: sent as it is */
    if (!gz) {
        struct encoding_piece pieces[3];
        const void *p[3];
        size_t n[3], k = 0;
        const struct body *b = &rep->body;
        if (b->src && b->src->mem)
            k = b->src->mem(b->src_ctx, 0, size, p, n);
        else if (!b->src && b->prefix_len == size)
            p[0] = b->prefix, n[0] = size, k = 1;
        for (size_t i = 0; i < k; i++)
            pieces[i] = (struct encoding_piece){p[i], n[i]};
        gz = k ? gzip_for_answer(a, pieces, k, &gz_len) : NULL;
        if (!gz)
            return 1;
    }
    rep->body = (struct body){.prefix = gz, .prefix_len = gz_len, .fd = -1};
    rep->mem = NULL;
    rep->content_encoding = encoding_name(ENCODING_GZIP);
    if (rep->etag[0])
        snprintf(rep->etag, sizeof(rep->etag), "%s",
                 etag_of_form(a, rep->etag, rep->content_encoding));
    return 1;
}

/* ---- errors, documents, redirects --------------------------------------------- */

char *respond_error_document(const char *code, const char *msg, int hub, size_t *len)
{
    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    if (hub) {
        jsonw_kstr(&w, "error", msg);
    } else {
        jsonw_kobj(&w, "error");
        jsonw_kstr(&w, "code", code);
        jsonw_kstr(&w, "message", msg);
        jsonw_obj_end(&w);
    }
    jsonw_obj_end(&w);
    char *text = jsonw_take(&w, len);
    return text ? answer_json_line(text, len) : NULL;
}

/* S3's Code for an error on an S3 path: the S3 handler's own, else (the
 * front's or the dispatcher's) by tensord's code, else by status. S3
 * clients read the Code (boto3's ClientError, a streamer's retry on
 * SlowDown); the message stays tensord's, which says why. */
static const char *s3_code(const struct answer *a)
{
    if (a->error.s3)
        return a->error.code;
    static const struct {
        const char *code, *s3;
    } by_code[] = {
        {"overloaded", "SlowDown"},
        {"bad_path", "InvalidURI"},
        {"host_not_allowed", "AccessDenied"},
        {"unauthorized", "AccessDenied"},
    };
    static const struct {
        unsigned status;
        const char *s3;
    } by_status[] = {
        {HTTP_BAD_REQUEST, "InvalidRequest"},
        {HTTP_FORBIDDEN, "AccessDenied"},
        {HTTP_NOT_FOUND, "NoSuchKey"},
        {HTTP_METHOD_NOT_ALLOWED, "MethodNotAllowed"},
        {HTTP_PRECONDITION_FAILED, "PreconditionFailed"},
        {HTTP_RANGE_NOT_SATISFIABLE, "InvalidRange"},
        {HTTP_SERVICE_UNAVAILABLE, "ServiceUnavailable"},
    };
    for (size_t i = 0; a->error.code && i < ARRAY_LEN(by_code); i++)
        if (strcmp(a->error.code, by_code[i].code) == 0)
            return by_code[i].s3;
    for (size_t i = 0; i < ARRAY_LEN(by_status); i++)
        if (a->status == by_status[i].status)
            return by_status[i].s3;
    return "InternalError";
}

/* The error document in S3's dialect: <Error><Code>, <Message>,
 * <Resource> when named, <RequestId></Error>, application/xml. NULL when
 * out of memory. */
static char *s3_error_document(const struct answer *a, size_t *len)
{
    struct xmlw w;
    xmlw_init(&w);
    xmlw_open(&w, "Error", NULL);
    xmlw_cstr(&w, "Code", s3_code(a));
    xmlw_cstr(&w, "Message", a->error.message);
    if (a->error.resource)
        xmlw_cstr(&w, "Resource", a->error.resource);
    xmlw_cstr(&w, "RequestId", "tensord");
    xmlw_close(&w, "Error");
    return xmlw_take(&w, len);
}

static void error_reply(struct answer *a, struct reply *r)
{
    static const char oom_doc[] =
        "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}\n";
    const struct answer_error *e = &a->error;
    const char *msg = e->message;
    size_t len;
    char *text = a->s3 ? s3_error_document(a, &len)
                       : respond_error_document(e->code ? e->code : "hub_error", msg, e->hub,
                                                &len);
    if (text)
        answer_defer(a, free, text);
    else
        len = sizeof(oom_doc) - 1;
    memory_body(a, r, text ? text : oom_doc, len);
    header(r, "Content-Type", a->s3 && text ? "application/xml" : "application/json");
    if (e->hub && e->code)
        header(r, "X-Error-Code", e->code);
    /* A header value is one line of visible ASCII: the message is given
     * there only when it is one (the body always has it). */
    int plain = e->hub && !a->s3;
    for (const char *c = msg; *c && plain; c++)
        plain = *c >= 0x20 && *c < 0x7f;
    if (plain && msg[0])
        header(r, "X-Error-Message", msg);
    extra_headers(r, a);
    if (a->status == HTTP_SERVICE_UNAVAILABLE && (e->retry_after || !e->s3))
        header(r, "Retry-After", answer_printf(a, "%u", e->retry_after ? e->retry_after : 1));
    if (e->content_range)
        header(r, "Content-Range", e->content_range);
    if (a->status == HTTP_METHOD_NOT_ALLOWED && e->allow)
        header(r, "Allow", e->allow);
    if (a->status == HTTP_UNAUTHORIZED)
        header(r, "WWW-Authenticate", "Bearer realm=\"tensord\"");
}

/* A representation's answer that turned into an error: its own headers go. */
static void body_error(struct answer *a, struct reply *r)
{
    a->n_extra = 0;
    a->extra[0] = NULL;
    memset(r, 0, sizeof(*r));
    r->status = a->status;
    error_reply(a, r);
}

/* ---- representations ------------------------------------------------------------- */

static void validator_headers(struct answer *a, struct reply *r)
{
    const struct representation *rep = &a->rep;
    if (rep->content_encoding)
        header(r, "Content-Encoding", rep->content_encoding);
    header(r, "Cache-Control", rep->cache_control ? rep->cache_control : "no-cache");
    if (rep->disposition)
        header(r, "Content-Disposition", rep->disposition);
    extra_headers(r, a);
    if (rep->etag[0])
        header(r, "ETag", rep->etag);
    if (rep->mtime >= 0) {
        char *date = answer_alloc(a, 40);
        http_date_format(rep->mtime, date, 40);
        header(r, "Last-Modified", date);
    }
    if (rep->dtype) {
        header(r, "X-Tensor-Dtype", rep->dtype);
        /* A scalar's shape is empty, and libmicrohttpd refuses empty values;
         * surrounding whitespace is not part of a field value (RFC 9110
         * §5.5), so a lone space reads as empty to every client. */
        header(r, "X-Tensor-Shape", rep->shape && rep->shape[0] ? rep->shape : " ");
    }
}

/* Where body bytes [off, off + len) already are in memory that lives as
 * long as the answer (a file's validated header, the prefix), or NULL. */
static const char *memory_span(const struct representation *rep, uint64_t off, uint64_t len)
{
    if (rep->body.src)
        return NULL;
    if (rep->mem && off + len <= rep->mem_len)
        return rep->mem + off;
    if (off + len <= rep->body.prefix_len)
        return rep->body.prefix + off;
    return NULL;
}

/* Whether the body's file no longer has the size and mtime it had when it
 * was validated (it was truncated or written in place). */
static int file_changed(const struct representation *rep)
{
    return rep->file_st && rep->body.fd >= 0 && !fileio_unchanged(rep->body.fd, rep->file_st);
}

/* The body of a single span [off, off + len): in place when it is in
 * memory (a shared document's pieces too), read now when it is small,
 * else a span the front streams or sends with sendfile. Returns 0, or
 * -ENODATA (the file changed) or another -errno (a read error). */
static int span_body(const struct request_view *v, struct answer *a, struct reply *r,
                     uint64_t off, uint64_t len)
{
    struct representation *rep = &a->rep;
    const struct body *b = &rep->body;
    r->length = len;
    if (rep->no_read) {
        r->no_body = 1;
        return 0;
    }
    const void *p[3];
    size_t n[3];
    unsigned k = b->src && b->src->mem && len && len <= RESPOND_DOC_BLOCK
                     ? b->src->mem(b->src_ctx, off, len, p, n)
                     : 0;
    const char *mem = memory_span(rep, off, len);
    if (k || mem) {
        struct reply_piece *pc = answer_alloc(a, (k ? k : 1) * sizeof(*pc));
        for (unsigned i = 0; i < k; i++)
            pc[i] = (struct reply_piece){.mem = p[i], .len = n[i]};
        if (!k)
            pc[k++] = (struct reply_piece){.mem = mem, .len = len};
        r->pieces = pc;
        r->n_pieces = k;
        return 0;
    }
    if (len <= RESPOND_SMALL_BODY_MAX && !rep->arriving) {
        char *buf = answer_alloc(a, len ? len : 1);
        int rc = len ? body_read(b, off, buf, len) : 0;
        /* Checked after the read: a write(2) bumps mtime before it copies
         * data, so an unchanged stat means the bytes read are the old ones. */
        if (rc == -ENODATA || file_changed(rep))
            return -ENODATA;
        if (rc < 0)
            return rc;
        if (rep->n_mirror) /* from a mirror's cache, complete: counted as hits */
            gate_want(v->srv->mirror, NULL, b, off, len);
        memory_body(a, r, buf, len);
        return 0;
    }
    struct reply_piece *pc = answer_alloc(a, sizeof(*pc));
    *pc = (struct reply_piece){.off = off, .len = len};
    r->pieces = pc;
    r->n_pieces = 1;
    return 0;
}

static atomic_uint_fast64_t boundary_counter;

/* The multipart/byteranges body of ranges[0..n): framing in memory around
 * spans of the body. Returns its Content-Type. */
static const char *multipart_body(const struct request_view *v, struct answer *a,
                                  struct reply *r, const struct byte_range *ranges, size_t n)
{
    const struct representation *rep = &a->rep;
    char boundary[40];
    snprintf(boundary, sizeof(boundary), "tensord-%016" PRIx64 "%08" PRIx64,
             hash_fnv1a(&v->start_ns, sizeof(v->start_ns), HASH_FNV_SEED),
             (uint64_t)atomic_fetch_add(&boundary_counter, 1));
    uint64_t size = body_size(&rep->body), out = 0;
    struct reply_piece *pc = answer_alloc(a, (2 * n + 1) * sizeof(*pc));
    size_t np = 0;
    for (size_t i = 0; i <= n; i++) {
        char *f;
        if (i < n)
            f = answer_printf(a,
                              "%s--%s\r\nContent-Type: %s\r\nContent-Range: bytes %" PRIu64
                              "-%" PRIu64 "/%" PRIu64 "\r\n\r\n",
                              i ? "\r\n" : "", boundary, rep->content_type, ranges[i].start,
                              ranges[i].start + ranges[i].len - 1, size);
        else
            f = answer_printf(a, "\r\n--%s--\r\n", boundary);
        pc[np++] = (struct reply_piece){.mem = f, .len = strlen(f)};
        out += strlen(f);
        if (i < n) {
            pc[np++] = (struct reply_piece){.off = ranges[i].start, .len = ranges[i].len};
            out += ranges[i].len;
        }
    }
    r->pieces = pc;
    r->n_pieces = np;
    r->length = out;
    return answer_printf(a, "multipart/byteranges; boundary=%s", boundary);
}

/* "bytes FIRST-LAST/SIZE" in the arena. */
static const char *content_range(struct answer *a, const struct byte_range *br, uint64_t size)
{
    char *out = answer_alloc(a, 72), *p = out;
    memcpy(p, "bytes ", 6);
    p = put_u64(p + 6, br->start);
    *p++ = '-';
    p = put_u64(p, br->start + br->len - 1);
    *p++ = '/';
    *put_u64(p, size) = '\0';
    return out;
}

static void body_reply(const struct request_view *v, struct answer *a, struct reply *r)
{
    struct representation *rep = &a->rep;
    uint64_t size = body_size(&rep->body);
    /* Preconditions and Range belong to requests that only read (GET, HEAD,
     * and a fetch POST, whose Range API.md defines so an interrupted fetch
     * resumes). A method that acts evaluated its preconditions before acting,
     * and its answer is never partial. */
    int get = v->is_head || strcmp(v->method, "GET") == 0;
    int reads = get || a->reads_only;
    int varies = encode_representation(v, a);
    size = body_size(&rep->body);
    struct cond_headers h = {
        .if_match = view_header(v, "If-Match"),
        .if_unmodified_since = view_header(v, "If-Unmodified-Since"),
        .if_none_match = view_header(v, "If-None-Match"),
        .if_modified_since = view_header(v, "If-Modified-Since"),
    };
    enum cond c = reads ? cond_evaluate(&h, rep->etag, rep->mtime, get) : COND_PROCEED;
    if (c == COND_PRECONDITION_FAILED) {
        answer_error(a, HTTP_PRECONDITION_FAILED, "precondition_failed",
                     get ? "If-Match or If-Unmodified-Since did not hold"
                         : "a precondition did not hold");
        return body_error(a, r);
    }
    if (c == COND_NOT_MODIFIED) {
        metrics_add(MC_NOT_MODIFIED, 1);
        /* No body, but the Content-Length a 200 would have (RFC 9110 §8.6:
         * a 304 may carry only that one). */
        r->status = HTTP_NOT_MODIFIED;
        r->no_body = 1;
        r->length = size;
        validator_headers(a, r);
        if (varies)
            vary(a, r, "Accept-Encoding");
        return;
    }

    const char *range_hdr = reads ? view_header(v, "Range") : NULL;
    struct byte_range ranges[RANGE_LIMIT];
    size_t n = 0;
    unsigned max = v->srv->cfg->max_ranges;
    enum range_result rr = RANGE_NONE;
    if (range_hdr && cond_if_range_allows(view_header(v, "If-Range"), rep->etag))
        rr = range_parse(range_hdr, size, max < RANGE_LIMIT ? max : RANGE_LIMIT, ranges, &n);
    if (range_hdr)
        metrics_add(MC_RANGE_REQUESTS, 1);
    if (rr == RANGE_UNSATISFIABLE) {
        metrics_add(MC_RANGE_NOT_SATISFIABLE, 1);
        answer_error(a, HTTP_RANGE_NOT_SATISFIABLE, "range_not_satisfiable",
                     "no range in \"%.200s\" overlaps the %" PRIu64 "-byte body", range_hdr, size);
        a->error.content_range = answer_printf(a, "bytes */%" PRIu64, size);
        return body_error(a, r);
    }

    /* A streamed or sendfile answer commits to its headers before the first
     * block is read, and libmicrohttpd 0.9.75 leaves the connection open until
     * the idle timeout when that first block fails: check a changed file now
     * (small bodies are checked right after their read; bytes in memory are
     * the validated ones and need no check). */
    uint64_t first_off = rr == RANGE_OK ? ranges[0].start : 0;
    uint64_t first_len = rr == RANGE_OK ? ranges[0].len : size;
    int multipart = rr == RANGE_OK && n > 1;
    if ((multipart || (first_len > RESPOND_SMALL_BODY_MAX && !memory_span(rep, first_off, first_len)))
        && file_changed(rep)) {
        answer_file_changed(a);
        return body_error(a, r);
    }
    r->status = rr == RANGE_OK ? HTTP_PARTIAL_CONTENT : HTTP_OK;
    r->counted = 1;
    const char *ctype = rep->content_type;
    if (multipart) {
        metrics_add(MC_MULTIRANGE_REQUESTS, 1);
        ctype = multipart_body(v, a, r, ranges, n);
    } else {
        int rc = span_body(v, a, r, first_off, first_len);
        if (rc < 0)
            return respond_failed(v, a, r, rc);
    }
    header(r, "Content-Type", ctype);
    if (rr == RANGE_OK && !multipart)
        header(r, "Content-Range", content_range(a, &ranges[0], size));
    /* Ranges are of the stored bytes: a compressed form offers none. */
    if (!rep->content_encoding)
        header(r, "Accept-Ranges", "bytes");
    validator_headers(a, r);
    if (varies)
        vary(a, r, "Accept-Encoding");
}

/* The headers every reply gets last: CORS's (server/http/cors.h). */
static void common_headers(const struct request_view *v, struct answer *a, struct reply *r)
{
    const char *cors[2 * CORS_MAX_HEADERS];
    size_t nc = cors_headers(v->srv->cfg, view_header(v, "Origin"), a->cors_methods,
                             a->cors_headers, cors);
    for (size_t i = 0; i < nc; i++) {
        if (strcmp(cors[2 * i], "Vary") == 0)
            vary(a, r, cors[2 * i + 1]);
        else
            header(r, cors[2 * i], cors[2 * i + 1]);
    }
}

void respond_failed(const struct request_view *v, struct answer *a, struct reply *r, int err)
{
    if (err == -ENODATA)
        answer_file_changed(a);
    else if (err == -EMFILE || err == -ENFILE)
        answer_error(a, HTTP_SERVICE_UNAVAILABLE, "overloaded", "out of file descriptors");
    else
        answer_error(a, HTTP_INTERNAL_SERVER_ERROR, "io_error",
                     "the file changed or could not be read while answering");
    body_error(a, r);
    common_headers(v, a, r);
}

void respond_reply(const struct request_view *v, struct answer *a, struct reply *r)
{
    memset(r, 0, sizeof(*r));
    if (a->kind == ANSWER_NONE || a->kind == ANSWER_WAIT)
        answer_error(a, HTTP_INTERNAL_SERVER_ERROR, "internal", "the request got no answer");
    r->status = a->status;
    switch (a->kind) {
    case ANSWER_BODY:
        body_reply(v, a, r);
        break;
    case ANSWER_DOC: {
        int varies;
        const char *text = a->text;
        size_t len = a->text_len;
        const char *gz = NULL;
        if (document_encoding(v, len, &varies) == ENCODING_GZIP && len <= ENCODING_ANSWER_MAX) {
            struct encoding_piece piece = {a->text, a->text_len};
            gz = gzip_for_answer(a, &piece, 1, &len);
            text = gz ? gz : text;
            len = gz ? len : a->text_len;
        }
        memory_body(a, r, text, len);
        header(r, "Content-Type", a->content_type);
        if (gz)
            header(r, "Content-Encoding", encoding_name(ENCODING_GZIP));
        /* an ETag passed on with the document (a mirror's) names its form */
        for (size_t i = 0; gz && i < a->n_extra; i++)
            if (strcasecmp(a->extra[2 * i], "ETag") == 0)
                a->extra[2 * i + 1] = etag_of_form(a, a->extra[2 * i + 1], "gzip");
        extra_headers(r, a);
        if (varies)
            vary(a, r, "Accept-Encoding");
        break;
    }
    case ANSWER_REDIRECT: {
        const char *text = answer_printf(a, "Found. Redirecting to %s\n", a->location);
        memory_body(a, r, text, strlen(text));
        header(r, "Content-Type", "text/plain; charset=utf-8");
        header(r, "Location", a->location);
        extra_headers(r, a);
        break;
    }
    case ANSWER_PREFLIGHT:
        memory_body(a, r, "", 0);
        break;
    default:
        error_reply(a, r);
    }
    common_headers(v, a, r);
}
