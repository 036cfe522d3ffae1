/* hub_tags: see hub_tags.h. */
#include "hub_tags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "json_scan.h"
#include "util.h"

/* Filters the Hub answers from what it alone knows: refused by name. */
static const char *const hub_only_prefixes[] = {"region:", "deploy:", "arxiv:", "doi:",
                                                "benchmark:", "endpoints:", NULL};
static const char *const hub_only_tags[] = {"endpoints_compatible", "autotrain_compatible",
                                            "text-generation-inference", "custom_code",
                                            "eval-results", "model-index", NULL};
/* list_models parameters of the same kind. */
static const char *const hub_only_params[] = {"apps", "inference", "inference_provider",
                                              "num_parameters", NULL};

/* Tags the Hub gives a repo for holding a file of this kind: by suffix, or
 * by name (as transformers names its weights). */
static const struct {
    const char *suffix, *tag;
} file_tags[] = {
    {".safetensors", "safetensors"}, {"pytorch_model.bin", "pytorch"},
    {".pt", "pytorch"},              {".pth", "pytorch"},
    {".gguf", "gguf"},               {".onnx", "onnx"},
    {"tf_model.h5", "tf"},           {"saved_model.pb", "tf"},
    {"flax_model.msgpack", "jax"},   {".tflite", "tflite"},
    {".mlmodel", "coreml"},          {".nemo", "nemo"},
    {"model_index.json", "diffusers"},
};

struct tagset {
    char **v;
    size_t n, cap;
};

static void tag_add(struct tagset *t, const char *prefix, const char *s, size_t n)
{
    t->v = xgrow(t->v, &t->cap, t->n, sizeof(*t->v), 16);
    t->v[t->n++] = xasprintf("%s%.*s", prefix, (int)n, s);
}

static int tag_has(const struct tagset *t, const char *tag)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i], tag) == 0)
            return 1;
    return 0;
}

/* ---- the card -------------------------------------------------------------- */

struct card_read {
    struct tagset *tags;
    char pipeline[128];
};

static int card_string(struct json_scan *s, struct tagset *t, const char *prefix)
{
    char buf[256];
    size_t n = s->str_len;
    if (n < sizeof(buf) && !s->str_nul) {
        json_scan_decode(s, buf, n);
        tag_add(t, prefix, buf, n);
    }
    return 0;
}

struct strings_ctx {
    struct tagset *t;
    const char *prefix;
};

static int strings_element(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct strings_ctx *c = ctx;
    (void)key;
    if (s->tok == JSON_TOK_STRING)
        return card_string(s, c->t, c->prefix);
    return json_scan_value(s, depth, JSON_SCAN_MAX_DEPTH);
}

/* A card value that is a string, or an array of strings (others are
 * skipped), each added with prefix. */
static int card_strings(struct json_scan *s, unsigned depth, struct tagset *t, const char *prefix)
{
    if (s->tok == JSON_TOK_STRING)
        return card_string(s, t, prefix);
    if (s->tok == '[') {
        struct strings_ctx c = {t, prefix};
        return json_scan_each(s, depth, JSON_SCAN_MAX_DEPTH, strings_element, &c);
    }
    return json_scan_value(s, depth, JSON_SCAN_MAX_DEPTH);
}

static int card_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct card_read *c = ctx;
    static const struct {
        const char *key, *prefix;
    } lists[] = {{"tags", ""},         {"library_name", ""},   {"pipeline_tag", ""},
                 {"license", "license:"}, {"language", ""}, {"datasets", "dataset:"},
                 {"base_model", "base_model:"}};
    if (strcmp(key, "pipeline_tag") == 0 && s->tok == JSON_TOK_STRING &&
        s->str_len < sizeof(c->pipeline) && !s->str_nul)
        c->pipeline[json_scan_decode(s, c->pipeline, s->str_len)] = '\0';
    for (size_t i = 0; i < ARRAY_LEN(lists); i++)
        if (strcmp(key, lists[i].key) == 0)
            return card_strings(s, depth, c->tags, lists[i].prefix);
    return json_scan_value(s, depth, JSON_SCAN_MAX_DEPTH);
}

/* ---- filters --------------------------------------------------------------- */

struct read_ctx {
    struct hub_filters *f;
    const char *refused;     /* the first parameter tensord cannot apply */
    int bad;                 /* a malformed escape */
};

static int starts_with_any(const char *s, const char *const *prefixes)
{
    for (; *prefixes; prefixes++)
        if (strncmp(s, *prefixes, strlen(*prefixes)) == 0)
            return 1;
    return 0;
}

static int is_any(const char *s, const char *const *words)
{
    for (; *words; words++)
        if (strcmp(s, *words) == 0)
            return 1;
    return 0;
}

static int read_param(void *arg, const char *key, const char *value)
{
    struct read_ctx *c = arg;
    if (is_any(key, hub_only_params)) {
        c->refused = key;
        return 1;
    }
    if (strcmp(key, "filter") != 0 || !value)
        return 0;
    size_t len;
    char *all = pct_decode(value, strlen(value), PCT_FORM | PCT_NUL, &len);
    if (!all) {
        c->bad = 1;
        return 1;
    }
    struct hub_filters *f = c->f;
    for (char *save = NULL, *t = strtok_r(all, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        f->tags = xrealloc(f->tags, (f->n + 1) * sizeof(*f->tags));
        f->tags[f->n++] = xstrdup(t);
    }
    free(all);
    return 0;
}

int hub_filters_read(const struct request_view *v, struct hub_filters *f, char *err,
                     size_t errlen)
{
    memset(f, 0, sizeof(*f));
    f->gated = -1;
    struct read_ctx c = {.f = f};
    v->each_query(v, read_param, &c);
    if (c.bad) {
        snprintf(err, errlen, "a filter has a malformed percent-escape");
        return -1;
    }
    if (c.refused) {
        snprintf(err, errlen, "tensord cannot apply %s=: the Hub answers it from data tensord "
                 "does not have", c.refused);
        return -1;
    }
    for (size_t i = 0; i < f->n; i++) {
        if (starts_with_any(f->tags[i], hub_only_prefixes) || is_any(f->tags[i], hub_only_tags)) {
            snprintf(err, errlen, "tensord cannot apply the filter \"%.100s\": the Hub derives "
                     "it from data tensord does not have. It filters on the files (safetensors, "
                     "pytorch, gguf, onnx, tf, jax, diffusers, ...) and the model card (tags, "
                     "library_name, pipeline_tag, license:X, language, dataset:X, base_model:X)",
                     f->tags[i]);
            return -1;
        }
    }
    int bad = 0;
    size_t len;
    f->pipeline_tag = view_query(v, "pipeline_tag", 1, &len, &bad);
    char *gated = view_query(v, "gated", 1, &len, &bad);
    if (gated)
        f->gated = strcasecmp(gated, "true") == 0 || strcmp(gated, "1") == 0;
    free(gated);
    if (bad) {
        snprintf(err, errlen, "a query parameter has a malformed percent-escape");
        return -1;
    }
    return 0;
}

void hub_filters_free(struct hub_filters *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->tags[i]);
    free(f->tags);
    free(f->pipeline_tag);
    memset(f, 0, sizeof(*f));
}

int hub_filters_any(const struct hub_filters *f)
{
    return f->n || f->pipeline_tag || f->gated == 1;
}

int hub_filters_match(const struct hub_filters *f, const struct reg_repo *r, const char *card,
                      size_t card_len)
{
    if (f->gated == 1)
        return 0; /* tensord serves no gated repo */
    struct tagset t = {0};
    for (size_t i = 0; i < r->n_files; i++) {
        const char *name = r->files[i].name;
        size_t n = strlen(name);
        for (size_t k = 0; k < ARRAY_LEN(file_tags); k++) {
            size_t sn = strlen(file_tags[k].suffix);
            if (n >= sn && strcmp(name + n - sn, file_tags[k].suffix) == 0 &&
                !tag_has(&t, file_tags[k].tag))
                tag_add(&t, "", file_tags[k].tag, strlen(file_tags[k].tag));
        }
    }
    struct card_read c = {.tags = &t};
    if (card && card_len) {
        struct json_scan s;
        json_scan_init(&s, card, card_len);
        if (json_scan_next(&s) == '{')
            json_scan_each(&s, 1, JSON_SCAN_MAX_DEPTH, card_member, &c);
    }
    int ok = !f->pipeline_tag || strcmp(f->pipeline_tag, c.pipeline) == 0;
    for (size_t i = 0; ok && i < f->n; i++)
        ok = tag_has(&t, f->tags[i]);
    for (size_t i = 0; i < t.n; i++)
        free(t.v[i]);
    free(t.v);
    return ok;
}
