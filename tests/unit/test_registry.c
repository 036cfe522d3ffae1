/* registry: model trees built in a temp directory, one per test, scanned
 * and checked model by model: the discovery rules, every cross-check of a
 * sharded model, the single-model option, scan errors and the snapshot
 * holder. Symlinks, special files and scale are in test_registry_fs.c. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "registry.h"
#include "registry_fixture.h"
#include "shared_doc.h"
#include "strmap.h"
#include "test.h"
#include "util.h"

TEST(single_file_root_model)
{
    new_root();
    write_tensors("solo.safetensors", "a,b");
    write_text("README.txt", "not a model");
    write_text("notes.safetensors.txt", "not a model either");
    struct reg_snapshot *r = scan();
    CHECK_EQ_U64(r->n_models, 1);
    CHECK_EQ_U64(r->generation, 7);
    const struct reg_model *m = model(r, "solo");
    CHECK(m && m->state == MODEL_READY);
    CHECK(strcmp(m->dir, "") == 0 && strcmp(m->files[0].path, "solo.safetensors") == 0);
    CHECK_EQ_U64(m->n_files, 1);
    CHECK_STR(m->files[0].name, "solo.safetensors");
    CHECK(m->files[0].is_safetensors && m->files[0].header && m->files[0].fd >= 0);
    CHECK_EQ_U64(m->n_tensors, 2);
    CHECK(has_tensor(m, "a") && has_tensor(m, "b") && !has_tensor(m, "c"));
    CHECK_EQ_U64(m->tensor_bytes, 8);
    CHECK(m->files[0].data_start == 8 + m->files[0].header->header_len);
    char etag[REG_ETAG_MAX];
    reg_file_etag(&m->files[0], etag);
    CHECK(strncmp(etag, "W/\"", 3) == 0 && !reg_file_hashed(&m->files[0]));
    CHECK(!m->sharded && m->index_file == NULL);
    CHECK(model(r, "README") == NULL);
    CHECK_EQ_U64(r->n_files, 1);
    CHECK_EQ_U64(r->bytes, m->files[0].st.size);
    reg_snapshot_unref(r);
}

TEST(directory_model)
{
    new_root();
    write_tensors("llama/model.safetensors", "embed,head");
    write_text("llama/config.json", "{}");
    write_text("llama/.hidden", "x");
    write_text("llama/tokenizer.json", "{\"t\":1}");
    struct reg_snapshot *r = scan();
    const struct reg_model *m = model(r, "llama");
    CHECK(m && m->state == MODEL_READY);
    CHECK_EQ_U64(m->n_files, 3);
    CHECK_STR(m->files[0].name, "config.json");
    CHECK_STR(m->files[1].name, "model.safetensors");
    CHECK_STR(m->files[2].name, "tokenizer.json");
    const struct reg_file *f = reg_model_find_file(m, "config.json", 11);
    /* Plain files are not kept open: an answer opens them again, below the root. */
    CHECK(f && !f->is_safetensors && !f->header && f->fd == -1 && f->error.code == ST_OK);
    int pfd = f ? reg_open_below(m->root, f, O_RDONLY) : -1;
    char buf[16] = "";
    CHECK(pfd >= 0 && read(pfd, buf, sizeof(buf) - 1) == 2 && strcmp(buf, "{}") == 0);
    if (pfd >= 0)
        close(pfd);
    CHECK(m->files[1].fd >= 0); /* the .safetensors file is */
    CHECK(reg_model_find_file(m, ".hidden", 7) == NULL);
    CHECK_EQ_U64(m->n_tensors, 2);
    const struct reg_tensor *t = reg_model_find_tensor(m, "head", 4);
    CHECK(t && t->file == &m->files[1] && t->t->begin == 4);
    CHECK(strcmp(m->dir, m->name) == 0);
    CHECK(m->tensors[0].t->begin == 0 && m->tensors[1].t->begin == 4);
    reg_snapshot_unref(r);
}

TEST(nested_models)
{
    new_root();
    write_tensors("org/name/model.safetensors", "w");
    write_tensors("org/other/deeper/x.safetensors", "w");
    write_text("org/README.md", "org is not a model");
    write_tensors("top/model.safetensors", "t");
    write_tensors("top/sub/model.safetensors", "s"); /* a model inside a model */
    struct reg_snapshot *r = scan();
    CHECK_EQ_U64(r->n_models, 4);
    CHECK(model(r, "org") == NULL);
    CHECK(model(r, "org/name") && model(r, "org/name")->state == MODEL_READY);
    CHECK(model(r, "org/other/deeper") != NULL);
    CHECK(model(r, "org/other") == NULL);
    const struct reg_model *top = model(r, "top");
    CHECK(top && top->n_files == 1 && has_tensor(top, "t") && !has_tensor(top, "s"));
    CHECK(model(r, "top/sub") && has_tensor(model(r, "top/sub"), "s"));
    /* sorted by name */
    for (size_t i = 1; i < r->n_models; i++)
        CHECK(strcmp(r->models[i - 1]->name, r->models[i]->name) < 0);
    reg_snapshot_unref(r);

    /* max_depth: directories deeper than it are not looked at */
    struct reg_scan_opts o = {.max_depth = 2};
    struct st_error err;
    r = reg_snapshot_scan(root, 1, &o, &err);
    CHECK(model(r, "org/name") != NULL);
    CHECK(model(r, "org/other/deeper") == NULL);
    reg_snapshot_unref(r);
}

static const char *index_json(const char *map)
{
    static char buf[1024];
    snprintf(buf, sizeof(buf), "{\"metadata\":{\"total_size\":16},\"weight_map\":{%s}}", map);
    return buf;
}

TEST(sharded_valid)
{
    new_root();
    write_tensors("sh/model-00001-of-00002.safetensors", "a,b");
    write_tensors("sh/model-00002-of-00002.safetensors", "c,d");
    write_tensors("sh/consolidated.safetensors", "a,b,c,d"); /* not named: served, no tensors */
    write_text("sh/model.safetensors.index.json",
               index_json("\"c\":\"model-00002-of-00002.safetensors\","
                          "\"a\":\"model-00001-of-00002.safetensors\","
                          "\"d\":\"model-00002-of-00002.safetensors\","
                          "\"b\":\"model-00001-of-00002.safetensors\""));
    write_text("sh/config.json", "{}");
    struct reg_snapshot *r = scan();
    const struct reg_model *m = model(r, "sh");
    CHECK(m && m->state == MODEL_READY);
    if (m && m->state != MODEL_READY)
        fprintf(stderr, "  %s\n", m->error.message);
    CHECK(m->sharded);
    CHECK(m->index_file && !strcmp(m->index_file->name, "model.safetensors.index.json"));
    CHECK_EQ_U64(m->n_files, 5);
    CHECK_EQ_U64(m->n_tensors, 4);
    CHECK_EQ_U64(m->tensor_bytes, 16);
    const struct reg_tensor *c = reg_model_find_tensor(m, "c", 1);
    CHECK(c && !strcmp(c->file->name, "model-00002-of-00002.safetensors"));
    /* (file, begin) order */
    CHECK_STR(m->tensors[0].t->name, "a");
    CHECK_STR(m->tensors[1].t->name, "b");
    CHECK_STR(m->tensors[2].t->name, "c");
    CHECK_STR(m->tensors[3].t->name, "d");
    CHECK(reg_model_find_file(m, "consolidated.safetensors", 24) != NULL);
    CHECK_EQ_U64(r->n_tensors, 4);
    reg_snapshot_unref(r);
}

TEST(sharded_failures)
{
    new_root();
    /* shard missing */
    write_tensors("missing/s1.safetensors", "a");
    write_text("missing/model.safetensors.index.json",
               index_json("\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\""));
    /* a shard that is not a safetensors file */
    write_tensors("notst/s1.safetensors", "a");
    write_text("notst/config.json", "{}");
    write_text("notst/model.safetensors.index.json",
               index_json("\"a\":\"s1.safetensors\",\"b\":\"config.json\""));
    /* tensor not in the shard the map names */
    write_tensors("notin/s1.safetensors", "a");
    write_tensors("notin/s2.safetensors", "b");
    write_text("notin/model.safetensors.index.json",
               index_json("\"a\":\"s2.safetensors\",\"b\":\"s2.safetensors\""));
    /* a shard holds a tensor the index does not map */
    write_tensors("unmapped/s1.safetensors", "a,extra");
    write_text("unmapped/model.safetensors.index.json", index_json("\"a\":\"s1.safetensors\""));
    /* a tensor in two shards, mapped to one */
    write_tensors("twice/s1.safetensors", "a");
    write_tensors("twice/s2.safetensors", "a,b");
    write_text("twice/model.safetensors.index.json",
               index_json("\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\""));
    /* two indexes */
    write_tensors("twoidx/s1.safetensors", "a");
    write_text("twoidx/a.safetensors.index.json", index_json("\"a\":\"s1.safetensors\""));
    write_text("twoidx/b.safetensors.index.json", index_json("\"a\":\"s1.safetensors\""));
    /* index errors */
    write_tensors("badjson/s1.safetensors", "a");
    write_text("badjson/model.safetensors.index.json", "{\"weight_map\":");
    write_tensors("escape/s1.safetensors", "a");
    write_text("escape/model.safetensors.index.json", index_json("\"a\":\"../s1.safetensors\""));
    write_tensors("empty/s1.safetensors", "a");
    write_text("empty/model.safetensors.index.json", "{\"weight_map\":{}}");
    /* a shard that fails validation */
    write_tensors("badshard/s1.safetensors", "a");
    write_st("badshard/s2.safetensors", "{\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 3);
    write_text("badshard/model.safetensors.index.json",
               index_json("\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\""));
    write_tensors("fine/model.safetensors", "a");

    struct reg_snapshot *r = scan();
    expect_invalid(r, "missing", ST_ERR_SHARD_MISSING, "s2.safetensors");
    expect_invalid(r, "notst", ST_ERR_SHARD_MISSING, "config.json");
    expect_invalid(r, "notin", ST_ERR_TENSOR_NOT_IN_SHARD, "\"a\"");
    CHECK_CONTAINS(model(r, "notin")->error.message, "s2.safetensors");
    expect_invalid(r, "unmapped", ST_ERR_TENSOR_NOT_IN_INDEX, "\"extra\"");
    expect_invalid(r, "twice", ST_ERR_TENSOR_NOT_IN_INDEX, "\"a\"");
    CHECK_CONTAINS(model(r, "twice")->error.message, "s2.safetensors");
    expect_invalid(r, "twoidx", ST_ERR_MULTIPLE_INDEXES, "b.safetensors.index.json");
    CHECK(model(r, "twoidx")->sharded && model(r, "twoidx")->index_file == NULL);
    expect_invalid(r, "badjson", ST_ERR_INDEX_JSON, "model.safetensors.index.json");
    expect_invalid(r, "escape", ST_ERR_INDEX_SHARD_PATH, "../s1.safetensors");
    expect_invalid(r, "empty", ST_ERR_INDEX_EMPTY, NULL);
    expect_invalid(r, "badshard", ST_ERR_SHARD_INVALID, "s2.safetensors");
    const struct reg_model *bs = model(r, "badshard");
    const struct reg_file *f = reg_model_find_file(bs, "s2.safetensors", 14);
    CHECK(f && f->error.code != ST_OK && f->header == NULL);
    CHECK(model(r, "fine")->state == MODEL_READY);
    CHECK_EQ_U64(r->n_invalid, 10);
    CHECK_EQ_U64(r->n_tensors, 1);
    reg_snapshot_unref(r);
}

TEST(duplicate_tensor)
{
    new_root();
    write_tensors("dup/a.safetensors", "x,y");
    write_tensors("dup/b.safetensors", "z,y");
    write_tensors("merge/a.safetensors", "x");
    write_tensors("merge/b.safetensors", "y");
    struct reg_snapshot *r = scan();
    expect_invalid(r, "dup", ST_ERR_DUPLICATE_TENSOR, "\"y\"");
    CHECK_CONTAINS(model(r, "dup")->error.message, "a.safetensors");
    CHECK_CONTAINS(model(r, "dup")->error.message, "b.safetensors");
    const struct reg_model *m = model(r, "merge");
    CHECK(m->state == MODEL_READY && m->n_tensors == 2 && has_tensor(m, "x") && has_tensor(m, "y"));
    reg_snapshot_unref(r);

    /* a 301-byte name of 2-byte characters is cut inside the message, never mid-character */
    new_root();
    char name[400] = "x";
    for (int i = 0; i < 150; i++)
        strcat(name, "\xc3\xa9");
    write_tensors("long/a.safetensors", name);
    write_tensors("long/b.safetensors", name);
    r = scan();
    expect_invalid(r, "long", ST_ERR_DUPLICATE_TENSOR, NULL);
    const char *msg = model(r, "long")->error.message;
    CHECK(utf8_valid(msg, strlen(msg)));
    reg_snapshot_unref(r);
}

TEST(name_conflict)
{
    new_root();
    write_tensors("dup.safetensors", "a");
    write_tensors("dup/model.safetensors", "b");
    write_text("dup/config.json", "{}");
    write_tensors("dupe.safetensors", "a"); /* a similar name is no conflict */
    struct reg_snapshot *r = scan();
    CHECK_EQ_U64(r->n_models, 2);
    expect_invalid(r, "dup", ST_ERR_NAME_CONFLICT, "dup");
    const struct reg_model *m = model(r, "dup");
    CHECK(m && m->n_files == 2 && m->dir[0] != 0); /* the directory's files */
    CHECK(model(r, "dupe")->state == MODEL_READY);
    CHECK_EQ_U64(r->n_invalid, 1);
    reg_snapshot_unref(r);
}

TEST(invalid_beside_valid)
{
    new_root();
    write_raw("bad/model.safetensors", "\x05\0\0\0\0\0\0\0{", 9);
    write_text("bad/config.json", "{}");
    write_raw("tiny.safetensors", "abc", 3);
    write_tensors("good/model.safetensors", "w");
    write_tensors("good2.safetensors", "w");
    struct reg_snapshot *r = scan();
    CHECK_EQ_U64(r->n_models, 4);
    expect_invalid(r, "bad", ST_ERR_SHARD_INVALID, "model.safetensors");
    CHECK(model(r, "bad")->files[1].error.code != ST_OK);
    CHECK(reg_model_find_file(model(r, "bad"), "config.json", 11) != NULL);
    expect_invalid(r, "tiny", ST_ERR_SHARD_INVALID, "tiny.safetensors");
    CHECK(model(r, "good")->state == MODEL_READY);
    CHECK(model(r, "good2")->state == MODEL_READY);
    CHECK_EQ_U64(r->n_invalid, 2);
    reg_snapshot_unref(r);
}

TEST(single_model_option)
{
    new_root();
    write_tensors("one/model.safetensors", "w");
    write_text("one/config.json", "{}");
    write_tensors("one/sub/model.safetensors", "s");
    char *dir = at("one");
    CHECK(registry_dir_is_model(dir));
    CHECK(!registry_dir_is_model(root));
    struct reg_scan_opts o = {.single_model = 1};
    struct st_error err;
    struct reg_snapshot *r = reg_snapshot_scan(dir, 1, &o, &err);
    CHECK_EQ_U64(r->n_models, 1);
    const struct reg_model *m = model(r, "one");
    CHECK(m && m->state == MODEL_READY && m->n_files == 2 && has_tensor(m, "w"));
    reg_snapshot_unref(r);
    free(dir);
}

TEST(scan_errors)
{
    struct st_error err;
    CHECK(reg_snapshot_scan("/nonexistent/models", 1, NULL, &err) == NULL);
    CHECK(err.code == ST_ERR_IO);
    CHECK_CONTAINS(err.message, "/nonexistent/models");
    new_root();
    write_text("file", "x");
    char *p = at("file");
    CHECK(reg_snapshot_scan(p, 1, NULL, &err) == NULL);
    CHECK(err.code == ST_ERR_IO);
    free(p);
    /* an empty root is fine */
    struct reg_snapshot *r = scan();
    CHECK_EQ_U64(r->n_models, 0);
    CHECK(model(r, "x") == NULL);
    reg_snapshot_unref(r);
}

TEST(holder)
{
    new_root();
    write_tensors("a/model.safetensors", "w");
    struct reg_snapshot *r1 = scan();
    struct registry h;
    registry_init(&h, r1);
    struct reg_snapshot *got = registry_acquire(&h);
    CHECK(got == r1);
    CHECK_EQ_U64(atomic_load(&r1->refs), 2);

    write_tensors("b/model.safetensors", "v");
    struct reg_snapshot *r2 = reg_snapshot_scan(root, 8, NULL, NULL);
    registry_swap(&h, r2);
    /* the old snapshot is still whole for its reader */
    CHECK_EQ_U64(atomic_load(&r1->refs), 1);
    const struct reg_model *m = model(got, "a");
    CHECK(m && model(got, "b") == NULL);
    const struct reg_tensor *t = reg_model_find_tensor(m, "w", 1);
    unsigned char buf[4] = {1, 1, 1, 1};
    CHECK(fileio_pread_full(t->file->fd, buf, 4, t->file->data_start + t->t->begin) == 0);
    CHECK(buf[0] == 0 && buf[3] == 0);
    struct reg_snapshot *now = registry_acquire(&h);
    CHECK(now == r2 && now->generation == 8 && model(now, "b") != NULL);
    reg_snapshot_unref(now);
    reg_snapshot_unref(got); /* frees r1 */
    CHECK(reg_snapshot_ref(NULL) == NULL);
    reg_snapshot_unref(NULL);
    registry_destroy(&h);

    struct registry empty;
    registry_init(&empty, NULL);
    CHECK(registry_acquire(&empty) == NULL);
    registry_destroy(&empty);
}

/* Readers racing reloads, as request threads race the main thread: each
 * takes the snapshot, pins a model beyond it, reads a tensor and the
 * model's cached document (and replaces it, as the renderer does), while
 * snapshots that reuse the model are swapped in and dropped. Run under
 * ThreadSanitizer by `make tsan`, which reports any unordered access. */
struct racer {
    struct registry *h;
    _Atomic int stop;
    _Atomic unsigned reads, bad;
};

static void *race_reader(void *arg)
{
    struct racer *rc = arg;
    while (!atomic_load(&rc->stop)) {
        struct reg_snapshot *r = registry_acquire(rc->h);
        const struct reg_model *m = r ? model(r, "a") : NULL;
        struct reg_model *pin = reg_model_ref(m);
        reg_snapshot_unref(r); /* the model outlives the snapshot it came from */
        if (!pin) {
            atomic_fetch_add(&rc->bad, 1);
            break;
        }
        const struct reg_tensor *t = reg_model_find_tensor(pin, "w", 1);
        unsigned char buf[4] = {1, 1, 1, 1};
        if (!t || fileio_pread_full(t->file->fd, buf, 4, t->file->data_start + t->t->begin) != 0 ||
            buf[0] != 0)
            atomic_fetch_add(&rc->bad, 1);
        struct shared_doc *d = reg_model_doc(pin, REG_DOC_HEADER);
        if (d && d->len != 5)
            atomic_fetch_add(&rc->bad, 1);
        shared_doc_unref(d);
        d = shared_doc_new(xstrdup("{\"x\"}"), 5, 0);
        reg_model_set_doc(pin, REG_DOC_HEADER, d); /* takes its own reference */
        shared_doc_unref(d);
        reg_model_unref(pin);
        atomic_fetch_add(&rc->reads, 1);
    }
    return NULL;
}

TEST(readers_race_reloads)
{
    new_root();
    write_tensors("a/model.safetensors", "w");
    struct registry h;
    registry_init(&h, scan());
    struct racer rc = {.h = &h};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, race_reader, &rc) == 0);
    for (int i = 0; i < 40; i++) {
        struct reg_snapshot *prev = registry_acquire(&h);
        struct reg_scan_opts opts = {.prev = prev};
        struct st_error err;
        struct reg_snapshot *next = reg_snapshot_scan(root, (uint64_t)i + 10, &opts, &err);
        CHECK(next && model(next, "a") == model(prev, "a")); /* reused */
        reg_snapshot_unref(prev);
        registry_swap(&h, next);
    }
    WAIT_UNTIL(atomic_load(&rc.reads) >= 1000, TEST_WAIT_MS);
    atomic_store(&rc.stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ_U64(atomic_load(&rc.bad), 0);
    registry_destroy(&h);
}

int main(void)
{
    int fds;
    if (registry_fixture_begin(&fds))
        return 1;
    RUN(single_file_root_model);
    RUN(directory_model);
    RUN(nested_models);
    RUN(sharded_valid);
    RUN(sharded_failures);
    RUN(duplicate_tensor);
    RUN(name_conflict);
    RUN(invalid_beside_valid);
    RUN(single_model_option);
    RUN(scan_errors);
    RUN(holder);
    RUN(readers_race_reloads);
    registry_fixture_end(fds);
    return TEST_SUMMARY();
}
