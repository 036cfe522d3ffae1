/* Tests for core/req/fetch_plan.c (and the many-piece bodies of core/body/body.c it
 * builds): a sharded model written to a temp directory, fetched whole, by
 * list, sliced and split; every answer's header is checked with the
 * project's own safetensors validator and its bytes, read back through
 * body_read, with an element-by-element gather written here. The daemon-level
 * comparison with NumPy is tests/integration/test_fetch.py. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "body.h"
#include "fetch_plan.h"
#include "fetch_req.h"
#include "registry.h"
#include "test.h"
#include "util.h"

static char root[] = "/tmp/test_fetch_plan.XXXXXX";
static struct reg_snapshot *reg;
static const struct reg_model *model;

/* Byte i of a tensor's data: a pattern that differs between tensors. */
static uint8_t pat(int tensor, uint64_t i)
{
    return (uint8_t)(i * 7 + (uint64_t)tensor * 31 + (i >> 8));
}

struct spec {
    const char *name;
    const char *dtype;
    unsigned elem;      /* bytes per element */
    uint32_t ndim;
    uint64_t shape[3];
};

/* Two shards: a is [6, 5] F32, b [4] U8, s a F64 scalar, e [0, 3] I16 in the
 * first; c [3, 4, 2] F16 and d [7] U8 in the second. */
static const struct spec specs[] = {
    {"a", "F32", 4, 2, {6, 5}}, {"b", "U8", 1, 1, {4}}, {"s", "F64", 8, 0, {0}},
    {"e", "I16", 2, 2, {0, 3}}, {"c", "F16", 2, 3, {3, 4, 2}}, {"d", "U8", 1, 1, {7}},
};
#define N_SPECS 6

static uint64_t nelems(const struct spec *s)
{
    uint64_t n = 1;
    for (uint32_t i = 0; i < s->ndim; i++)
        n *= s->shape[i];
    return n;
}

static void write_shard(const char *path, int first, int last)
{
    char json[2048];
    size_t n = (size_t)snprintf(json, sizeof(json), "{\"__metadata__\":{\"format\":\"pt\",\"k%d\":\"v\"}",
                                first);
    uint64_t off = 0;
    for (int t = first; t < last; t++) {
        const struct spec *s = &specs[t];
        uint64_t nb = nelems(s) * s->elem;
        n += (size_t)snprintf(json + n, sizeof(json) - n, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                              s->name, s->dtype);
        for (uint32_t i = 0; i < s->ndim; i++)
            n += (size_t)snprintf(json + n, sizeof(json) - n, "%s%llu", i ? "," : "",
                                  (unsigned long long)s->shape[i]);
        n += (size_t)snprintf(json + n, sizeof(json) - n, "],\"data_offsets\":[%llu,%llu]}",
                              (unsigned long long)off, (unsigned long long)(off + nb));
        off += nb;
    }
    n += (size_t)snprintf(json + n, sizeof(json) - n, "}");
    while (n % 8)
        json[n++] = ' ';
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)n >> (8 * i));
    CHECK(write(fd, len, 8) == 8 && write(fd, json, n) == (ssize_t)n);
    for (int t = first; t < last; t++) {
        uint64_t nb = nelems(&specs[t]) * specs[t].elem;
        for (uint64_t i = 0; i < nb; i++) {
            uint8_t b = pat(t, i);
            CHECK(write(fd, &b, 1) == 1);
        }
    }
    close(fd);
}

/* Model "n": N_MANY tensors t0000.. of U8 [2, c], c = i % 3 + 1, byte
 * (r, col) of tensor i being many_byte(i, r, col): enough tensors for the
 * reader to start from many marks. */
#define N_MANY 1000
static const struct reg_model *many;

static uint8_t many_byte(unsigned i, unsigned r, unsigned col)
{
    return (uint8_t)(i * 13 + r * 7 + col);
}

static void write_many(void)
{
    size_t cap = N_MANY * 96 + 64, n = 0;
    char *json = xmalloc(cap);
    uint8_t *data = xmalloc(N_MANY * 6);
    size_t off = 0;
    n += (size_t)snprintf(json + n, cap - n, "{");
    for (unsigned i = 0; i < N_MANY; i++) {
        unsigned c = i % 3 + 1;
        n += (size_t)snprintf(json + n, cap - n,
                              "%s\"t%04u\":{\"dtype\":\"U8\",\"shape\":[2,%u],\"data_offsets\":[%zu,%zu]}",
                              i ? "," : "", i, c, off, off + 2 * c);
        for (unsigned r = 0; r < 2; r++)
            for (unsigned col = 0; col < c; col++)
                data[off++] = many_byte(i, r, col);
    }
    n += (size_t)snprintf(json + n, cap - n, "}");
    while (n % 8)
        json[n++] = ' ';
    char *path = xasprintf("%s/n/model.safetensors", root);
    test_mkparents(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)n >> (8 * i));
    CHECK(fd >= 0 && write(fd, len, 8) == 8 && write(fd, json, n) == (ssize_t)n &&
          write(fd, data, off) == (ssize_t)off);
    close(fd);
    free(path);
    free(json);
    free(data);
}

static void setup(void)
{
    CHECK(mkdtemp(root) != NULL);
    char *dir = xasprintf("%s/m", root), *p1 = xasprintf("%s/m/model-1.safetensors", root),
         *p2 = xasprintf("%s/m/model-2.safetensors", root),
         *idx = xasprintf("%s/m/model.safetensors.index.json", root);
    CHECK(mkdir(dir, 0755) == 0);
    write_shard(p1, 0, 4);
    write_shard(p2, 4, 6);
    write_many();
    FILE *f = fopen(idx, "w");
    fprintf(f, "{\"metadata\":{},\"weight_map\":{\"a\":\"model-1.safetensors\",\"b\":\"model-1."
               "safetensors\",\"s\":\"model-1.safetensors\",\"e\":\"model-1.safetensors\",\"c\":"
               "\"model-2.safetensors\",\"d\":\"model-2.safetensors\"}}");
    fclose(f);
    struct st_error err;
    reg = reg_snapshot_scan(root, 1, NULL, &err);
    CHECK(reg != NULL);
    model = reg ? reg_snapshot_find_model(reg, "m", 1) : NULL;
    CHECK(model && model->state == MODEL_READY);
    many = reg ? reg_snapshot_find_model(reg, "n", 1) : NULL;
    CHECK(many && many->state == MODEL_READY && many->n_tensors == N_MANY);
    free(dir), free(p1), free(p2), free(idx);
}

/* Plans text over model m (see plan). */
static int plan_of(const struct reg_model *m, const char *text, uint64_t max_bytes,
                   struct fetch_plan **p, struct st_error *err)
{
    struct fetch_req req;
    struct fetch_limits lim = {.max_tensors = 100000};
    struct st_error rerr;
    *p = NULL;
    if (fetch_req_parse(text, strlen(text), &lim, &req, &rerr) != 0) {
        fprintf(stderr, "  request does not parse: %s\n", rerr.message);
        return -EINVAL;
    }
    struct fetch_plan_limits pl = {.max_bytes = max_bytes};
    return fetch_plan_build(m, &req, &pl, p, err);
}

static int spec_index(const char *name)
{
    for (int t = 0; t < N_SPECS; t++)
        if (strcmp(specs[t].name, name) == 0)
            return t;
    return -1;
}

/* Plans text; returns 0 with *p the plan, or -errno (*p NULL). */
static int plan(const char *text, uint64_t max_bytes, struct fetch_plan **p,
                struct st_error *err)
{
    return plan_of(model, text, max_bytes, p, err);
}

/* The whole answer, read through fetch_plan_source.read in chunks of `chunk` bytes. */
static uint8_t *read_answer(struct fetch_plan *p, size_t chunk, uint64_t *len)
{
    *len = fetch_plan_size(p);
    uint8_t *buf = xmalloc(*len + 1);
    for (uint64_t off = 0; off < *len; off += chunk) {
        size_t n = *len - off < chunk ? (size_t)(*len - off) : chunk;
        if (fetch_plan_source.read(p, off, buf + off, n) != 0) {
            free(buf);
            return NULL;
        }
    }
    return buf;
}

/* Checks answer tensor `name` (its header entry and bytes) against the
 * elements of source tensor t picked by per-dimension index lists. */
struct sel {
    uint32_t ndim;              /* of the result */
    uint64_t count[3];
    int64_t idx[3][16];         /* source index per result position; dims dropped by an
                                 * integer index are given with count 1 and drop = 1 */
    int drop[3];
};

static int check_tensor(const struct st_header *h, const uint8_t *data, const char *name,
                        const struct sel *sel)
{
    int t = spec_index(name);
    const struct spec *s = &specs[t];
    const struct st_tensor *e = NULL;
    for (size_t i = 0; i < h->n_tensors; i++)
        if (strcmp(h->tensors[i].name, name) == 0)
            e = &h->tensors[i];
    if (!e)
        return 0;
    uint32_t rd = 0;
    uint64_t n = 1;
    for (uint32_t d = 0; d < s->ndim; d++) {
        n *= sel->count[d];
        if (sel->drop[d])
            continue;
        if (rd >= e->ndim || e->shape[rd] != sel->count[d])
            return 0;
        rd++;
    }
    if (rd != e->ndim || e->end - e->begin != n * s->elem)
        return 0;
    uint64_t pos[3] = {0, 0, 0}, out = e->begin;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t lin = 0;
        for (uint32_t d = 0; d < s->ndim; d++)
            lin = lin * s->shape[d] + (uint64_t)sel->idx[d][pos[d]];
        for (unsigned b = 0; b < s->elem; b++)
            if (data[out++] != pat(t, lin * s->elem + b))
                return 0;
        for (int d = (int)s->ndim - 1; d >= 0 && ++pos[d] == sel->count[d]; d--)
            pos[d] = 0;
    }
    return 1;
}

/* A selection of whole dimensions of tensor name. */
static struct sel whole(const char *name)
{
    const struct spec *s = &specs[spec_index(name)];
    struct sel x = {.ndim = s->ndim};
    for (uint32_t d = 0; d < s->ndim; d++) {
        x.count[d] = s->shape[d];
        for (uint64_t i = 0; i < s->shape[d]; i++)
            x.idx[d][i] = (int64_t)i;
    }
    return x;
}

/* Plans, validates the header and returns the parsed header and data. */
static struct st_header *answer(const char *text, struct fetch_plan **p, uint8_t **blob,
                                const uint8_t **data)
{
    struct st_error err;
    int st = plan(text, 0, p, &err);
    if (st != 0) {
        fprintf(stderr, "  %s: status %d: %s\n", text, st, err.message);
        return NULL;
    }
    uint64_t len;
    *blob = read_answer(*p, 7, &len);
    if (!*blob)
        return NULL;
    struct st_header *h = NULL;
    struct st_error e;
    uint64_t hl = (*p)->prefix_len - 8;
    if (st_header_parse((const char *)*blob + 8, hl, len - 8 - hl, "answer", &h, &e) != 0) {
        fprintf(stderr, "  %s: the answer is not valid safetensors: %s\n", text, e.message);
        return NULL;
    }
    *data = *blob + 8 + hl;
    return h;
}

TEST(whole_model)
{
    struct fetch_plan *p;
    uint8_t *blob;
    const uint8_t *data;
    struct st_header *h = answer("{}", &p, &blob, &data);
    CHECK(h != NULL);
    if (!h)
        return;
    CHECK_EQ_U64(p->n_tensors, 6);
    CHECK_EQ_U64(h->n_tensors, 6);
    for (int t = 0; t < N_SPECS; t++) {
        struct sel w = whole(specs[t].name);
        CHECK(check_tensor(h, data, specs[t].name, &w));
    }
    /* the merged metadata: first file wins, keys of both */
    CHECK(h->n_metadata == 3);
    /* Whole tensors in file order are one contiguous span per shard: a
     * span inside one can go out with sendfile, one across the shards or
     * the header cannot. Shard 1 holds a (120 bytes), b (4), s (8), e (0). */
    const struct reg_file *f1 = reg_model_find_file(model, "model-1.safetensors", 19);
    int fd;
    uint64_t off;
    const struct fileio_stat *st;
    CHECK(fetch_plan_source.file_span(p, p->prefix_len + 4, 10, &fd, &off, &st) == 1);
    CHECK(fd == f1->fd && off == f1->data_start + 4 && st == &f1->st);
    /* a into b, s */
    CHECK(fetch_plan_source.file_span(p, p->prefix_len + 100, 32, &fd, &off, &st) == 1);
    CHECK(off == f1->data_start + 100);
    CHECK(fetch_plan_source.file_span(p, p->prefix_len + 130, 4, &fd, &off, &st) == 0);
    CHECK(fetch_plan_source.file_span(p, p->prefix_len - 2, 4, &fd, &off, &st) == 0);
    st_header_free(h);
    free(blob);
    fetch_plan_free(p);
}

TEST(listed_and_sliced)
{
    struct fetch_plan *p;
    uint8_t *blob;
    const uint8_t *data;
    struct st_header *h = answer("{\"tensors\":[\"d\",{\"name\":\"a\",\"slice\":\"::-2,1:4\"},"
                                 "{\"name\":\"c\",\"slice\":\"-1,::-1\"},\"s\",\"e\"]}",
                                 &p, &blob, &data);
    CHECK(h != NULL);
    if (!h)
        return;
    CHECK_EQ_U64(h->n_tensors, 5);
    struct sel d = whole("d");
    CHECK(check_tensor(h, data, "d", &d));
    struct sel a = {.ndim = 2, .count = {3, 3}, .idx = {{5, 3, 1}, {1, 2, 3}}};
    CHECK(check_tensor(h, data, "a", &a));
    struct sel c = {.ndim = 2, .count = {1, 4, 2}, .idx = {{2}, {3, 2, 1, 0}, {0, 1}},
                    .drop = {1, 0, 0}};
    CHECK(check_tensor(h, data, "c", &c));
    struct sel s = whole("s");
    CHECK(check_tensor(h, data, "s", &s));
    /* the data in request order: d first (the validator sorts entries by offset) */
    CHECK_STR(h->tensors[0].name, "d");
    CHECK_STR(h->tensors[1].name, "a");
    st_header_free(h);
    free(blob);
    fetch_plan_free(p);
}

TEST(split)
{
    /* array_split of 5 columns in 4 parts */
    static const uint64_t cols[4][2] = {{0, 2}, {2, 3}, {3, 4}, {4, 5}};
    for (int rank = 0; rank < 4; rank++) {
        char text[512];
        snprintf(text, sizeof(text), "{\"tensors\":[\"a\",{\"name\":\"c\",\"slice\":\"::-1\"},\"s\","
                 "\"b\"],\"split\":{\"world\":4,\"rank\":%d,\"rules\":[{\"match\":\"[a]\",\"dim\":-1},"
                 "{\"match\":\"?\",\"dim\":0}]}}", rank);
        struct fetch_plan *p;
        uint8_t *blob;
        const uint8_t *data;
        struct st_header *h = answer(text, &p, &blob, &data);
        CHECK(h != NULL);
        if (!h)
            continue;
        struct sel a = whole("a");
        a.count[1] = cols[rank][1] - cols[rank][0];
        for (uint64_t i = 0; i < a.count[1]; i++)
            a.idx[1][i] = (int64_t)(cols[rank][0] + i);
        CHECK(check_tensor(h, data, "a", &a));
        /* c reversed, then its rows split: 3 rows in 4 parts */
        struct sel c = whole("c");
        c.count[0] = rank < 3 ? 1 : 0;
        c.idx[0][0] = 2 - rank;
        CHECK(check_tensor(h, data, "c", &c));
        /* the scalar matches "?" but is never split */
        struct sel s = whole("s");
        CHECK(check_tensor(h, data, "s", &s));
        struct sel b = whole("b");
        b.count[0] = 1;
        b.idx[0][0] = rank;
        CHECK(check_tensor(h, data, "b", &b));
        st_header_free(h);
        free(blob);
        fetch_plan_free(p);
    }
}

TEST(array_split_bounds)
{
    uint64_t lo, hi;
    /* numpy.array_split(range(5), 4) -> [0,1] [2] [3] [4] */
    fetch_split_bounds(5, 4, 0, &lo, &hi);
    CHECK(lo == 0 && hi == 2);
    fetch_split_bounds(5, 4, 3, &lo, &hi);
    CHECK(lo == 4 && hi == 5);
    /* fewer elements than parts: the last parts are empty */
    fetch_split_bounds(2, 4, 1, &lo, &hi);
    CHECK(lo == 1 && hi == 2);
    fetch_split_bounds(2, 4, 3, &lo, &hi);
    CHECK(lo == 2 && hi == 2);
    fetch_split_bounds(0, 3, 2, &lo, &hi);
    CHECK(lo == 0 && hi == 0);
    /* parts cover everything, in order, sizes differing by at most one */
    for (uint64_t n = 0; n < 40; n++)
        for (uint64_t w = 1; w < 9; w++) {
            uint64_t at = 0;
            for (uint64_t r = 0; r < w; r++) {
                fetch_split_bounds(n, w, r, &lo, &hi);
                CHECK(lo == at && hi >= lo && hi - lo <= n / w + 1 && hi - lo >= n / w);
                at = hi;
            }
            CHECK(at == n);
        }
    fetch_split_bounds(UINT64_MAX, UINT64_MAX - 1, UINT64_MAX - 2, &lo, &hi);
    CHECK(hi == UINT64_MAX);
}

static int plan_fails(const char *text, uint64_t max_bytes, enum st_status want,
                      const char *msg)
{
    struct fetch_plan *p;
    struct st_error err = {0};
    int st = plan(text, max_bytes, &p, &err);
    if (st == 0)
        fetch_plan_free(p);
    if (st != st_status_errno(want) || err.code != want || !strstr(err.message, msg)) {
        fprintf(stderr, "  %s: status %d \"%s\", want %d \"%s\"\n", text, st, err.message,
                want, msg);
        return 0;
    }
    return p == NULL;
}

TEST(errors)
{
    CHECK(plan_fails("{\"tensors\":[\"a\",\"zz\"]}", 0, ST_ERR_NOT_FOUND,
                     "model \"m\" has no tensor \"zz\""));
    CHECK(plan_fails("{\"tensors\":[\"a\",{\"name\":\"a\",\"slice\":\"1\"}]}", 0,
                     ST_ERR_DUPLICATE_TENSOR, "tensor \"a\" is asked for twice"));
    CHECK(plan_fails("{\"tensors\":[{\"name\":\"a\",\"slice\":\"9\"}]}", 0, ST_ERR_SLICE,
                     "tensor \"a\" F32 [6,5]: dimension 0: index 9 out of range for size 6"));
    CHECK(plan_fails("{\"tensors\":[{\"name\":\"a\",\"slice\":\"::0\"}]}", 0, ST_ERR_SLICE,
                     "step must not be zero"));
    CHECK(plan_fails("{\"tensors\":[\"b\"],\"split\":{\"world\":2,\"rank\":0,\"rules\":[{\"match\":"
                     "\"b\",\"dim\":1}]}}", 0, ST_ERR_SPLIT,
                     "tensor \"b\" [4]: split dim 1 (rule \"b\") is out of range for 1 dimensions"));
    CHECK(plan_fails("{\"split\":{\"world\":2,\"rank\":0,\"rules\":[{\"match\":\"*\",\"dim\":-3}]}}",
                     0, ST_ERR_SPLIT, "tensor \"a\" [6,5]: split dim -3"));
    /* a slice that drops the split dim: the result's dims count */
    CHECK(plan_fails("{\"tensors\":[{\"name\":\"a\",\"slice\":\"0\"}],\"split\":{\"world\":2,"
                     "\"rank\":0,\"rules\":[{\"match\":\"a\",\"dim\":1}]}}", 0, ST_ERR_SPLIT,
                     "out of range for 1 dimensions"));
    CHECK(plan_fails("{}", 100, ST_ERR_LIMIT, "more than 100 bytes of tensor data"));
    CHECK(plan_fails("{\"tensors\":[\"b\"]}", 100, ST_ERR_LIMIT, "more than 100 (max_fetch_bytes)"));
}

TEST(identity)
{
    struct fetch_plan *p, *q;
    struct st_error err;
    CHECK(plan("{\"tensors\":[\"a\",\"b\"]}", 0, &p, &err) == 0);
    CHECK(plan(" {\"tensors\" : [{\"name\":\"a\"}, {\"slice\":\"\",\"name\":\"b\"}]}", 0, &q, &err) == 0);
    CHECK(p->hash[0] == q->hash[0] && p->hash[1] == q->hash[1]); /* the same bytes */
    fetch_plan_free(q);
    CHECK(plan("{\"tensors\":[\"b\",\"a\"]}", 0, &q, &err) == 0);
    CHECK(p->hash[0] != q->hash[0] && p->hash[1] != q->hash[1]);
    fetch_plan_free(q);
    CHECK(plan("{\"tensors\":[\"a\",{\"name\":\"b\",\"slice\":\"1:\"}]}", 0, &q, &err) == 0);
    CHECK(p->hash[0] != q->hash[0]);
    fetch_plan_free(q);
    fetch_plan_free(p);
}

TEST(file_changed_after_validation)
{
    struct fetch_plan *p;
    struct st_error err;
    CHECK(plan("{\"tensors\":[\"c\",{\"name\":\"a\",\"slice\":\":,1\"}]}", 0, &p, &err) == 0);
    uint64_t len;
    uint8_t *ok = read_answer(p, 1 << 20, &len);
    CHECK(ok != NULL);
    free(ok);
    CHECK(fetch_plan_files_unchanged(p));
    /* shard 2 grows: reads of c (its 48 bytes) now fail, those of a still work */
    char *p2 = xasprintf("%s/m/model-2.safetensors", root);
    int fd = open(p2, O_WRONLY | O_APPEND | O_CLOEXEC);
    CHECK(fd >= 0 && write(fd, "x", 1) == 1);
    close(fd);
    uint8_t buf[64];
    CHECK(!fetch_plan_files_unchanged(p));
    CHECK(fetch_plan_source.read(p, p->prefix_len, buf, 4) == -ENODATA);
    CHECK(fetch_plan_source.read(p, p->prefix_len + 48, buf, 4) == 0);
    CHECK(fetch_plan_source.read(p, 0, buf, 16) == 0); /* the header is not the file's */
    free(p2);
    fetch_plan_free(p);
}

/* Tensor i of the "n" answer h over data: columns [lo, hi) of each row. */
static int many_tensor_is(const struct st_header *h, const uint8_t *data, unsigned i,
                          unsigned lo, unsigned hi)
{
    char name[16];
    snprintf(name, sizeof(name), "t%04u", i);
    const struct st_tensor *e = NULL;
    for (size_t k = 0; k < h->n_tensors && !e; k++)
        if (strcmp(h->tensors[k].name, name) == 0)
            e = &h->tensors[k];
    if (!e || e->ndim != 2 || e->shape[0] != 2 || e->shape[1] != hi - lo ||
        e->end - e->begin != 2 * (hi - lo))
        return 0;
    uint64_t at = e->begin;
    for (unsigned r = 0; r < 2; r++)
        for (unsigned col = lo; col < hi; col++)
            if (data[at++] != many_byte(i, r, col))
                return 0;
    return 1;
}

/* Reads of any range, forwards or backwards, near a mark or far from one,
 * give the bytes of one sequential read; that read is a valid safetensors
 * file whose tensors hold the source bytes picked. */
TEST(any_range_reads_the_same_bytes)
{
    /* whole; every tensor's last dimension split (strided runs); a list
     * backwards, every other tensor */
    char listed[N_MANY * 12 + 32];
    size_t n = (size_t)snprintf(listed, sizeof(listed), "{\"tensors\":[");
    for (int i = N_MANY - 1; i >= 0; i -= 2)
        n += (size_t)snprintf(listed + n, sizeof(listed) - n, "%s\"t%04d\"",
                              i == N_MANY - 1 ? "" : ",", i);
    snprintf(listed + n, sizeof(listed) - n, "]}");
    const char *reqs[3] = {
        "{}",
        "{\"split\":{\"world\":2,\"rank\":1,\"rules\":[{\"match\":\"t*\",\"dim\":-1}]}}",
        listed};
    uint64_t rng = 12345;
    for (int q = 0; q < 3; q++) {
        struct fetch_plan *p;
        struct st_error err;
        CHECK(plan_of(many, reqs[q], 0, &p, &err) == 0);
        if (!p)
            continue;
        CHECK(p->n_marks > 1);
        uint64_t len;
        uint8_t *full = read_answer(p, 1 << 20, &len);
        CHECK(full != NULL && len == fetch_plan_size(p));
        struct st_header *h = NULL;
        struct st_error e;
        uint64_t hl = p->prefix_len - 8;
        CHECK(full && st_header_parse((const char *)full + 8, hl, len - 8 - hl, "answer", &h,
                                      &e) == 0);
        for (unsigned i = 0; h && i < N_MANY; i++) {
            unsigned c = i % 3 + 1;
            if (q == 0)
                CHECK(many_tensor_is(h, full + 8 + hl, i, 0, c));
            else if (q == 1) /* numpy.array_split(range(c), 2)[1] */
                CHECK(many_tensor_is(h, full + 8 + hl, i, c == 1 ? 1 : c == 2 ? 1 : 2, c));
            else if (i % 2 == 1)
                CHECK(many_tensor_is(h, full + 8 + hl, i, 0, c));
        }
        CHECK(h && h->n_tensors == (q == 2 ? N_MANY / 2 : N_MANY));
        st_header_free(h);
        uint8_t *chunked = read_answer(p, 7, &len);
        CHECK(full && chunked && memcmp(full, chunked, len) == 0);
        free(chunked);
        uint8_t *buf = xmalloc(6000);
        for (int k = 0; full && k < 400; k++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            uint64_t off = (rng >> 17) % len;
            size_t want = (size_t)((rng >> 40) % 6000) + 1;
            if (want > len - off)
                want = (size_t)(len - off);
            CHECK(fetch_plan_source.read(p, off, buf, want) == 0);
            if (memcmp(buf, full + off, want) != 0) {
                fprintf(stderr, "  request %d: bytes %" PRIu64 "+%zu differ\n", q, off, want);
                CHECK(!"a range read differs");
                break;
            }
        }
        free(buf);
        free(full);
        fetch_plan_free(p);
    }
}

int main(void)
{
    setup();
    if (!model) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    RUN(whole_model);
    RUN(listed_and_sliced);
    RUN(split);
    RUN(array_split_bounds);
    RUN(errors);
    RUN(identity);
    RUN(file_changed_after_validation);
    RUN(any_range_reads_the_same_bytes);
    reg_snapshot_unref(reg);
    char *cmd = xasprintf("rm -rf %s", root);
    if (system(cmd) != 0)
        fprintf(stderr, "  could not remove %s\n", root);
    free(cmd);
    return TEST_SUMMARY();
}
