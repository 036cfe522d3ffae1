/* Tests for the lease socket (server/lease_server.c) over a manager on the
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

static int run(void)
{
    RUN(lease_through_the_client);
    RUN(client_leases_per_open_and_out_of_memory);
    return TEST_SUMMARY();
}

int main(void)
{
    return fx_main(run);
}
