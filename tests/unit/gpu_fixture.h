/* gpu_fixture: what the GPU unit tests share (test_gpu_manager.c,
 * test_gpu_doc.c, test_lease_server.c): a models root per test, a manager
 * on it with the lease socket beside it, model writers, and short ways to
 * ask the manager through its documents. Included once by each test. */
#ifndef TENSORD_GPU_FIXTURE_H
#define TENSORD_GPU_FIXTURE_H

#pragma GCC diagnostic ignored "-Wunused-function" /* each test uses some */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dlpack/dlpack.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#include "cmem.h"
#include "config.h"
#include "dlpack_v1.h"
#include "gpu_manager.h"
#include "gpu_manager_int.h"
#include "ipc_proto.h"
#include "gpu_doc.h"
#include "gpu_req.h"
#include "lease_server.h"
#include "metrics.h"
#include "registry.h"
#include "tensord_client.h"
#include "test.h"
#include "util.h"

static char tmpdir[] = "/tmp/tensord-gpu-manager-XXXXXX";

/* One manager on its own models root, with its socket beside the root. */
struct fx {
    char *root, *sock;
    struct registry holder;
    struct config cfg;
    struct gpu_manager *gm;
    struct lease_server *ls;       /* the daemon's lease socket over gm */
    uint64_t reg_generation;
    uint64_t memory_limit;         /* preload_memory_limit for fx_start (0: none) */
};

/* A fresh directory for one test: models go into f->root, then fx_start. */
static void fx_init(struct fx *f)
{
    static int n;
    char *dir = xasprintf("%s/t%d", tmpdir, n++);
    CHECK(mkdir(dir, 0755) == 0);
    memset(f, 0, sizeof(*f));
    f->root = xasprintf("%s/models", dir);
    f->sock = xasprintf("%s/t.sock", dir);
    CHECK(mkdir(f->root, 0755) == 0);
    free(dir);
}

static struct reg_snapshot *fx_scan(struct fx *f)
{
    struct st_error serr;
    struct reg_snapshot *reg = reg_snapshot_scan(f->root, ++f->reg_generation, NULL, &serr);
    CHECK(reg != NULL);
    return reg;
}

/* Scans the root and starts a manager with verify on; preloads is the
 * config's list ("MODEL@DEVICE" each), NULL-terminated. */
static void fx_start(struct fx *f, const char *const *preloads)
{
    char err[512] = "";
    registry_init(&f->holder, fx_scan(f));
    config_defaults(&f->cfg);
    free(f->cfg.ipc_socket);
    f->cfg.ipc_socket = xstrdup(f->sock);
    f->cfg.verify = 1;
    f->cfg.preload_memory_limit = f->memory_limit;
    for (; preloads && *preloads; preloads++)
        f->cfg.preload[f->cfg.n_preload++] = xstrdup(*preloads);
    struct gm_options opt;
    struct st_error serr;
    gpu_doc_options(&opt, &f->cfg);
    f->gm = gpu_manager_new(&opt, &f->holder);
    CHECK(!gpu_manager_ready(f->gm));
    CHECK(gpu_manager_start(f->gm, &serr) == 0);
    f->ls = lease_server_start(f->gm, &f->holder, f->sock, &f->cfg, err, sizeof(err));
    CHECK(f->ls != NULL);
    if (err[0])
        fprintf(stderr, "  start: %s\n", err);
}

/* A reload as the daemon does it: scan, tell the manager, swap. */
static void fx_reload(struct fx *f)
{
    struct reg_snapshot *next = fx_scan(f);
    gpu_manager_on_reload(f->gm, next);
    registry_swap(&f->holder, next);
}

static void fx_free(struct fx *f)
{
    lease_server_stop(f->ls);
    gpu_manager_free(f->gm);
    CHECK(access(f->sock, F_OK) != 0); /* the socket file is removed */
    registry_destroy(&f->holder);
    config_free(&f->cfg);
    free(f->root);
    free(f->sock);
}

/* Writes a safetensors file at root/rel from its header JSON and data, into
 * a new inode (as a real update does). */
static void write_st(const struct fx *f, const char *rel, const char *json,
                     const unsigned char *data, size_t n)
{
    char *path = xasprintf("%s/%s", f->root, rel), *tmp = xasprintf("%s.tmp", path);
    size_t h = strlen(json);
    char *hdr = xmalloc(h + 8);
    memcpy(hdr, json, h);
    while (h % 8)
        hdr[h++] = ' ';
    unsigned char pre[8];
    for (int i = 0; i < 8; i++)
        pre[i] = (unsigned char)((uint64_t)h >> (8 * i));
    FILE *fp = fopen(tmp, "wb");
    CHECK(fp != NULL);
    fwrite(pre, 1, 8, fp);
    fwrite(hdr, 1, h, fp);
    fwrite(data, 1, n, fp);
    fclose(fp);
    free(hdr);
    CHECK(rename(tmp, path) == 0);
    free(tmp);
    free(path);
}

/* n bytes that depend on seed. */
static unsigned char *bytes_for(size_t n, unsigned seed)
{
    unsigned char *p = xmalloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131u + seed * 29u + (i >> 8));
    return p;
}

#define MODEL_BYTES 2200 /* x: U8 [1000], y: F32 [3,100], z: F32 [0] */

/* root/NAME.safetensors with tensors x, y and z; returns the data bytes. */
static unsigned char *write_model(const struct fx *f, const char *name, unsigned seed)
{
    unsigned char *data = bytes_for(MODEL_BYTES, seed);
    char *rel = xasprintf("%s.safetensors", name);
    write_st(f, rel,
             "{\"x\":{\"dtype\":\"U8\",\"shape\":[1000],\"data_offsets\":[0,1000]},"
             "\"y\":{\"dtype\":\"F32\",\"shape\":[3,100],\"data_offsets\":[1000,2200]},"
             "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[2200,2200]}}",
             data, MODEL_BYTES);
    free(rel);
    return data;
}

/* root/NAME.safetensors whose header promises more bytes than it has. */
static void write_invalid(const struct fx *f, const char *name)
{
    char *rel = xasprintf("%s.safetensors", name);
    write_st(f, rel, "{\"x\":{\"dtype\":\"U8\",\"shape\":[9],\"data_offsets\":[0,9]}}",
             (const unsigned char *)"abcd", 4);
    free(rel);
}

static void remove_model(const struct fx *f, const char *name)
{
    char *path = xasprintf("%s/%s.safetensors", f->root, name);
    CHECK(unlink(path) == 0);
    free(path);
}

/* What w holds, read back with jansson (the tests' oracle); w is emptied. */
static json_t *parsed(struct jsonw *w)
{
    char *text = jsonw_take(w, NULL);
    json_t *o = text ? json_loads(text, JSON_REJECT_DUPLICATES, NULL) : NULL;
    CHECK(o != NULL);
    free(text);
    return o;
}

/* A refusal as the error documents say it: {"error": {"code", "message"}}. */
static json_t *refusal(const struct gpu_req_error *e)
{
    return json_pack("{s:{s:s,s:s}}", "error", "code", e->code, "message", e->message);
}

/* The GET .../gpu document as text (the caller frees). */
static char *model_text(struct gpu_manager *gm, const char *model)
{
    struct jsonw w = JSONW_INIT;
    gpu_doc_model(gm, model, NULL, &w);
    char *text = jsonw_take(&w, NULL);
    CHECK(text != NULL);
    return text;
}

/* The GET .../gpu document, parsed. */
static json_t *model_json(struct gpu_manager *gm, const char *model)
{
    struct jsonw w = JSONW_INIT;
    gpu_doc_model(gm, model, NULL, &w);
    return parsed(&w);
}

/* GET .../gpu?device=D&rank=R (either NULL), parsed; a refused query is
 * its refusal. */
static json_t *model_json_at(struct gpu_manager *gm, const char *model, const char *device,
                             const char *rank)
{
    struct jsonw w = JSONW_INIT;
    struct gpu_req_error e;
    struct gm_which which;
    struct gm_device where;
    if (gpu_req_which(gm, device, rank, NULL, &which, &where, &e) < 0)
        return refusal(&e);
    gpu_doc_model(gm, model, &which, &w);
    return parsed(&w);
}

static json_t *summary_json(struct gpu_manager *gm, const char *model)
{
    struct jsonw w = JSONW_INIT;
    gpu_doc_summary(gm, model, &w);
    return parsed(&w);
}

static json_t *status_json(struct gpu_manager *gm, const char *sock)
{
    struct jsonw w = JSONW_INIT;
    gpu_doc_status(gm, sock, &w);
    return parsed(&w);
}

static json_t *list_json(struct gpu_manager *gm)
{
    struct jsonw w = JSONW_INIT;
    gpu_doc_list(gm, &w);
    return parsed(&w);
}

/* POST .../gpu with body: the answer (or the refusal) and its status. */
static json_t *post(struct gpu_manager *gm, const char *model, const char *body, int *status)
{
    struct gpu_req_error e;
    struct jsonw w = JSONW_INIT;
    struct gpu_req_preload p;
    int rc = gpu_req_preload_parse(body, strlen(body), &p, &e);
    if (rc == 0)
        rc = gpu_req_preload(gm, model, &p, &w, status, &e);
    gpu_req_preload_free(&p);
    if (rc == 0)
        return parsed(&w);
    CHECK(rc < 0 && e.http_status >= 400);
    *status = e.http_status;
    return refusal(&e);
}

/* DELETE .../gpu?device=D&rank=R (either NULL: every instance): the
 * answer (or the refusal) and its status. */
static json_t *evict_at(struct gpu_manager *gm, const char *model, const char *device,
                        const char *rank, int *status)
{
    struct gpu_req_error e;
    struct jsonw w = JSONW_INIT;
    struct gm_which which;
    struct gm_device where;
    if (gpu_req_which(gm, device, rank, NULL, &which, &where, &e) == 0 &&
        gpu_req_evict(gm, model, &which, &w, status, &e) == 0)
        return parsed(&w);
    *status = e.http_status;
    return refusal(&e);
}

static json_t *evict(struct gpu_manager *gm, const char *model, int *status)
{
    return evict_at(gm, model, NULL, NULL, status);
}

static const char *state_of(struct gpu_manager *gm, const char *model)
{
    static char buf[32];
    json_t *o = model_json(gm, model);
    snprintf(buf, sizeof(buf), "%s", json_string_value(json_object_get(o, "state")));
    json_decref(o);
    return buf;
}

static json_int_t int_of(struct gpu_manager *gm, const char *model, const char *key)
{
    json_t *o = model_json(gm, model);
    json_int_t v = json_integer_value(json_object_get(o, key));
    json_decref(o);
    return v;
}

/* Whether doc is an error with code; takes doc. */
static int code_is(json_t *doc, const char *code)
{
    const char *c = json_string_value(json_object_get(json_object_get(doc, "error"), "code"));
    int ok = c && strcmp(c, code) == 0;
    if (!ok)
        fprintf(stderr, "  error code %s, want %s\n", c ? c : "(none)", code);
    json_decref(doc);
    return ok;
}

/* The status document's model rows named name. */
static size_t status_rows(struct gpu_manager *gm, const char *name)
{
    json_t *s = status_json(gm, NULL), *row;
    size_t i, n = 0;
    json_array_foreach(json_object_get(s, "models"), i, row)
        n += strcmp(json_string_value(json_object_get(row, "name")), name) == 0;
    json_decref(s);
    return n;
}

/* The value of a Prometheus sample after gpu_manager_update_metrics. */
static double gpu_metric(struct gpu_manager *gm, const char *series)
{
    gpu_manager_update_metrics(gm);
    char *text = metrics_render_prometheus(), *line = xasprintf("\n%s ", series);
    const char *p = strstr(text, line);
    double v = p ? strtod(p + strlen(line), NULL) : -1;
    free(line);
    free(text);
    return v;
}

/* How many of this process's descriptors refer to the same file as fd. */
static int fds_on_file(int fd)
{
    struct stat want, st;
    int n = 0;
    CHECK(fstat(fd, &want) == 0);
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        int x = atoi(e->d_name);
        if (e->d_name[0] == '.' || x == dirfd(d))
            continue;
        n += fstat(x, &st) == 0 && st.st_ino == want.st_ino && st.st_dev == want.st_dev;
    }
    if (d)
        closedir(d);
    return n;
}

/* The lease socket's open of model's instance on device (NULL: any) and of
 * rank (-1: any), prefer chosen among several, with its answer (or the
 * refusal) parsed into *ans (lease id 1). */
static struct gpu_lease *open_rank(struct gpu_manager *gm, const char *model, const char *device,
                                   int rank, const char *prefer, json_t **ans, int *fds,
                                   size_t max_fds, size_t *n)
{
    struct gpu_req_error e;
    struct jsonw w = JSONW_INIT;
    struct gpu_lease *l = gpu_req_open(gm, model, device, rank, prefer, 1, &w, fds, max_fds, n,
                                       &e);
    *ans = l ? parsed(&w) : refusal(&e);
    CHECK(*ans != NULL);
    return l;
}

static struct gpu_lease *open_lease(struct gpu_manager *gm, const char *model, const char *device,
                                    json_t **ans, int *fds, size_t max_fds, size_t *n)
{
    return open_rank(gm, model, device, -1, NULL, ans, fds, max_fds, n);
}

static int cuda_available(struct gpu_manager *gm)
{
    json_t *s = status_json(gm, NULL);
    int yes = json_is_true(json_object_get(s, "available"));
    json_decref(s);
    return yes;
}

static void wait_idle(struct gpu_manager *gm)
{
    CHECK(gpu_manager_wait_idle(gm, 10000) == 0);
}

/* Ranks 0 .. n-1 of a world of `world` of model on the host, each its own
 * instance (x cut along dim 0), loaded. */
static void preload_ranks(struct gpu_manager *gm, const char *model, int n, int world)
{
    for (int r = 0; r < n; r++) {
        char body[160];
        int st;
        snprintf(body, sizeof(body), "{\"device\":\"host\",\"split\":{\"world\":%d,"
                 "\"rank\":%d,\"rules\":[{\"match\":\"x\",\"dim\":0}]}}", world, r);
        json_decref(post(gm, model, body, &st));
        CHECK(st == 202);
    }
    wait_idle(gm);
}

/* ---- tests ---------------------------------------------------------------- */

/* sh/: two shards (a, b) and a file that is not one. */
static void write_sharded(const struct fx *f, unsigned char **da, unsigned char **db)
{
    char *dir = xasprintf("%s/sh", f->root), *readme = xasprintf("%s/README.md", dir);
    CHECK(mkdir(dir, 0755) == 0);
    FILE *fp = fopen(readme, "w");
    CHECK(fp != NULL);
    fputs("not a shard\n", fp);
    fclose(fp);
    *da = bytes_for(5000, 3);
    *db = bytes_for(64, 4);
    write_st(f, "sh/a.safetensors",
             "{\"a\":{\"dtype\":\"U8\",\"shape\":[5000],\"data_offsets\":[0,5000]}}", *da, 5000);
    write_st(f, "sh/b.safetensors",
             "{\"b\":{\"dtype\":\"F64\",\"shape\":[2,4],\"data_offsets\":[0,64]}}", *db, 64);
    free(readme);
    free(dir);
}

/* Maps fd read-only and compares its first n bytes with want. */
static int maps_to(int fd, const unsigned char *want, size_t n)
{
    void *p = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return 0;
    int same = memcmp(p, want, n) == 0;
    munmap(p, n);
    return same;
}

/* Creates the directory the tests work in; removes it after run(). */
static int fx_main(int (*run)(void))
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    metrics_init();
    int rc = run();
    char *cmd = xasprintf("rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    free(cmd);
    return rc;
}

#endif
