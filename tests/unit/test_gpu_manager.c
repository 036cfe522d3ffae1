/* Tests for the GPU manager (gpu/gpu_manager.c, gpu_instance.c,
 * gpu_preload.c) on the host backend, no daemon, through its documents
 * (server/lease/gpu_doc.c): each test scans its own models root, starts a
 * manager on it and drives it through the public calls. Start-up preloads
 * and readiness, the GET document, leases opened directly (fds that map the
 * file bytes), evict while leased (draining, the daemon's hold released
 * with the last lease while a worker's mapping stays), reloads (changed
 * files get a new generation, unchanged ones keep theirs, removed or
 * invalid ones are evicted), a failed preload and its retry, and a preload
 * racing a reload. The fixture is tests/unit/gpu_fixture.h. */
#include "gpu_fixture.h"

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

    json_t *o = model_json(f.gm, "ma");
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
    json_t *io = json_object_get(pl, "io");
    CHECK(json_integer_value(json_object_get(io, "page_cache_bytes")) +
              json_integer_value(json_object_get(io, "disk_bytes")) == MODEL_BYTES);
    CHECK(json_integer_value(json_object_get(io, "handed_over_bytes")) <=
          json_integer_value(json_object_get(io, "disk_bytes")));
    CHECK(json_string_length(json_object_get(io, "disk_reads")) > 0);
    CHECK(json_integer_value(json_object_get(io, "threads")) >= 1);
    CHECK(json_integer_value(json_object_get(io, "depth")) == f.cfg.staging_buffers);
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

    o = summary_json(f.gm, "ma");
    CHECK_STR(json_string_value(json_object_get(o, "state")), "ready");
    CHECK_STR(json_string_value(json_object_get(o, "device")), "host");
    json_decref(o);
    o = summary_json(f.gm, "nope");
    CHECK_STR(json_string_value(json_object_get(o, "state")), "none");
    CHECK(json_object_size(o) == 1);
    json_decref(o);
    o = status_json(f.gm, f.sock);
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
    CHECK(int_of(f.gm, "ma", "generation") == gen); /* refusals change nothing */
    if (cuda_available(f.gm)) { /* a second instance, on the GPU, and its eviction alone */
        json_decref(post(f.gm, "ma", "{\"device\":\"cuda:0\"}", &st));
        CHECK(st == 202);
        wait_idle(f.gm);
        json_decref(evict_at(f.gm, "ma", "cuda:0", NULL, &st));
        CHECK(st == 200);
        CHECK(int_of(f.gm, "ma", "generation") == gen);
        CHECK_STR(state_of(f.gm, "ma"), "ready");
    }
    fx_free(&f);
    free(data);
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
    CHECK(int_of(f.gm, "sh", "leases") == 2);

    gpu_lease_release(f.gm, l1);
    gpu_lease_release(f.gm, l2);
    gpu_lease_release(f.gm, NULL);
    CHECK(int_of(f.gm, "sh", "leases") == 0);
    CHECK(gpu_metric(f.gm, "tensord_gpu_leases_active") == 0);
    CHECK_STR(state_of(f.gm, "sh"), "ready"); /* leases ending do not unload */
    ans = list_json(f.gm);
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

    json_t *d = evict(f.gm, "ma", &st);
    CHECK(st == 202);
    CHECK_STR(json_string_value(json_object_get(d, "state")), "draining");
    CHECK(json_integer_value(json_object_get(d, "leases")) == 1);
    CHECK(json_integer_value(json_object_get(d, "generation")) == gen);
    json_decref(d);
    CHECK_STR(state_of(f.gm, "ma"), "draining");
    CHECK(int_of(f.gm, "ma", "leases") == 1);
    d = summary_json(f.gm, "ma");
    CHECK_STR(json_string_value(json_object_get(d, "state")), "draining");
    json_decref(d);
    CHECK(status_rows(f.gm, "ma") == 1);
    d = list_json(f.gm); /* lists what can be opened: mb only */
    CHECK(json_array_size(json_object_get(d, "models")) == 1);
    json_decref(d);
    CHECK(open_lease(f.gm, "ma", NULL, &ans, fds, 2, &n) == NULL);
    CHECK(code_is(ans, "not_loaded"));
    CHECK(code_is(evict(f.gm, "ma", &st), "not_loaded") && st == 404);

    gpu_lease_release(f.gm, l);
    CHECK_STR(state_of(f.gm, "ma"), "none");
    CHECK(status_rows(f.gm, "ma") == 0);
    CHECK(fds_on_file(worker_fd) == 1); /* the daemon let go */
    CHECK(map != MAP_FAILED && memcmp(map, da, MODEL_BYTES) == 0);
    if (map != MAP_FAILED)
        munmap(map, MODEL_BYTES);
    if (worker_fd >= 0)
        close(worker_fd);

    d = evict(f.gm, "mb", &st);
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
    d = model_json(f.gm, "mt");
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

/* A preload that starts between a reload's announcement (on_reload) and the
 * holder's swap loads the new files, not the snapshot the holder still has. */
TEST(preload_during_reload_loads_the_new_files)
{
    struct fx f;
    fx_init(&f);
    unsigned char *old = write_model(&f, "ma", 11);
    fx_start(&f, NULL);
    unsigned char *now = write_model(&f, "ma", 12);
    struct reg_snapshot *next = fx_scan(&f);
    gpu_manager_on_reload(f.gm, next); /* announced, not yet swapped in */
    int st, fds[1];
    size_t n;
    json_t *d = post(f.gm, "ma", "{\"device\":\"host\"}", &st);
    CHECK(st == 202);
    json_decref(d);
    wait_idle(f.gm);
    registry_swap(&f.holder, next); /* no later reload will come to fix it */
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

/* A partition's world and rank are what workers name on the lease socket
 * and GET and DELETE take (below 2^31): a larger world is refused, not cut
 * to 32 bits, where 2^32 + 1 became the whole model's key (rank 0 of 1),
 * and the whole model's preload was then refused as a conflict. */
TEST(split_world_beyond_what_workers_name)
{
    struct fx f;
    fx_init(&f);
    unsigned char *data = write_model(&f, "ma", 3);
    fx_start(&f, NULL);
    static const char *const too_big[] = {"4294967297", "4294967298", "2147483648",
                                          "9223372036854775807"};
    int st;
    for (size_t i = 0; i < sizeof(too_big) / sizeof(too_big[0]); i++) {
        char body[256];
        snprintf(body, sizeof(body), "{\"device\":\"host\",\"split\":{\"world\":%s,\"rank\":1,"
                 "\"rules\":[{\"match\":\"y\",\"dim\":1}]}}", too_big[i]);
        json_t *d = post(f.gm, "ma", body, &st);
        CHECK_CONTAINS(json_string_value(json_object_get(json_object_get(d, "error"),
                                                         "message")), "2147483647");
        CHECK(code_is(d, "bad_split") && st == 400);
    }
    CHECK(status_rows(f.gm, "ma") == 0);
    json_decref(post(f.gm, "ma", "{\"device\":\"host\"}", &st));
    CHECK(st == 202); /* the whole model, refused as a conflict when 2^32 + 1 was rank 0 of 1 */
    json_t *d = post(f.gm, "ma", "{\"device\":\"host\",\"split\":{\"world\":2147483647,"
                     "\"rank\":2147483646,\"rules\":[{\"match\":\"x\",\"dim\":0}]}}", &st);
    CHECK(st == 202);
    CHECK(json_integer_value(json_object_get(d, "world")) == 2147483647);
    CHECK(json_integer_value(json_object_get(d, "rank")) == 2147483646);
    json_decref(d);
    wait_idle(f.gm);
    json_decref(evict(f.gm, "ma", &st));
    CHECK(st == 200);
    fx_free(&f);
    free(data);
}

/* A split of a world of 1 is the whole model (numpy.array_split into one
 * part: every tensor whole), its rules checked as POST /fetch checks them:
 * its instance is the whole model's, and a worker opens it. It was kept as
 * a partition of rank 0 of 1 with its split, whose open answer every
 * client refused (a split without a world above 1), and which refused the
 * whole model's own preload as a conflict. */
TEST(a_world_of_one_is_the_whole_model)
{
    struct fx f;
    char err[512];
    fx_init(&f);
    unsigned char *data = write_model(&f, "ma", 5);
    fx_start(&f, NULL);
    int st;
    json_t *d = post(f.gm, "ma", "{\"device\":\"host\",\"split\":{\"world\":1,\"rank\":0,\"rules\":"
                     "[{\"match\":\"y\",\"dim\":1}]}}", &st);
    CHECK(st == 202);
    CHECK(json_integer_value(json_object_get(d, "world")) == 1 && !json_object_get(d, "split"));
    json_decref(d);
    json_decref(post(f.gm, "ma", "{\"devices\":[\"host\"],\"split\":{\"world\":1,\"rules\":"
                     "[{\"match\":\"*\",\"dim\":0}]}}", &st));
    CHECK(st == 200);
    json_decref(post(f.gm, "ma", "{\"device\":\"host\"}", &st));
    CHECK(st == 200);
    CHECK(code_is(post(f.gm, "ma", "{\"device\":\"host\",\"split\":{\"world\":1,\"rank\":0,"
                       "\"rules\":[{\"match\":\"x\",\"dim\":1}]}}", &st), "bad_split") &&
          st == 400);
    wait_idle(f.gm);
    CHECK(status_rows(f.gm, "ma") == 1);
    struct tensord_client *c = tensord_connect(f.sock, err, sizeof(err));
    struct tensord_open_options o = TENSORD_OPEN_OPTIONS_INIT;
    o.rank = 0;
    struct tensord_model *m = c ? tensord_open_ex(c, "ma", &o, err, sizeof(err)) : NULL;
    CHECK(m != NULL);
    if (!m)
        fprintf(stderr, "  open: %s\n", err);
    if (m) {
        const struct tensord_tensor *y = tensord_model_find(m, "y");
        CHECK(tensord_model_world(m) == 1 && tensord_model_rank(m) == 0 &&
              !tensord_model_split(m));
        CHECK(y && y->ndim == 2 && y->shape[1] == 100 && memcmp(y->data, data + 1000, 1200) == 0);
        CHECK(tensord_model_verify(m, err, sizeof(err)) == 0);
        tensord_model_close(m);
    }
    tensord_close(c);
    fx_free(&f);
    free(data);
}

/* One client's requests in a loop: a POST (every rank of a world of 2, or
 * one rank, or the whole model), a DELETE naming a device, rank and world,
 * a GET of the model, and a lease opened and given back. */
struct racer {
    struct gpu_manager *gm;
    unsigned seed;
    atomic_int *stop;
    atomic_uint posts;         /* answered 200 or 202 */
    unsigned leases;
};

static void *racer_main(void *arg)
{
    static const char *const bodies[] = {
        "{\"devices\":[\"host\",\"host\"],\"split\":{\"world\":2,\"rules\":"
        "[{\"match\":\"y\",\"dim\":1}]}}",
        "{\"device\":\"host\",\"split\":{\"world\":2,\"rank\":1,\"rules\":"
        "[{\"match\":\"y\",\"dim\":1}]}}",
        "{\"device\":\"host\",\"split\":{\"world\":3,\"rank\":2,\"rules\":"
        "[{\"match\":\"x\",\"dim\":0}]}}",
        "{\"device\":\"host\"}",
    };
    static const char *const ranks[] = {"0", "1", "2", NULL};
    struct racer *r = arg;
    while (!atomic_load(r->stop)) {
        unsigned k = rand_r(&r->seed);
        int st, fds[1];
        size_t n;
        json_t *d = post(r->gm, "ma", bodies[k % 4], &st);
        if (st == 202 || st == 200)
            atomic_fetch_add(&r->posts, 1);
        json_decref(d);
        struct gpu_req_error e;
        struct jsonw w = JSONW_INIT;
        struct gm_which which;
        struct gm_device where;
        if (gpu_req_which(r->gm, "host", ranks[(k >> 4) % 4], (k >> 6) % 2 ? "2" : NULL, &which,
                          &where, &e) == 0 &&
            gpu_req_evict(r->gm, "ma", &which, &w, &st, &e) == 0)
            json_decref(parsed(&w));
        json_decref(model_json(r->gm, "ma"));
        struct gpu_lease *l = open_rank(r->gm, "ma", "host", (int)((k >> 8) % 3) - 1, NULL, &d,
                                        fds, 1, &n);
        json_decref(d);
        if (l) {
            r->leases++;
            gpu_lease_release(r->gm, l);
        }
    }
    return NULL;
}

/* Clients racing each other's POSTs (all or nothing over two ranks),
 * DELETEs of one device, rank and world, GETs and leases: whatever the
 * interleaving, the manager keeps one instance per device, world and rank,
 * and every document, lease and eviction is consistent (ThreadSanitizer
 * runs this in make test). */
TEST(posts_race_deletes_and_leases)
{
    struct fx f;
    fx_init(&f);
    unsigned char *data = write_model(&f, "ma", 16);
    fx_start(&f, NULL);
    atomic_int stop = 0;
    struct racer r[3];
    pthread_t th[3];
    for (unsigned i = 0; i < 3; i++) {
        r[i] = (struct racer){.gm = f.gm, .seed = 7 + i, .stop = &stop, .leases = 0};
        atomic_init(&r[i].posts, 0);
        CHECK(pthread_create(&th[i], NULL, racer_main, &r[i]) == 0);
    }
    uint64_t until = time_mono_ns() + 1500 * 1000000ull;
    unsigned posts = 0;
    while (time_mono_ns() < until || posts < 30) {
        posts = atomic_load(&r[0].posts) + atomic_load(&r[1].posts) + atomic_load(&r[2].posts);
        /* never two current instances with one key */
        pthread_mutex_lock(&f.gm->lock);
        for (struct gm_instance *a = f.gm->models; a; a = a->next)
            for (struct gm_instance *b = a->next; b; b = b->next)
                CHECK(!(a->current && b->current && a->world == b->world &&
                        a->rank == b->rank));
        pthread_mutex_unlock(&f.gm->lock);
        usleep(1000);
    }
    atomic_store(&stop, 1);
    for (unsigned i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    wait_idle(f.gm);
    int st;
    json_t *o = evict(f.gm, "ma", &st);
    CHECK(st == 200 || st == 404);
    json_decref(o);
    CHECK(status_rows(f.gm, "ma") == 0);
    CHECK(gpu_metric(f.gm, "tensord_gpu_resident_bytes") == 0);
    fx_free(&f);
    free(data);
}

static int run(void)
{
    RUN(startup_preloads_and_the_get_document);
    RUN(preload_requests);
    RUN(leases_hand_out_the_shards);
    RUN(evict_while_leased_drains);
    RUN(reload_replaces_changed_models);
    RUN(failed_preload_then_retry);
    RUN(preload_during_reload_loads_the_new_files);
    RUN(split_world_beyond_what_workers_name);
    RUN(a_world_of_one_is_the_whole_model);
    RUN(posts_race_deletes_and_leases);
    return TEST_SUMMARY();
}

int main(void)
{
    return fx_main(run);
}
