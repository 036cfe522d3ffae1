/* Tests for the lease socket (server/lease/lease_server.c) over a manager on the
 * host backend: leases through the C client over the real socket, one
 * lease per open, release, and a client that runs out of memory. */
#include "gpu_fixture.h"

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
    CHECK(code_is(evict(gm, "mb", &st), "not_loaded") && st == 404);
    d = post(gm, "ma", "{\"device\":\"host\"}", &st);
    CHECK(st == 200);
    json_decref(d);
    json_t *s = status_json(gm, NULL);
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
    d = evict(gm, "ma", &st);
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
    d = evict(gm, "mb", &st);
    CHECK(st == 200);
    json_decref(d);
    CHECK_STR(state_of(gm, "mb"), "none");

    gpu_manager_update_metrics(gm);
    fx_free(&f);
    free(da);
    free(db);
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

/* Restarts the lease socket of f with its configuration as it is now. */
static void fx_restart_socket(struct fx *f)
{
    char err[512] = "";
    lease_server_stop(f->ls);
    f->ls = lease_server_start(f->gm, NULL, f->sock, &f->cfg, err, sizeof(err));
    CHECK(f->ls != NULL);
}

/* The daemon keeps the per-uid limits, whatever a client does: leases
 * across connections (on e868279 only 1,024 per connection, so a uid could
 * hold 4 million), and connections. */
TEST(per_uid_limits)
{
    struct fx f;
    char err[512];
    fx_init(&f);
    unsigned char *data = write_model(&f, "ma", 3);
    static const char *const preloads[] = {"ma@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    f.cfg.ipc_max_leases_per_uid = 3;
    f.cfg.ipc_max_connections_per_uid = 2;
    fx_restart_socket(&f);
    struct tensord_client *c1 = tensord_connect(f.sock, err, sizeof(err));
    struct tensord_client *c2 = tensord_connect(f.sock, err, sizeof(err));
    CHECK(c1 && c2);
    /* a third connection of this uid is refused, with the reason */
    CHECK(tensord_connect(f.sock, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "too_many_connections");
    struct tensord_model *m[4] = {0};
    m[0] = c1 ? tensord_open(c1, "ma", NULL, err, sizeof(err)) : NULL;
    m[1] = c2 ? tensord_open(c2, "ma", NULL, err, sizeof(err)) : NULL;
    m[2] = c2 ? tensord_open(c2, "ma", NULL, err, sizeof(err)) : NULL;
    CHECK(m[0] && m[1] && m[2]);
    CHECK(c1 && tensord_open(c1, "ma", NULL, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "too_many_leases");
    CHECK_CONTAINS(err, "ipc_max_leases_per_uid");
    CHECK(int_of(f.gm, "ma", "leases") == 3);
    /* a release makes room, on any of the uid's connections */
    tensord_model_close(m[1]);
    m[3] = c1 ? tensord_open(c1, "ma", NULL, err, sizeof(err)) : NULL;
    CHECK(m[3] != NULL);
    /* a connection that ends gives its leases and its place back */
    tensord_model_close(m[2]);
    tensord_close(c2);
    c2 = NULL;
    for (int i = 0; i < 200 && int_of(f.gm, "ma", "leases") != 2; i++)
        usleep(5000);
    struct tensord_client *c3 = NULL;
    for (int i = 0; i < 200 && !c3; i++) /* the daemon sees the close soon after */
        if (!(c3 = tensord_connect(f.sock, err, sizeof(err))))
            usleep(5000);
    CHECK(c3 != NULL);
    struct tensord_model *m4 = c3 ? tensord_open(c3, "ma", NULL, err, sizeof(err)) : NULL;
    CHECK(m4 != NULL);
    CHECK(int_of(f.gm, "ma", "leases") == 3);
    tensord_model_close(m4);
    tensord_model_close(m[0]);
    tensord_model_close(m[3]);
    tensord_close(c3);
    tensord_close(c1);
    fx_free(&f);
    free(data);
}

/* Writes NAME.safetensors with n tensors of zero bytes whose names are
 * name_len bytes long, and one of 8 bytes: a model whose open answer, its
 * tensor table, is about n * (name_len + 70) bytes. */
static void write_wide_model(const struct fx *f, const char *name, size_t n, size_t name_len)
{
    char *path = xasprintf("%s/%s.safetensors", f->root, name);
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    char *tname = xmalloc(name_len + 1);
    memset(tname, 'n', name_len);
    tname[name_len] = '\0';
    /* the header's length first: every entry has the same size */
    static const char entry[] = "\"%s%010zu\":{\"dtype\":\"U8\",\"shape\":[0],"
                                "\"data_offsets\":[0,0]},";
    static const char last[] = "\"last\":{\"dtype\":\"U8\",\"shape\":[8],"
                               "\"data_offsets\":[0,8]}}";
    size_t one = (size_t)snprintf(NULL, 0, entry, tname, (size_t)0);
    uint64_t hlen = 1 + n * one + strlen(last);
    unsigned char pre[8];
    for (int i = 0; i < 8; i++)
        pre[i] = (unsigned char)(hlen >> (8 * i));
    fwrite(pre, 1, 8, fp);
    fputc('{', fp);
    for (size_t i = 0; i < n; i++)
        fprintf(fp, entry, tname, i);
    fputs(last, fp);
    fwrite("abcdefgh", 1, 8, fp);
    CHECK(fclose(fp) == 0);
    free(tname);
    free(path);
}

/* A field of model's row in the status document (no tensor table: cheap
 * for a model with a huge one). */
static json_t *status_field(struct gpu_manager *gm, const char *model, const char *key)
{
    json_t *st = status_json(gm, NULL), *row, *v = NULL;
    size_t i;
    json_array_foreach(json_object_get(st, "models"), i, row)
        if (strcmp(json_string_value(json_object_get(row, "name")), model) == 0)
            v = json_incref(json_object_get(row, key));
    json_decref(st);
    return v;
}

/* An open answer longer than a client reads (IPC_MAX_ANSWER) is never
 * sent: the daemon answers answer_too_large, gives that lease back, and
 * the connection and its other leases stay (on e868279 the frame went out,
 * the client dropped the connection and every lease on it). */
TEST(answer_longer_than_a_client_reads)
{
    struct fx f;
    char err[512];
    fx_init(&f);
    unsigned char *data = write_model(&f, "small", 5);
    /* 16,500 names of 4,000 bytes: about 67.2 MB of tensor table */
    write_wide_model(&f, "wide", 16500, 4000);
    static const char *const preloads[] = {"small@host", "wide@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    json_t *state = status_field(f.gm, "wide", "state");
    CHECK_STR(json_string_value(state), "ready");
    json_decref(state);
    struct tensord_client *c = tensord_connect(f.sock, err, sizeof(err));
    struct tensord_model *s1 = c ? tensord_open(c, "small", NULL, err, sizeof(err)) : NULL;
    CHECK(s1 != NULL);
    CHECK(c && tensord_open(c, "wide", NULL, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "answer_too_large");
    json_t *leases = status_field(f.gm, "wide", "leases");
    CHECK(json_integer_value(leases) == 0 && json_is_integer(leases));
    json_decref(leases);
    /* the connection is still in step and still holds its lease */
    CHECK(int_of(f.gm, "small", "leases") == 1);
    char *list = c ? tensord_list(c, err, sizeof(err)) : NULL;
    CHECK(list != NULL);
    free(list);
    struct tensord_model *s2 = c ? tensord_open(c, "small", NULL, err, sizeof(err)) : NULL;
    CHECK(s2 != NULL);
    CHECK(int_of(f.gm, "small", "leases") == 2);
    tensord_model_close(s2);
    tensord_model_close(s1);
    tensord_close(c);
    fx_free(&f);
    free(data);
}

static int run(void)
{
    RUN(lease_through_the_client);
    RUN(client_leases_per_open_and_out_of_memory);
    RUN(per_uid_limits);
    RUN(answer_longer_than_a_client_reads);
    return TEST_SUMMARY();
}

int main(void)
{
    return fx_main(run);
}
