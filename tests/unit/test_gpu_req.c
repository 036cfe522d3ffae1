/* Tests for the GPU requests as the endpoints receive them
 * (server/lease/gpu_req.c): a POST .../gpu body, read against jansson (the
 * oracle) for its device and names; and the ?device= and &rank= of GET and
 * DELETE. What the manager makes of them is test_gpu_manager's. */
#include "gpu_fixture.h"

/* Bodies with one device: its name is what jansson finds as the string
 * member "device" of an object with no duplicate key; anything else (a
 * member that is none of device, devices and split included: a typo must
 * not load the whole model) is a 400 bad_request. */
TEST(one_device_read_as_jansson_reads_it)
{
    static const char *const bodies[] = {
        "{\"device\":\"host\"}", " {\"device\" : \"cuda:0\" } \n", "{\"\\u0064evice\":\"host\"}",
        "{\"device\":\"h\\u00e9\\ud83d\\ude00\"}", "{\"device\":\"\"}",
        "{\"device\":\"a\",\"device\":\"b\"}", "{\"device\":\"a\\u0000b\"}", "{\"device\":null}",
        "{\"device\":7}", "[]", "\"host\"", "{\"device\":\"host\"} x", "{\"device\":\"\xff\"}", "{}",
        "", "{\"device\":\"host\",}", "{\"devic\":\"host\"}", "{\"devicee\":\"host\"}",
        "{\"device\":\"host\"", "{\"a\":1,\"a\":2,\"device\":\"host\"}", "{\"device\":[\"host\"]}",
        "{\"x\":[1,{\"device\":2}],\"device\":\"host\"}", "{\"device\":\"host\",\"splits\":{}}",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        const char *b = bodies[i];
        json_t *o = json_loadb(b, strlen(b), JSON_REJECT_DUPLICATES, NULL);
        const char *want = json_object_size(o) == 1
                               ? json_string_value(json_object_get(o, "device"))
                               : NULL;
        struct gpu_req_error e;
        struct gpu_req_preload p;
        int rc = gpu_req_preload_parse(b, strlen(b), &p, &e);
        int ok = want ? rc == 0 && p.device && strcmp(p.device, want) == 0 && !p.devices &&
                            !p.split.has_split
                      : rc == -EINVAL && !p.device && e.http_status == 400 &&
                            strcmp(e.code, "bad_request") == 0;
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "  body %zu: %s (%s)\n", i, b, rc ? e.message : "accepted");
        gpu_req_preload_free(&p);
        json_decref(o);
    }
}

/* Splits: one rank on one device, or every rank on devices of their own;
 * each refusal says what is wrong. */
TEST(splits_and_devices)
{
    static const struct {
        const char *body;
        const char *error;     /* NULL: accepted */
        size_t n_devices;
        uint64_t world, rank;
    } cases[] = {
        {"{\"device\":\"cuda:1\",\"split\":{\"world\":2,\"rank\":1,\"rules\":"
         "[{\"match\":\"*.weight\",\"dim\":0}]}}", NULL, 0, 2, 1},
        {"{\"devices\":[\"cuda:0\",\"cuda:1\",\"cuda:0\"],\"split\":{\"world\":3,\"rules\":[]}}",
         NULL, 3, 3, 0},
        {"{\"device\":\"cuda:1\",\"split\":{\"world\":2,\"rules\":[]}}", "rank", 0, 0, 0},
        {"{\"device\":\"cuda:1\",\"split\":{\"world\":2,\"rank\":2,\"rules\":[]}}",
         "split.rank must be in [0, 2)", 0, 0, 0},
        {"{\"device\":\"cuda:1\",\"split\":{\"world\":0,\"rank\":0,\"rules\":[]}}",
         "at least 1", 0, 0, 0},
        {"{\"devices\":[\"cuda:0\",\"cuda:1\"],\"split\":{\"world\":2,\"rank\":0,\"rules\":[]}}",
         "rank", 0, 0, 0},
        {"{\"devices\":[\"cuda:0\"],\"split\":{\"world\":2,\"rules\":[]}}",
         "names 1 devices for a world of 2", 0, 0, 0},
        {"{\"devices\":[\"cuda:0\",\"cuda:1\"]}", "give one", 0, 0, 0},
        {"{\"devices\":[\"cuda:0\",1],\"split\":{\"world\":2,\"rules\":[]}}", "device names",
         0, 0, 0},
        {"{\"devices\":[],\"split\":{\"world\":1,\"rules\":[]}}", "names 0 devices", 0, 0, 0},
        {"{\"device\":\"cuda:0\",\"devices\":[\"cuda:0\"],\"split\":{\"world\":1,\"rules\":[]}}",
         "the body must be", 0, 0, 0},
        {"{\"device\":\"cuda:0\",\"split\":[]}", "not one of", 0, 0, 0},
        {"{\"device\":\"cuda:0\",\"split\":{\"world\":1,\"rank\":0,\"rules\":[{\"match\":\"[\"}]}}",
         "", 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gpu_req_error e;
        struct gpu_req_preload p;
        const char *b = cases[i].body;
        int rc = gpu_req_preload_parse(b, strlen(b), &p, &e);
        int ok = cases[i].error
                     ? rc == -EINVAL && e.http_status == 400 && strstr(e.message, cases[i].error)
                     : rc == 0 && p.split.has_split && p.n_devices == cases[i].n_devices &&
                           p.split.world == cases[i].world && p.split.rank == cases[i].rank;
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "  body %zu: %s (%s)\n", i, b, rc ? e.message : "accepted");
        gpu_req_preload_free(&p);
    }
    /* more devices than one request places */
    char body[4096] = "{\"devices\":[";
    for (int i = 0; i <= GPU_REQ_MAX_DEVICES; i++)
        strcat(body, i ? ",\"host\"" : "\"host\"");
    strcat(body, "],\"split\":{\"world\":65,\"rules\":[]}}");
    struct gpu_req_error e;
    struct gpu_req_preload p;
    CHECK(gpu_req_preload_parse(body, strlen(body), &p, &e) == -EINVAL);
    CHECK_CONTAINS(e.message, "at most 64");
    gpu_req_preload_free(&p);
}

/* ?device=, &rank= and &world=: a rank and a world are plain decimal numbers. */
TEST(which_instances)
{
    struct fx f;
    fx_init(&f);
    fx_start(&f, NULL);
    struct gpu_manager *gm = f.gm;
    struct gm_which which;
    struct gm_device where;
    struct gpu_req_error e;
    CHECK(gpu_req_which(gm, NULL, NULL, NULL, &which, &where, &e) == 0);
    CHECK(!which.where && which.rank == -1 && which.world == 0);
    CHECK(gpu_req_which(gm, "host", "3", "4", &which, &where, &e) == 0);
    CHECK(which.where == &where && which.rank == 3 && which.world == 4);
    CHECK(gpu_req_which(gm, NULL, NULL, "0", &which, &where, &e) == -EINVAL);
    CHECK_CONTAINS(e.message, "world=0");
    static const char *const bad[] = {"", "-1", "+1", "x", "1x", " 1", "99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(gpu_req_which(gm, NULL, bad[i], NULL, &which, &where, &e) == -EINVAL);
        CHECK(gpu_req_which(gm, NULL, NULL, bad[i], &which, &where, &e) == -EINVAL);
        CHECK(e.http_status == 400 && strcmp(e.code, "bad_request") == 0);
    }
    CHECK(gpu_req_which(gm, "cuda:x", NULL, NULL, &which, &where, &e) < 0);
    CHECK(e.http_status == 400 && strcmp(e.code, "bad_device") == 0);
    fx_free(&f);
}

/* A "devices" request that fails on one rank takes back the ranks it
 * started, and only those: the model's other instances on those devices
 * (the whole model, rank 0 of another world) stay, where taking back rank 0
 * evicted every rank 0 there, whatever its world. */
TEST(devices_refused_takes_back_only_its_own_ranks)
{
    struct fx f;
    fx_init(&f);
    /* q: F4 [2, 4]: cut in three along dim 1, rank 1's single column is half
     * a byte, which F4 cannot be cut into: rank 0 starts, rank 1 is refused */
    static const unsigned char q[4] = {0x12, 0x34, 0x56, 0x78};
    write_st(&f, "mq.safetensors",
             "{\"q\":{\"dtype\":\"F4\",\"shape\":[2,4],\"data_offsets\":[0,4]}}", q, sizeof(q));
    fx_start(&f, NULL);
    int st;
    json_decref(post(f.gm, "mq", "{\"device\":\"host\"}", &st));
    CHECK(st == 202);
    json_decref(post(f.gm, "mq", "{\"device\":\"host\",\"split\":{\"world\":2,\"rank\":0,"
                     "\"rules\":[{\"match\":\"q\",\"dim\":0}]}}", &st));
    CHECK(st == 202);
    wait_idle(f.gm);
    json_t *d = post(f.gm, "mq", "{\"devices\":[\"host\",\"host\",\"host\"],\"split\":"
                     "{\"world\":3,\"rules\":[{\"match\":\"q\",\"dim\":1}]}}", &st);
    CHECK(code_is(d, "bad_split") && st == 400);
    wait_idle(f.gm);
    CHECK(status_rows(f.gm, "mq") == 2);
    json_t *o = model_json(f.gm, "mq");
    json_t *inst, *is = json_object_get(o, "instances");
    size_t i, ready = 0;
    CHECK(json_array_size(is) == 2);
    json_array_foreach(is, i, inst) {
        json_int_t world = json_integer_value(json_object_get(inst, "world"));
        CHECK(world == 0 || world == 2); /* a whole model's instance shows no world */
        ready += strcmp(json_string_value(json_object_get(inst, "state")), "ready") == 0;
    }
    CHECK(ready == 2);
    json_decref(o);
    fx_free(&f);
}

struct costly_post {
    struct gpu_manager *gm;
    const char *body;
    int status;
    atomic_int done;
};

static void *costly_post_main(void *arg)
{
    struct costly_post *c = arg;
    json_decref(post(c->gm, "mg", c->body, &c->status));
    atomic_store(&c->done, 1);
    return NULL;
}

/* Cutting a model as a split says (matching its rules against every
 * tensor name, up to FETCH_GLOB_BUDGET steps: seconds for hostile globs)
 * happens outside the manager's lock, so that while one POST plans, the
 * other models' GETs, leases and loads go on: the lock is free nearly all
 * the time the POST takes. It was held for the whole plan. */
TEST(a_costly_split_holds_nothing_else_up)
{
    struct fx f;
    fx_init(&f);
    /* mg: four tensors with 2,000-byte names that every rule matches only
     * after a walk of about 10^6 steps */
    struct strbuf hdr = STRBUF_INIT;
    strbuf_putc(&hdr, '{');
    for (int i = 0; i < 4; i++) {
        strbuf_printf(&hdr, "%s\"", i ? "," : "");
        for (int k = 0; k < 2000; k++)
            strbuf_putc(&hdr, 'a');
        strbuf_printf(&hdr, "%d\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[%d,%d]}", i,
                      2 * i, 2 * i + 2);
    }
    strbuf_putc(&hdr, '}');
    static const unsigned char zeros[8];
    write_st(&f, "mg.safetensors", hdr.buf, zeros, sizeof(zeros));
    strbuf_release(&hdr);
    fx_start(&f, NULL);

    struct strbuf body = STRBUF_INIT;
    strbuf_puts(&body, "{\"device\":\"host\",\"split\":{\"world\":2,\"rank\":1,\"rules\":[");
    for (int r = 0; r < 60; r++) {
        strbuf_puts(&body, r ? ",{\"match\":\"*" : "{\"match\":\"*");
        for (int k = 0; k < 1000; k++)
            strbuf_putc(&body, 'a');
        strbuf_puts(&body, "b\",\"dim\":0}");
    }
    strbuf_puts(&body, "]}}");
    struct costly_post c = {.gm = f.gm, .body = body.buf};
    pthread_t th;
    uint64_t free_seen = 0, held_seen = 0;
    CHECK(pthread_create(&th, NULL, costly_post_main, &c) == 0);
    while (!atomic_load(&c.done)) {
        if (pthread_mutex_trylock(&f.gm->lock) == 0) {
            pthread_mutex_unlock(&f.gm->lock);
            free_seen++;
        } else {
            held_seen++;
        }
    }
    pthread_join(th, NULL);
    CHECK(c.status == 202);
    CHECK(held_seen < free_seen / 4);
    if (held_seen >= free_seen / 4)
        fprintf(stderr, "  the manager's lock was held %llu times of %llu\n",
                (unsigned long long)held_seen, (unsigned long long)(held_seen + free_seen));
    strbuf_release(&body);
    wait_idle(f.gm);
    fx_free(&f);
}

/* DELETE of more than 64 instances (ranks 0 .. 69 of a world of 100) lists
 * every one, and says draining when the one a lease holds is among the
 * last evicted: the answer kept 64, and said "none" (200) while rank 0,
 * the 70th evicted, drained. */
TEST(evict_reports_every_instance)
{
    struct fx f;
    fx_init(&f);
    unsigned char *data = write_model(&f, "ma", 15);
    fx_start(&f, NULL);
    preload_ranks(f.gm, "ma", 70, 100);
    int fds[1], st;
    size_t n;
    json_t *ans;
    struct gpu_lease *l = open_rank(f.gm, "ma", "host", 0, NULL, &ans, fds, 1, &n);
    CHECK(l != NULL);
    json_decref(ans);
    json_t *o = evict(f.gm, "ma", &st);
    CHECK(st == 202);
    CHECK_STR(json_string_value(json_object_get(o, "state")), "draining");
    json_t *is = json_object_get(o, "instances"), *inst;
    size_t i, draining = 0;
    CHECK(json_array_size(is) == 70);
    json_array_foreach(is, i, inst)
        draining += strcmp(json_string_value(json_object_get(inst, "state")), "draining") == 0;
    CHECK(draining == 1);
    json_decref(o);
    gpu_lease_release(f.gm, l);
    fx_free(&f);
    free(data);
}

static int run(void)
{
    RUN(one_device_read_as_jansson_reads_it);
    RUN(splits_and_devices);
    RUN(which_instances);
    RUN(devices_refused_takes_back_only_its_own_ranks);
    RUN(a_costly_split_holds_nothing_else_up);
    RUN(evict_reports_every_instance);
    return TEST_SUMMARY();
}

int main(void)
{
    return fx_main(run);
}
