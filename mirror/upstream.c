/* upstream: see upstream.h. */
#include "upstream.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "util.h"

#define MAX_HOPS 5              /* redirects followed, as huggingface_hub's client does */
#define CONNECT_TIMEOUT_S 10L
#define DOC_TIMEOUT_S 60L       /* a HEAD or a document: the whole request */
#define STALL_TIMEOUT_S 60L     /* a range that sends nothing for this long is cut */
#define URL_MAX 8192

struct upstream {
    char *base;                /* without a trailing '/' */
    size_t origin_len;         /* base[0..origin_len): scheme://authority */
    enum upstream_private redirect_private;
    atomic_int origin_private; /* the last connection to the origin's address: private 1,
                                * public 0, none yet -1 */
};

struct upstream_conn {
    struct upstream *u;
    CURL *h;
    const atomic_int *abort;   /* stop a transfer when set (may be NULL) */
    char refused[64];          /* the address a redirect was refused, for the error */
};

int upstream_global_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

struct upstream *upstream_new(const char *base_url, enum upstream_private redirect_private)
{
    struct upstream *u = xcalloc(1, sizeof(*u));
    u->redirect_private = redirect_private;
    atomic_init(&u->origin_private, -1);
    u->base = xstrdup(base_url);
    size_t n = strlen(u->base);
    while (n > 0 && u->base[n - 1] == '/')
        u->base[--n] = '\0';
    const char *auth = strstr(u->base, "://");
    auth = auth ? auth + 3 : u->base;
    u->origin_len = (size_t)(auth - u->base) + strcspn(auth, "/");
    return u;
}

void upstream_free(struct upstream *u)
{
    if (!u)
        return;
    free(u->base);
    free(u);
}

const char *upstream_base(const struct upstream *u)
{
    return u->base;
}

struct upstream_conn *upstream_conn_new(struct upstream *u, const atomic_int *abort)
{
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    struct upstream_conn *c = xcalloc(1, sizeof(*c));
    *c = (struct upstream_conn){.u = u, .h = h, .abort = abort};
    return c;
}

const atomic_int *upstream_conn_abort(const struct upstream_conn *c)
{
    return c->abort;
}

/* libcurl calls this about once a second, and whenever bytes move. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    const struct upstream_conn *c = arg;
    return c->abort && atomic_load(c->abort) ? 1 : 0;
}

void upstream_conn_free(struct upstream_conn *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->h);
    free(c);
}

int upstream_encode(char *out, size_t cap, size_t *len, const char *s, int keep_slash)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        int keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                   (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' ||
                   ch == '~' || (keep_slash && ch == '/');
        size_t need = keep ? 1 : 3;
        if (*len + need >= cap) {
            out[*len] = '\0';
            return -1;
        }
        if (keep) {
            out[(*len)++] = (char)ch;
        } else {
            out[(*len)++] = '%';
            out[(*len)++] = hex_upper[ch >> 4];
            out[(*len)++] = hex_upper[ch & 15];
        }
    }
    out[*len] = '\0';
    return 0;
}

/* base + "/" + repo + "/resolve/" + rev + "/" + path, each encoded.
 * Returns 0, or -EINVAL with err when it does not fit. */
static int file_url(const struct upstream *u, const char *repo, const char *rev, const char *path,
                    char *out, size_t cap, struct st_error *err)
{
    size_t len = (size_t)snprintf(out, cap, "%s/", u->base);
    if (len >= cap || upstream_encode(out, cap, &len, repo, 1) < 0 ||
        upstream_encode(out, cap, &len, "/resolve/", 1) < 0 ||
        upstream_encode(out, cap, &len, rev, 0) < 0 ||
        upstream_encode(out, cap, &len, "/", 1) < 0 ||
        upstream_encode(out, cap, &len, path, 1) < 0)
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "the upstream URL of %s is too long",
                             path);
    return 0;
}

static size_t on_header(char *line, size_t size, size_t n, void *arg)
{
    upstream_answer_header(arg, line, size * n);
    return size * n;
}

/* ---- requests --------------------------------------------------------------- */

static curl_socket_t open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *addr);

/* The options every request shares; the handle was reset before. */
static void common_options(struct upstream_conn *c, const char *url, struct curl_slist *hdrs,
                           struct upstream_answer *a)
{
    CURL *h = c->h;
    c->refused[0] = '\0';
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, c);
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85: the string forms; the bitmasks are deprecated */
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "tensord/" TENSORD_VERSION " (mirror)");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    /* The bytes as stored: no Accept-Encoding, so no transfer coding. */
}

/* Appends "name: value" to *list (the caller frees it) when value is not
 * NULL; a value with a line break is never sent. Returns 0 or -errno with
 * err. */
static int add_header(struct curl_slist **list, const char *name, const char *value,
                      struct st_error *err)
{
    if (!value)
        return 0;
    if (strpbrk(value, "\r\n"))
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "the %s header has a line break", name);
    char *h = xasprintf("%s: %s", name, value);
    struct curl_slist *more = curl_slist_append(*list, h);
    free(h);
    if (!more)
        return st_error_fail(err, ST_ERR_NO_MEMORY, "no memory for a request header");
    *list = more;
    return 0;
}

static int curl_fail(const struct upstream_conn *c, CURLcode rc, const char *url,
                     struct st_error *err)
{
    if (c->refused[0]) { /* the same again if asked again, whatever libcurl made of it */
        st_error_fail(err, ST_ERR_IO, "upstream %s: a redirect led to %s, a private address: "
                      "not followed (upstream_redirect_private)", url, c->refused);
        return -EPERM;
    }
    int e = rc == CURLE_ABORTED_BY_CALLBACK ? -ECANCELED
            : rc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
            : rc == CURLE_OUT_OF_MEMORY    ? -ENOMEM
            : rc == CURLE_TOO_MANY_REDIRECTS ? -ELOOP
                                           : -EIO;
    st_error_fail(err, e == -ENOMEM ? ST_ERR_NO_MEMORY : ST_ERR_IO, "upstream %s: %s", url,
                  curl_easy_strerror(rc));
    return e;
}

/* Whether url is on the upstream's origin. */
static int same_origin(const struct upstream *u, const char *url)
{
    return strncmp(url, u->base, u->origin_len) == 0 &&
           (url[u->origin_len] == '/' || url[u->origin_len] == '\0');
}

/* Every socket libcurl opens: one to the upstream's origin tells whether
 * the upstream is on a private address; one for a redirect that left it
 * must be allowed by upstream_addr.h's rule. The URL is the one being
 * connected to (libcurl updates it before following a redirect). */
static curl_socket_t open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *addr)
{
    (void)purpose;
    struct upstream_conn *c = arg;
    char *url = NULL;
    curl_easy_getinfo(c->h, CURLINFO_EFFECTIVE_URL, &url);
    if (url && same_origin(c->u, url)) {
        atomic_store(&c->u->origin_private, !upstream_addr_public(&addr->addr));
    } else if (!upstream_redirect_allowed(c->u->redirect_private,
                                          atomic_load(&c->u->origin_private), &addr->addr)) {
        upstream_addr_text(&addr->addr, c->refused, sizeof(c->refused));
        return CURL_SOCKET_BAD;
    }
    return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

/* Fields an earlier hop set and the final answer lacks. */
static void keep_earlier(struct upstream_answer *a, const struct upstream_answer *prev)
{
    if (!a->commit[0])
        memcpy(a->commit, prev->commit, sizeof(a->commit));
    if (!a->linked_etag[0])
        memcpy(a->linked_etag, prev->linked_etag, sizeof(a->linked_etag));
    if (!a->has_linked_size && prev->has_linked_size) {
        a->linked_size = prev->linked_size;
        a->has_linked_size = 1;
    }
}

struct body_buf {
    char *p;
    size_t len, cap, max;      /* p holds cap bytes, len of them the body's */
    int too_large;
};

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct body_buf *b = arg;
    size_t len = size * n;
    if (b->len + len > b->max) {
        b->too_large = 1;
        return 0;
    }
    if (b->len + len + 1 > b->cap) { /* doubling: a body of n bytes is copied O(n) times */
        size_t cap = b->cap ? b->cap : 16384;
        while (cap < b->len + len + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return 0;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
    b->p[b->len] = '\0';
    return len;
}

/* One request after another, following redirects that stay on the
 * upstream (at most MAX_HOPS) and stopping at one that leaves it. */
static int request_hops(struct upstream_conn *c, const char *method, const char *url0,
                        const char *body, size_t body_len, const char *content_type,
                        const char *auth, struct body_buf *bb, struct upstream_answer *a,
                        struct st_error *err)
{
    char *url = xstrdup(url0);
    struct upstream_answer prev = {0};
    int rc = 0;
    struct curl_slist *hdrs = NULL;
    memset(a, 0, sizeof(*a));
    if ((rc = add_header(&hdrs, "Authorization", auth, err)) < 0 ||
        (rc = add_header(&hdrs, "Content-Type", content_type, err)) < 0)
        goto out;
    for (int hop = 0;; hop++) {
        upstream_answer_free(a); /* the previous hop's */
        curl_easy_reset(c->h);
        common_options(c, url, hdrs, a);
        curl_easy_setopt(c->h, CURLOPT_TIMEOUT, DOC_TIMEOUT_S);
        if (strcmp(method, "HEAD") == 0) {
            curl_easy_setopt(c->h, CURLOPT_NOBODY, 1L);
        } else {
            if (bb->p)
                bb->len = 0;
            curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_body);
            curl_easy_setopt(c->h, CURLOPT_WRITEDATA, bb);
            /* An answer whose Content-Length is over the bound: refused
             * before its first byte is read. */
            curl_easy_setopt(c->h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)bb->max);
        }
        if (strcmp(method, "POST") == 0) {
            curl_easy_setopt(c->h, CURLOPT_POST, 1L);
            curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, body ? body : "");
            curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        }
        CURLcode cr = curl_easy_perform(c->h);
        if (cr != CURLE_OK) {
            if (bb->too_large || cr == CURLE_FILESIZE_EXCEEDED) {
                st_error_fail(err, ST_ERR_LIMIT, "upstream %s: the answer is larger than %zu "
                              "bytes", url, bb->max);
                rc = -EFBIG;
            } else {
                rc = curl_fail(c, cr, url, err);
            }
            goto out;
        }
        long code = 0;
        curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &code);
        a->status = code;
        if (hop > 0)
            keep_earlier(a, &prev);
        char *next = NULL;
        if (code >= 300 && code < 400)
            curl_easy_getinfo(c->h, CURLINFO_REDIRECT_URL, &next);
        /* A POST redirected becomes a GET for 301-303 in every client; the
         * Hub answers paths-info in place, so a POST is never followed. */
        if (!next || strcmp(method, "POST") == 0)
            break;
        if (!same_origin(c->u, next)) {
            a->redirected_away = 1;
            break;
        }
        if (hop == MAX_HOPS) {
            st_error_fail(err, ST_ERR_IO, "upstream %s: more than %d redirects", url0,
                          MAX_HOPS);
            rc = -ELOOP;
            goto out;
        }
        prev = *a;
        prev.link = NULL; /* a's, freed with the next hop: only its fixed fields are kept */
        free(url);
        url = xstrdup(next);
    }
out:
    curl_slist_free_all(hdrs);
    free(url);
    return rc;
}

int upstream_head_file(struct upstream_conn *c, const char *repo, const char *rev,
                       const char *path, const char *auth, struct upstream_answer *a,
                       struct st_error *err)
{
    char url[URL_MAX];
    struct body_buf bb = {0};
    memset(a, 0, sizeof(*a));
    int rc = file_url(c->u, repo, rev, path, url, sizeof(url), err);
    return rc < 0 ? rc : request_hops(c, "HEAD", url, NULL, 0, NULL, auth, &bb, a, err);
}

int upstream_request(struct upstream_conn *c, const char *method, const char *target,
                     const char *body, size_t body_len, const char *content_type,
                     const char *auth, size_t max, char **out, size_t *out_len,
                     struct upstream_answer *a, struct st_error *err)
{
    struct body_buf bb = {.max = max};
    *out = NULL;
    *out_len = 0;
    memset(a, 0, sizeof(*a));
    if (target[0] != '/')
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "a request target starts with /");
    char *url = xasprintf("%s%s", c->u->base, target);
    int rc = request_hops(c, method, url, body, body_len, content_type, auth, &bb, a, err);
    free(url);
    if (rc < 0) {
        free(bb.p);
        return rc;
    }
    *out = bb.p ? bb.p : xstrdup("");
    *out_len = bb.len;
    return 0;
}

/* ---- ranges ----------------------------------------------------------------- */

struct range_xfer {
    struct upstream_conn *c;
    struct upstream_answer *a;
    uint64_t off, len, size;
    const char *commit, *sha256_hex;
    upstream_sink sink;
    void *arg;
    uint64_t got;
    int checked;               /* the answer's headers were found to be the range asked for */
    int rc;                    /* why the transfer was stopped */
    char why[320];
};

/* Whether the answer being received came from the upstream itself, not
 * from where a redirect led (a CDN's ETag names its own object, which the
 * final hash checks instead). */
static int on_upstream(const struct range_xfer *x)
{
    char *url = NULL;
    curl_easy_getinfo(x->c->h, CURLINFO_EFFECTIVE_URL, &url);
    return url && same_origin(x->c->u, url);
}

/* Whether the answer is the range asked for, of the version asked for;
 * else the reason in x (rc, why). */
static int range_answer_ok(struct range_xfer *x)
{
    const struct upstream_answer *a = x->a;
    if (a->status == 401 || a->status == 403) {
        x->rc = -EACCES;
        snprintf(x->why, sizeof(x->why), "the upstream refused the token (%ld)", a->status);
    } else if (a->status == 404 || a->status == 410) {
        x->rc = -ENOENT;
        snprintf(x->why, sizeof(x->why), "the upstream no longer has it (%ld%s%s)", a->status,
                 a->error_code[0] ? " " : "", a->error_code);
    } else if (a->status == 429 || a->status >= 500) {
        x->rc = -EAGAIN; /* busy or failing: asked again, after its Retry-After */
        snprintf(x->why, sizeof(x->why), "the upstream answered %ld%s%.160s", a->status,
                 a->error_message[0] ? ": " : "", a->error_message);
    } else if (a->status != 206 || !a->has_range) {
        x->rc = -EPROTO;
        snprintf(x->why, sizeof(x->why), "the upstream answered %ld, not 206 with a "
                 "Content-Range", a->status);
    } else if (a->range_start != x->off || a->range_end >= x->off + x->len ||
               a->range_total != x->size) {
        x->rc = a->range_total != x->size ? -ESTALE : -EPROTO;
        snprintf(x->why, sizeof(x->why), "the upstream sent bytes %" PRIu64 "-%" PRIu64 "/%"
                 PRIu64 " for %" PRIu64 "-%" PRIu64 "/%" PRIu64, a->range_start, a->range_end,
                 a->range_total, x->off, x->off + x->len - 1, x->size);
    } else if (a->commit[0] && strcmp(a->commit, x->commit) != 0) {
        x->rc = -ESTALE;
        snprintf(x->why, sizeof(x->why), "the upstream answered for commit %.40s, not %s",
                 a->commit, x->commit);
    } else if (x->sha256_hex &&
               ((a->linked_etag[0] && strcmp(a->linked_etag, x->sha256_hex) != 0) ||
                (strlen(a->etag) == 64 && strcspn(a->etag, "0123456789abcdef") == 64 &&
                 strcmp(a->etag, x->sha256_hex) != 0 && on_upstream(x)))) {
        x->rc = -ESTALE;
        snprintf(x->why, sizeof(x->why), "the upstream's bytes have another sha256 (%.64s)",
                 a->linked_etag[0] ? a->linked_etag : a->etag);
    } else {
        return 1;
    }
    return 0;
}

static size_t on_range(char *data, size_t size, size_t n, void *arg)
{
    struct range_xfer *x = arg;
    size_t len = size * n;
    if (!x->checked) {
        if (!range_answer_ok(x))
            return 0;
        x->checked = 1;
    }
    if (x->got + len > x->len) {
        x->rc = -EPROTO;
        snprintf(x->why, sizeof(x->why), "the upstream sent more than the range");
        return 0;
    }
    int rc = x->sink(x->arg, data, len);
    if (rc < 0) {
        x->rc = rc;
        snprintf(x->why, sizeof(x->why), "writing to the cache: %s", strerror(-rc));
        return 0;
    }
    x->got += len;
    return len;
}

int upstream_get_range(struct upstream_conn *c, const char *repo, const char *commit,
                       const char *path, const char *auth, uint64_t off, uint64_t len,
                       uint64_t size, const char *sha256_hex, upstream_sink sink, void *arg,
                       uint64_t *got, struct upstream_answer *a, struct st_error *err)
{
    char url[URL_MAX], range[64];
    struct range_xfer x = {.c = c, .a = a, .off = off, .len = len, .size = size, .commit = commit,
                           .sha256_hex = sha256_hex, .sink = sink, .arg = arg};
    *got = 0;
    if (len == 0)
        return 0;
    struct curl_slist *hdrs = NULL;
    snprintf(range, sizeof(range), "bytes=%" PRIu64 "-%" PRIu64, off, off + len - 1);
    int rc = file_url(c->u, repo, commit, path, url, sizeof(url), err);
    if (rc < 0 || (rc = add_header(&hdrs, "Authorization", auth, err)) < 0 ||
        (rc = add_header(&hdrs, "Range", range, err)) < 0) {
        curl_slist_free_all(hdrs);
        return rc;
    }
    memset(a, 0, sizeof(*a));
    curl_easy_reset(c->h);
    common_options(c, url, hdrs, a);
    curl_easy_setopt(c->h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c->h, CURLOPT_MAXREDIRS, (long)MAX_HOPS);
    curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_range);
    curl_easy_setopt(c->h, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c->h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c->h, CURLOPT_LOW_SPEED_TIME, STALL_TIMEOUT_S);
    CURLcode cr = curl_easy_perform(c->h);
    curl_slist_free_all(hdrs);
    free(a->link); /* a range's answer has no use for one: nothing for the caller to free */
    a->link = NULL;
    *got = x.got;
    if (cr == CURLE_OK && !x.checked && !range_answer_ok(&x))
        cr = CURLE_WRITE_ERROR; /* an answer with no body at all */
    if (cr == CURLE_WRITE_ERROR && x.rc < 0) {
        st_error_fail(err, ST_ERR_IO, "upstream %s (bytes %" PRIu64 "-%" PRIu64 "): %s", url,
                      off, off + len - 1, x.why);
        return x.rc;
    }
    /* Cut part-way: what arrived was taken (*got), the caller asks for the rest. */
    return cr == CURLE_OK ? 0 : curl_fail(c, cr, url, err);
}
