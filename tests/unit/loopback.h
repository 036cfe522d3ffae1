/* loopback: a request through the daemon's dispatcher, handlers and reply
 * filter with no socket and no daemon, as h2o's t/00unit runs one through
 * h2o_loopback_create: a request view made of literals goes to
 * dispatch_request, an answer that waits is waited for and dispatched
 * again (as the front does), and server/http/respond's reply is read into the
 * status, the headers in order (with the Connection and CORS headers the
 * front adds) and the body bytes a client would get.
 *
 *   struct lb_server s;
 *   lb_start(&s, root, LB_HASHED, NULL);
 *   struct lb_answer r = lb_get(&s, "/v1/models/m/header", NULL);
 *   CHECK_EQ_U64(r.status, 200);
 *   lb_free(&r);
 *   lb_stop(&s);
 *
 * Each test file includes it once (its functions are static). */
#ifndef TENSORD_LOOPBACK_H
#define TENSORD_LOOPBACK_H

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "blob_index.h"
#include "config.h"
#include "cors.h"
#include "dispatch.h"
#include "doc_cache.h"
#include "h_answer.h"
#include "hasher.h"
#include "http.h"
#include "mirror.h"
#include "registry.h"
#include "respond.h"
#include "server.h"
#include "test.h"
#include "util.h"

struct lb_server {
    struct server srv;
    struct config cfg;
    char state[64];                 /* the hasher's state directory */
    int rescans;                    /* answers that asked for a rescan */
};

enum lb_start_flags {
    LB_HASHED = 1,                  /* wait until every file's content hash is known */
    LB_NO_HASHER = 2,               /* no hasher at all */
};

/* Starts the daemon's state (registry over root, hasher, blob index,
 * document renderer) with the default configuration changed by options
 * ("name=value" strings, NULL-ended; may be NULL). */
static inline void lb_start(struct lb_server *s, const char *root, int flags, const char *const *options)
{
    memset(s, 0, sizeof(*s));
    config_defaults(&s->cfg);
    struct st_error err;
    for (const char *const *o = options; o && *o; o++) {
        char *name = xstrdup(*o), *eq = strchr(name, '=');
        *eq = '\0';
        if (config_set(&s->cfg, name, eq + 1, &err) != 0) {
            fprintf(stderr, "loopback: option %s: %s\n", *o, err.message);
            abort();
        }
        free(name);
    }
    if (config_set(&s->cfg, "models", root, &err) != 0)
        abort();
    s->srv.cfg = &s->cfg;
    s->srv.rescan_fd = -1;
    struct st_error e;
    struct reg_snapshot *reg = reg_snapshot_scan(root, 1, NULL, &e);
    if (!reg) {
        fprintf(stderr, "loopback: scan of %s: %s\n", root, e.message);
        abort();
    }
    registry_init(&s->srv.registry, reg);
    s->srv.blobs = blob_index_new();
    s->srv.docs = doc_cache_start();
    atomic_store(&s->srv.ready, 1);
    if (!(flags & LB_NO_HASHER)) {
        snprintf(s->state, sizeof(s->state), "/tmp/test_lb_state.XXXXXX");
        if (!mkdtemp(s->state))
            abort();
        struct hasher_opts ho = {.threads = 1, .state_dir = s->state};
        if (!(s->srv.hasher = hasher_new(&ho, &e))) {
            fprintf(stderr, "loopback: hasher: %s\n", e.message);
            abort();
        }
        hasher_submit(s->srv.hasher, reg);
    }
    for (int i = 0; (flags & LB_HASHED) && i < 3000; i++) {
        struct hasher_progress hp;
        hasher_progress(s->srv.hasher, &hp);
        if (hp.files_pending == 0 && hp.files_known == hp.files)
            break;
        usleep(10000);
    }
}

/* Stops what lb_start started (and the front and the mirror, when they
 * were), in the daemon's order. */
static inline void lb_stop(struct lb_server *s)
{
    if (s->srv.hasher)
        hasher_stop(s->srv.hasher); /* first: it resumes anyone waiting for a hash */
    doc_cache_stop(s->srv.docs);
    if (s->srv.daemon)
        http_stop(&s->srv, 1000);
    doc_cache_free(s->srv.docs);
    registry_destroy(&s->srv.registry);
    mirror_free(s->srv.mirror);
    hasher_free(s->srv.hasher);
    blob_index_free(s->srv.blobs);
    free(s->srv.read_token);
    free(s->srv.admin_token);
    if (s->state[0]) {
        char *cmd = xasprintf("rm -rf '%s'", s->state);
        if (system(cmd) != 0)
            fprintf(stderr, "loopback: could not remove %s\n", s->state);
        free(cmd);
    }
    config_free(&s->cfg);
}

/* The mtime lb_write gives files: Tue, 14 Nov 2023 22:13:20 GMT. Files
 * this old are hashed at once (the hasher waits 2 s for fresh ones). */
#define LB_MTIME 1700000000

/* Writes data[0..n) to root/rel (directories made), modified at LB_MTIME. */
static inline void lb_write(const char *root, const char *rel, const void *data, size_t n)
{
    char *p = xasprintf("%s/%s", root, rel);
    test_write_file(p, data, n);
    struct timespec ts[2] = {{LB_MTIME, 0}, {LB_MTIME, 0}};
    CHECK(utimensat(AT_FDCWD, p, ts, 0) == 0);
    free(p);
}

/* Sets root/rel's mtime to now: a file the hasher waits for. */
static inline void lb_touch(const char *root, const char *rel)
{
    char *p = xasprintf("%s/%s", root, rel);
    CHECK(utimensat(AT_FDCWD, p, NULL, 0) == 0);
    free(p);
}

/* A safetensors file at root/rel: its header JSON, then data[0..n). */
static inline void lb_write_st(const char *root, const char *rel, const char *json, const void *data,
                        size_t n)
{
    size_t jn = strlen(json);
    unsigned char *buf = xmalloc(8 + jn + n);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)jn >> (8 * i));
    memcpy(buf + 8, json, jn);
    memcpy(buf + 8 + jn, data, n);
    lb_write(root, rel, buf, 8 + jn + n);
    free(buf);
}

/* A fresh temporary models root (removed by lb_remove_root). */
static inline void lb_new_root(char *root, size_t len)
{
    snprintf(root, len, "/tmp/test_lb_root.XXXXXX");
    if (!mkdtemp(root))
        abort();
}

static inline void lb_remove_root(const char *root)
{
    char *cmd = xasprintf("rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "loopback: could not remove %s\n", root);
    free(cmd);
}

/* FNV-1a, 64 bits, from its published constants: the documents' ETags. */
static inline uint64_t lb_fnv1a(const void *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}

/* ---- the request's view ------------------------------------------------------------ */

#define LB_MAX_QUERY 64

struct lb_request {
    const char *const *headers;     /* "Name: value" strings, NULL-ended (may be NULL) */
    char *query;                    /* a copy of the target's query, split in place */
    const char *keys[LB_MAX_QUERY], *values[LB_MAX_QUERY];
    size_t n;
};

static inline const char *lb_view_header(const struct request_view *v, const char *name)
{
    const struct lb_request *q = v->ctx;
    size_t n = strlen(name);
    for (const char *const *h = q->headers; h && *h; h++)
        if (strncasecmp(*h, name, n) == 0 && (*h)[n] == ':')
            return *h + n + 1 + strspn(*h + n + 1, " ");
    return NULL;
}

static inline const char *lb_view_query(const struct request_view *v, const char *key)
{
    const struct lb_request *q = v->ctx;
    for (size_t i = 0; i < q->n; i++)
        if (strcmp(q->keys[i], key) == 0)
            return q->values[i];
    return NULL;
}

static inline void lb_view_each_query(const struct request_view *v,
                               int (*fn)(void *arg, const char *key, const char *value),
                               void *arg)
{
    const struct lb_request *q = v->ctx;
    for (size_t i = 0; i < q->n && !fn(arg, q->keys[i], q->values[i]); i++) {
    }
}

/* Splits the query as libmicrohttpd does ('&' between parameters, the
 * value after the first '=', none without one), values left escaped. */
static inline void lb_split_query(struct lb_request *q, const char *target)
{
    const char *qm = strchr(target, '?');
    q->query = xstrdup(qm ? qm + 1 : "");
    for (char *p = q->query, *save = NULL, *t; (t = strtok_r(p, "&", &save)) && q->n < LB_MAX_QUERY;
         p = NULL) {
        char *eq = strchr(t, '=');
        if (eq)
            *eq = '\0';
        q->keys[q->n] = t;
        q->values[q->n++] = eq ? eq + 1 : NULL;
    }
}

/* A view of method target with headers ("Name: value", NULL-ended; may be
 * NULL) and no body, over q (free q->query when done). */
static inline struct request_view lb_view(struct lb_request *q, struct server *srv, const char *method,
                                   const char *target, const char *const *headers)
{
    memset(q, 0, sizeof(*q));
    q->headers = headers;
    lb_split_query(q, target);
    return (struct request_view){
        .srv = srv, .method = method, .is_head = strcmp(method, "HEAD") == 0, .path = target,
        .target = target, .start_ns = 1, .header = lb_view_header, .query = lb_view_query,
        .each_query = lb_view_each_query, .ctx = q,
    };
}

/* ---- answers ------------------------------------------------------------------------- */

struct lb_answer {
    unsigned status;
    char *head;                     /* the headers in order, "Name: value\r\n" each */
    char *body;                     /* the body a client gets (none for HEAD), NUL-terminated */
    size_t len;
    uint64_t length;                /* Content-Length */
    int waited;                     /* its answer waited once */
    int rescan;                     /* it asked for a rescan */
    int counted;                    /* its bytes count as a representation's */
};

struct lb_wait {
    atomic_int done;
    atomic_int result;
};

static inline void lb_resumed(void *arg, int result)
{
    struct lb_wait *w = arg;
    atomic_store(&w->result, result);
    atomic_store(&w->done, 1);
}

static inline void lb_append(char **s, size_t *len, const char *add)
{
    size_t n = strlen(add);
    *s = xrealloc(*s, *len + n + 1);
    memcpy(*s + *len, add, n + 1);
    *len += n;
}

/* The reply's headers, then Connection as the front adds it. */
static inline char *lb_head(const struct answer *a, const struct reply *r)
{
    char *head = xstrdup("");
    size_t len = 0;
    for (size_t i = 0; i < r->n_headers + (a->close ? 1 : 0); i++) {
        const char *name, *value;
        if (i < r->n_headers)
            name = r->headers[2 * i], value = r->headers[2 * i + 1];
        else
            name = "Connection", value = "close";
        lb_append(&head, &len, name);
        lb_append(&head, &len, ": ");
        lb_append(&head, &len, value);
        lb_append(&head, &len, "\r\n");
    }
    return head;
}

/* Waits for a span of a mirrored file the body reads (as the front's
 * gate would, blocking). */
struct lb_span_wait {
    struct mirror *m;
    const struct representation *rep;
};

static inline int lb_wait_span(void *arg, int fd, uint64_t file_off, uint64_t n,
                               uint64_t body_off)
{
    (void)body_off;
    const struct lb_span_wait *w = arg;
    atomic_int cancel = 0;
    struct st_error e;
    for (size_t i = 0; i < w->rep->n_mirror; i++)
        if (w->rep->mirror[i].fd == fd)
            return mirror_wait_range(w->m, w->rep->mirror[i].f, file_off, n, &cancel, &e);
    return 0;
}

/* The bytes of the reply's body, read as the front's reader would (a
 * mirrored file's waited for as they arrive from its upstream). */
static inline char *lb_body(const struct answer *a, const struct reply *r, struct mirror *m,
                            size_t *len)
{
    char *body = xmalloc(r->length + 1);
    uint64_t at = 0;
    struct lb_span_wait w = {m, &a->rep};
    for (size_t i = 0; !r->no_body && i < r->n_pieces; i++) {
        const struct reply_piece *p = &r->pieces[i];
        if (p->mem)
            memcpy(body + at, p->mem, p->len);
        else if ((a->rep.arriving && body_each_span(&a->rep.body, p->off, p->len, lb_wait_span,
                                                    &w) != 0) ||
                 body_read(&a->rep.body, p->off, body + at, p->len) != 0)
            break; /* cut short, as the front's reader would */
        at += p->len;
    }
    body[at] = '\0';
    *len = at;
    return body;
}

/* Answers method target with the headers ("Name: value", NULL-ended; may
 * be NULL) and body (may be NULL). */
static inline struct lb_answer lb_request(struct lb_server *s, const char *method, const char *target,
                                   const char *const *headers, const char *body)
{
    struct lb_request q = {.headers = headers};
    lb_split_query(&q, target);
    char *path = xstrndup(target, strcspn(target, "?"));
    char *upload = body ? xstrdup(body) : NULL;
    struct request_view v = {
        .srv = &s->srv, .method = method, .is_head = strcmp(method, "HEAD") == 0,
        .path = path, .target = target, .body = upload, .body_len = body ? strlen(body) : 0,
        .start_ns = time_mono_ns(), .header = lb_view_header, .query = lb_view_query,
        .each_query = lb_view_each_query, .ctx = &q,
    };
    struct lb_answer out = {0};
    struct answer a;
    void *job = NULL;
    void (*release)(void *) = NULL;
    answer_init(&a);
    for (;;) {
        dispatch_request(&v, &a);
        if (a.kind != ANSWER_WAIT)
            break;
        struct lb_wait w = {0};
        a.wait.done = lb_resumed;
        a.wait.done_arg = &w;
        release = a.wait.release;
        job = a.wait.start(&a);
        answer_rendered(&a);
        for (int i = 0; i < 6000 && !atomic_load(&w.done); i++)
            usleep(5000);
        CHECK(atomic_load(&w.done));
        answer_free(&a);
        v.waited = out.waited = 1;
        v.wait_result = atomic_load(&w.result);
        v.wait_job = job;
    }
    struct reply r;
    respond_reply(&v, &a, &r);
    out.status = r.status;
    out.head = lb_head(&a, &r);
    out.length = r.length;
    out.counted = r.counted;
    out.rescan = a.rescan;
    s->rescans += a.rescan;
    if (v.is_head) {
        out.body = xstrdup("");
    } else {
        out.body = lb_body(&a, &r, s->srv.mirror, &out.len);
    }
    answer_free(&a);
    if (release && job)
        release(job);
    free(upload);
    free(path);
    free(q.query);
    return out;
}

static inline struct lb_answer lb_get(struct lb_server *s, const char *target, const char *const *headers)
{
    return lb_request(s, "GET", target, headers, NULL);
}

static inline void lb_free(struct lb_answer *r)
{
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

/* The value of header name in r (the first), in a static buffer, or NULL. */
static inline const char *lb_header(const struct lb_answer *r, const char *name)
{
    static char value[4096];
    size_t n = strlen(name);
    for (const char *l = r->head; *l; l = strstr(l, "\r\n") + 2) {
        if (strncasecmp(l, name, n) == 0 && l[n] == ':') {
            const char *v = l + n + 2, *end = strstr(v, "\r\n");
            snprintf(value, sizeof(value), "%.*s", (int)(end - v), v);
            return value;
        }
    }
    return NULL;
}

/* ---- the real front, for the tests of server/http/http.c and server/http/stream.c ------- */

/* Starts the HTTP front over s on 127.0.0.1 (a port the kernel picks);
 * returns the port. */
static inline unsigned lb_listen(struct lb_server *s)
{
    struct st_error e;
    char err[256];
    if (config_set(&s->cfg, "listen", "127.0.0.1:0", &e) != 0) {
        fprintf(stderr, "loopback: %s\n", e.message);
        abort();
    }
    if (http_start(&s->srv, err, sizeof(err)) != 0) {
        fprintf(stderr, "loopback: %s\n", err);
        abort();
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->srv.daemon, MHD_DAEMON_INFO_BIND_PORT);
    return di ? di->port : 0;
}

static inline void lb_unlisten(struct lb_server *s)
{
    http_stop(&s->srv, 1000);
}

/* A connection to 127.0.0.1:port, with a receive timeout. */
static inline int lb_connect(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        abort();
    return fd;
}

/* Everything the server sends on fd until it closes the connection (or
 * 10 s pass). */
static inline char *lb_read_all(int fd, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = xmalloc(cap + 1);
    for (;;) {
        if (n == cap)
            buf = xrealloc(buf, (cap *= 2) + 1);
        ssize_t got = recv(fd, buf + n, cap - n, 0);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Sends raw bytes as one request on a new connection and returns all the
 * server sends until it closes it. */
static inline char *lb_raw(unsigned port, const char *request, size_t *len)
{
    int fd = lb_connect(port);
    CHECK(send(fd, request, strlen(request), MSG_NOSIGNAL) == (ssize_t)strlen(request));
    shutdown(fd, SHUT_WR);
    char *out = lb_read_all(fd, len);
    close(fd);
    return out;
}

/* Checks an answer byte for byte: its status, its headers (all of them, in
 * order, "Name: value" separated by "\r\n" and ending with one) and body. */
#define CHECK_ANSWER(r, st, want_head, want_body)                                             \
    do {                                                                                     \
        CHECK_EQ_U64((r).status, (st));                                                      \
        CHECK_STR((r).head, (want_head));                                                    \
        CHECK_STR((r).body, (want_body));                                                    \
    } while (0)

#endif
