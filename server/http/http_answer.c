/* http_answer: see http_answer.h. */
#include "http_answer.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "conns.h"
#include "dispatch.h"
#include "respond.h"
#include "stream.h"
#include "util.h"

/* Whether the request's header `name` lists token (case-insensitive). */
static int header_has_token(struct MHD_Connection *mc, const char *name, const char *token)
{
    const char *v = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, name);
    size_t n = strlen(token);
    while (v && *v) {
        v += strspn(v, " \t,");
        size_t len = strcspn(v, " \t,");
        if (len == n && strncasecmp(v, token, n) == 0)
            return 1;
        v += len;
    }
    return 0;
}

struct head_size {
    uint64_t bytes;
    int has_connection;         /* the answer sets Connection itself */
};

static enum MHD_Result add_header_size(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    struct head_size *h = cls;
    if (kind == MHD_HEADER_KIND) {
        h->bytes += strlen(key) + 2 + strlen(value) + 2;
        h->has_connection |= strcasecmp(key, MHD_HTTP_HEADER_CONNECTION) == 0;
    }
    return MHD_YES;
}

/* The bytes of the status line and headers libmicrohttpd 0.9.75 writes for
 * resp (connection.c, build_header_response): "HTTP/1.1 CODE REASON", Date
 * (37 bytes), Connection when it must close or keep an HTTP/1.0 connection
 * alive and the answer does not set it, the answer's own headers,
 * Content-Length, the blank line. tests/integration/test_aborted.py checks
 * it against what a client's kernel received. */
static uint64_t answer_head_bytes(struct MHD_Connection *mc, const struct request *rq,
                                  unsigned status, struct MHD_Response *resp, uint64_t body)
{
    struct head_size h = {0};
    char digits[24];
    MHD_get_response_headers(resp, add_header_size, &h);
    h.bytes += 9 + 4 + MHD_get_reason_phrase_len_for(status) + 2 + 37;
    if (!h.has_connection) {
        int keep10 = rq->http10 && header_has_token(mc, MHD_HTTP_HEADER_CONNECTION, "keep-alive");
        if (header_has_token(mc, MHD_HTTP_HEADER_CONNECTION, "close") || (rq->http10 && !keep10))
            h.bytes += sizeof("Connection: close\r\n") - 1;
        else if (keep10)
            h.bytes += sizeof("Connection: Keep-Alive\r\n") - 1;
    }
    h.bytes += sizeof("Content-Length: \r\n") - 1 + (uint64_t)snprintf(digits, sizeof(digits),
                                                                     "%llu", (unsigned long long)body);
    return h.bytes + 2;
}

/* An answer whose body is over this has the connection's sent-byte count
 * taken when it is queued, so that if it is cut short the bytes the client
 * got are known (http_conn_request_end). */
#define MEASURED_BODY_MIN (64 * 1024)

/* The answer resp (status, a body of body_bytes) was queued for rq: its
 * headers are all set. */
static void answer_queued(struct MHD_Connection *mc, struct request *rq, unsigned status,
                          struct MHD_Response *resp, uint64_t body_bytes)
{
    rq->status = status;
    rq->body_bytes = body_bytes;
    rq->queued_ns = time_mono_ns();
    if (body_bytes <= MEASURED_BODY_MIN || !rq->owner)
        return;
    rq->sock_sent0 = conn_bytes_written(rq->owner->entry);
    rq->head_bytes = answer_head_bytes(mc, rq, status, resp, body_bytes);
}

/* Asks the daemon's main loop to rescan the models root (a request found a
 * file changed since its snapshot validated it). Never blocks. */
static void request_rescan(struct server *srv)
{
    uint64_t one = 1;
    if (srv->rescan_fd >= 0 && write(srv->rescan_fd, &one, sizeof(one)) < 0) {
        /* EAGAIN: the counter is full, a rescan is asked for already */
    }
}

/* ---- the request's view ------------------------------------------------------------ */

static const char *view_get_header(const struct request_view *v, const char *name)
{
    return MHD_lookup_connection_value(v->ctx, MHD_HEADER_KIND, name);
}

static const char *view_get_query(const struct request_view *v, const char *key)
{
    return MHD_lookup_connection_value(v->ctx, MHD_GET_ARGUMENT_KIND, key);
}

struct each_query {
    int (*fn)(void *arg, const char *key, const char *value);
    void *arg;
};

static enum MHD_Result each_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    (void)kind;
    const struct each_query *e = cls;
    return e->fn(e->arg, key, value) ? MHD_NO : MHD_YES;
}

static void view_each_query(const struct request_view *v,
                            int (*fn)(void *arg, const char *key, const char *value), void *arg)
{
    struct each_query e = {fn, arg};
    MHD_get_connection_values(v->ctx, MHD_GET_ARGUMENT_KIND, each_arg, &e);
}

struct request_view http_answer_view(struct MHD_Connection *mc, struct request *rq,
                                     const char *path)
{
    return (struct request_view){
        .srv = rq->srv,
        .method = rq->method,
        .is_head = rq->is_head,
        .path = path,
        .target = rq->uri,
        .body = rq->upload,
        .body_len = rq->upload_len,
        .tls = (rq->srv->daemon_flags & MHD_USE_TLS) != 0,
        .client = rq->owner ? rq->owner->client : 0,
        .start_ns = rq->start_ns,
        .header = view_get_header,
        .query = view_get_query,
        .each_query = view_each_query,
        .ctx = mc,
        .waited = atomic_load(&rq->wait) == WAIT_DONE,
        .wait_result = atomic_load(&rq->wait_result),
        .wait_job = rq->wait_job,
    };
}

/* ---- answers ------------------------------------------------------------------------- */

/* The wait's end (any thread): the request is dispatched again, unless the
 * connection table gave it up first (its client left). */
static void resumed(void *arg, int result)
{
    struct request *rq = arg;
    atomic_store(&rq->wait_result, result);
    atomic_store(&rq->wait, WAIT_RESUMED);
    if (!rq->wait_watched || conn_resume(rq->owner ? rq->owner->entry : NULL))
        MHD_resume_connection(rq->mhd);
}

/* Suspends rq and starts what its answer waits for. Suspended before the
 * wait starts: its callback may come at once. A wait that can be taken
 * back (a mirror's job: its release does) is watched by the connection
 * table, which gives it up when its client leaves or idles past
 * connection_timeout; the hash and document waits end within their own
 * bounds, and their callbacks cannot be taken back. */
static enum MHD_Result start_wait(struct MHD_Connection *mc, struct request *rq)
{
    struct answer *a = &rq->answer;
    rq->mhd = mc;
    rq->wait_watched = a->wait.release != NULL;
    if (rq->wait_watched && conn_suspend(rq->owner ? rq->owner->entry : NULL) < 0) {
        answer_rendered(a);
        return MHD_NO; /* stopping: closed, unanswered, like a connection made now */
    }
    /* A second wait (a mirrored model's job, then its document's render):
     * the first one's job is done with, its result taken. */
    if (rq->wait_release && rq->wait_job)
        rq->wait_release(rq->wait_job);
    rq->wait_job = NULL;
    atomic_store(&rq->wait, WAIT_SUSPENDED);
    MHD_suspend_connection(mc);
    a->wait.done = resumed;
    a->wait.done_arg = rq;
    rq->wait_release = a->wait.release;
    rq->wait_job = a->wait.start(a);
    answer_rendered(a);
    return MHD_YES; /* answered when dispatched again */
}

/* The libmicrohttpd response for reply r of rq's answer (another reply in
 * r when its body could not be built). */
static struct MHD_Response *build(struct MHD_Connection *mc, struct request *rq,
                                  const struct request_view *v, struct reply *r,
                                  struct stream_out *so)
{
    struct stream_ctx sc = {rq->srv->mirror, mc, rq->owner ? rq->owner->entry : NULL,
                            rq->srv->cfg->sendfile};
    int err;
    struct MHD_Response *resp = stream_response(r, &rq->answer, &sc, so, &err);
    if (!resp && err) {
        respond_failed(v, &rq->answer, r, err);
        resp = stream_response(r, &rq->answer, &sc, so, &err);
    }
    return resp;
}

enum MHD_Result http_answer_send(struct MHD_Connection *mc, struct request *rq,
                                 const struct request_view *v)
{
    struct answer *a = &rq->answer;
    if (a->kind == ANSWER_WAIT)
        return start_wait(mc, rq);
    struct reply r;
    struct stream_out so;
    respond_reply(v, a, &r);
    struct MHD_Response *resp = build(mc, rq, v, &r, &so);
    if (!resp) {
        answer_rendered(a);
        return MHD_NO;
    }
    int own_policy = 0;
    for (size_t i = 0; i < r.n_headers; i++) {
        MHD_add_response_header(resp, r.headers[2 * i], r.headers[2 * i + 1]);
        own_policy |= strcmp(r.headers[2 * i], "Content-Security-Policy") == 0;
    }
    /* No answer is a page but the console's, which sets its own policy: a
     * browser must not sniff one into another type nor run anything in it
     * (a model's file, an upstream's document). */
    if (!own_policy) {
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "Content-Security-Policy", HTTP_ANSWER_POLICY);
    }
    if (a->close || atomic_load(&rq->srv->draining))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    rq->body_method = so.method;
    if (so.sending && rq->owner)
        conn_sending(rq->owner->entry, so.sending->dev, so.sending->ino);
    if (a->rescan)
        request_rescan(rq->srv);
    answer_queued(mc, rq, r.status, resp, rq->is_head ? 0 : r.length);
    enum MHD_Result ret = MHD_queue_response(mc, r.status, resp);
    MHD_destroy_response(resp);
    answer_rendered(a);
    /* Nothing reads the body once answered: a connection that does not
     * read its answer holds no more than the answer. */
    free(rq->upload);
    rq->upload = NULL;
    rq->upload_len = 0;
    return ret;
}

enum MHD_Result http_answer_dispatch(struct MHD_Connection *mc, struct request *rq,
                                     const char *url)
{
    answer_free(&rq->answer);
    struct request_view v = http_answer_view(mc, rq, url);
    dispatch_request(&v, &rq->answer);
    rq->endpoint = rq->answer.endpoint;
    return http_answer_send(mc, rq, &v);
}
