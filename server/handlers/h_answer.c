/* h_answer: see h_answer.h. */
#include "h_answer.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conditional.h"
#include "hasher.h"
#include "jsonw.h"
#include "server.h"
#include "util.h"

/* The arena: chunks of at least CHUNK bytes, each allocation aligned for
 * any type; an allocation larger than a chunk gets a chunk of its own. */
#define CHUNK 4096
#define ALIGN 16

struct answer_chunk {
    struct answer_chunk *next;
    size_t used, cap;
    _Alignas(ALIGN) char data[];
};

struct answer_cleanup {
    struct answer_cleanup *next;
    void (*fn)(void *);
    void *arg;
};

/* Each thread keeps the last standard chunk it freed for its next answer:
 * a small request then costs no malloc and no free, which glibc makes
 * expensive for 4 KiB blocks (they consolidate). The key's destructor frees
 * it when the thread ends. */
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static int spare_ok; /* the key exists (without one, every chunk is malloc'd) */

static void spare_key_make(void)
{
    spare_ok = pthread_key_create(&spare_key, free) == 0;
}

static struct answer_chunk *chunk_new(size_t cap)
{
    struct answer_chunk *c = NULL;
    if (cap == CHUNK) {
        pthread_once(&spare_once, spare_key_make);
        c = spare_ok ? pthread_getspecific(spare_key) : NULL;
        if (c)
            pthread_setspecific(spare_key, NULL);
    }
    if (!c)
        c = xmalloc(sizeof(*c) + cap);
    c->used = 0;
    c->cap = cap;
    return c;
}

static void chunk_free(struct answer_chunk *c)
{
    if (c->cap == CHUNK && spare_ok && !pthread_getspecific(spare_key)
        && pthread_setspecific(spare_key, c) == 0)
        return;
    free(c);
}

void answer_init(struct answer *a)
{
    memset(a, 0, sizeof(*a));
    a->rep.body.fd = -1;
    a->rep.mtime = -1;
    a->fd = -1;
}

void answer_rendered(struct answer *a)
{
    reg_snapshot_unref(a->snapshot);
    a->snapshot = NULL;
    if (a->fd >= 0)
        close(a->fd);
    a->fd = -1;
}

void answer_free(struct answer *a)
{
    answer_rendered(a);
    while (a->cleanups) {
        struct answer_cleanup *c = a->cleanups;
        a->cleanups = c->next;
        c->fn(c->arg); /* the cleanup records live in the chunks, freed below */
    }
    while (a->chunks) {
        struct answer_chunk *c = a->chunks;
        a->chunks = c->next;
        chunk_free(c);
    }
    answer_init(a);
}

void *answer_alloc(struct answer *a, size_t n)
{
    n = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    struct answer_chunk *c = a->chunks;
    if (!c || c->cap - c->used < n) {
        c = chunk_new(n > CHUNK ? n : CHUNK);
        if (n > CHUNK && a->chunks) { /* a big one: the current chunk stays the one to fill */
            c->next = a->chunks->next;
            a->chunks->next = c;
        } else {
            c->next = a->chunks;
            a->chunks = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *answer_strdup(struct answer *a, const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(answer_alloc(a, n), s, n);
}

/* fmt formatted into the arena, cut at max bytes. */
static char *vprintf_max(struct answer *a, size_t max, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    size_t len = n < 0 ? 0 : (size_t)n > max ? max : (size_t)n;
    char *p = answer_alloc(a, len + 1);
    vsnprintf(p, len + 1, fmt, ap);
    return p;
}

char *answer_printf(struct answer *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *p = vprintf_max(a, SIZE_MAX - 1, fmt, ap);
    va_end(ap);
    return p;
}

const char *answer_shape(struct answer *a, const uint64_t *shape, uint32_t ndim)
{
    char buf[ST_MAX_NDIM * 21 + 1];
    size_t n = shape_format(buf, sizeof(buf), shape, ndim, ",");
    return memcpy(answer_alloc(a, n + 1), buf, n + 1);
}

void answer_defer(struct answer *a, void (*fn)(void *), void *arg)
{
    struct answer_cleanup *c = answer_alloc(a, sizeof(*c));
    c->fn = fn;
    c->arg = arg;
    c->next = a->cleanups;
    a->cleanups = c;
}

static void unref_model(void *m)
{
    reg_model_unref(m);
}

void answer_hold_model(struct answer *a, const struct reg_model *m)
{
    if (m)
        answer_defer(a, unref_model, (void *)reg_model_ref(m));
}

void answer_header(struct answer *a, const char *name, const char *value)
{
    if (a->n_extra == ANSWER_MAX_EXTRA)
        return; /* a handler's fixed set of headers never reaches it */
    a->extra[2 * a->n_extra] = name;
    a->extra[2 * a->n_extra + 1] = answer_strdup(a, value);
    a->extra[2 * ++a->n_extra] = NULL;
}

void answer_headers(struct answer *a, const char *const *pairs)
{
    for (; pairs[0] && a->n_extra < ANSWER_MAX_EXTRA; pairs += 2) {
        a->extra[2 * a->n_extra] = pairs[0];
        a->extra[2 * a->n_extra + 1] = pairs[1];
        a->extra[2 * ++a->n_extra] = NULL;
    }
}

static struct answer *set(struct answer *a, enum answer_kind kind, unsigned status)
{
    a->kind = kind;
    a->status = status;
    return a;
}

struct answer *answer_body(struct answer *a, const struct representation *rep)
{
    a->rep = *rep;
    return set(a, ANSWER_BODY, HTTP_OK);
}

static struct answer *error_v(struct answer *a, int hub, unsigned status, const char *code,
                              unsigned retry_after, const char *fmt, va_list ap)
{
    a->error.hub = hub;
    a->error.code = code ? answer_strdup(a, code) : NULL; /* may be the handler's, or a document's */
    a->error.retry_after = retry_after;
    a->error.message = vprintf_max(a, ANSWER_MESSAGE_MAX, fmt, ap);
    return set(a, ANSWER_ERROR, status);
}

struct answer *answer_error(struct answer *a, unsigned status, const char *code, const char *fmt,
                            ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_v(a, 0, status, code, 0, fmt, ap);
    va_end(ap);
    return a;
}

struct answer *answer_hub_error(struct answer *a, unsigned status, const char *code,
                                unsigned retry_after, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_v(a, 1, status, code, retry_after, fmt, ap);
    va_end(ap);
    return a;
}

struct answer *answer_s3_error(struct answer *a, unsigned status, const char *code,
                               const char *resource, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_v(a, 0, status, code, 0, fmt, ap);
    va_end(ap);
    a->s3 = a->error.s3 = 1;
    a->error.resource = resource ? answer_strdup(a, resource) : NULL;
    return a;
}

struct answer *answer_file_changed(struct answer *a)
{
    a->rescan = 1;
    return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "file_changed",
                        "the file changed on disk since it was validated; retry once the "
                        "daemon has rescanned it");
}

struct answer *answer_doc(struct answer *a, unsigned status, const char *content_type,
                          const char *text, size_t len)
{
    a->content_type = content_type;
    a->text = text;
    a->text_len = len;
    return set(a, ANSWER_DOC, status);
}

char *answer_json_line(char *text, size_t *len)
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

struct answer *answer_jsonw(struct answer *a, unsigned status, struct jsonw *w)
{
    size_t len;
    char *text = jsonw_take(w, &len);
    if (text)
        text = answer_json_line(text, &len);
    if (!text)
        return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                            "not enough memory to render the answer; try again later");
    answer_defer(a, free, text);
    if (status != HTTP_OK)
        return answer_doc(a, status, "application/json", text, len);
    struct representation rep = {
        .body = {.prefix = text, .prefix_len = len, .fd = -1},
        .content_type = "application/json",
        .mtime = -1,
        .document = 1,
    };
    return answer_body(a, &rep);
}

struct answer *answer_redirect(struct answer *a, unsigned status, const char *location)
{
    a->location = answer_strdup(a, location);
    return set(a, ANSWER_REDIRECT, status);
}

struct answer *answer_preflight(struct answer *a, const char *methods, const char *headers)
{
    a->cors_methods = methods;
    a->cors_headers = answer_strdup(a, headers);
    return set(a, ANSWER_PREFLIGHT, HTTP_NO_CONTENT);
}

struct answer *answer_wait(struct answer *a, void *(*start)(struct answer *a),
                           void (*release)(void *job), void *ctx)
{
    a->wait.start = start;
    a->wait.release = release;
    a->wait.ctx = ctx;
    return set(a, ANSWER_WAIT, 0);
}

void answer_resume(struct answer *a, int result)
{
    /* Read before the call: once resumed, the request may be dispatched
     * again on its own thread, which makes a new answer here. */
    void (*done)(void *, int) = a->wait.done;
    void *arg = a->wait.done_arg;
    done(arg, result);
}

static void hashes_done(void *arg, enum hasher_result r)
{
    answer_resume(arg, (int)r);
}

/* What an answer waits for: the hashes of some files. */
struct hash_wait {
    struct hasher *h;
    const struct reg_file **files;
    size_t n;
    unsigned ms;
};

static void *start_hashing(struct answer *a)
{
    const struct hash_wait *w = a->wait.ctx;
    enum hasher_state st = hasher_want(w->h, w->files, w->n, w->ms, hashes_done, a);
    if (st != HASHER_PENDING)
        answer_resume(a, st == HASHER_KNOWN ? (int)HASHER_DONE : (int)HASHER_GONE);
    return NULL;
}

int answer_wait_hashes(const struct request_view *v, struct answer *a,
                       const struct reg_file **files, size_t n)
{
    struct hasher *h = v->srv->hasher;
    unsigned wait_s = v->srv->cfg->hash_wait;
    if (v->waited || wait_s == 0 || !h)
        return 0;
    struct hash_wait *w = answer_alloc(a, sizeof(*w));
    *w = (struct hash_wait){h, files, n, wait_s * 1000u};
    answer_wait(a, start_hashing, NULL, w);
    return 1;
}

/* The renderer's callback: the document is there (or cannot be), dispatch
 * the request again. */
static void doc_ready(void *arg, enum doc_result r)
{
    answer_resume(arg, (int)r);
}

/* What an answer waits for: a document's render. */
struct doc_wait {
    struct doc_cache *docs;
    const struct reg_model *m;  /* in the snapshot the request holds while the wait starts */
    const struct reg_repo *r;   /* likewise; NULL for a model's document */
    enum doc_kind kind;
};

static void *start_render(struct answer *a)
{
    const struct doc_wait *w = a->wait.ctx;
    if (doc_cache_render(w->docs, w->m, w->r, w->kind, doc_ready, a) != 0)
        doc_ready(a, DOC_STOPPED);
    return NULL;
}

struct answer *answer_wait_doc(const struct request_view *v, struct answer *a,
                               const struct reg_model *m, const struct reg_repo *r,
                               enum doc_kind kind)
{
    struct doc_wait *w = answer_alloc(a, sizeof(*w));
    *w = (struct doc_wait){v->srv->docs, m, r, kind};
    return answer_wait(a, start_render, NULL, w);
}

const char *answer_disposition(struct answer *a, const char *type, const char *name, size_t n)
{
    char *out = answer_alloc(a, strlen(type) + 40 + 4 * n);
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

const char *answer_content_type(const char *name)
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

const char *view_header(const struct request_view *v, const char *name)
{
    return v->header(v, name);
}

int view_preconditions_hold(const struct request_view *v)
{
    struct cond_headers h = {
        .if_match = view_header(v, "If-Match"),
        .if_unmodified_since = view_header(v, "If-Unmodified-Since"),
        .if_none_match = view_header(v, "If-None-Match"),
        .if_modified_since = view_header(v, "If-Modified-Since"),
    };
    return cond_evaluate(&h, "", -1, 0) == COND_PROCEED;
}

char *view_query(const struct request_view *v, const char *key, int form, size_t *len, int *bad)
{
    const char *raw = v->query(v, key);
    if (!raw)
        return NULL;
    char *d = pct_decode(raw, strlen(raw), form ? PCT_FORM : 0, len);
    if (!d)
        *bad = 1;
    return d;
}

void answer_reads_mirrored(struct representation *rep, const struct mirror_read *rd, size_t n)
{
    rep->mirror = rd;
    rep->n_mirror = n;
    rep->arriving = 0;
    for (size_t i = 0; i < n; i++)
        rep->arriving |= !rd[i].complete;
}
