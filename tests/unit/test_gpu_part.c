/* Tests for a shard's selection (gpu/gpu_part.c), against an oracle that
 * walks every element: a partition's bytes are, tensor by tensor in file
 * order, the elements whose index along the cut dimension lies in the
 * rank's numpy.array_split part (the first n % world parts one longer),
 * packed row-major; a tensor no rule matches, and a scalar, is whole. The loader's use is
 * checked as it makes it: chunks of the file at any boundaries, each
 * compacted and copied to gpu_select_dst of its offset, rebuild exactly
 * those bytes, and the stretches it reads hold every selected byte. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "gpu_part.h"
#include "reg_model.h"
#include "st_header.h"
#include "test.h"
#include "util.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* numpy.array_split's part `rank` of n in world parts, written out: part
 * sizes q + 1 for the first n % world parts, q after. */
static void oracle_bounds(uint64_t n, uint64_t world, uint64_t rank, uint64_t *lo, uint64_t *hi)
{
    uint64_t at = 0;
    for (uint64_t r = 0; r <= rank; r++) {
        uint64_t len = n / world + (r < n % world ? 1 : 0);
        *lo = at;
        *hi = at + len;
        at += len;
    }
}

/* Appends to out the bytes of tensor t (in data) that rank keeps of a cut
 * of dim (dim < 0: whole), element by element. */
static size_t oracle_tensor(const struct st_tensor *t, const unsigned char *data, int dim,
                            uint64_t world, uint64_t rank, unsigned char *out)
{
    size_t es = dtype_info(t->dtype)->bits / 8, o = 0;
    uint64_t lo = 0, hi = 0, idx[8] = {0};
    if (dim >= 0)
        oracle_bounds(t->shape[dim], world, rank, &lo, &hi);
    for (uint64_t e = 0; e < t->nelems; e++) {
        uint64_t rest = e;
        for (int d = (int)t->ndim - 1; d >= 0; d--) {
            idx[d] = rest % t->shape[d];
            rest /= t->shape[d];
        }
        if (dim < 0 || (idx[dim] >= lo && idx[dim] < hi)) {
            memcpy(out + o, data + t->begin + e * es, es);
            o += es;
        }
    }
    return o;
}

struct shard {
    struct st_tensor t[6];
    uint64_t shapes[6][4];
    char names[6][16];
    struct reg_tensor rt[6];
    int n;
    uint64_t size;
    unsigned char *data;
};

/* A shard of up to six tensors of random byte dtypes and shapes (a
 * dimension may be 0 or 1), some named to match "*.weight". */
static void make_shard(struct shard *s)
{
    static const enum dtype dts[] = {DT_U8, DT_BF16, DT_F32, DT_I64, DT_F8_E4M3};
    memset(s, 0, sizeof(*s));
    s->n = 1 + (int)(next() % 6);
    for (int i = 0; i < s->n; i++) {
        struct st_tensor *t = &s->t[i];
        t->dtype = dts[next() % 5];
        t->ndim = (uint32_t)(next() % 4);
        t->nelems = 1;
        for (uint32_t d = 0; d < t->ndim; d++) {
            s->shapes[i][d] = next() % 7 ? 1 + next() % 9 : next() % 2;
            t->nelems *= s->shapes[i][d];
        }
        t->shape = s->shapes[i];
        snprintf(s->names[i], sizeof(s->names[i]), next() % 3 ? "l%d.weight" : "l%d.bias", i);
        t->name = s->names[i];
        t->name_len = strlen(t->name);
        t->begin = s->size + (next() % 2) * 8; /* a gap now and then: bytes of no tensor */
        t->end = t->begin + t->nelems * (dtype_info(t->dtype)->bits / 8);
        s->size = t->end;
        s->rt[i] = (struct reg_tensor){.t = t};
    }
    s->data = xmalloc(s->size + 1);
    for (uint64_t i = 0; i < s->size; i++)
        s->data[i] = (unsigned char)next();
}

struct cover {
    const struct gpu_select *sel;
    unsigned char *marks;          /* 1 where a stretch covers the byte */
    uint64_t last_hi;
    int bad;
};

static int mark(void *arg, uint64_t lo, uint64_t hi)
{
    struct cover *c = arg;
    c->bad |= lo >= hi || lo < c->last_hi; /* non-empty, in order, merged */
    c->last_hi = hi;
    memset(c->marks + lo, 1, hi - lo);
    return 0;
}

/* One shard, one split: the selection against the oracle. */
static void check_one(struct shard *s, uint64_t world, uint64_t rank, int dim_rule)
{
    char json[200];
    snprintf(json, sizeof(json), "{\"world\":%llu,\"rank\":%llu,\"rules\":[{\"match\":"
             "\"*.weight\",\"dim\":%d}]}", (unsigned long long)world, (unsigned long long)rank,
             dim_rule);
    struct fetch_req split;
    struct st_error err;
    CHECK(fetch_req_parse_split(json, strlen(json), 1, &split, &err) == 0);
    struct gpu_select sel = {0};
    unsigned char *want = xmalloc(s->size + 1);
    size_t want_n = 0;
    for (int i = 0; i < s->n; i++) {
        const struct st_tensor *t = &s->t[i];
        struct gpu_part_tensor pt;
        /* a scalar has no dimension to cut: held whole, as the fetch sends it */
        int matches = strstr(t->name, ".weight") != NULL && t->ndim > 0;
        int dim = dim_rule < 0 ? (int)t->ndim + dim_rule : dim_rule;
        int rc = gpu_part_add(&sel, &split, &s->rt[i], NULL, &pt, &err);
        if (matches && (dim < 0 || dim >= (int)t->ndim)) { /* a dim the tensor lacks */
            CHECK(rc < 0 && err.code == ST_ERR_SPLIT);
            goto out;
        }
        CHECK(rc == 0);
        size_t n = oracle_tensor(t, s->data, matches ? dim : -1, world, rank, want + want_n);
        CHECK_EQ_U64(pt.offset, want_n);
        CHECK_EQ_U64(pt.nbytes, n);
        CHECK(pt.part.split == matches);
        if (matches) {
            uint64_t lo, hi;
            oracle_bounds(t->shape[dim], world, rank, &lo, &hi);
            CHECK(pt.part.dim == (uint32_t)dim && pt.part.lo == lo && pt.part.hi == hi &&
                  pt.part.full == t->shape[dim] && pt.shape[dim] == hi - lo);
        }
        want_n += n;
    }
    CHECK_EQ_U64(sel.bytes, want_n);
    /* The loader's way: chunks at random boundaries, compacted, placed. */
    unsigned char *got = xcalloc(1, want_n + 1), *buf = xmalloc(s->size + 1);
    for (uint64_t off = 0; off < s->size;) {
        uint64_t len = 1 + next() % (s->size - off);
        memcpy(buf, s->data + off, len);
        uint64_t dst = gpu_select_dst(&sel, off);
        size_t k = gpu_select_compact(&sel, off, (char *)buf, len);
        CHECK(dst + k <= want_n && dst + k == gpu_select_dst(&sel, off + len));
        memcpy(got + dst, buf, k);
        off += len;
    }
    CHECK(memcmp(got, want, want_n) == 0);
    /* The stretches read hold every selected byte. */
    struct cover c = {.sel = &sel, .marks = xcalloc(1, s->size + 1)};
    CHECK(gpu_select_stretches(&sel, mark, &c) == 0 && !c.bad);
    for (size_t e = 0; e < sel.n; e++)
        for (uint64_t k = 0; k < sel.ext[e].count; k++)
            for (uint64_t b = 0; b < sel.ext[e].run; b++)
                CHECK(c.marks[sel.ext[e].src + k * sel.ext[e].stride + b]);
    free(c.marks);
    free(got);
    free(buf);
out:
    free(want);
    gpu_select_free(&sel);
    fetch_req_free(&split);
}

TEST(partitions_equal_the_elementwise_oracle)
{
    for (int round = 0; round < 3000; round++) {
        struct shard s;
        make_shard(&s);
        uint64_t world = 1 + next() % 5;
        int dim = (int)(next() % 5) - 2; /* -2 .. 2 */
        check_one(&s, world, next() % world, dim);
        free(s.data);
    }
}

/* A dim-0 cut of a large tensor: another rank's rows are never read (the
 * stretches are the rank's rows only), and the selection is one run. */
TEST(dim0_reads_only_its_rows)
{
    static uint64_t shape[2] = {1000, 64};
    struct st_tensor t = {.name = "w.weight", .name_len = 8, .dtype = DT_F32, .ndim = 2,
                          .shape = shape, .nelems = 64000, .begin = 0, .end = 256000};
    struct reg_tensor rt = {.t = &t};
    const char *json = "{\"world\":3,\"rank\":1,\"rules\":[{\"match\":\"*\",\"dim\":0}]}";
    struct fetch_req split;
    struct st_error err;
    CHECK(fetch_req_parse_split(json, strlen(json), 1, &split, &err) == 0);
    struct gpu_select sel = {0};
    struct gpu_part_tensor pt;
    CHECK(gpu_part_add(&sel, &split, &rt, NULL, &pt, &err) == 0);
    CHECK(sel.n == 1 && sel.ext[0].src == 334 * 256 && sel.ext[0].run * sel.ext[0].count ==
                                                            333 * 256);
    CHECK(pt.shape[0] == 333 && pt.shape[1] == 64);
    /* a dim-1 cut: one extent of 1000 strided runs */
    gpu_select_free(&sel);
    fetch_req_free(&split);
    json = "{\"world\":4,\"rank\":3,\"rules\":[{\"match\":\"*\",\"dim\":1}]}";
    CHECK(fetch_req_parse_split(json, strlen(json), 1, &split, &err) == 0);
    CHECK(gpu_part_add(&sel, &split, &rt, NULL, &pt, &err) == 0);
    CHECK(sel.n == 1 && sel.ext[0].count == 1000 && sel.ext[0].run == 64 &&
          sel.ext[0].stride == 256 && sel.ext[0].src == 192);
    gpu_select_free(&sel);
    fetch_req_free(&split);
}

int main(void)
{
    RUN(partitions_equal_the_elementwise_oracle);
    RUN(dim0_reads_only_its_rows);
    return TEST_SUMMARY();
}
