#include "respond.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "conditional.h"
#include "cors.h"
#include "http.h"
#include "jsonw.h"
#include "metrics.h"
#include "range.h"
#include "stream.h"
#include "util.h"

/* Most parts one multipart answer can have, whatever max_ranges says. */
#define RANGE_LIMIT 256

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

/* ---- JSON and errors ---------------------------------------------------- */

static void add_common_headers(struct MHD_Response *resp, const char *content_type)
{
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
}

static enum MHD_Result queue(struct MHD_Connection *conn, struct request *rq, unsigned status,
                             struct MHD_Response *resp, uint64_t body_bytes)
{
    if (rq->close_after || atomic_load(&rq->srv->draining))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    const char *cors[2 * CORS_MAX_HEADERS];
    size_t nc = cors_headers(rq->srv->cfg, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                                       "Origin"),
                             rq->cors_methods, cors);
    for (size_t i = 0; i < nc; i++)
        MHD_add_response_header(resp, cors[2 * i], cors[2 * i + 1]);
    http_answer_queued(conn, rq, status, resp, rq->is_head ? 0 : body_bytes);
    enum MHD_Result r = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return r;
}

/* The error document: {"error": {"code": code, "message": msg}}, or in the
 * Hub's dialect (hub) {"error": msg}. NULL when out of memory. */
static char *error_document(const char *code, const char *msg, int hub, size_t *len)
{
    struct jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    if (hub) {
        jsonw_kstr(&w, "error", msg);
    } else {
        jsonw_key(&w, "error");
        jsonw_obj(&w);
        jsonw_kstr(&w, "code", code);
        jsonw_kstr(&w, "message", msg);
        jsonw_obj_end(&w);
    }
    jsonw_obj_end(&w);
    char *text = jsonw_take(&w, len);
    return text ? respond_json_line(text, len) : NULL;
}

char *respond_json_line(char *text, size_t *len)
{
    if (*len && text[*len - 1] == '\n')
        return text;
    char *grown = realloc(text, *len + 2);
    if (!grown) {
        free(text);
        return NULL;
    }
    grown[(*len)++] = '\n';
    grown[*len] = '\0';
    return grown;
}

/* Queues an error answer; extra holds header name/value pairs (NULL-ended). */
static enum MHD_Result send_error(struct MHD_Connection *conn, struct request *rq,
                                  unsigned status, const char *code, int hub,
                                  const char *const *extra, unsigned retry_after,
                                  const char *msg)
{
    static const char oom_doc[] =
        "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}\n";
    size_t len;
    char *text = error_document(code ? code : "hub_error", msg, hub, &len);
    struct MHD_Response *resp =
        text ? MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE)
             : MHD_create_response_from_buffer(len = sizeof(oom_doc) - 1, (void *)oom_doc,
                                               MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    add_common_headers(resp, "application/json");
    if (hub && code)
        MHD_add_response_header(resp, "X-Error-Code", code);
    /* A header value is one line of visible ASCII: the message is given
     * there only when it is one (the body always has it). */
    int plain = hub;
    for (const char *c = msg; *c && plain; c++)
        plain = *c >= 0x20 && *c < 0x7f;
    if (plain && msg[0])
        MHD_add_response_header(resp, "X-Error-Message", msg);
    for (const char *const *e = extra; e && e[0]; e += 2)
        MHD_add_response_header(resp, e[0], e[1]);
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%u", retry_after ? retry_after : 1);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (rq->content_range)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, rq->content_range);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED && rq->allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, rq->allow);
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"tensord\"");
    rq->error_code = code ? code : "hub_error";
    rq->body_method = BODY_UNCOUNTED; /* also when a body could not be built after all */
    return queue(conn, rq, status, resp, len);
}

enum MHD_Result respond_error(struct MHD_Connection *conn, struct request *rq, unsigned status,
                              const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return send_error(conn, rq, status, code, 0, NULL, 0, msg);
}

enum MHD_Result respond_hub_error(struct MHD_Connection *conn, struct request *rq, unsigned status,
                                  const char *code, const char *const *extra, unsigned retry_after,
                                  const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return send_error(conn, rq, status, code, 1, extra, retry_after, msg);
}

enum MHD_Result respond_redirect(struct MHD_Connection *conn, struct request *rq, unsigned status,
                                 const char *location, const char *const *extra)
{
    char *text = xasprintf("Found. Redirecting to %s\n", location);
    size_t len = strlen(text);
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    add_common_headers(resp, "text/plain; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, location);
    for (const char *const *e = extra; e && e[0]; e += 2)
        MHD_add_response_header(resp, e[0], e[1]);
    return queue(conn, rq, status, resp, len);
}

enum MHD_Result respond_preflight(struct MHD_Connection *conn, struct request *rq,
                                  const char *methods)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"",
                                                                MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    rq->cors_methods = methods;
    return queue(conn, rq, MHD_HTTP_NO_CONTENT, resp, 0);
}

char *respond_disposition(char *out, size_t len, const char *type, const char *name, size_t n)
{
    size_t need = strlen(type) + 40 + 4 * n;
    if (need > len)
        return NULL;
    char *p = out;
    p += sprintf(p, "%s; filename=\"", type);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        *p++ = c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '/' ? '_' : (char)c;
    }
    p += sprintf(p, "\"; filename*=UTF-8''");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c == '/')
            c = '_';
        /* RFC 8187 attr-char; everything else is percent-encoded. */
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("!#$&+-.^_`|~", c)) {
            *p++ = (char)c;
        } else {
            *p++ = '%';
            *p++ = hex_upper[c >> 4];
            *p++ = hex_upper[c & 15];
        }
    }
    *p = '\0';
    return out;
}

const char *respond_content_type(const char *name)
{
    static const struct {
        const char *suffix, *type;
    } types[] = {
        {".json", "application/json"}, {".txt", "text/plain; charset=utf-8"},
        {".md", "text/markdown; charset=utf-8"}, {".model", "application/octet-stream"},
    };
    size_t n = strlen(name);
    for (size_t i = 0; i < ARRAY_LEN(types); i++) {
        size_t s = strlen(types[i].suffix);
        if (n >= s && strcmp(name + n - s, types[i].suffix) == 0)
            return types[i].type;
    }
    return "application/octet-stream";
}

enum MHD_Result respond_refusal_raw(struct request *rq, int fd, unsigned status,
                                    const char *code, const char *fmt, ...)
{
    char msg[512], head[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    size_t len;
    char *text = error_document(code, msg, 0, &len);
    if (!text)
        return MHD_NO;
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     status, MHD_get_reason_phrase_for(status), len);
    struct iovec iov[2] = {{head, (size_t)n}, {text, len}};
    /* The socket has sent nothing on this request and its buffer is empty:
     * a few hundred bytes go out in one call, or not at all. */
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    free(text);
    rq->status = status;
    rq->error_code = code;
    rq->queued_ns = time_mono_ns();
    rq->body_bytes = w == n + (ssize_t)len ? len : 0;
    rq->answered_raw = 1;
    return MHD_NO; /* libmicrohttpd closes the connection */
}

enum MHD_Result respond_json(struct MHD_Connection *conn, struct request *rq, unsigned status,
                             json_t *doc, const char *etag)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    size_t len = text ? strlen(text) : 0;
    if (text)
        text = respond_json_line(text, &len);
    if (!text)
        return respond_error(conn, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                             "could not encode the answer as JSON");
    if (status != MHD_HTTP_OK) {
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
        add_common_headers(resp, "application/json");
        return queue(conn, rq, status, resp, len);
    }
    return respond_json_text(conn, rq, text, len, etag, NULL);
}

enum MHD_Result respond_json_text(struct MHD_Connection *conn, struct request *rq,
                                  const char *text, size_t len, const char *etag,
                                  const struct reg_model *pin)
{
    if (!pin && !(text = respond_json_line((char *)text, &len)))
        return respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                             "out of memory");
    struct representation rep = {
        .body = {.prefix = text, .prefix_len = len, .fd = -1},
        .prefix_buf = pin ? NULL : (char *)text,
        .pin = pin,
        .content_type = "application/json",
        .mtime = -1,
    };
    if (etag)
        snprintf(rep.etag, sizeof(rep.etag), "%s", etag);
    return respond_body(conn, rq, &rep);
}
enum MHD_Result respond_file_changed(struct MHD_Connection *conn, struct request *rq)
{
    http_request_rescan(rq->srv);
    return respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "file_changed",
                         "the file changed on disk since it was validated; retry once the "
                         "daemon has rescanned it");
}

/* The body reader of a 304, which libmicrohttpd never calls. */
static ssize_t never_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls, (void)pos, (void)buf, (void)max;
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* The request's precondition headers. */
static struct cond_headers cond_headers_of(struct MHD_Connection *conn)
{
    return (struct cond_headers){
        .if_match = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_MATCH),
        .if_unmodified_since = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                           MHD_HTTP_HEADER_IF_UNMODIFIED_SINCE),
        .if_none_match =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH),
        .if_modified_since = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                         MHD_HTTP_HEADER_IF_MODIFIED_SINCE),
    };
}

int respond_preconditions_hold(struct MHD_Connection *conn)
{
    struct cond_headers h = cond_headers_of(conn);
    return cond_evaluate(&h, "", -1, 0) == COND_PROCEED;
}

static void add_validators(struct MHD_Response *resp, const struct representation *rep)
{
    char date[40];
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
                            rep->cache_control ? rep->cache_control : "no-cache");
    if (rep->disposition)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, rep->disposition);
    for (const char *const *e = rep->extra; e && e[0]; e += 2)
        MHD_add_response_header(resp, e[0], e[1]);
    if (rep->etag[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, rep->etag);
    if (rep->mtime >= 0) {
        http_date_format(rep->mtime, date, sizeof(date));
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LAST_MODIFIED, date);
    }
    if (rep->dtype) {
        MHD_add_response_header(resp, "X-Tensor-Dtype", rep->dtype);
        /* A scalar's shape is empty, and libmicrohttpd refuses empty values;
         * surrounding whitespace is not part of a field value (RFC 9110
         * §5.5), so a lone space reads as empty to every client. */
        MHD_add_response_header(resp, "X-Tensor-Shape", rep->shape[0] ? rep->shape : " ");
    }
}

static void representation_release(struct representation *rep)
{
    free(rep->prefix_buf);
    free(rep->plan_buf);
    free(rep->pieces_buf);
    if (rep->src_buf)
        rep->body.src->free(rep->src_buf);
    rep->prefix_buf = NULL;
    rep->plan_buf = NULL;
    rep->pieces_buf = NULL;
    rep->src_buf = NULL;
}

/* Answers a failed precondition: 412, or 304 with the validators. */
static enum MHD_Result respond_condition(struct MHD_Connection *conn, struct request *rq,
                                         struct representation *rep, enum cond c, int get)
{
    representation_release(rep);
    if (c == COND_PRECONDITION_FAILED)
        return respond_error(conn, rq, MHD_HTTP_PRECONDITION_FAILED, "precondition_failed",
                             get ? "If-Match or If-Unmodified-Since did not hold"
                                 : "a precondition did not hold");
    metrics_add(MC_NOT_MODIFIED, 1);
    /* No body, but the Content-Length a 200 would have (RFC 9110 §8.6: a
     * 304 may carry only that one): libmicrohttpd sends the length of the
     * response and never reads a 304's body. */
    struct MHD_Response *resp = MHD_create_response_from_callback(
        body_size(&rep->body), STREAM_BLOCK, never_read, NULL, NULL);
    if (!resp)
        return MHD_NO;
    add_validators(resp, rep);
    return queue(conn, rq, MHD_HTTP_NOT_MODIFIED, resp, 0);
}

/* Answers 416 for a Range none of whose ranges overlaps the body. */
static enum MHD_Result respond_unsatisfiable(struct MHD_Connection *conn, struct request *rq,
                                             struct representation *rep, const char *range_hdr)
{
    uint64_t size = body_size(&rep->body);
    representation_release(rep);
    metrics_add(MC_RANGE_NOT_SATISFIABLE, 1);
    char cr[48];
    snprintf(cr, sizeof(cr), "bytes */%" PRIu64, size);
    rq->content_range = cr;
    enum MHD_Result ret =
        respond_error(conn, rq, MHD_HTTP_RANGE_NOT_SATISFIABLE, "range_not_satisfiable",
                      "no range in \"%.200s\" overlaps the %" PRIu64 "-byte body", range_hdr, size);
    rq->content_range = NULL;
    return ret;
}

/* Answers when the body could not be built (stream_span's failures). */
static enum MHD_Result respond_no_body(struct MHD_Connection *conn, struct request *rq,
                                       unsigned err_status, int changed)
{
    if (changed)
        return respond_file_changed(conn, rq);
    if (err_status == MHD_HTTP_SERVICE_UNAVAILABLE)
        return respond_error(conn, rq, err_status, "overloaded", "out of file descriptors");
    return respond_error(conn, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, "io_error",
                         "the file changed or could not be read while answering");
}

/* Writes "bytes FIRST-LAST/SIZE" into out (at least 70 bytes). */
static void format_content_range(char *out, const struct byte_range *r, uint64_t size)
{
    char *p = out;
    memcpy(p, "bytes ", 6);
    p = put_u64(p + 6, r->start);
    *p++ = '-';
    p = put_u64(p, r->start + r->len - 1);
    *p++ = '/';
    *put_u64(p, size) = '\0';
}

enum MHD_Result respond_body(struct MHD_Connection *conn, struct request *rq,
                             struct representation *rep)
{
    uint64_t size = body_size(&rep->body);
    /* Preconditions and Range belong to requests that only read (GET, HEAD,
     * and a fetch POST, whose Range API.md defines so an interrupted fetch
     * resumes). A method that acts evaluated its preconditions before acting,
     * and its answer is never partial. */
    int get = rq->is_head || strcmp(rq->method, MHD_HTTP_METHOD_GET) == 0;
    int reads = get || rq->reads_only;
    struct cond_headers h = cond_headers_of(conn);
    enum cond c = reads ? cond_evaluate(&h, rep->etag, rep->mtime, get) : COND_PROCEED;
    if (c != COND_PROCEED)
        return respond_condition(conn, rq, rep, c, get);

    const char *range_hdr =
        reads ? MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE) : NULL;
    struct byte_range ranges[RANGE_LIMIT];
    size_t n = 0;
    size_t max_ranges = rq->srv->cfg->max_ranges < RANGE_LIMIT ? rq->srv->cfg->max_ranges : RANGE_LIMIT;
    enum range_result rr = RANGE_NONE;
    if (range_hdr && cond_if_range_allows(MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                                      MHD_HTTP_HEADER_IF_RANGE),
                                          rep->etag))
        rr = range_parse(range_hdr, size, max_ranges, ranges, &n);
    if (range_hdr)
        metrics_add(MC_RANGE_REQUESTS, 1);
    if (rr == RANGE_UNSATISFIABLE)
        return respond_unsatisfiable(conn, rq, rep, range_hdr);

    /* A streamed or sendfile answer commits to its headers before the first
     * block is read, and libmicrohttpd 0.9.75 leaves the connection open until
     * the idle timeout when that first block fails: check a changed file now
     * (small bodies are checked right after their read; bytes sent from the
     * model's memory are the validated ones and need no check). */
    uint64_t first_off = rr == RANGE_OK ? ranges[0].start : 0;
    uint64_t first_len = rr == RANGE_OK ? ranges[0].len : size;
    int multipart = rr == RANGE_OK && n > 1;
    if ((multipart ||
         (first_len > STREAM_SMALL_BODY_MAX && !stream_pinned_span(rep, first_off, first_len))) &&
        stream_file_changed(rep)) {
        representation_release(rep);
        return respond_file_changed(conn, rq);
    }

    struct MHD_Response *resp;
    unsigned status = rr == RANGE_OK ? MHD_HTTP_PARTIAL_CONTENT : MHD_HTTP_OK, err_status = 0;
    int changed = 0;
    uint64_t total = first_len;
    char content_range[80], ctype[96];
    if (multipart) {
        metrics_add(MC_MULTIRANGE_REQUESTS, 1);
        resp = stream_multipart(rq, rep, ranges, n, ctype, sizeof(ctype), &total);
    } else {
        if (rr == RANGE_OK)
            format_content_range(content_range, &ranges[0], size);
        resp = stream_span(rq, rep, first_off, first_len, &err_status, &changed);
    }
    if (!resp) {
        representation_release(rep);
        return respond_no_body(conn, rq, err_status, changed);
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            multipart ? ctype : rep->content_type);
    if (rr == RANGE_OK && !multipart)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, content_range);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    add_validators(resp, rep);
    representation_release(rep);
    return queue(conn, rq, status, resp, total);
}

enum MHD_Result respond_doc(struct MHD_Connection *conn, struct request *rq, unsigned status,
                            const char *content_type, char *text, size_t len,
                            const char *const *extra, const char *error_code)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    add_common_headers(resp, content_type);
    for (const char *const *e = extra; e && e[0]; e += 2)
        MHD_add_response_header(resp, e[0], e[1]);
    if (error_code)
        rq->error_code = error_code;
    return queue(conn, rq, status, resp, len);
}
