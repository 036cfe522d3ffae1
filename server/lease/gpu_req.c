/* gpu_req: the GPU manager's requests as the endpoints receive them, and
 * its status codes as theirs (see gpu_req.h). */
#include "gpu_req.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_doc.h"
#include "json_scan.h"
#include "util.h"

/* What a manager call failed with, as the HTTP endpoints and the lease
 * socket say it: the one place where status codes become wire codes. */
enum gpu_op { GPU_OP_DEVICE, GPU_OP_PRELOAD, GPU_OP_EVICT, GPU_OP_OPEN };

/* Fills e from the manager's err for a call of kind op; returns rc. */
static int refused(enum gpu_op op, const struct st_error *err, int rc, struct gpu_req_error *e)
{
    static const struct {
        enum gpu_op op;
        enum st_status code;
        int http;
        const char *wire;
    } map[] = {
        {GPU_OP_DEVICE, ST_ERR_INVALID_ARGUMENT, 400, "bad_device"},
        {GPU_OP_DEVICE, ST_ERR_NO_DEVICE, 503, "gpu_unavailable"},
        {GPU_OP_PRELOAD, ST_ERR_NOT_FOUND, 404, "not_found"},
        {GPU_OP_PRELOAD, ST_ERR_INVALID_ARGUMENT, 409, "model_invalid"},
        {GPU_OP_PRELOAD, ST_ERR_SPLIT, 400, "bad_split"},
        {GPU_OP_PRELOAD, ST_ERR_CONFLICT, 409, "split_conflict"},
        {GPU_OP_PRELOAD, ST_ERR_DEVICE_MEMORY, 507, "insufficient_memory"},
        {GPU_OP_PRELOAD, ST_ERR_LIMIT, 503, "too_many_devices"},
        {GPU_OP_EVICT, ST_ERR_NOT_FOUND, 404, "not_loaded"},
        {GPU_OP_OPEN, ST_ERR_NOT_FOUND, 0, "not_loaded"},
        {GPU_OP_OPEN, ST_ERR_INVALID_ARGUMENT, 0, "wrong_device"},
        {GPU_OP_OPEN, ST_ERR_AMBIGUOUS, 0, "ambiguous"},
        {GPU_OP_OPEN, ST_ERR_CONFLICT, 0, "loading"},
        {GPU_OP_OPEN, ST_ERR_RETRY, 0, "reloading"},
        {GPU_OP_OPEN, ST_ERR_DEVICE, 0, "failed"},
        {GPU_OP_OPEN, ST_ERR_LIMIT, 0, "too_many_shards"},
    };
    int oom = err->code == ST_ERR_NO_MEMORY;
    e->http_status = oom ? 503 : 500;
    e->code = oom ? "out_of_memory" : "internal";
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        if (map[i].op == op && map[i].code == err->code) {
            e->http_status = map[i].http;
            e->code = map[i].wire;
        }
    }
    snprintf(e->message, sizeof(e->message), "%s", err->message);
    return rc;
}

static int bad_request(struct gpu_req_error *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int bad_request(struct gpu_req_error *e, const char *fmt, ...)
{
    va_list ap;
    *e = (struct gpu_req_error){.code = "bad_request", .http_status = 400};
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* ---- the POST body ------------------------------------------------------------ */

struct body_ctx {
    struct gpu_req_preload *p;
    const char *split_text;    /* the raw "split" value, in the body */
    size_t split_len;
    int bad;                   /* a member of the wrong kind, or an unknown one */
    char why[160];
};

static char *decoded(const struct json_scan *s)
{
    char *out = xmalloc(s->str_len + 1);
    out[json_scan_decode(s, out, s->str_len)] = '\0';
    return out;
}

static int device_element(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct body_ctx *c = ctx;
    (void)key;
    if (s->tok != JSON_TOK_STRING || c->p->n_devices == GPU_REQ_MAX_DEVICES) {
        c->bad = 1;
        snprintf(c->why, sizeof(c->why), "\"devices\" holds at most %d device names (strings)",
                 GPU_REQ_MAX_DEVICES);
        return json_scan_value(s, depth, JSON_SCAN_MAX_DEPTH);
    }
    c->p->devices[c->p->n_devices++] = decoded(s);
    return 0;
}

static int body_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct body_ctx *c = ctx;
    size_t start = s->start;
    if (strcmp(key, "device") == 0 && s->tok == JSON_TOK_STRING) {
        c->p->device = decoded(s);
        return 0;
    }
    if (strcmp(key, "devices") == 0 && s->tok == '[') {
        c->p->devices = xcalloc(GPU_REQ_MAX_DEVICES, sizeof(*c->p->devices));
        return json_scan_each(s, depth, JSON_SCAN_MAX_DEPTH, device_element, c);
    }
    int rc = json_scan_value(s, depth, JSON_SCAN_MAX_DEPTH);
    if (strcmp(key, "split") == 0 && s->tok == '}') {
        c->split_text = s->buf + start;
        c->split_len = s->pos - start;
    } else if (!c->bad) {
        c->bad = 1;
        snprintf(c->why, sizeof(c->why), "\"%.40s\" is not one of \"device\" (a string), "
                 "\"devices\" (an array) and \"split\" (an object)", key);
    }
    return rc;
}

int gpu_req_preload_parse(const char *body, size_t len, struct gpu_req_preload *p,
                          struct gpu_req_error *e)
{
    struct body_ctx c = {.p = p};
    struct json_scan s;
    struct st_error err;
    memset(p, 0, sizeof(*p));
    const char *usage = "the body must be a JSON object with \"device\": \"cuda:N\", a GPU UUID "
                        "or \"host\" (and a \"split\" for one rank), or \"devices\" and a "
                        "\"split\" without its rank";
    if (memchr(body, '\0', len) || !utf8_valid(body, len))
        return bad_request(e, "%s", usage);
    json_scan_init(&s, body, len);
    int rc = 0;
    if (json_scan_next(&s) != '{' || json_scan_each(&s, 1, JSON_SCAN_MAX_DEPTH, body_member,
                                                    &c) != 0 ||
        json_scan_next(&s) != JSON_TOK_EOF || (!p->device == !p->devices))
        rc = bad_request(e, "%s", usage);
    else if (c.bad)
        rc = bad_request(e, "%s", c.why);
    else if (p->devices && !c.split_text)
        rc = bad_request(e, "\"devices\" places the ranks of a \"split\": give one");
    else if (c.split_text && fetch_req_parse_split(c.split_text, c.split_len, p->device != NULL,
                                                   &p->split, &err) < 0)
        rc = bad_request(e, "%s", err.message);
    else if (p->devices && p->split.world != p->n_devices)
        rc = bad_request(e, "\"devices\" names %zu devices for a world of %llu: one per rank",
                         p->n_devices, (unsigned long long)p->split.world);
    if (rc < 0)
        gpu_req_preload_free(p);
    return rc;
}

void gpu_req_preload_free(struct gpu_req_preload *p)
{
    free(p->device);
    for (size_t i = 0; i < p->n_devices; i++)
        free(p->devices[i]);
    free(p->devices);
    fetch_req_free(&p->split);
    memset(p, 0, sizeof(*p));
}

/* ---- preloads ----------------------------------------------------------------- */

int gpu_req_preload(struct gpu_manager *gm, const char *model, const struct gpu_req_preload *p,
                    struct jsonw *w, int *http_status, struct gpu_req_error *e)
{
    size_t n = p->devices ? p->n_devices : 1;
    struct gm_device *where = xcalloc(n, sizeof(*where));
    struct gm_view *v = xcalloc(n, sizeof(*v));
    int *started = xcalloc(n, sizeof(*started)), rc = 0;
    struct st_error err;
    for (size_t r = 0; r < n && rc == 0; r++)
        if (gm_resolve_device(gm, p->devices ? p->devices[r] : p->device, &where[r], &err) < 0)
            rc = refused(GPU_OP_DEVICE, &err, -EINVAL, e);
    size_t done = 0;
    for (; done < n && rc == 0; done++) {
        struct fetch_req one = p->split; /* this rank's: the rules are shared, read-only */
        if (p->devices)
            one.rank = done;
        int got = gpu_preload_request(gm, model, &where[done], &one, 0, &v[done], &err);
        if (got < 0)
            rc = refused(GPU_OP_PRELOAD, &err, got, e);
        else
            started[done] = got == 1;
    }
    if (rc < 0) { /* take back what this request started: all or nothing */
        for (size_t r = 0; r < done; r++) {
            /* its world too: the model's other instances there stay */
            struct gm_which which = {.where = &where[r], .rank = (int)r,
                                     .world = (unsigned)p->split.world};
            struct gm_evicted *ev;
            if (started[r] && p->devices && gpu_manager_evict(gm, model, &which, &ev, &err) > 0)
                free(ev);
        }
    } else if (!p->devices) {
        gpu_doc_instance(w, &v[0], 0, 0);
    } else {
        jsonw_obj(w);
        jsonw_kstr(w, "model", model);
        jsonw_karr(w, "instances");
        for (size_t r = 0; r < n; r++)
            gpu_doc_instance(w, &v[r], 0, 0);
        jsonw_arr_end(w);
        jsonw_obj_end(w);
    }
    int any = 0;
    for (size_t r = 0; r < n; r++) {
        any |= started[r];
        gpu_manager_view_release(gm, &v[r]);
    }
    *http_status = any ? 202 : 200;
    free(started);
    free(v);
    free(where);
    return rc;
}

int gpu_req_preload_model(struct gpu_manager *gm, const char *model, const char *device,
                          const struct reg_model *rm, struct gm_source **src, struct jsonw *w,
                          int *http_status, struct gpu_req_error *e)
{
    struct gm_device where;
    struct gm_view v;
    struct st_error err;
    int rc = gm_resolve_device(gm, device, &where, &err);
    if (rc < 0)
        return refused(GPU_OP_DEVICE, &err, rc, e);
    rc = gpu_preload_request_model(gm, model, rm, src ? *src : NULL, &where, &v, &err);
    if (rc < 0)
        return refused(GPU_OP_PRELOAD, &err, rc, e);
    if (rc == 1 && src)
        *src = NULL; /* the instance took it */
    *http_status = rc == 1 ? 202 : 200;
    gpu_doc_instance(w, &v, 0, 0);
    gpu_manager_view_release(gm, &v);
    return 0;
}

/* ---- GET and DELETE ------------------------------------------------------------ */

/* A query's number: plain decimal digits, at most INT32_MAX. -1 when not. */
static long query_number(const char *text)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);
    return text[0] < '0' || text[0] > '9' || *end || v > INT32_MAX ? -1 : (long)v;
}

int gpu_req_which(struct gpu_manager *gm, const char *device, const char *rank,
                  const char *world, struct gm_which *which, struct gm_device *where,
                  struct gpu_req_error *e)
{
    struct st_error err;
    *which = (struct gm_which){.rank = -1};
    if (device && gm_resolve_device(gm, device, where, &err) < 0)
        return refused(GPU_OP_DEVICE, &err, -EINVAL, e);
    if (device)
        which->where = where;
    if (rank && (which->rank = (int)query_number(rank)) < 0)
        return bad_request(e, "rank=%.40s is not a rank (0, 1, ...)", rank);
    long n = world ? query_number(world) : 0;
    if (n <= 0 && world)
        return bad_request(e, "world=%.40s is not a world (1, 2, ...)", world);
    which->world = (unsigned)n;
    return 0;
}

int gpu_req_evict(struct gpu_manager *gm, const char *model, const struct gm_which *which,
                  struct jsonw *w, int *http_status, struct gpu_req_error *e)
{
    struct gm_evicted *ev;
    struct st_error err;
    int n = gpu_manager_evict(gm, model, which, &ev, &err);
    if (n < 0)
        return refused(GPU_OP_EVICT, &err, n, e);
    int draining = 0;
    for (int i = 0; i < n; i++)
        draining |= ev[i].draining;
    *http_status = draining ? 202 : 200;
    jsonw_obj(w);
    jsonw_kstr(w, "model", model);
    jsonw_kstr(w, "state", draining ? "draining" : "none");
    if (n == 1) { /* the document of one instance, as before several could be */
        jsonw_kstr(w, "device", ev[0].device);
        jsonw_ku64(w, "generation", ev[0].generation);
        if (ev[0].draining)
            jsonw_ku64(w, "leases", ev[0].leases);
    }
    jsonw_karr(w, "instances");
    for (int i = 0; i < n; i++) {
        jsonw_obj(w);
        jsonw_kstr(w, "device", ev[i].device);
        if (ev[i].world > 1) {
            jsonw_ku64(w, "world", ev[i].world);
            jsonw_ku64(w, "rank", ev[i].rank);
        }
        jsonw_kstr(w, "state", ev[i].draining ? "draining" : "none");
        jsonw_ku64(w, "generation", ev[i].generation);
        if (ev[i].draining)
            jsonw_ku64(w, "leases", ev[i].leases);
        jsonw_obj_end(w);
    }
    jsonw_arr_end(w);
    jsonw_obj_end(w);
    free(ev);
    return 0;
}

/* ---- the lease socket ------------------------------------------------------------ */

struct gpu_lease *gpu_req_open(struct gpu_manager *gm, const char *model, const char *device,
                               int rank, const char *prefer, uint64_t lease_id, struct jsonw *w,
                               int *fds, size_t max_fds, size_t *n_fds, struct gpu_req_error *e)
{
    struct gm_device where;
    struct gm_view v;
    struct st_error err;
    struct gm_which which = {.rank = rank, .prefer = prefer};
    *n_fds = 0;
    if (device && *device) {
        if (gm_resolve_device(gm, device, &where, &err) < 0) {
            refused(GPU_OP_DEVICE, &err, 0, e);
            return NULL;
        }
        which.where = &where;
    }
    struct gpu_lease *l = gpu_manager_open(gm, model, &which, &v, fds, max_fds, n_fds, &err);
    if (!l) {
        refused(GPU_OP_OPEN, &err, 0, e);
        return NULL;
    }
    gpu_doc_instance(w, &v, 1, lease_id);
    gpu_manager_view_release(gm, &v);
    return l;
}
