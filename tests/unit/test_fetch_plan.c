/* Tests for core/fetch_plan.c (and the many-piece bodies of core/body.c it
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

static void setup(void)
{
    CHECK(mkdtemp(root) != NULL);
    char *dir = xasprintf("%s/m", root), *p1 = xasprintf("%s/m/model-1.safetensors", root),
         *p2 = xasprintf("%s/m/model-2.safetensors", root),
         *idx = xasprintf("%s/m/model.safetensors.index.json", root);
    CHECK(mkdir(dir, 0755) == 0);
    write_shard(p1, 0, 4);
    write_shard(p2, 4, 6);
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
    free(dir), free(p1), free(p2), free(idx);
}

static int spec_index(const char *name)
{
    for (int t = 0; t < N_SPECS; t++)
        if (strcmp(specs[t].name, name) == 0)
            return t;
    return -1;
}

/* Plans text; returns the status, with *p filled on success. */
static enum fetch_plan_status plan(const char *text, uint64_t max_bytes, struct fetch_plan *p,
                                   char *err, size_t errlen)
{
    struct fetch_req req;
    struct fetch_limits lim = {.max_tensors = 100};
    struct st_error rerr;
    if (fetch_req_parse(text, strlen(text), &lim, &req, &rerr) != 0) {
        fprintf(stderr, "  request does not parse: %s\n", rerr.message);
        return (enum fetch_plan_status)-1;
    }
    struct fetch_plan_limits pl = {.max_bytes = max_bytes};
    enum fetch_plan_status st = fetch_plan_build(model, &req, &pl, p, err, errlen);
    fetch_req_free(&req);
    return st;
}

/* The whole answer, read through body_read in chunks of `chunk` bytes. */
static uint8_t *read_answer(const struct fetch_plan *p, size_t chunk, uint64_t *len)
{
    struct body b = {.prefix = p->prefix, .prefix_len = p->prefix_len, .fd = -1,
                     .data_len = p->data_len, .pieces = p->pieces, .n_pieces = p->n_pieces};
    *len = body_size(&b);
    uint8_t *buf = xmalloc(*len + 1);
    for (uint64_t off = 0; off < *len; off += chunk) {
        size_t n = *len - off < chunk ? (size_t)(*len - off) : chunk;
        if (body_read(&b, off, buf + off, n) != 0) {
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
static struct st_header *answer(const char *text, struct fetch_plan *p, uint8_t **blob,
                                const uint8_t **data)
{
    char err[512];
    enum fetch_plan_status st = plan(text, 0, p, err, sizeof(err));
    if (st != FETCH_PLAN_OK) {
        fprintf(stderr, "  %s: status %d: %s\n", text, st, err);
        return NULL;
    }
    uint64_t len;
    *blob = read_answer(p, 7, &len);
    if (!*blob)
        return NULL;
    struct st_header *h = NULL;
    struct st_error e;
    uint64_t hl = p->prefix_len - 8;
    if (st_header_parse((const char *)*blob + 8, hl, len - 8 - hl, "answer", &h, &e) != 0) {
        fprintf(stderr, "  %s: the answer is not valid safetensors: %s\n", text, e.message);
        return NULL;
    }
    *data = *blob + 8 + hl;
    return h;
}

TEST(whole_model)
{
    struct fetch_plan p;
    uint8_t *blob;
    const uint8_t *data;
    struct st_header *h = answer("{}", &p, &blob, &data);
    CHECK(h != NULL);
    if (!h)
        return;
    CHECK_EQ_U64(p.n_tensors, 6);
    CHECK_EQ_U64(h->n_tensors, 6);
    for (int t = 0; t < N_SPECS; t++) {
        struct sel w = whole(specs[t].name);
        CHECK(check_tensor(h, data, specs[t].name, &w));
    }
    /* one contiguous piece per shard: whole tensors in file order merge */
    CHECK_EQ_U64(p.n_pieces, 2);
    CHECK(p.pieces[0].runs == NULL && p.pieces[1].runs == NULL);
    /* the merged metadata: first file wins, keys of both */
    CHECK(h->n_metadata == 3);
    /* a span inside a piece can go out with sendfile; one across pieces cannot */
    struct body b = {.prefix = p.prefix, .prefix_len = p.prefix_len, .fd = -1,
                     .data_len = p.data_len, .pieces = p.pieces, .n_pieces = p.n_pieces};
    int fd;
    uint64_t off;
    CHECK(body_file_span(&b, p.prefix_len + 4, 10, &fd, &off) == 1);
    CHECK(fd == p.pieces[0].fd && off == p.pieces[0].file_off + 4);
    CHECK(body_file_span(&b, p.prefix_len + p.pieces[1].at - 2, 4, &fd, &off) == 0);
    CHECK(body_file_span(&b, p.prefix_len - 2, 4, &fd, &off) == 0);
    st_header_free(h);
    free(blob);
    fetch_plan_free(&p);
}

TEST(listed_and_sliced)
{
    struct fetch_plan p;
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
    fetch_plan_free(&p);
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
        struct fetch_plan p;
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
        fetch_plan_free(&p);
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

static int plan_fails(const char *text, uint64_t max_bytes, enum fetch_plan_status want,
                      const char *msg)
{
    struct fetch_plan p;
    char err[512];
    enum fetch_plan_status st = plan(text, max_bytes, &p, err, sizeof(err));
    if (st == FETCH_PLAN_OK)
        fetch_plan_free(&p);
    if (st != want || !strstr(err, msg)) {
        fprintf(stderr, "  %s: status %d \"%s\", want %d \"%s\"\n", text, st, err, want, msg);
        return 0;
    }
    return p.prefix == NULL && p.pieces_buf == NULL;
}

TEST(errors)
{
    CHECK(plan_fails("{\"tensors\":[\"a\",\"zz\"]}", 0, FETCH_PLAN_NO_TENSOR,
                     "model \"m\" has no tensor \"zz\""));
    CHECK(plan_fails("{\"tensors\":[\"a\",{\"name\":\"a\",\"slice\":\"1\"}]}", 0,
                     FETCH_PLAN_DUPLICATE, "tensor \"a\" is asked for twice"));
    CHECK(plan_fails("{\"tensors\":[{\"name\":\"a\",\"slice\":\"9\"}]}", 0, FETCH_PLAN_BAD_SLICE,
                     "tensor \"a\" F32 [6,5]: dimension 0: index 9 out of range for size 6"));
    CHECK(plan_fails("{\"tensors\":[{\"name\":\"a\",\"slice\":\"::0\"}]}", 0, FETCH_PLAN_BAD_SLICE,
                     "step must not be zero"));
    CHECK(plan_fails("{\"tensors\":[\"b\"],\"split\":{\"world\":2,\"rank\":0,\"rules\":[{\"match\":"
                     "\"b\",\"dim\":1}]}}", 0, FETCH_PLAN_BAD_SPLIT,
                     "tensor \"b\" [4]: split dim 1 (rule \"b\") is out of range for 1 dimensions"));
    CHECK(plan_fails("{\"split\":{\"world\":2,\"rank\":0,\"rules\":[{\"match\":\"*\",\"dim\":-3}]}}",
                     0, FETCH_PLAN_BAD_SPLIT, "tensor \"a\" [6,5]: split dim -3"));
    /* a slice that drops the split dim: the result's dims count */
    CHECK(plan_fails("{\"tensors\":[{\"name\":\"a\",\"slice\":\"0\"}],\"split\":{\"world\":2,"
                     "\"rank\":0,\"rules\":[{\"match\":\"a\",\"dim\":1}]}}", 0, FETCH_PLAN_BAD_SPLIT,
                     "out of range for 1 dimensions"));
    CHECK(plan_fails("{}", 100, FETCH_PLAN_TOO_LARGE, "more than 100 bytes of tensor data"));
    CHECK(plan_fails("{\"tensors\":[\"b\"]}", 100, FETCH_PLAN_TOO_LARGE, "more than 100 (max_fetch_bytes)"));
}

TEST(identity)
{
    struct fetch_plan p, q;
    char err[256];
    CHECK(plan("{\"tensors\":[\"a\",\"b\"]}", 0, &p, err, sizeof(err)) == FETCH_PLAN_OK);
    CHECK(plan(" {\"tensors\" : [{\"name\":\"a\"}, {\"slice\":\"\",\"name\":\"b\"}]}", 0, &q, err,
               sizeof(err)) == FETCH_PLAN_OK);
    CHECK(p.hash[0] == q.hash[0] && p.hash[1] == q.hash[1]); /* the same bytes */
    fetch_plan_free(&q);
    CHECK(plan("{\"tensors\":[\"b\",\"a\"]}", 0, &q, err, sizeof(err)) == FETCH_PLAN_OK);
    CHECK(p.hash[0] != q.hash[0] && p.hash[1] != q.hash[1]);
    fetch_plan_free(&q);
    CHECK(plan("{\"tensors\":[\"a\",{\"name\":\"b\",\"slice\":\"1:\"}]}", 0, &q, err, sizeof(err)) ==
          FETCH_PLAN_OK);
    CHECK(p.hash[0] != q.hash[0]);
    fetch_plan_free(&q);
    fetch_plan_free(&p);
}

TEST(file_changed_after_validation)
{
    struct fetch_plan p;
    char err[256];
    CHECK(plan("{\"tensors\":[\"c\",{\"name\":\"a\",\"slice\":\":,1\"}]}", 0, &p, err,
               sizeof(err)) == FETCH_PLAN_OK);
    uint64_t len;
    uint8_t *ok = read_answer(&p, 1 << 20, &len);
    CHECK(ok != NULL);
    free(ok);
    /* shard 2 grows: reads of its pieces now fail, the others still work */
    char *p2 = xasprintf("%s/m/model-2.safetensors", root);
    int fd = open(p2, O_WRONLY | O_APPEND | O_CLOEXEC);
    CHECK(fd >= 0 && write(fd, "x", 1) == 1);
    close(fd);
    struct body b = {.prefix = p.prefix, .prefix_len = p.prefix_len, .fd = -1,
                     .data_len = p.data_len, .pieces = p.pieces, .n_pieces = p.n_pieces};
    uint8_t buf[64];
    CHECK(body_read(&b, p.prefix_len, buf, 4) == -ENODATA);
    CHECK(body_read(&b, p.prefix_len + p.pieces[1].at, buf, 4) == 0);
    free(p2);
    fetch_plan_free(&p);
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
    reg_snapshot_unref(reg);
    char *cmd = xasprintf("rm -rf %s", root);
    if (system(cmd) != 0)
        fprintf(stderr, "  could not remove %s\n", root);
    free(cmd);
    return TEST_SUMMARY();
}
