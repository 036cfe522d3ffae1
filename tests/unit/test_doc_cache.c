/* doc_cache: model documents rendered on the renderer's thread only, once
 * per state, and shared by reference (issue 23). Asking never renders on
 * the asking thread; 200 requests from 4 threads for a document being
 * rendered get one rendering; a description shows the hashes known when it
 * was rendered, lags them by at most DOC_REFRESH_MS, and shows them all as
 * soon as they are all known; its states share one rendering of the
 * tensors; a reference outlives the document's replacement; its bytes are
 * valid JSON (jansson) whose "hashes" count the files hashed, and its hash
 * is the FNV-1a of those bytes (computed here). Stopping answers every
 * waiter once. */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "doc_cache.h"
#include "metrics.h"
#include "model_doc.h"
#include "registry.h"
#include "test.h"
#include "util.h"

/* Renders made so far (tensord_documents_rendered_total): a description's
 * middle (once per model), each state of a description, each merged header. */
static uint64_t renders(void)
{
    const char *series = "\ntensord_documents_rendered_total ";
    char *text = metrics_render_prometheus(), *p = text ? strstr(text, series) : NULL;
    uint64_t n = p ? strtoull(p + strlen(series), NULL, 10) : UINT64_MAX;
    free(text);
    return n;
}

static char base[] = "/tmp/test_doc_cache.XXXXXX";
static struct reg_snapshot *snap;
static const struct reg_model *model;

/* Enough that a render takes a while and requests pile up behind it (fewer
 * under ThreadSanitizer, which makes rendering ten times slower). */
#if defined(__SANITIZE_THREAD__)
#define N_TENSORS 4000
#else
#define N_TENSORS 20000
#endif

/* base/m: model.safetensors with N_TENSORS small tensors, config.json and
 * tokenizer.json: three files whose hashes the tests set by hand. */
static void make_model(void)
{
    size_t cap = (size_t)N_TENSORS * 96 + 64, len = 0;
    char *json = xmalloc(cap);
    len += (size_t)snprintf(json + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (unsigned i = 0; i < N_TENSORS; i++)
        len += (size_t)snprintf(json + len, cap - len,
                                ",\"layers.%u.weight\":{\"dtype\":\"F32\",\"shape\":[2],"
                                "\"data_offsets\":[%u,%u]}", i, 8 * i, 8 * i + 8);
    json[len++] = '}';
    json[len] = '\0';
    char *p = xasprintf("%s/root/m/model.safetensors", base);
    test_write_st(p, json, (size_t)N_TENSORS * 8);
    free(p);
    p = xasprintf("%s/root/m/config.json", base);
    test_write_file(p, "{}", 2);
    free(p);
    p = xasprintf("%s/root/m/tokenizer.json", base);
    test_write_file(p, "{}", 2);
    free(p);
    free(json);
    char *root = xasprintf("%s/root", base);
    struct st_error err;
    snap = reg_snapshot_scan(root, 1, NULL, &err);
    free(root);
    CHECK(snap && snap->n_models == 1);
    model = snap->models[0];
    CHECK(model->state == MODEL_READY && model->n_files == 3 && model->n_tensors == N_TENSORS);
}

static void hash_file(size_t i)
{
    unsigned char sha[32];
    memset(sha, (int)(0x10 + i), sizeof(sha));
    reg_file_set_hashes(&model->files[i], sha, NULL);
}

/* ---- waiting for the renderer -------------------------------------------- */

struct waits {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned called, ready, off_thread, twice;
    pthread_t asker[8];
    unsigned n_askers;
};

struct ask {
    struct waits *w;
    unsigned done; /* this ask's callbacks */
};

static void answered(void *arg, enum doc_result r)
{
    struct ask *a = arg;
    struct waits *w = a->w;
    pthread_mutex_lock(&w->lock);
    w->twice += a->done++ > 0;
    w->called++;
    w->ready += r == DOC_READY;
    int mine = 0;
    for (unsigned i = 0; i < w->n_askers; i++)
        mine |= pthread_equal(pthread_self(), w->asker[i]);
    w->off_thread += !mine;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static int wait_called(struct waits *w, unsigned n)
{
    pthread_mutex_lock(&w->lock);
    uint64_t end = time_mono_ns() + 10000000000ull;
    while (w->called < n && time_mono_ns() < end) {
        pthread_mutex_unlock(&w->lock);
        usleep(2000);
        pthread_mutex_lock(&w->lock);
    }
    int ok = w->called == n;
    pthread_mutex_unlock(&w->lock);
    return ok;
}

/* Renders (m, kind) through the cache and waits for it. */
static int render_now(struct doc_cache *dc, enum doc_kind kind)
{
    struct waits w = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
                      .asker = {pthread_self()}, .n_askers = 1};
    struct ask a = {.w = &w};
    CHECK(doc_cache_render(dc, model, NULL, kind, answered, &a) == 0);
    return wait_called(&w, 1) && w.ready == 1;
}

/* ---- checks of one document ------------------------------------------------ */

static char *bytes_of(const struct shared_doc *d)
{
    char *text = xmalloc(d->len + 1);
    shared_doc_source.read((void *)d, 0, text, d->len);
    text[d->len] = '\0';
    return text;
}

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
    return h;
}

/* d is valid JSON whose "hashes" say `known` of the model's files, with
 * that many sha256 values, N_TENSORS tensors, and d->hash its bytes' FNV-1a. */
static void check_description(const struct shared_doc *d, size_t known)
{
    char *text = bytes_of(d);
    CHECK(d->hash == fnv1a(text, d->len));
    CHECK_EQ_U64(d->key, known);
    json_error_t je;
    json_t *doc = json_loads(text, 0, &je);
    CHECK(doc != NULL);
    json_t *h = json_object_get(doc, "hashes");
    CHECK_EQ_U64(json_integer_value(json_object_get(h, "known")), known);
    CHECK(json_is_true(json_object_get(h, "complete")) == (known == 3));
    size_t shas = 0;
    json_t *files = json_object_get(doc, "files"), *f;
    size_t i;
    json_array_foreach(files, i, f)
        shas += json_is_string(json_object_get(f, "sha256"));
    CHECK_EQ_U64(shas, known);
    CHECK_EQ_U64(json_object_size(json_object_get(doc, "tensors")), N_TENSORS);
    json_decref(doc);
    free(text);
}

/* ---- the tests -------------------------------------------------------------- */

struct burst {
    struct doc_cache *dc;
    struct waits *w;
    struct ask asks[50];
};

static void *ask_50(void *arg)
{
    struct burst *b = arg;
    for (unsigned i = 0; i < 50; i++) {
        b->asks[i].w = b->w;
        /* what a request does: take it when fresh, else ask */
        struct shared_doc *d = doc_cache_get(model, DOC_DESCRIPTION, 1);
        if (d) {
            shared_doc_unref(d);
            answered(&b->asks[i], DOC_READY);
            continue;
        }
        CHECK(doc_cache_render(b->dc, model, NULL, DOC_DESCRIPTION, answered, &b->asks[i]) == 0);
    }
    return NULL;
}

TEST(a_burst_gets_one_rendering_on_the_renderer_thread)
{
    struct doc_cache *dc = doc_cache_start();
    hash_file(0);
    /* Asking never renders. */
    uint64_t before = renders();
    CHECK(doc_cache_get(model, DOC_DESCRIPTION, 1) == NULL);
    CHECK(doc_cache_get(model, DOC_DESCRIPTION, 0) == NULL);
    CHECK(doc_cache_get(model, DOC_HEADER, 1) == NULL);
    CHECK_EQ_U64(renders() - before, 0);
    struct waits w = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    static struct burst bursts[4];
    pthread_t t[4];
    pthread_mutex_lock(&w.lock);
    for (unsigned i = 0; i < 4; i++) {
        bursts[i] = (struct burst){.dc = dc, .w = &w};
        CHECK(pthread_create(&t[i], NULL, ask_50, &bursts[i]) == 0);
        w.asker[w.n_askers++] = t[i];
    }
    pthread_mutex_unlock(&w.lock);
    for (unsigned i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK(wait_called(&w, 200));
    CHECK_EQ_U64(w.ready, 200);
    CHECK_EQ_U64(w.twice, 0);
    /* the callbacks that came from the renderer came on its thread */
    CHECK(w.off_thread > 0);
    /* one middle, one state, however many asked */
    CHECK_EQ_U64(renders() - before, 2);
    struct shared_doc *d = doc_cache_get(model, DOC_DESCRIPTION, 1);
    CHECK(d != NULL);
    if (d)
        check_description(d, 1);
    shared_doc_unref(d);
    doc_cache_free(dc);
}

/* Ages d: made ms milliseconds ago, as the cache reads it (instead of
 * sleeping, which on a loaded machine may last longer than asked). */
static void made_ago(struct shared_doc *d, unsigned ms)
{
    if (d)
        d->made_ns = time_mono_ns() - (uint64_t)ms * 1000000u;
}

TEST(a_description_follows_the_hashes_within_the_refresh_time)
{
    struct doc_cache *dc = doc_cache_start();
    uint64_t before = renders();
    struct shared_doc *one = doc_cache_get(model, DOC_DESCRIPTION, 1); /* from the test above */
    CHECK(one && one->key == 1);
    hash_file(1);
    /* behind by one file, but rendered less than DOC_REFRESH_MS ago: kept */
    made_ago(one, 0);
    struct shared_doc *d = doc_cache_get(model, DOC_DESCRIPTION, 1);
    CHECK(d == one);
    shared_doc_unref(d);
    made_ago(one, DOC_REFRESH_MS + 1);
    CHECK(doc_cache_get(model, DOC_DESCRIPTION, 1) == NULL); /* too old now */
    d = doc_cache_get(model, DOC_DESCRIPTION, 0);            /* still there for a waiter */
    CHECK(d == one);
    shared_doc_unref(d);
    CHECK(render_now(dc, DOC_DESCRIPTION));
    struct shared_doc *two = doc_cache_get(model, DOC_DESCRIPTION, 1);
    CHECK(two && two != one);
    if (two)
        check_description(two, 2);
    CHECK(two && two->middle == one->middle); /* the tensors were not rendered again */
    CHECK_EQ_U64(renders() - before, 1);
    /* The last hash: stale at once, whatever the refresh time. */
    hash_file(2);
    CHECK(doc_cache_get(model, DOC_DESCRIPTION, 1) == NULL);
    CHECK(render_now(dc, DOC_DESCRIPTION));
    struct shared_doc *all = doc_cache_get(model, DOC_DESCRIPTION, 1);
    CHECK(all != NULL);
    if (all)
        check_description(all, 3);
    CHECK(reg_model_doc(model, REG_DOC_MODEL_BODY) == NULL); /* the complete one holds it */
    CHECK_EQ_U64(renders() - before, 2);
    /* complete: kept for the model's life, never rendered again */
    made_ago(all, 100 * DOC_REFRESH_MS);
    d = doc_cache_get(model, DOC_DESCRIPTION, 1);
    CHECK(d == all);
    shared_doc_unref(d);
    /* The old states are alive for those who hold them, and unchanged. */
    check_description(one, 1);
    check_description(two, 2);
    shared_doc_unref(one);
    shared_doc_unref(two);
    shared_doc_unref(all);
    doc_cache_free(dc);
}

TEST(the_merged_header_is_rendered_once)
{
    struct doc_cache *dc = doc_cache_start();
    uint64_t before = renders();
    CHECK(render_now(dc, DOC_HEADER));
    CHECK(render_now(dc, DOC_HEADER));
    CHECK_EQ_U64(renders() - before, 1);
    struct shared_doc *d = doc_cache_get(model, DOC_HEADER, 1);
    char *want = model_doc_header(model);
    CHECK(d && want);
    if (d && want) {
        char *got = bytes_of(d);
        CHECK(strcmp(got, want) == 0);
        CHECK(d->hash == fnv1a(got, d->len));
        free(got);
    }
    free(want);
    shared_doc_unref(d);
    doc_cache_free(dc);
}

TEST(stopping_answers_every_waiter_once)
{
    struct doc_cache *dc = doc_cache_start();
    /* models of their own, so every ask queues a render */
    char *root = xasprintf("%s/root", base);
    struct st_error err;
    struct reg_snapshot *r[6];
    struct waits w = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
                      .asker = {pthread_self()}, .n_askers = 1};
    struct ask asks[12];
    for (int i = 0; i < 6; i++) {
        r[i] = reg_snapshot_scan(root, 1, NULL, &err);
        CHECK(r[i] && r[i]->n_models == 1);
        for (int k = 0; k < 2; k++) {
            asks[2 * i + k] = (struct ask){.w = &w};
            CHECK(doc_cache_render(dc, r[i]->models[0], NULL, k ? DOC_HEADER : DOC_DESCRIPTION,
                                   answered, &asks[2 * i + k]) == 0);
        }
    }
    doc_cache_stop(dc);
    CHECK(wait_called(&w, 12));
    CHECK_EQ_U64(w.twice, 0);
    struct ask late = {.w = &w};
    CHECK(doc_cache_render(dc, model, NULL, DOC_HEADER, answered, &late) == -1);
    doc_cache_free(dc); /* the renderer has been joined: nothing may call back after */
    CHECK_EQ_U64(w.called, 12);
    for (int i = 0; i < 6; i++)
        reg_snapshot_unref(r[i]);
    free(root);
}

int main(void)
{
    CHECK(mkdtemp(base) != NULL);
    make_model();
    RUN(a_burst_gets_one_rendering_on_the_renderer_thread);
    RUN(a_description_follows_the_hashes_within_the_refresh_time);
    RUN(the_merged_header_is_rendered_once);
    RUN(stopping_answers_every_waiter_once);
    reg_snapshot_unref(snap);
    char *cmd = xasprintf("rm -rf '%s'", base);
    CHECK(system(cmd) == 0);
    free(cmd);
    return TEST_SUMMARY();
}
