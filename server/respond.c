#include "respond.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "http.h"
#include "jsonw.h"
#include "metrics.h"
#include "range.h"
#include "util.h"

/* Bodies up to this size are read into a buffer and sent with the headers in
 * one write; larger contiguous spans go out with sendfile. */
#define SMALL_BODY_MAX (64 * 1024)
/* Block size MHD asks streamed readers for. */
#define STREAM_BLOCK (256 * 1024)
/* Most parts one multipart answer can have, whatever max_ranges says. */
#define RANGE_LIMIT 256

/* Responses own a duplicate of the model file's descriptor, so a reload can
 * free the model while a download is still going. */
static int fcntl_dupfd(int fd)
{
    return fcntl(fd, F_DUPFD_CLOEXEC, 0);
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

static char *put_2digits(char *p, int v)
{
    *p++ = (char)('0' + v / 10);
    *p++ = (char)('0' + v % 10);
    return p;
}

/* IMF-fixdate by arithmetic: gmtime_r and strftime take the time zone lock
 * and go through the locale on every answer, and the date is always UTC. */
void http_date_format(int64_t t, char *buf, size_t len)
{
    static const char wdays[7][4] = {"Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    int64_t days = t / 86400, secs = t % 86400;
    if (secs < 0) {
        secs += 86400;
        days--;
    }
    int wday = (int)(((days % 7) + 7) % 7); /* 1970-01-01 was a Thursday */
    /* Civil date from days since the epoch, in 400-year eras starting on
     * March 1st so the leap day is the era-year's last day. */
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int day = (int)(doy - (153 * mp + 2) / 5 + 1);
    int month = (int)(mp < 10 ? mp + 3 : mp - 9);
    int64_t year = yoe + era * 400 + (month <= 2);
    if (year < 0 || year > 9999 || len < HTTP_DATE_LEN) { /* outside what HTTP-date can say */
        snprintf(buf, len, "%s", "Thu, 01 Jan 1970 00:00:00 GMT");
        return;
    }
    /* "Sun, 06 Nov 1994 08:49:37 GMT" */
    char *p = buf;
    memcpy(p, wdays[wday], 3);
    p += 3;
    *p++ = ',';
    *p++ = ' ';
    p = put_2digits(p, day);
    *p++ = ' ';
    memcpy(p, months[month - 1], 3);
    p += 3;
    *p++ = ' ';
    p = put_2digits(p, (int)(year / 100));
    p = put_2digits(p, (int)(year % 100));
    *p++ = ' ';
    p = put_2digits(p, (int)(secs / 3600));
    *p++ = ':';
    p = put_2digits(p, (int)(secs / 60 % 60));
    *p++ = ':';
    p = put_2digits(p, (int)(secs % 60));
    memcpy(p, " GMT", 5);
}

int http_date_parse(const char *s, int64_t *out)
{
    static const char *const formats[] = {
        "%a, %d %b %Y %H:%M:%S GMT", /* IMF-fixdate */
        "%A, %d-%b-%y %H:%M:%S GMT", /* obsolete RFC 850 */
        "%a %b %e %H:%M:%S %Y",      /* asctime */
    };
    for (size_t i = 0; i < ARRAY_LEN(formats); i++) {
        struct tm tm;
        memset(&tm, 0, sizeof(tm));
        const char *end = strptime(s, formats[i], &tm);
        if (!end)
            continue;
        while (*end == ' ' || *end == '\t')
            end++;
        if (*end)
            continue;
        *out = (int64_t)timegm(&tm);
        return 0;
    }
    return -1;
}

/* Compares one entity-tag from a list with ours. */
static int etag_equal(const char *tag, size_t len, const char *etag, int weak)
{
    int tag_weak = len >= 2 && tag[0] == 'W' && tag[1] == '/';
    int our_weak = etag[0] == 'W' && etag[1] == '/';
    if (!weak && (tag_weak || our_weak))
        return 0;
    if (tag_weak) {
        tag += 2;
        len -= 2;
    }
    if (our_weak)
        etag += 2;
    return strlen(etag) == len && memcmp(tag, etag, len) == 0;
}

int http_etag_match(const char *list, const char *etag, int weak)
{
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (!*p)
            break;
        if (*p == '*')
            return 1; /* any current representation, with a validator or not */
        if (!etag || !etag[0])
            return 0;
        const char *start = p;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        if (*p != '"')
            return 0; /* malformed list: treat as no match */
        const char *close = strchr(p + 1, '"');
        if (!close)
            return 0;
        p = close + 1;
        if (etag_equal(start, (size_t)(p - start), etag, weak))
            return 1;
    }
    return 0;
}

/* ---- JSON and errors ---------------------------------------------------- */

static void add_common_headers(struct MHD_Response *resp, const char *content_type)
{
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
}

static enum MHD_Result queue(struct MHD_Connection *conn, struct request *rq, unsigned status,
                             struct MHD_Response *resp, uint64_t body_bytes)
{
    rq->status = status;
    rq->body_bytes = rq->is_head ? 0 : body_bytes;
    rq->queued_ns = time_mono_ns();
    if (rq->close_after || atomic_load(&rq->srv->draining))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
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
    return jsonw_take(&w, len);
}

/* Queues an error answer; extra holds header name/value pairs (NULL-ended). */
static enum MHD_Result send_error(struct MHD_Connection *conn, struct request *rq,
                                  unsigned status, const char *code, int hub,
                                  const char *const *extra, unsigned retry_after,
                                  const char *msg)
{
    static const char oom_doc[] = "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}";
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

char *respond_disposition(char *out, size_t len, const char *type, const char *name, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
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
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
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
    return MHD_NO; /* libmicrohttpd closes the connection */
}

enum MHD_Result respond_json(struct MHD_Connection *conn, struct request *rq, unsigned status,
                             json_t *doc, const char *etag)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (!text)
        return respond_error(conn, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                             "could not encode the answer as JSON");
    if (status != MHD_HTTP_OK) {
        size_t len = strlen(text);
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
        add_common_headers(resp, "application/json");
        return queue(conn, rq, status, resp, len);
    }
    return respond_json_text(conn, rq, text, strlen(text), etag, NULL);
}

enum MHD_Result respond_json_text(struct MHD_Connection *conn, struct request *rq,
                                  const char *text, size_t len, const char *etag,
                                  const struct reg_model *pin)
{
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
/* ---- streamed bodies ---------------------------------------------------- */

/* A piece of the answer: either literal bytes (multipart framing) or a span
 * of the body. */
struct piece {
    const char *mem;   /* literal bytes, or NULL for a body span */
    uint64_t body_off; /* body offset of a span */
    uint64_t len;
    uint64_t out_off;  /* where the piece starts in the answer */
};

struct stream {
    struct body body;       /* fd is a dup owned by the stream */
    struct fileio_stat file_st; /* what the file looked like when it was validated */
    int verify;             /* check file_st after every block read from the file */
    char *prefix_buf;
    struct slice_plan *plan_buf;
    void *pieces_buf;
    const struct reg_model *pin; /* a reference keeping body.prefix (and the pieces' fds) alive,
                                  * or NULL */
    size_t n_pieces;
    struct piece *pieces;
    char *framing;          /* storage of the multipart framing strings */
    size_t cursor;          /* piece of the last read: MHD reads sequentially */
};

static void stream_free(void *cls)
{
    struct stream *s = cls;
    if (s->body.fd >= 0)
        close(s->body.fd);
    free(s->prefix_buf);
    free(s->plan_buf);
    free(s->pieces_buf);
    reg_model_unref(s->pin);
    free(s->pieces);
    free(s->framing);
    free(s);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct stream *s = cls;
    size_t i = s->cursor;
    if (i >= s->n_pieces || pos < s->pieces[i].out_off)
        i = 0;
    while (i < s->n_pieces && pos >= s->pieces[i].out_off + s->pieces[i].len)
        i++;
    if (i == s->n_pieces)
        return MHD_CONTENT_READER_END_OF_STREAM;
    s->cursor = i;
    size_t done = 0;
    while (done < max && i < s->n_pieces) {
        const struct piece *p = &s->pieces[i];
        uint64_t in = pos + done - p->out_off;
        uint64_t n = p->len - in;
        if (n > max - done)
            n = max - done;
        if (p->mem) {
            memcpy(buf + done, p->mem + in, n);
        } else if (body_read(&s->body, p->body_off + in, buf + done, n) < 0 ||
                   (s->verify && !fileio_unchanged(s->body.fd, &s->file_st))) {
            /* The file shrank or changed in place since it was validated:
             * close the connection short of Content-Length, never send
             * padding or bytes of another version. */
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        done += n;
        if (in + n == p->len)
            i++;
    }
    metrics_add(MC_COPIED_BYTES, done);
    return (ssize_t)done;
}

/* Moves the representation's owned buffers and a dup of its fd into a new stream. */
static struct stream *stream_new(struct representation *rep)
{
    struct stream *s = xcalloc(1, sizeof(*s));
    s->body = rep->body;
    s->prefix_buf = rep->prefix_buf;
    s->plan_buf = rep->plan_buf;
    s->pieces_buf = rep->pieces_buf;
    rep->prefix_buf = NULL;
    rep->plan_buf = NULL;
    rep->pieces_buf = NULL;
    s->pin = reg_model_ref(rep->pin);
    s->body.fd = rep->body.fd >= 0 ? fcntl_dupfd(rep->body.fd) : -1;
    if (rep->file_st && s->body.fd >= 0) {
        s->file_st = *rep->file_st;
        s->verify = 1;
    }
    return s;
}

static ssize_t never_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls, (void)pos, (void)buf, (void)max;
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void unpin(void *cls)
{
    reg_model_unref(cls);
}

/* Where body bytes [off, off + len) are held in memory that a model keeps
 * alive (a file's validated header, a cached document), or NULL. */
static const char *pinned_span(const struct representation *rep, uint64_t off, uint64_t len)
{
    if (!rep->pin)
        return NULL;
    if (rep->mem && off + len <= rep->mem_len)
        return rep->mem + off;
    if (!rep->prefix_buf && off + len <= rep->body.prefix_len)
        return rep->body.prefix + off;
    return NULL;
}

/* Answers body bytes [off, off + len) without reading or copying them when
 * they are already in memory: pinned memory (the response holds a reference
 * to the model until it is sent), or the representation's own buffer
 * when it is the whole body (handed over). Returns NULL otherwise. */
static struct MHD_Response *memory_response(struct representation *rep, uint64_t off,
                                            uint64_t len)
{
    const struct body *b = &rep->body;
    const char *mem = pinned_span(rep, off, len);
    if (mem) {
        struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback_cls(
            (size_t)len, (void *)mem, unpin, reg_model_ref(rep->pin));
        if (!resp)
            reg_model_unref(rep->pin); /* out of memory: the reference was not taken over */
        else
            metrics_add(MC_COPIED_BYTES, len);
        return resp;
    }
    if (rep->prefix_buf && b->prefix == rep->prefix_buf && off == 0 && len == b->prefix_len &&
        b->data_len == 0) {
        char *buf = rep->prefix_buf;
        rep->prefix_buf = NULL;
        metrics_add(MC_COPIED_BYTES, len);
        return MHD_create_response_from_buffer((size_t)len, buf, MHD_RESPMEM_MUST_FREE);
    }
    return NULL;
}

/* Returns 1 when the body's file no longer has the size and mtime it had when
 * it was validated (it was truncated or written in place). */
static int file_changed(const struct representation *rep)
{
    return rep->file_st && rep->body.fd >= 0 && !fileio_unchanged(rep->body.fd, rep->file_st);
}

/* Builds the answer for body span [off, off + len). On failure *err_status is
 * 500 (read error), 503 with *changed set (the file changed) or 503 (no fd). */
static struct MHD_Response *span_response(struct request *rq, struct representation *rep,
                                          uint64_t off, uint64_t len, unsigned *err_status,
                                          int *changed)
{
    uint64_t file_off;
    struct MHD_Response *resp = memory_response(rep, off, len);
    if (resp)
        return resp;
    if (len <= SMALL_BODY_MAX) {
        char *buf = xmalloc(len ? len : 1);
        int rc = len ? body_read(&rep->body, off, buf, len) : 0;
        /* Checked after the read: a write(2) bumps mtime before it copies
         * data, so an unchanged stat means the bytes read are the old ones. */
        if (rc == -ENODATA || file_changed(rep)) {
            free(buf);
            *err_status = MHD_HTTP_SERVICE_UNAVAILABLE;
            *changed = 1;
            return NULL;
        }
        if (rc < 0) {
            free(buf);
            *err_status = MHD_HTTP_INTERNAL_SERVER_ERROR;
            return NULL;
        }
        metrics_add(MC_COPIED_BYTES, len);
        return MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    }
    int span_fd;
    if (rq->srv->cfg->sendfile && body_file_span(&rep->body, off, len, &span_fd, &file_off)) {
        int fd = fcntl_dupfd(span_fd);
        if (fd < 0) {
            *err_status = MHD_HTTP_SERVICE_UNAVAILABLE;
            return NULL;
        }
        metrics_add(MC_SENDFILE_BYTES, len);
        /* sendfile sends what the file holds as it goes: a write to the file
         * must cut this connection (the watcher does, through conns). */
        http_sending(rq, rep->body.n_pieces ? body_piece_stat(&rep->body, off) : rep->file_st);
        return MHD_create_response_from_fd_at_offset64(len, fd, file_off);
    }
    struct stream *s = stream_new(rep);
    http_sending(rq, rep->file_st); /* a write that keeps size and mtime is cut too */
    s->n_pieces = 1;
    s->pieces = xcalloc(1, sizeof(struct piece));
    s->pieces[0] = (struct piece){.body_off = off, .len = len, .out_off = 0};
    return MHD_create_response_from_callback(len, STREAM_BLOCK, stream_read, s, stream_free);
}

static atomic_uint_fast64_t boundary_counter;

static struct MHD_Response *multipart_response(struct request *rq, struct representation *rep,
                                               const struct byte_range *ranges, size_t n,
                                               char *content_type, size_t ct_len,
                                               uint64_t *total_out)
{
    char boundary[40];
    snprintf(boundary, sizeof(boundary), "tensord-%016" PRIx64 "%08" PRIx64,
             hash_fnv1a(&rq->start_ns, sizeof(rq->start_ns), HASH_FNV_SEED),
             (uint64_t)atomic_fetch_add(&boundary_counter, 1));
    snprintf(content_type, ct_len, "multipart/byteranges; boundary=%s", boundary);
    uint64_t size = body_size(&rep->body);

    /* Framing strings: one before each part and the closing delimiter. */
    size_t cap = (n + 1) * (sizeof(boundary) + strlen(rep->content_type) + 120);
    char *framing = xmalloc(cap);
    size_t used = 0;
    struct piece *pieces = xcalloc(2 * n + 1, sizeof(*pieces));
    uint64_t out = 0;
    size_t np = 0;
    for (size_t i = 0; i <= n; i++) {
        char *f = framing + used;
        int flen;
        if (i < n)
            flen = snprintf(f, cap - used,
                            "%s--%s\r\nContent-Type: %s\r\nContent-Range: bytes %" PRIu64
                            "-%" PRIu64 "/%" PRIu64 "\r\n\r\n",
                            i ? "\r\n" : "", boundary, rep->content_type, ranges[i].start,
                            ranges[i].start + ranges[i].len - 1, size);
        else
            flen = snprintf(f, cap - used, "\r\n--%s--\r\n", boundary);
        used += (size_t)flen;
        pieces[np++] = (struct piece){.mem = f, .len = (uint64_t)flen, .out_off = out};
        out += (uint64_t)flen;
        if (i < n) {
            pieces[np++] = (struct piece){
                .body_off = ranges[i].start, .len = ranges[i].len, .out_off = out};
            out += ranges[i].len;
        }
    }
    *total_out = out;
    struct stream *s = stream_new(rep);
    http_sending(rq, rep->file_st);
    s->framing = framing;
    s->pieces = pieces;
    s->n_pieces = np;
    return MHD_create_response_from_callback(out, STREAM_BLOCK, stream_read, s, stream_free);
}

enum MHD_Result respond_file_changed(struct MHD_Connection *conn, struct request *rq)
{
    http_request_rescan(rq->srv);
    return respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "file_changed",
                         "the file changed on disk since it was validated; retry once the "
                         "daemon has rescanned it");
}

/* ---- conditional requests ----------------------------------------------- */

enum cond { COND_PROCEED, COND_NOT_MODIFIED, COND_PRECONDITION_FAILED };

/* RFC 9110 §13.2.2: the preconditions in their evaluation order, for a
 * representation that exists, with validators etag ("" for none) and mtime
 * (-1 for none). `safe` is GET or HEAD: only those answer 304 and consider
 * If-Modified-Since; for a method that acts, a failed If-None-Match is 412. */
static enum cond evaluate_conditions(struct MHD_Connection *conn, const char *etag, int64_t mtime,
                                     int safe)
{
    const char *im = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_MATCH);
    const char *ius =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_UNMODIFIED_SINCE);
    const char *inm =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    const char *ims =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_MODIFIED_SINCE);
    int64_t t;
    if (im) {
        if (!http_etag_match(im, etag, 0))
            return COND_PRECONDITION_FAILED;
    } else if (ius && mtime >= 0 && http_date_parse(ius, &t) == 0 && mtime > t) {
        return COND_PRECONDITION_FAILED;
    }
    if (inm) {
        if (http_etag_match(inm, etag, 1))
            return safe ? COND_NOT_MODIFIED : COND_PRECONDITION_FAILED;
    } else if (safe && ims && mtime >= 0 && http_date_parse(ims, &t) == 0 && mtime <= t) {
        return COND_NOT_MODIFIED;
    }
    return COND_PROCEED;
}

int respond_preconditions_hold(struct MHD_Connection *conn)
{
    return evaluate_conditions(conn, "", -1, 0) == COND_PROCEED;
}

/* If-Range (RFC 9110 §13.1.5): the Range applies only when the validator
 * still matches. An entity-tag must match strongly. A date never does here:
 * it validates only when the server knows the representation changed at most
 * once in that second (§8.8.2.2), and a file can be rewritten twice in one
 * second, or given back an old mtime, so a resuming client would splice two
 * versions. The full representation is sent instead. */
static int if_range_allows(struct MHD_Connection *conn, const struct representation *rep)
{
    const char *ir = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_RANGE);
    if (!ir)
        return 1;
    while (*ir == ' ')
        ir++;
    return ir[0] == '"' && http_etag_match(ir, rep->etag, 0);
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
    rep->prefix_buf = NULL;
    rep->plan_buf = NULL;
    rep->pieces_buf = NULL;
}

enum MHD_Result respond_body(struct MHD_Connection *conn, struct request *rq,
                             struct representation *rep)
{
    enum MHD_Result ret;
    uint64_t size = body_size(&rep->body);
    /* Preconditions and Range belong to requests that only read (GET, HEAD,
     * and a fetch POST, whose Range API.md defines so an interrupted fetch
     * resumes). A method that acts evaluated its preconditions before acting,
     * and its answer is never partial. */
    int get = rq->is_head || strcmp(rq->method, MHD_HTTP_METHOD_GET) == 0;
    int reads = get || rq->reads_only;
    enum cond c = reads ? evaluate_conditions(conn, rep->etag, rep->mtime, get) : COND_PROCEED;
    if (c != COND_PROCEED) {
        representation_release(rep);
        if (c == COND_PRECONDITION_FAILED)
            return respond_error(conn, rq, MHD_HTTP_PRECONDITION_FAILED, "precondition_failed",
                                 get ? "If-Match or If-Unmodified-Since did not hold"
                                     : "a precondition did not hold");
        metrics_add(MC_NOT_MODIFIED, 1);
        /* No body, but the Content-Length a 200 would have (RFC 9110 §8.6:
         * a 304 may carry only that one): libmicrohttpd sends the length of
         * the response and never reads a 304's body. */
        struct MHD_Response *resp =
            MHD_create_response_from_callback(size, STREAM_BLOCK, never_read, NULL, NULL);
        add_validators(resp, rep);
        return queue(conn, rq, MHD_HTTP_NOT_MODIFIED, resp, 0);
    }

    const char *range_hdr =
        reads ? MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE) : NULL;
    struct byte_range ranges[RANGE_LIMIT];
    size_t n = 0;
    size_t max_ranges = rq->srv->cfg->max_ranges < RANGE_LIMIT ? rq->srv->cfg->max_ranges : RANGE_LIMIT;
    enum range_result rr = RANGE_NONE;
    if (range_hdr && if_range_allows(conn, rep))
        rr = range_parse(range_hdr, size, max_ranges, ranges, &n);
    if (range_hdr)
        metrics_add(MC_RANGE_REQUESTS, 1);

    if (rr == RANGE_UNSATISFIABLE) {
        representation_release(rep);
        metrics_add(MC_RANGE_NOT_SATISFIABLE, 1);
        char cr[48];
        snprintf(cr, sizeof(cr), "bytes */%" PRIu64, size);
        rq->content_range = cr;
        ret = respond_error(conn, rq, MHD_HTTP_RANGE_NOT_SATISFIABLE, "range_not_satisfiable",
                            "no range in \"%.200s\" overlaps the %" PRIu64 "-byte body", range_hdr,
                            size);
        rq->content_range = NULL;
        return ret;
    }

    /* A streamed or sendfile answer commits to its headers before the first
     * block is read, and libmicrohttpd 0.9.75 leaves the connection open until
     * the idle timeout when that first block fails: check a changed file now
     * (small bodies are checked right after their read; bytes sent from the
     * model's memory are the validated ones and need no check). */
    uint64_t first_off = rr == RANGE_OK ? ranges[0].start : 0;
    uint64_t first_len = rr == RANGE_OK ? ranges[0].len : size;
    int multipart = rr == RANGE_OK && n > 1;
    if ((multipart || (first_len > SMALL_BODY_MAX && !pinned_span(rep, first_off, first_len))) &&
        file_changed(rep)) {
        representation_release(rep);
        return respond_file_changed(conn, rq);
    }

    struct MHD_Response *resp;
    unsigned status = MHD_HTTP_OK, err_status = 0;
    int changed = 0;
    uint64_t total;
    char content_range[80], ctype[96];
    if (rr == RANGE_OK && n == 1) {
        status = MHD_HTTP_PARTIAL_CONTENT;
        total = ranges[0].len;
        char *p = content_range; /* "bytes FIRST-LAST/SIZE" */
        memcpy(p, "bytes ", 6);
        p = put_u64(p + 6, ranges[0].start);
        *p++ = '-';
        p = put_u64(p, ranges[0].start + ranges[0].len - 1);
        *p++ = '/';
        *put_u64(p, size) = '\0';
        resp = span_response(rq, rep, ranges[0].start, ranges[0].len, &err_status, &changed);
    } else if (rr == RANGE_OK) {
        status = MHD_HTTP_PARTIAL_CONTENT;
        metrics_add(MC_MULTIRANGE_REQUESTS, 1);
        resp = multipart_response(rq, rep, ranges, n, ctype, sizeof(ctype), &total);
    } else {
        total = size;
        resp = span_response(rq, rep, 0, size, &err_status, &changed);
    }
    if (!resp) {
        representation_release(rep);
        if (changed)
            return respond_file_changed(conn, rq);
        if (err_status == MHD_HTTP_SERVICE_UNAVAILABLE)
            return respond_error(conn, rq, err_status, "overloaded", "out of file descriptors");
        return respond_error(conn, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, "io_error",
                             "the file changed or could not be read while answering");
    }
    if (rr == RANGE_OK && n > 1) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    } else {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, rep->content_type);
        if (status == MHD_HTTP_PARTIAL_CONTENT)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, content_range);
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    add_validators(resp, rep);
    representation_release(rep);
    return queue(conn, rq, status, resp, total);
}
