/* Tests for reloads (gpu/gpu_reload.c) and admission (gpu/gpu_preload.c)
 * on the host backend, with preload_memory_limit standing for a device
 * that holds one copy of the model and not two: a reload never leaves a
 * model worse off (the old generation serves, and opens succeed on it,
 * until the new one is ready; where both do not fit, the new one waits
 * for the old one's leases, says so, and finishes by itself once they
 * end; six reloads in a row without leases each end ready; one that fails
 * leaves the old generation serving with the reason), and a preload that
 * cannot fit is refused before anything is allocated. Also what a
 * finished preload reports: phases that add up to its seconds, and its
 * checksums, summed after ready. The fixture is tests/unit/gpu_fixture.h. */
#include "gpu_fixture.h"

#define ONE_COPY 6000 /* a model's allocation is a 4 KiB page: one fits, two do not */

/* Opens model, as a worker's client library does: a "reloading" refusal
 * (the new generation loading where the old one was) is asked again, any
 * other refusal fails. Returns the lease, with *gen its generation. */
static struct gpu_lease *open_as_worker(struct gpu_manager *gm, const char *model, int *fds,
                                        json_int_t *gen)
{
    for (int tries = 0; tries < 2000; tries++) {
        json_t *ans;
        size_t n;
        struct gpu_lease *l = open_lease(gm, model, NULL, &ans, fds, 1, &n);
        if (l) {
            *gen = json_integer_value(json_object_get(ans, "generation"));
            json_decref(ans);
            return l;
        }
        const char *code =
            json_string_value(json_object_get(json_object_get(ans, "error"), "code"));
        int retry = code && strcmp(code, "reloading") == 0;
        if (!retry)
            fprintf(stderr, "  open refused: %s\n", json_dumps(ans, 0));
        json_decref(ans);
        CHECK(retry);
        if (!retry)
            return NULL;
        usleep(5000);
    }
    CHECK(!"the reload never ended");
    return NULL;
}

static json_t *reload_of(struct gpu_manager *gm, const char *model)
{
    json_t *o = model_json(gm, model), *r = json_object_get(o, "reload");
    json_incref(r);
    json_decref(o);
    return r;
}

/* A lease holds the old generation and both do not fit: the new one waits
 * (GET says for how many leases, and the bytes it needs), new opens still
 * get the old one, and when the last lease ends the reload finishes by
 * itself. */
TEST(reload_waits_for_the_leases_where_two_copies_do_not_fit)
{
    struct fx f;
    fx_init(&f);
    f.memory_limit = ONE_COPY;
    unsigned char *old = write_model(&f, "ma", 1);
    static const char *const preloads[] = {"ma@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    json_int_t gen0 = int_of(f.gm, "ma", "generation"), gen;
    int fds[1];
    struct gpu_lease *l1 = open_as_worker(f.gm, "ma", fds, &gen);
    CHECK(l1 && gen == gen0);

    unsigned char *now = write_model(&f, "ma", 2);
    fx_reload(&f);
    wait_idle(f.gm); /* the loader parked it */
    CHECK_STR(state_of(f.gm, "ma"), "ready");
    CHECK(int_of(f.gm, "ma", "generation") == gen0);
    json_t *r = reload_of(f.gm, "ma");
    CHECK_STR(json_string_value(json_object_get(r, "state")), "waiting");
    CHECK_STR(json_string_value(json_object_get(r, "reason")), "waiting for 1 lease");
    CHECK(json_integer_value(json_object_get(r, "leases")) == 1);
    CHECK(json_integer_value(json_object_get(r, "bytes_needed")) == 4096);
    CHECK(json_integer_value(json_object_get(r, "bytes_available")) < 4096);
    CHECK(json_integer_value(json_object_get(r, "generation")) > gen0);
    json_decref(r);

    struct gpu_lease *l2 = open_as_worker(f.gm, "ma", fds, &gen);
    CHECK(l2 && gen == gen0 && maps_to(fds[0], old, MODEL_BYTES));
    gpu_lease_release(f.gm, l1);
    wait_idle(f.gm);
    CHECK(int_of(f.gm, "ma", "generation") == gen0); /* l2 still holds it */
    r = reload_of(f.gm, "ma");
    CHECK(json_integer_value(json_object_get(r, "leases")) == 1);
    json_decref(r);
    gpu_lease_release(f.gm, l2);
    wait_idle(f.gm);
    CHECK_STR(state_of(f.gm, "ma"), "ready");
    CHECK(int_of(f.gm, "ma", "generation") > gen0);
    r = reload_of(f.gm, "ma");
    CHECK(r == NULL);
    json_decref(r);
    CHECK(status_rows(f.gm, "ma") == 1);
    struct gpu_lease *l3 = open_as_worker(f.gm, "ma", fds, &gen);
    CHECK(l3 && gen > gen0 && maps_to(fds[0], now, MODEL_BYTES));
    gpu_lease_release(f.gm, l3);
    fx_free(&f);
    free(old);
    free(now);
}

/* Six reloads in a row, no lease held between them, one copy of room:
 * each ends ready on the new generation, and an open made right after
 * each reload is never refused (at most told to ask again). */
TEST(reloads_in_a_row_end_ready)
{
    struct fx f;
    fx_init(&f);
    f.memory_limit = ONE_COPY;
    unsigned char *data = write_model(&f, "ma", 3);
    static const char *const preloads[] = {"ma@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    json_int_t last = int_of(f.gm, "ma", "generation");
    for (unsigned i = 0; i < 6; i++) {
        free(data);
        data = write_model(&f, "ma", 20 + i);
        fx_reload(&f);
        int fds[1];
        json_int_t gen;
        struct gpu_lease *l = open_as_worker(f.gm, "ma", fds, &gen);
        CHECK(l != NULL && gen >= last);
        gpu_lease_release(f.gm, l);
        wait_idle(f.gm);
        CHECK_STR(state_of(f.gm, "ma"), "ready");
        json_int_t g = int_of(f.gm, "ma", "generation");
        CHECK(g > last);
        last = g;
        l = open_as_worker(f.gm, "ma", fds, &gen);
        CHECK(l && gen == last && maps_to(fds[0], data, MODEL_BYTES));
        gpu_lease_release(f.gm, l);
        CHECK(status_rows(f.gm, "ma") == 1);
    }
    CHECK(gpu_metric(f.gm, "tensord_gpu_resident_bytes") == 4096);
    fx_free(&f);
    free(data);
}

/* A file rewritten in place, same size, its mtime set back (cp -p, rsync
 * -t into the same inode): another version, as the registry sees it (ctime
 * moved), so the instance is reloaded with the new bytes, not left holding
 * the old ones. */
TEST(rewrite_in_place_with_mtime_set_back_reloads)
{
    struct fx f;
    fx_init(&f);
    unsigned char *old = write_model(&f, "ma", 6);
    static const char *const preloads[] = {"ma@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    json_int_t gen0 = int_of(f.gm, "ma", "generation"), gen;
    char *path = xasprintf("%s/ma.safetensors", f.root);
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    unsigned char *now = bytes_for(MODEL_BYTES, 7);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, now, MODEL_BYTES, sb.st_size - MODEL_BYTES) == MODEL_BYTES);
    struct timespec times[2] = {sb.st_atim, sb.st_mtim};
    CHECK(futimens(fd, times) == 0);
    close(fd);
    struct stat after;
    CHECK(stat(path, &after) == 0 && after.st_ino == sb.st_ino &&
          after.st_mtim.tv_nsec == sb.st_mtim.tv_nsec && after.st_size == sb.st_size);
    fx_reload(&f);
    wait_idle(f.gm);
    CHECK_STR(state_of(f.gm, "ma"), "ready");
    CHECK(int_of(f.gm, "ma", "generation") > gen0);
    int fds[1];
    struct gpu_lease *l = open_as_worker(f.gm, "ma", fds, &gen);
    CHECK(l && gen > gen0 && maps_to(fds[0], now, MODEL_BYTES));
    gpu_lease_release(f.gm, l);
    fx_free(&f);
    free(path);
    free(old);
    free(now);
}

/* A reload whose load fails (its file shrank after the scan) leaves the old
 * generation serving, and GET says why; the next good reload replaces it. */
TEST(failed_reload_keeps_the_old_generation)
{
    struct fx f;
    fx_init(&f);
    unsigned char *old = write_model(&f, "ma", 4);
    static const char *const preloads[] = {"ma@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    json_int_t gen0 = int_of(f.gm, "ma", "generation"), gen;
    char *path = xasprintf("%s/ma.safetensors", f.root), *moved = xasprintf("%s.old", path);
    CHECK(rename(path, moved) == 0); /* the serving generation keeps its own file */
    unsigned char *now = write_model(&f, "ma", 5);
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    struct reg_snapshot *next = fx_scan(&f);
    CHECK(truncate(path, sb.st_size - 100) == 0); /* the snapshot's fd sees it */
    gpu_manager_on_reload(f.gm, next);
    registry_swap(&f.holder, next);
    wait_idle(f.gm);
    CHECK_STR(state_of(f.gm, "ma"), "ready");
    CHECK(int_of(f.gm, "ma", "generation") == gen0);
    json_t *r = reload_of(f.gm, "ma");
    CHECK_STR(json_string_value(json_object_get(r, "state")), "failed");
    CHECK_CONTAINS(json_string_value(json_object_get(r, "reason")), "ma.safetensors");
    json_decref(r);
    int fds[1];
    struct gpu_lease *l = open_as_worker(f.gm, "ma", fds, &gen);
    CHECK(l && gen == gen0 && maps_to(fds[0], old, MODEL_BYTES));
    gpu_lease_release(f.gm, l);
    CHECK(status_rows(f.gm, "ma") == 1);

    free(now);
    now = write_model(&f, "ma", 6);
    fx_reload(&f);
    wait_idle(f.gm);
    CHECK(int_of(f.gm, "ma", "generation") > gen0);
    r = reload_of(f.gm, "ma");
    CHECK(r == NULL);
    json_decref(r);
    l = open_as_worker(f.gm, "ma", fds, &gen);
    CHECK(l && maps_to(fds[0], now, MODEL_BYTES));
    gpu_lease_release(f.gm, l);
    fx_free(&f);
    unlink(moved);
    free(path);
    free(moved);
    free(old);
    free(now);
}

/* A preload that cannot fit is refused before anything is allocated: 507
 * with the bytes needed and available, at start-up shown failed with the
 * reason; and what earlier preloads were promised counts. */
TEST(admission_refuses_what_cannot_fit)
{
    struct fx f;
    fx_init(&f);
    f.memory_limit = 3000;
    unsigned char *da = write_model(&f, "ma", 7), *db = write_model(&f, "mb", 8);
    static const char *const preloads[] = {"ma@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    CHECK(gpu_manager_ready(f.gm));
    json_t *o = model_json(f.gm, "ma");
    CHECK_STR(json_string_value(json_object_get(o, "state")), "failed");
    CHECK_CONTAINS(json_string_value(json_object_get(o, "reason")), "insufficient memory");
    json_decref(o);
    int st;
    o = post(f.gm, "mb", "{\"device\":\"host\"}", &st);
    CHECK(st == 507);
    CHECK_CONTAINS(json_string_value(json_object_get(json_object_get(o, "error"), "message")),
                   "needs 4096 bytes on host and 3000 are available");
    CHECK(code_is(o, "insufficient_memory"));
    CHECK(gpu_metric(f.gm, "tensord_gpu_resident_bytes") == 0);
    CHECK_STR(state_of(f.gm, "mb"), "none");
    fx_free(&f);

    fx_init(&f);
    f.memory_limit = ONE_COPY;
    free(da);
    free(db);
    da = write_model(&f, "ma", 9);
    db = write_model(&f, "mb", 10);
    fx_start(&f, NULL);
    o = post(f.gm, "ma", "{\"device\":\"host\"}", &st);
    CHECK(st == 202);
    json_decref(o);
    CHECK(code_is(post(f.gm, "mb", "{\"device\":\"host\"}", &st), "insufficient_memory"));
    CHECK(st == 507);
    wait_idle(f.gm);
    CHECK_STR(state_of(f.gm, "ma"), "ready");
    CHECK(code_is(post(f.gm, "mb", "{\"device\":\"host\"}", &st), "insufficient_memory"));
    o = evict(f.gm, "ma", &st);
    json_decref(o);
    o = post(f.gm, "mb", "{\"device\":\"host\"}", &st);
    CHECK(st == 202);
    json_decref(o);
    wait_idle(f.gm);
    CHECK_STR(state_of(f.gm, "mb"), "ready");
    fx_free(&f);
    free(da);
    free(db);
}

/* The phases add up to the preload's seconds, and the metrics count them;
 * the checksums, summed after ready, are those of the bytes, in GET and on
 * the lease socket. */
TEST(phases_and_checksums)
{
    struct fx f;
    fx_init(&f);
    unsigned char *data = write_model(&f, "ma", 11);
    static const char *const preloads[] = {"ma@host", NULL};
    fx_start(&f, preloads);
    wait_idle(f.gm);
    json_t *o = model_json(f.gm, "ma");
    json_t *pl = json_object_get(o, "preload"), *ph = json_object_get(pl, "phases");
    static const char *const names[] = {"alloc", "ring", "plan", "copy", "finish"};
    double sum = 0;
    CHECK(json_object_size(ph) == 5);
    for (int i = 0; i < 5; i++) {
        json_t *v = json_object_get(ph, names[i]);
        CHECK(json_is_number(v) && json_number_value(v) >= 0);
        sum += json_number_value(v);
    }
    double secs = json_number_value(json_object_get(pl, "seconds"));
    CHECK(secs > 0 && sum > secs * 0.999 - 1e-6 && sum < secs * 1.001 + 1e-6);
    CHECK_STR(json_string_value(json_object_get(o, "checksums")), "ready");
    char sum_text[32];
    snprintf(sum_text, sizeof(sum_text), "%016llx",
             (unsigned long long)ipc_tsum_final(ipc_tsum_add(0, data, MODEL_BYTES, 0),
                                                MODEL_BYTES));
    json_t *a0 = json_array_get(json_object_get(o, "allocations"), 0);
    CHECK_STR(json_string_value(json_object_get(a0, "checksum")), sum_text);
    json_decref(o);
    CHECK(gpu_metric(f.gm, "tensord_gpu_preload_phase_seconds_total{phase=\"copy\"}") > 0);

    int fds[1];
    json_int_t gen;
    struct gpu_lease *l = open_as_worker(f.gm, "ma", fds, &gen);
    struct jsonw w = JSONW_INIT;
    gpu_doc_checksums(f.gm, l, &w);
    o = parsed(&w);
    CHECK_STR(json_string_value(json_object_get(o, "state")), "ready");
    CHECK_STR(json_string_value(json_array_get(json_object_get(o, "checksums"), 0)), sum_text);
    json_decref(o);
    gpu_lease_release(f.gm, l);
    fx_free(&f);
    free(data);
}

static int run(void)
{
    RUN(reload_waits_for_the_leases_where_two_copies_do_not_fit);
    RUN(reloads_in_a_row_end_ready);
    RUN(failed_reload_keeps_the_old_generation);
    RUN(rewrite_in_place_with_mtime_set_back_reloads);
    RUN(admission_refuses_what_cannot_fit);
    RUN(phases_and_checksums);
    return TEST_SUMMARY();
}

int main(void)
{
    return fx_main(run);
}
