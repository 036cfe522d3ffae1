/* Tests for the GPU manager (core/gpu/gpu_manager.c, gpu_preload.c,
 * server/gpu_doc.c, server/lease_server.c) on the host backend, no daemon: each test scans its own
 * models root, starts a manager on it and drives it through the public
 * calls. Start-up preloads and readiness, the GET document, leases opened
 * directly (fds that map the file bytes), evict while leased (draining, the
 * daemon's hold released with the last lease while a worker's mapping
 * stays), reloads (changed files get a new generation, unchanged ones keep
 * theirs, removed or invalid ones are evicted), a failed preload and its
 * retry, and a lease through the C client over the real socket. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dlpack/dlpack.h>
#include <pthread.h>
#include <stdatomic.h>

#include "cmem.h"
#include "config.h"
#include "dlpack_v1.h"
#include "gpu/gpu_manager.h"
#include "gpu/gpu_manager_int.h"
#include "gpu/ipc_proto.h"
#include "gpu_doc.h"
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
    struct registry_holder holder;
    struct config cfg;
    struct gpu_manager *gm;
    struct lease_server *ls;       /* the daemon's lease socket over gm */
    uint64_t reg_generation;
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

static struct registry *fx_scan(struct fx *f)
{
    struct st_error serr;
    struct registry *reg = registry_scan(f->root, ++f->reg_generation, NULL, &serr);
    CHECK(reg != NULL);
    return reg;
}

/* Scans the root and starts a manager with verify on; preloads is the
 * config's list ("MODEL@DEVICE" each), NULL-terminated. */
static void fx_start(struct fx *f, const char *const *preloads)
{
    char err[512] = "";
    registry_holder_init(&f->holder, fx_scan(f));
    config_defaults(&f->cfg);
    free(f->cfg.ipc_socket);
    f->cfg.ipc_socket = xstrdup(f->sock);
    f->cfg.verify = 1;
    for (; preloads && *preloads; preloads++)
        f->cfg.preload[f->cfg.n_preload++] = xstrdup(*preloads);
    struct gm_options opt;
    struct st_error serr;
    gpu_doc_options(&opt, &f->cfg);
    f->gm = gpu_manager_new(&opt, &f->holder);
    CHECK(!gpu_manager_ready(f->gm));
    CHECK(gpu_manager_start(f->gm, &serr) == 0);
    f->ls = lease_server_start(f->gm, f->sock, &f->cfg, err, sizeof(err));
    CHECK(f->ls != NULL);
    if (err[0])
        fprintf(stderr, "  start: %s\n", err);
}

/* A reload as the daemon does it: scan, tell the manager, swap. */
static void fx_reload(struct fx *f)
{
    struct registry *next = fx_scan(f);
    gpu_manager_on_reload(f->gm, next);
    registry_holder_swap(&f->holder, next);
}

static void fx_free(struct fx *f)
{
    lease_server_stop(f->ls);
    gpu_manager_free(f->gm);
    CHECK(access(f->sock, F_OK) != 0); /* the socket file is removed */
    registry_holder_destroy(&f->holder);
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
    char hdr[512];
    int h = snprintf(hdr, sizeof(hdr), "%s", json);
    while (h % 8)
        hdr[h++] = ' ';
    unsigned char pre[8];
    for (int i = 0; i < 8; i++)
        pre[i] = (unsigned char)((uint64_t)h >> (8 * i));
    FILE *fp = fopen(tmp, "wb");
    CHECK(fp != NULL);
    fwrite(pre, 1, 8, fp);
    fwrite(hdr, 1, (size_t)h, fp);
    fwrite(data, 1, n, fp);
    fclose(fp);
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

static json_t *post(struct gpu_manager *gm, const char *model, const char *body, int *status)
{
    return gpu_doc_preload(gm, model, body, strlen(body), status);
}

static const char *state_of(struct gpu_manager *gm, const char *model)
{
    static char buf[32];
    int st;
    json_t *o = gpu_doc_model_json(gm, model, &st);
    snprintf(buf, sizeof(buf), "%s", json_string_value(json_object_get(o, "state")));
    json_decref(o);
    return buf;
}

static json_int_t int_of(struct gpu_manager *gm, const char *model, const char *key)
{
    int st;
    json_t *o = gpu_doc_model_json(gm, model, &st);
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
    json_t *s = gpu_doc_status_json(gm, NULL), *row;
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

/* gpu_doc_open with its answer parsed into *ans (lease id 1). */
static struct gpu_lease *open_lease(struct gpu_manager *gm, const char *model, const char *device,
                                    json_t **ans, int *fds, size_t max_fds, size_t *n)
{
    char *text = NULL;
    struct gpu_lease *l = gpu_doc_open(gm, model, device, 1, &text, fds, max_fds, n);
    *ans = text ? json_loads(text, 0, NULL) : NULL;
    CHECK(*ans != NULL);
    free(text);
    return l;
}

static int cuda_available(struct gpu_manager *gm)
{
    json_t *s = gpu_doc_status_json(gm, NULL);
    int yes = json_is_true(json_object_get(s, "available"));
    json_decref(s);
    return yes;
}

static void wait_idle(struct gpu_manager *gm)
{
    CHECK(gpu_manager_wait_idle(gm, 10000) == 0);
}

/* ---- tests ---------------------------------------------------------------- */

/* The config's preloads: a good one loads and readiness waits for it; a
 * malformed one and an unknown model are skipped without holding /readyz. */
TEST(startup_preloads_and_the_get_document)
{
    struct fx f;
    fx_init(&f);
    unsigned char *data = write_model(&f, "ma", 1);
    static const char *const preloads[] = {"ma@host", "no-device", "nope@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    CHECK(gpu_manager_ready(f.gm));
    CHECK_STR(state_of(f.gm, "nope"), "none");

    int st = 0;
    json_t *o = gpu_doc_model_json(f.gm, "ma", &st);
    CHECK(st == 200);
    CHECK_STR(json_string_value(json_object_get(o, "state")), "ready");
    CHECK_STR(json_string_value(json_object_get(o, "backend")), "host");
    CHECK_STR(json_string_value(json_object_get(o, "device")), "host");
    CHECK_STR(json_string_value(json_object_get(o, "device_uuid")), "host");
    CHECK(json_integer_value(json_object_get(o, "device_index")) == 0);
    CHECK(json_integer_value(json_object_get(o, "generation")) >= 1);
    CHECK(json_integer_value(json_object_get(o, "leases")) == 0);
    json_t *pr = json_object_get(o, "progress");
    CHECK(json_integer_value(json_object_get(pr, "bytes_done")) == MODEL_BYTES);
    CHECK(json_integer_value(json_object_get(pr, "bytes_total")) == MODEL_BYTES);
    CHECK(json_real_value(json_object_get(pr, "fraction")) == 1.0);
    json_t *pl = json_object_get(o, "preload");
    CHECK(json_is_true(json_object_get(pl, "verified")));
    CHECK(json_string_length(json_object_get(pl, "io")) > 0);
    json_t *allocs = json_object_get(o, "allocations");
    CHECK(json_array_size(allocs) == 1);
    json_t *a0 = json_array_get(allocs, 0);
    char sum[32];
    uint64_t tsum = ipc_tsum_final(ipc_tsum_add(0, data, MODEL_BYTES, 0), MODEL_BYTES);
    snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)tsum);
    CHECK_STR(json_string_value(json_object_get(a0, "file")), "ma.safetensors");
    CHECK(json_integer_value(json_object_get(a0, "byte_size")) == MODEL_BYTES);
    CHECK(json_integer_value(json_object_get(a0, "alloc_size")) >= MODEL_BYTES);
    CHECK_STR(json_string_value(json_object_get(a0, "checksum")), sum);
    CHECK_STR(json_string_value(json_array_get(json_object_get(a0, "handle_types"), 0)), "memfd");
    CHECK(json_object_get(a0, "raw_handle") == NULL); /* legacy handles are CUDA's */
    json_t *ts = json_object_get(o, "tensors");
    CHECK(json_array_size(ts) == 3);
    json_t *y = json_array_get(ts, 1);
    CHECK_STR(json_string_value(json_object_get(y, "name")), "y");
    CHECK_STR(json_string_value(json_object_get(y, "dtype")), "F32");
    CHECK(json_integer_value(json_array_get(json_object_get(y, "shape"), 0)) == 3);
    CHECK(json_integer_value(json_object_get(y, "alloc")) == 0);
    CHECK(json_integer_value(json_object_get(y, "offset")) == 1000);
    CHECK(json_integer_value(json_object_get(y, "nbytes")) == 1200);
    CHECK(json_integer_value(json_object_get(json_array_get(ts, 2), "nbytes")) == 0);
    json_decref(o);

    o = gpu_doc_summary(f.gm, "ma");
    CHECK_STR(json_string_value(json_object_get(o, "state")), "ready");
    CHECK_STR(json_string_value(json_object_get(o, "device")), "host");
    json_decref(o);
    o = gpu_doc_summary(f.gm, "nope");
    CHECK_STR(json_string_value(json_object_get(o, "state")), "none");
    CHECK(json_object_size(o) == 1);
    json_decref(o);
    o = gpu_doc_status_json(f.gm, f.sock);
    CHECK_STR(json_string_value(json_object_get(o, "ipc_socket")), f.sock);
    CHECK_STR(json_string_value(json_array_get(json_object_get(o, "backends"), 0)), "host");
    CHECK(json_array_size(json_object_get(o, "models")) == 1);
    json_decref(o);
    fx_free(&f);
    free(data);
}

/* POST answers: 202 then 200 for the same device, and the refusals. */
TEST(preload_requests)
{
    struct fx f;
    fx_init(&f);
    unsigned char *data = write_model(&f, "ma", 2);
    write_invalid(&f, "bad");
    fx_start(&f, NULL);
    CHECK(gpu_manager_ready(f.gm)); /* no start-up preloads */
    int st;
    json_t *d = post(f.gm, "ma", "{\"device\":\"host\"}", &st);
    CHECK(st == 202);
    CHECK_STR(json_string_value(json_object_get(d, "state")), "loading");
    json_int_t gen = json_integer_value(json_object_get(d, "generation"));
    json_decref(d);
    d = post(f.gm, "ma", "{\"device\":\"host\"}", &st);
    CHECK(st == 200);
    CHECK(json_integer_value(json_object_get(d, "generation")) == gen);
    json_decref(d);
    wait_idle(f.gm);
    CHECK_STR(state_of(f.gm, "ma"), "ready");
    d = post(f.gm, "ma", "{\"device\":\"host\"}", &st);
    CHECK(st == 200 && int_of(f.gm, "ma", "generation") == gen);
    json_decref(d);

    CHECK(code_is(post(f.gm, "ma", "", &st), "bad_request") && st == 400);
    CHECK(code_is(post(f.gm, "ma", "[\"host\"]", &st), "bad_request") && st == 400);
    CHECK(code_is(post(f.gm, "ma", "{\"device\":7}", &st), "bad_request") && st == 400);
    CHECK(code_is(post(f.gm, "ma", "{\"device\":\"tpu:0\"}", &st), "bad_device") && st == 400);
    CHECK(code_is(post(f.gm, "nope", "{\"device\":\"host\"}", &st), "not_found") && st == 404);
    CHECK(code_is(post(f.gm, "bad", "{\"device\":\"host\"}", &st), "model_invalid") && st == 409);
    if (!cuda_available(f.gm))
        CHECK(code_is(post(f.gm, "ma", "{\"device\":\"cuda:0\"}", &st), "gpu_unavailable") &&
              st == 503);
    else
        CHECK(code_is(post(f.gm, "ma", "{\"device\":\"cuda:0\"}", &st), "loaded_elsewhere") &&
              st == 409);
    CHECK(int_of(f.gm, "ma", "generation") == gen); /* refusals change nothing */
    fx_free(&f);
    free(data);
}

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

/* Leases opened directly: one fd per shard, in fd_index order, that maps
 * the file bytes; the refusals; lease counts in the documents and metrics. */
TEST(leases_hand_out_the_shards)
{
    struct fx f;
    unsigned char *da, *db;
    fx_init(&f);
    write_sharded(&f, &da, &db);
    static const char *const preloads[] = {"sh@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    CHECK_STR(state_of(f.gm, "sh"), "ready");

    int fds[4];
    size_t n = 99;
    json_t *ans;
    struct gpu_lease *l1 = open_lease(f.gm, "sh", NULL, &ans, fds, 4, &n);
    CHECK(l1 != NULL && n == 2);
    CHECK(json_is_true(json_object_get(ans, "ok")));
    CHECK_STR(json_string_value(json_object_get(ans, "model")), "sh");
    json_int_t gen = json_integer_value(json_object_get(ans, "generation"));
    CHECK(gen == int_of(f.gm, "sh", "generation"));
    json_t *allocs = json_object_get(ans, "allocations"), *al;
    size_t i;
    CHECK(json_array_size(allocs) == 2);
    json_array_foreach(allocs, i, al) {
        CHECK(json_integer_value(json_object_get(al, "fd_index")) == (json_int_t)i);
        CHECK_STR(json_string_value(json_object_get(al, "handle_type")), "memfd");
    }
    al = json_array_get(allocs, 1);
    CHECK_STR(json_string_value(json_object_get(al, "file")), "b.safetensors");
    json_t *tb = json_array_get(json_object_get(ans, "tensors"), 1);
    CHECK_STR(json_string_value(json_object_get(tb, "name")), "b");
    CHECK(json_integer_value(json_object_get(tb, "alloc")) == 1);
    json_decref(ans);
    if (l1 && n == 2) {
        CHECK(maps_to(fds[0], da, 5000) && maps_to(fds[1], db, 64));
        CHECK((fcntl(fds[0], F_GET_SEALS) & F_SEAL_WRITE) != 0);
    }

    struct gpu_lease *l2 = open_lease(f.gm, "sh", "host", &ans, fds, 4, &n);
    CHECK(l2 != NULL);
    json_decref(ans);
    CHECK(int_of(f.gm, "sh", "leases") == 2);
    CHECK(gpu_metric(f.gm, "tensord_gpu_leases_active") == 2);
    CHECK(gpu_metric(f.gm, "tensord_gpu_resident_bytes") >= 5000 + 64);

    /* refusals take no lease */
    CHECK(open_lease(f.gm, "sh", NULL, &ans, fds, 1, &n) == NULL && n == 0);
    CHECK(code_is(ans, "too_many_shards"));
    CHECK(open_lease(f.gm, "nope", NULL, &ans, fds, 4, &n) == NULL);
    CHECK(code_is(ans, "not_loaded"));
    CHECK(open_lease(f.gm, "sh", "tpu", &ans, fds, 4, &n) == NULL);
    CHECK(code_is(ans, "bad_device"));
    CHECK(open_lease(f.gm, "sh", "cuda:0", &ans, fds, 4, &n) == NULL);
    CHECK(code_is(ans, cuda_available(f.gm) ? "wrong_device" : "gpu_unavailable"));
    ans = gpu_doc_answer_error("forbidden", "uid %d", 7);
    CHECK(json_is_false(json_object_get(ans, "ok")));
    CHECK_STR(json_string_value(json_object_get(json_object_get(ans, "error"), "message")), "uid 7");
    CHECK(code_is(ans, "forbidden"));
    CHECK(int_of(f.gm, "sh", "leases") == 2);

    gpu_lease_release(f.gm, l1);
    gpu_lease_release(f.gm, l2);
    gpu_lease_release(f.gm, NULL);
    CHECK(int_of(f.gm, "sh", "leases") == 0);
    CHECK(gpu_metric(f.gm, "tensord_gpu_leases_active") == 0);
    CHECK_STR(state_of(f.gm, "sh"), "ready"); /* leases ending do not unload */
    ans = gpu_doc_list_json(f.gm);
    CHECK(json_array_size(json_object_get(ans, "models")) == 1);
    json_decref(ans);
    fx_free(&f);
    free(da);
    free(db);
}

/* Evicting a leased model: draining, no new opens; the last lease's end
 * releases the daemon's memory while a worker's own descriptor and mapping
 * stay valid. Evicting an unleased model releases it at once. */
TEST(evict_while_leased_drains)
{
    struct fx f;
    fx_init(&f);
    unsigned char *da = write_model(&f, "ma", 5), *db = write_model(&f, "mb", 6);
    static const char *const preloads[] = {"ma@host", "mb@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    int fds[2], st;
    size_t n;
    json_t *ans;
    struct gpu_lease *l = open_lease(f.gm, "ma", NULL, &ans, fds, 2, &n);
    CHECK(l != NULL && n == 1);
    json_decref(ans);
    json_int_t gen = int_of(f.gm, "ma", "generation");
    int worker_fd = l ? dup(fds[0]) : -1; /* what SCM_RIGHTS gives a worker */
    void *map = mmap(NULL, MODEL_BYTES, PROT_READ, MAP_SHARED, worker_fd, 0);
    CHECK(map != MAP_FAILED);
    CHECK(fds_on_file(worker_fd) == 2); /* the daemon's and the worker's */

    json_t *d = gpu_doc_evict(f.gm, "ma", &st);
    CHECK(st == 202);
    CHECK_STR(json_string_value(json_object_get(d, "state")), "draining");
    CHECK(json_integer_value(json_object_get(d, "leases")) == 1);
    CHECK(json_integer_value(json_object_get(d, "generation")) == gen);
    json_decref(d);
    CHECK_STR(state_of(f.gm, "ma"), "draining");
    CHECK(int_of(f.gm, "ma", "leases") == 1);
    d = gpu_doc_summary(f.gm, "ma");
    CHECK_STR(json_string_value(json_object_get(d, "state")), "draining");
    json_decref(d);
    CHECK(status_rows(f.gm, "ma") == 1);
    d = gpu_doc_list_json(f.gm); /* lists what can be opened: mb only */
    CHECK(json_array_size(json_object_get(d, "models")) == 1);
    json_decref(d);
    CHECK(open_lease(f.gm, "ma", NULL, &ans, fds, 2, &n) == NULL);
    CHECK(code_is(ans, "not_loaded"));
    CHECK(code_is(gpu_doc_evict(f.gm, "ma", &st), "not_loaded") && st == 404);

    gpu_lease_release(f.gm, l);
    CHECK_STR(state_of(f.gm, "ma"), "none");
    CHECK(status_rows(f.gm, "ma") == 0);
    CHECK(fds_on_file(worker_fd) == 1); /* the daemon let go */
    CHECK(map != MAP_FAILED && memcmp(map, da, MODEL_BYTES) == 0);
    if (map != MAP_FAILED)
        munmap(map, MODEL_BYTES);
    if (worker_fd >= 0)
        close(worker_fd);

    d = gpu_doc_evict(f.gm, "mb", &st);
    CHECK(st == 200);
    CHECK_STR(json_string_value(json_object_get(d, "state")), "none");
    json_decref(d);
    CHECK_STR(state_of(f.gm, "mb"), "none");
    CHECK(gpu_metric(f.gm, "tensord_gpu_resident_bytes") == 0);
    d = post(f.gm, "ma", "{\"device\":\"host\"}", &st); /* and it can come back */
    CHECK(st == 202);
    json_decref(d);
    wait_idle(f.gm);
    CHECK_STR(state_of(f.gm, "ma"), "ready");
    CHECK(int_of(f.gm, "ma", "generation") > gen);
    fx_free(&f);
    free(da);
    free(db);
}

/* Reloads: a model whose file changed is loaded again under a new
 * generation while the old one drains for its lease; an unchanged one keeps
 * its instance; a removed or invalid one is evicted. */
TEST(reload_replaces_changed_models)
{
    struct fx f;
    fx_init(&f);
    unsigned char *da = write_model(&f, "ma", 7), *db = write_model(&f, "mb", 8);
    static const char *const preloads[] = {"ma@host", "mb@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    json_int_t gen_a = int_of(f.gm, "ma", "generation"), gen_b = int_of(f.gm, "mb", "generation");
    int fds[2];
    size_t n;
    json_t *ans;
    struct gpu_lease *old = open_lease(f.gm, "ma", NULL, &ans, fds, 2, &n);
    CHECK(old != NULL);
    json_decref(ans);

    fx_reload(&f); /* nothing changed */
    wait_idle(f.gm);
    CHECK(int_of(f.gm, "ma", "generation") == gen_a && int_of(f.gm, "mb", "generation") == gen_b);
    CHECK(int_of(f.gm, "ma", "leases") == 1);

    free(da);
    da = write_model(&f, "ma", 9);
    fx_reload(&f);
    wait_idle(f.gm);
    CHECK_STR(state_of(f.gm, "ma"), "ready");
    CHECK(int_of(f.gm, "ma", "generation") > gen_a);
    CHECK(int_of(f.gm, "ma", "leases") == 0); /* the lease stays on the old generation */
    CHECK(int_of(f.gm, "mb", "generation") == gen_b);
    CHECK(status_rows(f.gm, "ma") == 2);      /* ready + draining */
    if (old)
        CHECK(!maps_to(fds[0], da, MODEL_BYTES)); /* still the old bytes */
    struct gpu_lease *cur = open_lease(f.gm, "ma", NULL, &ans, fds, 2, &n);
    CHECK(cur != NULL && json_integer_value(json_object_get(ans, "generation")) > gen_a);
    json_decref(ans);
    if (cur)
        CHECK(maps_to(fds[0], da, MODEL_BYTES));
    gpu_lease_release(f.gm, old);
    CHECK(status_rows(f.gm, "ma") == 1);

    remove_model(&f, "mb");
    write_invalid(&f, "ma");
    fx_reload(&f);
    wait_idle(f.gm);
    CHECK_STR(state_of(f.gm, "mb"), "none");
    CHECK_STR(state_of(f.gm, "ma"), "draining"); /* cur still holds it */
    gpu_lease_release(f.gm, cur);
    CHECK_STR(state_of(f.gm, "ma"), "none");
    CHECK(gpu_manager_ready(f.gm));
    fx_free(&f);
    free(da);
    free(db);
}

/* A load that fails (the file shrank after the scan) reports why, refuses
 * opens, and a new POST retries under a new generation. */
TEST(failed_preload_then_retry)
{
    struct fx f;
    fx_init(&f);
    unsigned char *data = write_model(&f, "mt", 10);
    char *path = xasprintf("%s/mt.safetensors", f.root);
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    fx_start(&f, NULL);
    CHECK(truncate(path, sb.st_size - 100) == 0); /* same inode, the snapshot's fd sees it */
    int st, fds[1];
    size_t n;
    json_t *d = post(f.gm, "mt", "{\"device\":\"host\"}", &st);
    CHECK(st == 202);
    json_decref(d);
    wait_idle(f.gm);
    CHECK_STR(state_of(f.gm, "mt"), "failed");
    json_int_t gen = int_of(f.gm, "mt", "generation");
    d = gpu_doc_model_json(f.gm, "mt", &st);
    CHECK_CONTAINS(json_string_value(json_object_get(d, "reason")), "mt.safetensors");
    json_t *a0 = json_array_get(json_object_get(d, "allocations"), 0);
    CHECK(a0 && json_object_get(a0, "checksum") == NULL); /* nothing published */
    json_decref(d);
    CHECK(gpu_metric(f.gm, "tensord_gpu_resident_bytes") == 0);
    CHECK(open_lease(f.gm, "mt", NULL, &d, fds, 1, &n) == NULL);
    CHECK(code_is(d, "failed"));

    /* the bytes come back in place: a retry succeeds */
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, data + MODEL_BYTES - 100, 100, sb.st_size - 100) == 100);
    if (fd >= 0)
        close(fd);
    d = post(f.gm, "mt", "{\"device\":\"host\"}", &st);
    CHECK(st == 202 && json_integer_value(json_object_get(d, "generation")) > gen);
    json_decref(d);
    wait_idle(f.gm);
    CHECK_STR(state_of(f.gm, "mt"), "ready");
    CHECK(status_rows(f.gm, "mt") == 1); /* the failed instance went */
    fx_free(&f);
    free(path);
    free(data);
}

/* The whole path a worker takes: the C client over the real socket. */
TEST(lease_through_the_client)
{
    struct fx f;
    char err[512];
    int st;
    fx_init(&f);
    unsigned char *da = write_model(&f, "ma", 1), *db = write_model(&f, "mb", 2);
    static const char *const preloads[] = {"ma@host", NULL};
    fx_start(&f, preloads);
    struct gpu_manager *gm = f.gm;
    CHECK(gpu_manager_wait_idle(gm, 10000) == 0);
    CHECK(gpu_manager_ready(gm));
    CHECK_STR(state_of(gm, "ma"), "ready");
    CHECK_STR(state_of(gm, "mb"), "none");

    /* HTTP-level answers */
    CHECK(code_is(post(gm, "mb", "{}", &st), "bad_request") && st == 400);
    CHECK(code_is(post(gm, "mb", "{\"device\":\"gpu0\"}", &st), "bad_device") && st == 400);
    json_t *d = post(gm, "mb", "{\"device\":\"cuda:0\"}", &st);
    CHECK(st == 503 || st == 202);
    json_decref(d);
    CHECK(code_is(post(gm, "nope", "{\"device\":\"host\"}", &st), "not_found") && st == 404);
    CHECK(code_is(gpu_doc_evict(gm, "mb", &st), "not_loaded") && st == 404);
    d = post(gm, "ma", "{\"device\":\"host\"}", &st);
    CHECK(st == 200);
    json_decref(d);
    json_t *s = gpu_doc_status_json(gm, NULL);
    CHECK(json_is_boolean(json_object_get(s, "available")));
    CHECK(json_array_size(json_object_get(s, "backends")) >= 1);
    json_decref(s);

    /* a lease through the C client over the socket */
    struct tensord_client *c = tensord_connect(f.sock, err, sizeof(err));
    CHECK(c != NULL);
    struct tensord_model *m = tensord_open(c, "ma", "host", err, sizeof(err));
    CHECK(m != NULL);
    if (m) {
        CHECK_EQ_U64(tensord_model_tensor_count(m), 3);
        const struct tensord_tensor *x = tensord_model_find(m, "x"), *y = tensord_model_find(m, "y");
        CHECK(x && memcmp(x->data, da, 1000) == 0);
        CHECK(y && y->ndim == 2 && y->shape[1] == 100 && memcmp(y->data, da + 1000, 1200) == 0);
        CHECK(tensord_model_verify(m, err, sizeof(err)) == 0);
        CHECK(tensord_model_find(m, "w") == NULL);
    }
    CHECK(tensord_open(c, "ma", "cuda:0", err, sizeof(err)) == NULL);
    CHECK(tensord_open(c, "mb", NULL, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "not_loaded");
    CHECK(int_of(gm, "ma", "leases") == 1);
    json_int_t gen1 = int_of(gm, "ma", "generation");

    /* a reload with ma rewritten: new generation, the lease keeps the old one */
    free(da);
    da = write_model(&f, "ma", 7);
    fx_reload(&f);
    CHECK(gpu_manager_wait_idle(gm, 10000) == 0);
    CHECK_STR(state_of(gm, "ma"), "ready");
    CHECK(int_of(gm, "ma", "generation") > gen1);
    if (m) {
        const struct tensord_tensor *x = tensord_model_find(m, "x");
        CHECK(tensord_model_generation(m) == (uint64_t)gen1);
        CHECK(memcmp(x->data, da, 1000) != 0); /* still the old bytes */
        CHECK(tensord_model_verify(m, err, sizeof(err)) == 0);
    }
    struct tensord_client *c2 = tensord_connect(f.sock, err, sizeof(err));
    struct tensord_model *m2 = c2 ? tensord_open(c2, "ma", NULL, err, sizeof(err)) : NULL;
    CHECK(m2 && tensord_model_generation(m2) > (uint64_t)gen1);
    CHECK(m2 && memcmp(tensord_model_find(m2, "x")->data, da, 1000) == 0);

    /* evict while leased: draining until the lease ends */
    d = gpu_doc_evict(gm, "ma", &st);
    CHECK(st == 202);
    CHECK_STR(json_string_value(json_object_get(d, "state")), "draining");
    json_decref(d);
    CHECK_STR(state_of(gm, "ma"), "draining");
    CHECK(m2 && memcmp(tensord_model_find(m2, "x")->data, da, 1000) == 0);
    tensord_model_close(m2);
    tensord_close(c2);
    tensord_model_close(m);
    tensord_close(c);
    for (int i = 0; i < 500 && strcmp(state_of(gm, "ma"), "none") != 0; i++)
        usleep(10000);
    CHECK_STR(state_of(gm, "ma"), "none");

    /* a model evicted with no lease goes at once */
    d = post(gm, "mb", "{\"device\":\"host\"}", &st);
    CHECK(st == 202);
    json_decref(d);
    CHECK(gpu_manager_wait_idle(gm, 10000) == 0);
    d = gpu_doc_evict(gm, "mb", &st);
    CHECK(st == 200);
    json_decref(d);
    CHECK_STR(state_of(gm, "mb"), "none");

    gpu_manager_update_metrics(gm);
    fx_free(&f);
    free(da);
    free(db);
}

/* A preload that starts between a reload's announcement (on_reload) and the
 * holder's swap loads the new files, not the snapshot the holder still has. */
TEST(preload_during_reload_loads_the_new_files)
{
    struct fx f;
    fx_init(&f);
    unsigned char *old = write_model(&f, "ma", 11);
    fx_start(&f, NULL);
    unsigned char *now = write_model(&f, "ma", 12);
    struct registry *next = fx_scan(&f);
    gpu_manager_on_reload(f.gm, next); /* announced, not yet swapped in */
    int st, fds[1];
    size_t n;
    json_t *d = post(f.gm, "ma", "{\"device\":\"host\"}", &st);
    CHECK(st == 202);
    json_decref(d);
    wait_idle(f.gm);
    registry_holder_swap(&f.holder, next); /* no later reload will come to fix it */
    json_t *ans;
    struct gpu_lease *l = open_lease(f.gm, "ma", NULL, &ans, fds, 1, &n);
    CHECK(l != NULL);
    json_decref(ans);
    if (l) {
        CHECK(maps_to(fds[0], now, MODEL_BYTES));
        CHECK(!maps_to(fds[0], old, MODEL_BYTES));
        gpu_lease_release(f.gm, l);
    }
    fx_free(&f);
    free(old);
    free(now);
}

/* Legacy CUDA IPC handles are never in the HTTP document, which any HTTP
 * client may read; the lease socket's open answer carries them (whoever
 * imports one holds a lease). The host backend has none, so the test gives
 * a published allocation one. */
TEST(legacy_handle_only_in_the_open_answer)
{
    struct fx f;
    fx_init(&f);
    unsigned char *data = write_model(&f, "ma", 13);
    static const char *const preloads[] = {"ma@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    pthread_mutex_lock(&f.gm->lock);
    struct gm_instance *m = f.gm->models;
    CHECK(m && m->published);
    if (m) {
        m->shards[0].a.legacy_size = 2u << 20;
        memset(m->shards[0].a.legacy_handle, 0xab, GPU_LEGACY_HANDLE_BYTES);
    }
    pthread_mutex_unlock(&f.gm->lock);
    int st, fds[1];
    size_t n;
    char *text = gpu_doc_model_text(f.gm, "ma", &st);
    CHECK(text && !strstr(text, "raw_handle") && strstr(text, "cuda_ipc"));
    free(text);
    json_t *ans;
    struct gpu_lease *l = open_lease(f.gm, "ma", NULL, &ans, fds, 1, &n);
    json_t *a0 = json_array_get(json_object_get(ans, "allocations"), 0);
    CHECK(json_object_get(json_object_get(a0, "raw_handle"), "b64") != NULL);
    CHECK(json_integer_value(json_object_get(a0, "legacy_byte_size")) == 2 << 20);
    json_decref(ans);
    gpu_lease_release(f.gm, l);
    pthread_mutex_lock(&f.gm->lock);
    if (m)
        m->shards[0].a.legacy_size = 0;
    pthread_mutex_unlock(&f.gm->lock);
    fx_free(&f);
    free(data);
}

struct poller {
    struct gpu_manager *gm;
    atomic_int stop;
    int renders;
};

static void *poll_gpu_doc(void *arg)
{
    struct poller *p = arg;
    while (!atomic_load(&p->stop)) {
        int st;
        free(gpu_doc_model_text(p->gm, "big", &st));
        p->renders++;
    }
    return NULL;
}

/* Clients polling GET /gpu of a model with many tensors never hold the
 * manager's lock while the document is built: what /healthz, /metrics and
 * /readyz take stays quick. */
TEST(documents_render_outside_the_lock)
{
    struct fx f;
    fx_init(&f);
    enum { N = 100000 };
    size_t cap = (size_t)N * 80 + 64, o = 0;
    char *json = xmalloc(cap);
    o += (size_t)snprintf(json + o, cap - o, "{");
    for (int i = 0; i < N; i++)
        o += (size_t)snprintf(json + o, cap - o,
                              "%s\"layer.%05d.w\":{\"dtype\":\"U8\",\"shape\":[1],"
                              "\"data_offsets\":[%d,%d]}", i ? "," : "", i, i, i + 1);
    snprintf(json + o, cap - o, "}");
    unsigned char *data = bytes_for(N, 3);
    char *path = xasprintf("%s/big.safetensors", f.root);
    FILE *fp = fopen(path, "wb");
    size_t h = strlen(json), padded = (h + 7) / 8 * 8;
    unsigned char pre[8];
    for (int i = 0; i < 8; i++)
        pre[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    fwrite(pre, 1, 8, fp);
    fwrite(json, 1, h, fp);
    for (size_t i = h; i < padded; i++)
        fputc(' ', fp);
    fwrite(data, 1, N, fp);
    fclose(fp);
    static const char *const preloads[] = {"big@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    CHECK_STR(state_of(f.gm, "big"), "ready");
    /* What one render costs the first time (nothing cached). */
    int st;
    uint64_t t0 = time_mono_ns();
    free(gpu_doc_model_text(f.gm, "big", &st));
    uint64_t first = time_mono_ns() - t0;
    struct poller p[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        p[i] = (struct poller){.gm = f.gm};
        CHECK(pthread_create(&th[i], NULL, poll_gpu_doc, &p[i]) == 0);
    }
    enum { SAMPLES = 200 };
    uint64_t lat[SAMPLES], stop_at = time_mono_ns() + 3000000000ULL;
    int got = 0;
    while (got < SAMPLES && time_mono_ns() < stop_at) {
        uint64_t a = time_mono_ns();
        CHECK(gpu_manager_ready(f.gm));
        lat[got++] = time_mono_ns() - a;
        usleep(2000);
    }
    CHECK(got == SAMPLES); /* a lock held while rendering starves the checks */
    for (int i = got; i < SAMPLES; i++)
        lat[i] = stop_at;
    /* The median: a scheduler's time slice on a busy machine may land in
     * any one sample, a lock held while rendering lands in most. */
    for (int i = 1; i < SAMPLES; i++)
        for (int j = i; j > 0 && lat[j] < lat[j - 1]; j--) {
            uint64_t t = lat[j];
            lat[j] = lat[j - 1];
            lat[j - 1] = t;
        }
    uint64_t median = lat[SAMPLES / 2];
    for (int i = 0; i < 3; i++) {
        atomic_store(&p[i].stop, 1);
        pthread_join(th[i], NULL);
        CHECK(p[i].renders > 0);
    }
    fprintf(stderr, "  first render %.1f ms; median readiness check while polling %.3f ms\n",
            (double)first / 1e6, (double)median / 1e6);
    CHECK(median < first / 10);
    fx_free(&f);
    free(path);
    free(data);
    free(json);
}

/* Lease protocol 2 through the C client: one lease per open, released when
 * the model closes while the connection stays; and with every allocation
 * of the client failing in turn, calls return errors (never abort) and no
 * lease stays held by nobody. */
TEST(client_leases_per_open_and_out_of_memory)
{
    struct fx f;
    char err[512];
    fx_init(&f);
    unsigned char *data = write_model(&f, "ma", 21);
    static const char *const preloads[] = {"ma@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    struct tensord_client *c = tensord_connect(f.sock, err, sizeof(err));
    CHECK(c != NULL);
    struct tensord_model *m1 = c ? tensord_open(c, "ma", NULL, err, sizeof(err)) : NULL;
    struct tensord_model *m2 = c ? tensord_open(c, "ma", NULL, err, sizeof(err)) : NULL;
    CHECK(m1 && m2);
    CHECK(int_of(f.gm, "ma", "leases") == 2);
    struct DLManagedTensor *dl = m1 ? tensord_tensor_dlpack(m1, 0) : NULL;
    CHECK(dl != NULL);
    tensord_model_close(m1);
    CHECK(int_of(f.gm, "ma", "leases") == 2); /* the DLPack tensor still holds it */
    if (dl)
        dl->deleter(dl);
    CHECK(int_of(f.gm, "ma", "leases") == 1); /* released; the connection stays */
    tensord_model_close(m2);
    CHECK(int_of(f.gm, "ma", "leases") == 0);
    CHECK(tensord_open(c, "nope", NULL, err, sizeof(err)) == NULL);
    CHECK(int_of(f.gm, "ma", "leases") == 0);

    /* Fail the n-th allocation, for every n until a whole round succeeds. */
    int done = 0;
    for (long k = 0; k < 5000 && !done; k++) {
        cmem_fail_after(k);
        struct tensord_client *c2 = tensord_connect(f.sock, err, sizeof(err));
        struct tensord_model *m = c2 ? tensord_open(c2, "ma", NULL, err, sizeof(err)) : NULL;
        struct DLManagedTensor *t = m ? tensord_tensor_dlpack(m, 1) : NULL;
        struct DLManagedTensorVersioned *v =
            m ? tensord_tensor_dlpack_versioned(m, 1, 0, err, sizeof(err)) : NULL;
        char *list = c2 ? tensord_list(c2, err, sizeof(err)) : NULL;
        done = c2 && m && t && v && list;
        cmem_fail_after(-1);
        if (m)
            CHECK(memcmp(tensord_model_find(m, "x")->data, data, 1000) == 0);
        if (t)
            t->deleter(t);
        if (v)
            v->deleter(v);
        free(list);
        tensord_model_close(m);
        tensord_close(c2);
        for (int i = 0; i < 200 && int_of(f.gm, "ma", "leases") != 0; i++)
            usleep(5000);
        if (int_of(f.gm, "ma", "leases") != 0) {
            fprintf(stderr, "  allocation %ld failing left a lease held\n", k);
            test_failed_flag = 1;
            break;
        }
    }
    CHECK(done);
    tensord_close(c);
    fx_free(&f);
    free(data);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    metrics_init();
    RUN(startup_preloads_and_the_get_document);
    RUN(preload_requests);
    RUN(leases_hand_out_the_shards);
    RUN(evict_while_leased_drains);
    RUN(reload_replaces_changed_models);
    RUN(failed_preload_then_retry);
    RUN(lease_through_the_client);
    RUN(preload_during_reload_loads_the_new_files);
    RUN(legacy_handle_only_in_the_open_answer);
    RUN(documents_render_outside_the_lock);
    RUN(client_leases_per_open_and_out_of_memory);
    char *cmd = xasprintf("rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    free(cmd);
    return TEST_SUMMARY();
}
