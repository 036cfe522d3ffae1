/* registry against what a file tree can hold: symlinks (outside the root
 * ignored, inside followed, loops cut), special files skipped without
 * blocking, unreadable files, and scale (thousands of models, half a million
 * tensors). Discovery rules and the holder are in test_registry.c. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry.h"
#include "registry_fixture.h"
#include "test.h"
#include "util.h"

TEST(symlinks)
{
    new_root();
    char *outside = xasprintf("%s/outside%d", base, n_roots);
    CHECK(mkdir(outside, 0755) == 0);
    char *ofile = xasprintf("%s/model.safetensors", outside);
    {
        /* a valid file outside the root, written by hand */
        char *saved = xstrdup(root);
        snprintf(root, sizeof(root), "%s", outside);
        write_tensors("model.safetensors", "secret");
        write_text("passwd", "root:x:0:0");
        snprintf(root, sizeof(root), "%s", saved);
        free(saved);
    }
    write_tensors("real/model.safetensors", "w");
    symlink_at(outside, "ext");                              /* directory outside */
    symlink_at(ofile, "linked.safetensors");                 /* root file outside */
    write_tensors("m/model.safetensors", "w");
    symlink_at(ofile, "m/extra.safetensors");                /* model file outside */
    char *pw = xasprintf("%s/passwd", outside);
    symlink_at(pw, "m/passwd");                              /* plain file outside */
    symlink_at("../real/model.safetensors", "inside/model.safetensors"); /* file inside */
    symlink_at("real", "alias");                             /* directory inside */
    symlink_at("/nonexistent/x", "m/dangling.json");
    symlink_at("../..", "m/up");                             /* escapes via .. */
    struct reg_snapshot *r = scan();
    CHECK(model(r, "ext") == NULL);
    CHECK(model(r, "linked") == NULL);
    const struct reg_model *m = model(r, "m");
    CHECK(m && m->state == MODEL_READY && m->n_files == 1);
    CHECK(!has_tensor(m, "secret"));
    CHECK(reg_model_find_file(m, "passwd", 6) == NULL);
    CHECK(reg_model_find_file(m, "dangling.json", 13) == NULL);
    const struct reg_model *in = model(r, "inside");
    CHECK(in && in->state == MODEL_READY && has_tensor(in, "w"));
    CHECK(model(r, "alias") && has_tensor(model(r, "alias"), "w"));
    for (size_t i = 0; i < r->n_models; i++)
        CHECK(!has_tensor(r->models[i], "secret"));
    reg_snapshot_unref(r);
    free(outside);
    free(ofile);
    free(pw);
}

TEST(symlink_loops)
{
    new_root();
    write_tensors("loop/model.safetensors", "w");
    symlink_at("..", "loop/up");           /* back to the root */
    symlink_at("../loop", "loop/self");    /* back to itself */
    symlink_at("../../loop", "loop/x/back");
    symlink_at("b", "loop/a");             /* a <-> b: realpath fails */
    symlink_at("a", "loop/b");
    symlink_at(".", "dot");
    uint64_t t0 = time_mono_ns();
    struct reg_snapshot *r = scan();
    CHECK(time_mono_ns() - t0 < 5000000000ULL);
    CHECK(model(r, "loop") && model(r, "loop")->state == MODEL_READY);
    /* loop/x/back leads to loop, which is on the path: not entered */
    CHECK(model(r, "loop/x/back") == NULL);
    CHECK(model(r, "loop/self") == NULL);
    CHECK(model(r, "dot/loop") == NULL);
    CHECK_EQ_U64(r->n_models, 1);
    reg_snapshot_unref(r);
}

TEST(special_files_skipped)
{
    new_root();
    write_tensors("fm/model.safetensors", "w");
    char *p = at("fm/pipe");
    CHECK(mkfifo(p, 0644) == 0);
    free(p);
    p = at("fm/pipe.safetensors");
    CHECK(mkfifo(p, 0644) == 0);
    free(p);
    p = at("fifo.safetensors");
    CHECK(mkfifo(p, 0644) == 0);
    free(p);
    mkparents("onlyfifo/x");
    p = at("onlyfifo/model.safetensors");
    CHECK(mkfifo(p, 0644) == 0);
    free(p);
    symlink_at("pipe", "fm/link-to-pipe");
    symlink_at("/dev/null", "fm/null");
    alarm(20); /* a blocking open would hang here */
    struct reg_snapshot *r = scan();
    alarm(0);
    CHECK_EQ_U64(r->n_models, 1);
    const struct reg_model *m = model(r, "fm");
    CHECK(m && m->state == MODEL_READY && m->n_files == 1);
    CHECK(model(r, "fifo") == NULL && model(r, "onlyfifo") == NULL);
    reg_snapshot_unref(r);
}

TEST(unreadable_file)
{
    if (geteuid() == 0) {
        printf("  note: running as root, which reads mode-000 files: unreadable case skipped\n");
        return;
    }
    new_root();
    write_tensors("u/model.safetensors", "w");
    write_tensors("u/extra.safetensors", "x");
    write_text("u/config.json", "{}");
    char *p = at("u/extra.safetensors");
    CHECK(chmod(p, 0) == 0);
    free(p);
    struct reg_snapshot *r = scan();
    expect_invalid(r, "u", ST_ERR_SHARD_INVALID, "extra.safetensors");
    const struct reg_file *f = reg_model_find_file(model(r, "u"), "extra.safetensors", 17);
    CHECK(f && f->fd == -1 && f->error.code == ST_ERR_IO);
    reg_snapshot_unref(r);
}

TEST(thousands_of_models)
{
    new_root();
    enum { N = 2000 };
    for (int i = 0; i < N; i++) {
        char rel[64];
        snprintf(rel, sizeof(rel), "many/m%04d/model.safetensors", i);
        write_tensors(rel, "w,b");
    }
    for (int i = 0; i < 500; i++) {
        char rel[64];
        snprintf(rel, sizeof(rel), "r%03d.safetensors", i);
        write_tensors(rel, "w");
    }
    uint64_t t0 = time_mono_ns();
    struct reg_snapshot *r = scan();
    double dt = (double)(time_mono_ns() - t0) / 1e9;
    printf("  scan of %d models: %.3f s\n", N + 500, dt);
    CHECK_EQ_U64(r->n_models, N + 500);
    CHECK_EQ_U64(r->n_invalid, 0);
    CHECK_EQ_U64(r->n_files, N + 500);
    CHECK_EQ_U64(r->n_tensors, 2 * N + 500);
    CHECK(model(r, "many/m1999") && model(r, "r499"));
    CHECK(dt < 10.0);
    reg_snapshot_unref(r);
}

TEST(half_million_tensors)
{
    new_root();
    enum { N = 500000 };
    size_t cap = (size_t)N * 80 + 16, len = 0;
    char *json = xmalloc(cap);
    json[len++] = '{';
    for (size_t i = 0; i < N; i++)
        len += (size_t)snprintf(json + len, cap - len,
                                "%s\"t%zu\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
                                i ? "," : "", i, i, i + 1);
    json[len++] = '}';
    json[len] = '\0';
    write_st("big/model.safetensors", json, N);
    free(json);
    uint64_t t0 = time_mono_ns();
    struct reg_snapshot *r = scan();
    double dt = (double)(time_mono_ns() - t0) / 1e9;
    printf("  scan of one file with %d tensors: %.3f s\n", N, dt);
    const struct reg_model *m = model(r, "big");
    CHECK(m && m->state == MODEL_READY);
    CHECK_EQ_U64(m->n_tensors, N);
    CHECK(has_tensor(m, "t0") && has_tensor(m, "t499999"));
    CHECK(m->tensors[N - 1].t->begin == N - 1);
    CHECK(dt < 20.0);
    reg_snapshot_unref(r);
}

int main(void)
{
    int fds;
    if (registry_fixture_begin(&fds))
        return 1;
    RUN(symlinks);
    RUN(symlink_loops);
    RUN(special_files_skipped);
    RUN(unreadable_file);
    RUN(thousands_of_models);
    RUN(half_million_tensors);
    registry_fixture_end(fds);
    return TEST_SUMMARY();
}
