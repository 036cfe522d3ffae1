/* model_doc: the documents written without a tree are byte for byte the
 * ones the jansson tree gave (the tree renderers are kept below as the
 * reference): over every generated test model (tests/gen/gen_models.py
 * --test, through /usr/bin/python3) and over models made here with names,
 * metadata and messages that need every kind of escape. Python's json
 * module must read each document. Out of memory gives NULL, not an abort. */
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "digest.h"
#include "model_doc.h"
#include "registry.h"
#include "strmap.h"
#include "test.h"
#include "util.h"

#define PY "/usr/bin/python3"

static char base[] = "/tmp/test_model_doc.XXXXXX";

/* ---- the reference: the documents as h_meta.c built them with jansson ---- */

static json_t *ref_error(const struct st_error *e)
{
    return json_pack("{s:s,s:s}", "code", st_status_name(e->code), "message", e->message);
}

static json_t *ref_shape(const uint64_t *shape, uint32_t ndim)
{
    json_t *a = json_array();
    for (uint32_t i = 0; i < ndim; i++)
        json_array_append_new(a, json_integer((json_int_t)shape[i]));
    return a;
}

static json_t *ref_offsets(uint64_t begin, uint64_t end)
{
    return json_pack("[I,I]", (json_int_t)begin, (json_int_t)end);
}

/* jansson's compact rendering, then the newline every JSON answer ends
 * with (server/http/respond.h). */
static char *ref_dump(json_t *doc)
{
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    char *line = text ? xasprintf("%s\n", text) : NULL;
    free(text);
    return line;
}

static char *ref_description(const struct reg_model *m)
{
    json_t *files = json_array(), *metadata = json_object(), *tensors = json_object();
    size_t known = 0;
    for (size_t i = 0; i < m->n_files; i++) {
        const struct reg_file *f = &m->files[i];
        char etag[REG_ETAG_MAX], sha[2 * DIGEST_SHA256_LEN + 1];
        reg_file_etag(f, etag);
        int hashed = reg_file_sha256_hex(f, sha);
        known += (size_t)hashed;
        json_t *o = json_pack("{s:s,s:I,s:s}", "name", f->name, "size", (json_int_t)f->st.size,
                              "etag", etag);
        if (!o)
            continue;
        json_object_set_new(o, "header_length",
                            f->header ? json_integer((json_int_t)f->header->header_len) : json_null());
        json_object_set_new(o, "sha256", hashed ? json_string(sha) : json_null());
        if (f->is_safetensors && f->error.code != ST_OK)
            json_object_set_new(o, "error", ref_error(&f->error));
        json_array_append_new(files, o);
        if (f->header && f->header->has_metadata) {
            json_t *md = json_object();
            for (size_t k = 0; k < f->header->n_metadata; k++)
                json_object_set_new(md, f->header->metadata[k].key,
                                    json_string(f->header->metadata[k].value));
            json_object_set_new(metadata, f->name, md);
        }
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        const struct reg_tensor *t = &m->tensors[i];
        const struct st_tensor *st = t->t;
        json_object_set_new(tensors, st->name,
                            json_pack("{s:s,s:o,s:s,s:o,s:I}", "dtype", dtype_info(st->dtype)->name,
                                      "shape", ref_shape(st->shape, st->ndim), "file",
                                      t->file->name, "data_offsets",
                                      ref_offsets(st->begin, st->end), "nbytes",
                                      (json_int_t)(st->end - st->begin)));
    }
    json_t *doc = json_pack("{s:s,s:s,s:b,s:I,s:I,s:o,s:o,s:o}", "name", m->name, "state",
                            m->state == MODEL_READY ? "ready" : "invalid", "sharded", m->sharded,
                            "tensor_count", (json_int_t)m->n_tensors, "bytes",
                            (json_int_t)m->tensor_bytes, "files", files, "metadata", metadata,
                            "tensors", tensors);
    if (m->index_file)
        json_object_set_new(doc, "index", json_string(m->index_file->name));
    if (m->state != MODEL_READY)
        json_object_set_new(doc, "error", ref_error(&m->error));
    json_object_set_new(doc, "hashes",
                        json_pack("{s:I,s:I,s:b}", "known", (json_int_t)known, "files",
                                  (json_int_t)m->n_files, "complete", known == m->n_files));
    return ref_dump(doc);
}

static char *ref_header(const struct reg_model *m)
{
    json_t *doc = json_object(), *md = json_object();
    json_object_set_new(doc, "__metadata__", md);
    for (size_t i = 0; i < m->n_files; i++) {
        const struct st_header *h = m->files[i].header;
        for (size_t k = 0; h && k < h->n_metadata; k++)
            if (!json_object_get(md, h->metadata[k].key))
                json_object_set_new(md, h->metadata[k].key, json_string(h->metadata[k].value));
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        const struct st_tensor *st = m->tensors[i].t;
        json_object_set_new(doc, st->name,
                            json_pack("{s:s,s:o,s:o,s:s}", "dtype", dtype_info(st->dtype)->name,
                                      "shape", ref_shape(st->shape, st->ndim), "data_offsets",
                                      ref_offsets(st->begin, st->end), "file",
                                      m->tensors[i].file->name));
    }
    return ref_dump(doc);
}

/* The description as doc_cache keeps it: its middle and its ends (at the
 * hashes known now), put together. NULL when a part could not be rendered. */
static char *description(const struct reg_model *m)
{
    size_t mid_len, head_len, len, known, n = 0;
    char *mid = model_doc_description_middle(m, &mid_len);
    char *ends = model_doc_description_ends(m, &head_len, &len, &known);
    char *whole = NULL;
    for (size_t i = 0; i < m->n_files; i++)
        n += (size_t)reg_file_hashed(&m->files[i]);
    if (mid && ends) {
        CHECK_EQ_U64(known, n);
        CHECK_EQ_U64(strlen(mid), mid_len);
        whole = xasprintf("%.*s%s%s", (int)head_len, ends, mid, ends + head_len);
    }
    free(mid);
    free(ends);
    return whole;
}

/* The description in parts is the reference's document. */
static void check_parts(const struct reg_model *m)
{
    char *whole = description(m), *ref = ref_description(m);
    CHECK(whole && ref);
    if (whole && ref && strcmp(whole, ref) != 0) {
        fprintf(stderr, "  model %s, description in parts:\n    new %.300s\n    ref %.300s\n",
                m->name, whole, ref);
        CHECK(!"documents differ");
    }
    free(whole);
    free(ref);
}

/* ---- models on disk ---- */

/* Renders every model of root both ways; each new document is also written
 * to out/<n>.json for Python. Returns the number of models. */
static size_t compare_all(const char *root, const char *out)
{
    struct st_error err;
    struct reg_snapshot *r = reg_snapshot_scan(root, 1, NULL, &err);
    CHECK(r != NULL);
    if (!r)
        return 0;
    mkdir(out, 0755);
    for (size_t i = 0; i < r->n_models; i++) {
        const struct reg_model *m = r->models[i];
        char *(*const mine[2])(const struct reg_model *) = {description, model_doc_header};
        char *(*const ref[2])(const struct reg_model *) = {ref_description, ref_header};
        for (int k = 0; k < 2; k++) {
            char *a = mine[k](m), *b = ref[k](m);
            CHECK(a && b);
            if (a && b && strcmp(a, b) != 0) {
                fprintf(stderr, "  model %s, %s:\n    new %.300s\n    ref %.300s\n", m->name,
                        k ? "header" : "description", a, b);
                CHECK(!"documents differ");
            }
            char *path = xasprintf("%s/%zu.%d.json", out, i, k);
            if (a)
                test_write_file(path, a, strlen(a));
            free(path);
            free(a);
            free(b);
        }
        /* and with the hashes of every other file known */
        for (size_t f = 0; f < m->n_files; f += 2) {
            unsigned char sha[32];
            memset(sha, (int)(f * 7 + 1), sizeof(sha));
            reg_file_set_hashes(&m->files[f], sha, NULL);
        }
        check_parts(m);
    }
    size_t n = r->n_models;
    reg_snapshot_unref(r);
    return n;
}

/* Python's json reads every document in dir. */
static void python_reads(const char *dir)
{
    if (access(PY, X_OK) != 0) {
        printf("  SKIP: %s not available, Python check skipped\n", PY);
        return;
    }
    char *cmd = xasprintf(PY " -c 'import glob, json, sys\n"
                          "fs = glob.glob(sys.argv[1] + \"/*.json\")\n"
                          "[json.loads(open(f, \"rb\").read().decode(\"utf-8\")) for f in fs]\n"
                          "assert fs' '%s'", dir);
    CHECK(system(cmd) == 0);
    free(cmd);
}

TEST(generated_test_models_match_the_tree)
{
    if (access(PY, X_OK) != 0 || system(PY " -c 'import numpy' >/dev/null 2>&1") != 0) {
        printf("  SKIP: %s with numpy not available, generated models not compared\n", PY);
        return;
    }
    char *root = xasprintf("%s/gen", base), *out = xasprintf("%s/gen-out", base);
    char *cmd = xasprintf(PY " tests/gen/gen_models.py --test '%s' >/dev/null", root);
    CHECK(system(cmd) == 0);
    size_t n = compare_all(root, out);
    printf("  %zu generated models compared\n", n);
    CHECK(n >= 20);
    python_reads(out);
    free(cmd);
    free(root);
    free(out);
}

TEST(escapes_metadata_and_errors_match_the_tree)
{
    char *root = xasprintf("%s/edge", base), *out = xasprintf("%s/edge-out", base), *p;
    /* names and metadata needing every escape, non-ASCII, '/', an empty
     * metadata object in one shard and a key two shards both set */
    p = xasprintf("%s/esc/model-1.safetensors", root);
    test_write_st(p,
             "{\"__metadata__\":{\"q\\\"k\":\"v\\\\1\\n\",\"ctl\\u0001\":\"\\t\\b\\f\\r\\u001f\\u007f\","
             "\"caf\\u00e9\":\"\\ud83d\\ude00 \\/ \\u2028\",\"both\":\"first\"},"
             "\"w\\\"1\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
             "\"a/b\\\\c\\u0002\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[24,25]},"
             "\"\xe6\x97\xa5\":{\"dtype\":\"BF16\",\"shape\":[0,4],\"data_offsets\":[25,25]}}",
             25);
    free(p);
    p = xasprintf("%s/esc/model-2.safetensors", root);
    test_write_st(p, "{\"__metadata__\":{\"both\":\"second\",\"only2\":\"x\"},"
                "\"z\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8);
    free(p);
    p = xasprintf("%s/esc/tok\"en\\izer.json", root);
    test_write_file(p, "{}", 2);
    free(p);
    p = xasprintf("%s/emptymeta/model.safetensors", root);
    test_write_st(p, "{\"__metadata__\":{},\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    free(p);
    /* invalid: a message quoting a name with a quote, a sharded model */
    p = xasprintf("%s/bad/model.safetensors", root);
    test_write_st(p, "{\"t\\\"q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4);
    free(p);
    p = xasprintf("%s/shard/model-00001-of-00001.safetensors", root);
    test_write_st(p, "{\"s\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
    free(p);
    p = xasprintf("%s/shard/model.safetensors.index.json", root);
    const char *idx = "{\"weight_map\":{\"s\":\"model-00001-of-00001.safetensors\"}}";
    test_write_file(p, idx, strlen(idx));
    free(p);
    p = xasprintf("%s/top.safetensors", root);
    test_write_st(p, "{\"k\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3);
    free(p);
    CHECK_EQ_U64(compare_all(root, out), 5);
    python_reads(out);
    free(root);
    free(out);
}

TEST(out_of_memory_gives_null)
{
#if defined(__SANITIZE_ADDRESS__)
    printf("  SKIP: ASan needs its address space, no RLIMIT_AS test\n");
    return;
#endif
    /* 200,000 tensors: documents of about 20 MB */
    size_t n = 200000, cap = n * 80 + 16, len = 1;
    char *json = xmalloc(cap);
    json[0] = '{';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(json + len, cap - len,
                                "%s\"layer.%06zu.weight\":{\"dtype\":\"U8\",\"shape\":[1],"
                                "\"data_offsets\":[%zu,%zu]}",
                                i ? "," : "", i, i, i + 1);
    json[len++] = '}';
    json[len] = '\0';
    char *root = xasprintf("%s/oom", base), *p = xasprintf("%s/big/model.safetensors", root);
    test_write_st(p, json, n);
    free(json);
    struct st_error err;
    struct reg_snapshot *r = reg_snapshot_scan(root, 1, NULL, &err);
    CHECK(r && r->n_models == 1 && r->models[0]->state == MODEL_READY);
    if (!r || r->n_models != 1) {
        reg_snapshot_unref(r);
        return;
    }
    struct rlimit old, tight;
    CHECK(getrlimit(RLIMIT_AS, &old) == 0);
    tight = old;
    tight.rlim_cur = vm_size_bytes() + (4 << 20);
    CHECK(setrlimit(RLIMIT_AS, &tight) == 0);
    char *a = description(r->models[0]), *b = model_doc_header(r->models[0]);
    CHECK(setrlimit(RLIMIT_AS, &old) == 0);
    CHECK(a == NULL);
    CHECK(b == NULL);
    free(a);
    free(b);
    /* with room again, both render */
    a = description(r->models[0]);
    b = model_doc_header(r->models[0]);
    CHECK(a && strlen(a) > n * 60);
    CHECK(b && strlen(b) > n * 60);
    free(a);
    free(b);
    reg_snapshot_unref(r);
    free(p);
    free(root);
}

int main(void)
{
    CHECK(mkdtemp(base) != NULL);
    RUN(generated_test_models_match_the_tree);
    RUN(escapes_metadata_and_errors_match_the_tree);
    RUN(out_of_memory_gives_null);
    char *cmd = xasprintf("rm -rf '%s'", base);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", base);
    free(cmd);
    return TEST_SUMMARY();
}
