/* Tests for the host (memfd) backend, the staging-ring loader and the
 * manager: sealing, ring sizes and unaligned data through io_uring with and
 * without O_DIRECT (and the pread fallback), truncated files, cancel, verify;
 * then a manager on a scanned models root: preload, a lease through the C
 * client over the real socket, evict while leased, reload generations, and
 * the HTTP answers' status codes. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "gpu.h"
#include "gpu_load.h"
#include "gpu_manager.h"
#include "ipc_proto.h"
#include "registry.h"
#include "tensord_client.h"
#include "test.h"
#include "util.h"

static char tmpdir[] = "/tmp/tensord-gpu-unit-XXXXXX";

static unsigned char *pattern(size_t n, unsigned seed)
{
    unsigned char *p = xmalloc(n ? n : 1);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
    return p;
}

/* Writes head bytes of junk then data; returns the fd (read-only). */
static int data_file(const char *name, size_t head, const unsigned char *data, size_t n)
{
    char *path = xasprintf("%s/%s", tmpdir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    unsigned char *junk = pattern(head, 99);
    CHECK(fd >= 0);
    CHECK(write(fd, junk, head) == (ssize_t)head);
    CHECK(write(fd, data, n) == (ssize_t)n);
    close(fd);
    fd = open(path, O_RDONLY);
    free(junk);
    free(path);
    return fd;
}

static int direct_fd(const char *name)
{
    char *path = xasprintf("%s/%s", tmpdir, name);
    int fd = open(path, O_RDONLY | O_DIRECT);
    free(path);
    return fd;
}

TEST(host_alloc_seal_read_back)
{
    struct gpu_backend *b = gpu_host_new();
    struct gpu_alloc a = {.fd = -1};
    char err[256];
    CHECK(b->n_devices == 1 && strcmp(b->handle_type, "memfd") == 0);
    CHECK(b->ops->alloc(b, 0, 10000, 0, "t", &a, err, sizeof(err)) == 0);
    CHECK(a.alloc_size >= 10000 && a.alloc_size % 4096 == 0);
    struct gpu_stage *s = b->ops->stage_open(b, 0, 2, 8192, err, sizeof(err));
    unsigned char *src = pattern(10000, 1);
    memcpy(b->ops->stage_buf(s, 1), src, 8192);
    CHECK(b->ops->stage_copy(s, 1, &a, 0, b->ops->stage_buf(s, 1), 8192, err, sizeof(err)) == 0);
    CHECK(b->ops->stage_copy(s, 0, &a, 8192, src + 8192, 10000 - 8192, err, sizeof(err)) == 0);
    CHECK(b->ops->stage_copy(s, 0, &a, 9000, src, 2000, err, sizeof(err)) == -1); /* past size */
    CHECK(b->ops->stage_wait(s, 1, err, sizeof(err)) == 0);
    b->ops->stage_close(s);
    CHECK(b->ops->finish(b, &a, err, sizeof(err)) == 0);
    int seals = fcntl(a.fd, F_GET_SEALS);
    CHECK((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)) ==
          (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL));
    CHECK(mmap(NULL, a.alloc_size, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0) == MAP_FAILED);
    CHECK(ftruncate(a.fd, 0) < 0);
    void *ro = mmap(NULL, a.alloc_size, PROT_READ, MAP_SHARED, a.fd, 0);
    CHECK(ro != MAP_FAILED && memcmp(ro, src, 10000) == 0);
    unsigned char back[100];
    CHECK(b->ops->read_back(b, &a, 9900, back, 100, err, sizeof(err)) == 0);
    CHECK(memcmp(back, src + 9900, 100) == 0);
    munmap(ro, a.alloc_size);
    b->ops->free(b, &a);
    CHECK(a.fd == -1);
    b->ops->free(b, &a); /* twice is harmless */
    b->ops->destroy(b);
    free(src);
}

/* Loads n bytes at offset head of a file through a ring of nbuf x chunk and
 * checks the bytes, the checksum and verify. mode: 0 buffered, 1 O_DIRECT,
 * 2 pread fallback. */
static void load_case(size_t head, size_t n, unsigned nbuf, size_t chunk, int mode)
{
    struct gpu_backend *b = gpu_host_new();
    struct gpu_loader l;
    struct gpu_alloc a = {.fd = -1};
    char err[256] = "";
    atomic_int cancel = 0;
    _Atomic uint64_t progress = 0;
    unsigned char *src = pattern(n, (unsigned)(head + n));
    int fd = data_file("load.bin", head, src, n), dfd = mode == 1 ? direct_fd("load.bin") : -1;
    uint64_t sum = 0;
    CHECK(b->ops->alloc(b, 0, n, 0, "load", &a, err, sizeof(err)) == 0);
    CHECK(gpu_loader_init(&l, b, 0, nbuf, chunk, &cancel, &progress, err, sizeof(err)) == 0);
    if (mode == 2) { /* as if io_uring were unavailable */
        if (l.have_ring)
            io_uring_queue_exit(&l.ring);
        l.have_ring = 0;
    }
    int rc = gpu_loader_shard(&l, fd, dfd, head, n, &a, &sum, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "  head %zu n %zu nbuf %u chunk %zu mode %d: %s\n", head, n, nbuf, chunk,
                mode, err);
    CHECK(rc == 0);
    CHECK_EQ_U64(atomic_load(&progress), n);
    CHECK_EQ_U64(sum, ipc_tsum_final(ipc_tsum_add(0, src, n, 0), n));
    CHECK(b->ops->finish(b, &a, err, sizeof(err)) == 0);
    CHECK(gpu_loader_verify(&l, fd, head, n, &a, err, sizeof(err)) == 0);
    /* verify against other bytes names the first difference */
    if (n > 1 && head > 0) {
        CHECK(gpu_loader_verify(&l, fd, head - 1, n, &a, err, sizeof(err)) == -1);
        CHECK_CONTAINS(err, "differs");
    }
    if (mode == 1 && dfd >= 0)
        CHECK(strcmp(l.io_mode, "io_uring+O_DIRECT") == 0 || strcmp(l.io_mode, "io_uring") == 0);
    if (mode == 2)
        CHECK_STR(l.io_mode, "pread");
    unsigned char *got = xmalloc(n ? n : 1);
    CHECK(b->ops->read_back(b, &a, 0, got, n, err, sizeof(err)) == 0);
    CHECK(memcmp(got, src, n) == 0);
    gpu_loader_close(&l);
    b->ops->free(b, &a);
    b->ops->destroy(b);
    close(fd);
    if (dfd >= 0)
        close(dfd);
    free(got);
    free(src);
}

TEST(loader_ring_shapes)
{
    static const size_t heads[] = {0, 8, 4096, 5000};
    static const size_t sizes[] = {0, 1, 4095, 4096, 4097, 200000};
    for (int mode = 0; mode < 3; mode++)
        for (size_t h = 0; h < ARRAY_LEN(heads); h++)
            for (size_t s = 0; s < ARRAY_LEN(sizes); s++) {
                load_case(heads[h], sizes[s], 1, 4096, mode);
                load_case(heads[h], sizes[s], 3, 8192, mode);
            }
    load_case(123, 3 << 20, 4, 64 << 10, 1); /* many laps of the ring */
}

TEST(loader_truncated_file_and_cancel)
{
    struct gpu_backend *b = gpu_host_new();
    struct gpu_loader l;
    struct gpu_alloc a = {.fd = -1};
    char err[256] = "";
    atomic_int cancel = 0;
    uint64_t sum;
    unsigned char *src = pattern(50000, 5);
    int fd = data_file("short.bin", 100, src, 50000), dfd = direct_fd("short.bin");
    CHECK(b->ops->alloc(b, 0, 60000, 0, "short", &a, err, sizeof(err)) == 0);
    CHECK(gpu_loader_init(&l, b, 0, 2, 4096, &cancel, NULL, err, sizeof(err)) == 0);
    CHECK(gpu_loader_shard(&l, fd, dfd, 100, 60000, &a, &sum, err, sizeof(err)) == -1);
    CHECK_CONTAINS(err, "shorter than its header says");
    atomic_store(&cancel, 1);
    CHECK(gpu_loader_shard(&l, fd, dfd, 100, 50000, &a, &sum, err, sizeof(err)) == -ECANCELED);
    gpu_loader_close(&l);
    b->ops->free(b, &a);
    b->ops->destroy(b);
    close(fd);
    if (dfd >= 0)
        close(dfd);
    free(src);
}

TEST(device_names)
{
    enum gpu_kind k;
    int idx;
    const char *uuid;
    CHECK(gpu_parse_device("host", &k, &idx, &uuid) == 0 && k == GPU_KIND_HOST);
    CHECK(gpu_parse_device("cuda", &k, &idx, &uuid) == 0 && k == GPU_KIND_CUDA && idx == 0);
    CHECK(gpu_parse_device("cuda:3", &k, &idx, &uuid) == 0 && idx == 3 && !uuid);
    CHECK(gpu_parse_device("GPU-0a1b2c3d-aaaa-bbbb-cccc-0123456789ab", &k, &idx, &uuid) == 0 &&
          uuid && idx == -1);
    CHECK(gpu_parse_device("", &k, &idx, &uuid) < 0);
    CHECK(gpu_parse_device("cuda:", &k, &idx, &uuid) < 0);
    CHECK(gpu_parse_device("cuda:-1", &k, &idx, &uuid) < 0);
    CHECK(gpu_parse_device("cuda:99999", &k, &idx, &uuid) < 0);
    CHECK(gpu_parse_device("cuda:1x", &k, &idx, &uuid) < 0);
    CHECK(gpu_parse_device("GPU-zz", &k, &idx, &uuid) < 0);
    CHECK(gpu_parse_device("tpu", &k, &idx, &uuid) < 0);
    struct gpu_backend *b = gpu_host_new();
    CHECK(gpu_find_device(b, 0, NULL) == 0 && gpu_find_device(b, 1, NULL) == -1);
    b->ops->destroy(b);
    char reason[256] = "";
    struct gpu_backend *c = gpu_cuda_probe(reason, sizeof(reason));
    if (!c)
        CHECK(reason[0] != '\0'); /* no GPU here: there is a reason */
    else
        c->ops->destroy(c);
}

/* ---- the manager on a real models root ---------------------------------- */

/* A single-file model with three U8/F32 tensors; returns the data bytes. */
static unsigned char *write_model(const char *name, unsigned seed, size_t *data_len)
{
    const size_t n0 = 1000, n1 = 4 * 300, n2 = 0;
    char hdr[512];
    int h = snprintf(hdr, sizeof(hdr),
                     "{\"x\":{\"dtype\":\"U8\",\"shape\":[%zu],\"data_offsets\":[0,%zu]},"
                     "\"y\":{\"dtype\":\"F32\",\"shape\":[3,100],\"data_offsets\":[%zu,%zu]},"
                     "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[%zu,%zu]}}",
                     n0, n0, n0, n0 + n1, n0 + n1, n0 + n1 + n2);
    while (h % 8)
        hdr[h++] = ' ';
    *data_len = n0 + n1 + n2;
    unsigned char *data = pattern(*data_len, seed);
    char *path = xasprintf("%s/models/%s.safetensors", tmpdir, name);
    char *tmp = xasprintf("%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    uint64_t hl = (uint64_t)h;
    unsigned char pre[8];
    for (int i = 0; i < 8; i++)
        pre[i] = (unsigned char)(hl >> (8 * i));
    fwrite(pre, 1, 8, f);
    fwrite(hdr, 1, (size_t)h, f);
    fwrite(data, 1, *data_len, f);
    fclose(f);
    rename(tmp, path); /* a new inode, as a real update makes */
    free(tmp);
    free(path);
    return data;
}

static json_t *post(struct gpu_manager *gm, const char *model, const char *body, int *status)
{
    return gpu_manager_preload(gm, model, body, strlen(body), status);
}

static const char *state_of(struct gpu_manager *gm, const char *model)
{
    static char buf[32];
    int st;
    json_t *o = gpu_manager_model_json(gm, model, &st);
    snprintf(buf, sizeof(buf), "%s", json_string_value(json_object_get(o, "state")));
    json_decref(o);
    return buf;
}

static json_int_t int_of(struct gpu_manager *gm, const char *model, const char *key)
{
    int st;
    json_t *o = gpu_manager_model_json(gm, model, &st);
    json_int_t v = json_integer_value(json_object_get(o, key));
    json_decref(o);
    return v;
}

static int code_is(json_t *doc, const char *code)
{
    const char *c = json_string_value(json_object_get(json_object_get(doc, "error"), "code"));
    int ok = c && strcmp(c, code) == 0;
    if (!ok)
        fprintf(stderr, "  error code %s, want %s\n", c ? c : "(none)", code);
    json_decref(doc);
    return ok;
}

TEST(manager_preload_lease_evict_reload)
{
    char *root = xasprintf("%s/models", tmpdir), *sock = xasprintf("%s/t.sock", tmpdir);
    char err[512];
    int st;
    size_t n_a, n_b;
    mkdir(root, 0755);
    unsigned char *da = write_model("ma", 1, &n_a), *db = write_model("mb", 2, &n_b);
    struct st_error serr;
    struct registry *reg = registry_scan(root, 1, NULL, &serr);
    CHECK(reg != NULL);
    struct registry_holder holder;
    registry_holder_init(&holder, reg);
    struct config cfg;
    config_defaults(&cfg);
    free(cfg.ipc_socket);
    cfg.ipc_socket = xstrdup(sock);
    cfg.verify = 1;
    cfg.n_preload = 1;
    cfg.preload[0] = xstrdup("ma@host");
    struct gpu_manager *gm = gpu_manager_new(&cfg, &holder);
    CHECK(!gpu_manager_ready(gm));
    CHECK(gpu_manager_start(gm, err, sizeof(err)) == 0);
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
    CHECK(code_is(gpu_manager_evict(gm, "mb", &st), "not_loaded") && st == 404);
    d = post(gm, "ma", "{\"device\":\"host\"}", &st);
    CHECK(st == 200);
    json_decref(d);
    json_t *s = gpu_manager_status_json(gm);
    CHECK(json_is_boolean(json_object_get(s, "available")));
    CHECK(json_array_size(json_object_get(s, "backends")) >= 1);
    json_decref(s);

    /* a lease through the C client over the socket */
    struct tensord_client *c = tensord_connect(sock, err, sizeof(err));
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
    da = write_model("ma", 7, &n_a);
    struct registry *reg2 = registry_scan(root, 2, NULL, &serr);
    gpu_manager_on_reload(gm, reg2);
    registry_holder_swap(&holder, reg2);
    CHECK(gpu_manager_wait_idle(gm, 10000) == 0);
    CHECK_STR(state_of(gm, "ma"), "ready");
    CHECK(int_of(gm, "ma", "generation") > gen1);
    if (m) {
        const struct tensord_tensor *x = tensord_model_find(m, "x");
        CHECK(tensord_model_generation(m) == (uint64_t)gen1);
        CHECK(memcmp(x->data, da, 1000) != 0); /* still the old bytes */
        CHECK(tensord_model_verify(m, err, sizeof(err)) == 0);
    }
    struct tensord_client *c2 = tensord_connect(sock, err, sizeof(err));
    struct tensord_model *m2 = c2 ? tensord_open(c2, "ma", NULL, err, sizeof(err)) : NULL;
    CHECK(m2 && tensord_model_generation(m2) > (uint64_t)gen1);
    CHECK(m2 && memcmp(tensord_model_find(m2, "x")->data, da, 1000) == 0);

    /* evict while leased: draining until the lease ends */
    d = gpu_manager_evict(gm, "ma", &st);
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
    d = gpu_manager_evict(gm, "mb", &st);
    CHECK(st == 200);
    json_decref(d);
    CHECK_STR(state_of(gm, "mb"), "none");

    gpu_manager_update_metrics(gm);
    gpu_manager_free(gm);
    CHECK(access(sock, F_OK) != 0); /* the socket file is removed */
    registry_holder_destroy(&holder);
    config_free(&cfg);
    free(da);
    free(db);
    free(root);
    free(sock);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(host_alloc_seal_read_back);
    RUN(loader_ring_shapes);
    RUN(loader_truncated_file_and_cancel);
    RUN(device_names);
    RUN(manager_preload_lease_evict_reload);
    char *cmd = xasprintf("rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    free(cmd);
    return TEST_SUMMARY();
}
