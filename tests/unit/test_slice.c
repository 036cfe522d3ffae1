/* slice: the plan and slice_read are checked against a brute-force NumPy
 * model written here from scratch (every selected element enumerated, its
 * source bits gathered), over thousands of random shapes and specs. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "slice.h"
#include "test.h"

/* ---- deterministic PRNG (splitmix64) ---- */
static uint64_t rng_state = 0x5eed1234abcdULL;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static int64_t rnd_range(int64_t lo, int64_t hi) /* inclusive */
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

/* ---- test file: bytes with a position-derived pattern ---- */
#define FILE_PAD 13 /* the tensor starts at an odd offset in the file */
static uint8_t pattern_byte(uint64_t pos)
{
    uint64_t z = pos * 0x9e3779b97f4a7c15ULL;
    return (uint8_t)((z >> 29) ^ (z >> 47) ^ pos);
}

static int make_file(uint64_t tensor_bytes, uint8_t **copy)
{
    char path[] = "/tmp/test_slice_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    unlink(path);
    size_t total = FILE_PAD + tensor_bytes;
    uint8_t *buf = malloc(total ? total : 1);
    for (size_t i = 0; i < total; i++)
        buf[i] = pattern_byte(i);
    if (write(fd, buf, total) != (ssize_t)total) {
        close(fd);
        free(buf);
        return -1;
    }
    *copy = buf;
    return fd;
}

/* ---- the reference model ---- */
struct ref_item {
    int is_index;
    int64_t index;
    int has_start, has_stop, has_step;
    int64_t start, stop, step;
};

/* Renders items as a spec string, with some stylistic variety. */
static void render(const struct ref_item *it, int n, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        if (i)
            len += (size_t)snprintf(out + len, cap - len, ",");
        if (it[i].is_index) {
            len += (size_t)snprintf(out + len, cap - len,
                                    (it[i].index >= 0 && rnd() % 8 == 0) ? "+%" PRId64 : "%" PRId64,
                                    it[i].index);
            continue;
        }
        if (it[i].has_start)
            len += (size_t)snprintf(out + len, cap - len, "%" PRId64, it[i].start);
        len += (size_t)snprintf(out + len, cap - len, ":");
        if (it[i].has_stop)
            len += (size_t)snprintf(out + len, cap - len, "%" PRId64, it[i].stop);
        if (it[i].has_step)
            len += (size_t)snprintf(out + len, cap - len, ":%" PRId64, it[i].step);
        else if (rnd() % 4 == 0)
            len += (size_t)snprintf(out + len, cap - len, ":");
    }
}

/* Python's slice.indices(), written naively: clamped to [0, len] for a
 * positive step, to [-1, len - 1] for a negative one. */
static int64_t py_bound(int64_t v, int64_t len, int64_t step)
{
    int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? len : len - 1;
    if (v < 0)
        v += len; /* the random bounds are small: no overflow */
    if (v < lo)
        v = lo;
    if (v > hi)
        v = hi;
    return v;
}

#define REF_MAX 64
struct ref_dim {
    int n;                 /* selected indices */
    int64_t idx[REF_MAX];
    int dropped;
};

/* Returns 0 and fills dims, or -1 with the expected error message. */
static int ref_resolve(const struct ref_item *it, int n_items, int ndim, const uint64_t *shape,
                       struct ref_dim *dims, char *msg, size_t cap)
{
    if (n_items > ndim) {
        snprintf(msg, cap, "too many indices: tensor has %d dimensions, slice has %d", ndim, n_items);
        return -1;
    }
    for (int d = 0; d < ndim; d++) {
        int64_t len = (int64_t)shape[d];
        struct ref_item whole = {0};
        const struct ref_item *x = d < n_items ? &it[d] : &whole;
        dims[d].n = 0;
        dims[d].dropped = x->is_index;
        if (x->is_index) {
            int64_t i = x->index < 0 ? x->index + len : x->index;
            if (i < 0 || i >= len) {
                snprintf(msg, cap, "dimension %d: index %" PRId64 " out of range for size %" PRId64,
                         d, x->index, len);
                return -1;
            }
            dims[d].idx[dims[d].n++] = i;
            continue;
        }
        int64_t step = x->has_step ? x->step : 1;
        if (step == 0) {
            snprintf(msg, cap, "dimension %d: step must not be zero", d);
            return -1;
        }
        int64_t start = x->has_start ? py_bound(x->start, len, step) : step > 0 ? 0 : len - 1;
        int64_t stop = x->has_stop ? py_bound(x->stop, len, step) : step > 0 ? len : -1;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            dims[d].idx[dims[d].n++] = i;
    }
    return 0;
}

/* Source bit ranges of every selected element in result order, merged into
 * maximal contiguous pieces. Returns the number of pieces. */
static size_t ref_pieces(int ndim, const uint64_t *shape, const struct ref_dim *dims,
                         unsigned bits, uint64_t *pstart, uint64_t *pend, uint64_t *nelems)
{
    size_t np = 0;
    int pos[8] = {0};
    *nelems = 0;
    for (int d = 0; d < ndim; d++)
        if (dims[d].n == 0)
            return 0;
    for (;;) {
        uint64_t lin = 0;
        for (int d = 0; d < ndim; d++)
            lin = lin * shape[d] + (uint64_t)dims[d].idx[pos[d]];
        uint64_t b0 = lin * bits, b1 = b0 + bits;
        if (np && pend[np - 1] == b0) {
            pend[np - 1] = b1;
        } else {
            pstart[np] = b0;
            pend[np] = b1;
            np++;
        }
        (*nelems)++;
        int d = ndim - 1;
        while (d >= 0 && ++pos[d] == dims[d].n)
            pos[d--] = 0;
        if (d < 0)
            break;
    }
    return np;
}

static const enum dtype rand_dtypes[] = {DT_U8, DT_F16, DT_F32, DT_F64, DT_F4, DT_F6_E2M3, DT_BF16};

static struct ref_item rand_item(uint64_t len)
{
    struct ref_item it = {0};
    int64_t L = (int64_t)len;
    if (rnd() % 4 == 0) {
        it.is_index = 1;
        it.index = rnd_range(-L - 1, L);
        return it;
    }
    it.has_start = rnd() % 2;
    it.start = rnd_range(-L - 2, L + 2);
    it.has_stop = rnd() % 2;
    it.stop = rnd_range(-L - 2, L + 2);
    it.has_step = rnd() % 2;
    it.step = rnd() % 40 == 0 ? 0 : rnd() % 3 == 0 ? rnd_range(-4, -1) : rnd_range(1, 4);
    return it;
}

static int g_cases, g_ok_plans, g_err_plans, g_reads;

/* One random case: build, compare plan and bytes with the model. */
static int random_case(void)
{
    uint64_t shape[4];
    int ndim;
    enum dtype dt = rand_dtypes[rnd() % (sizeof(rand_dtypes) / sizeof(rand_dtypes[0]))];
    unsigned bits = dtype_info(dt)->bits;
    uint64_t total_elems;
    do {
        ndim = (int)rnd_range(0, 4);
        total_elems = 1;
        for (int d = 0; d < ndim; d++) {
            shape[d] = rnd() % 16 == 0 ? 0 : (uint64_t)rnd_range(1, 7);
            total_elems *= shape[d];
        }
    } while (total_elems * bits % 8);
    uint64_t tensor_bytes = total_elems * bits / 8;

    struct ref_item items[5];
    int n_items = ndim == 0 ? 0 : (int)rnd_range(0, ndim);
    if (rnd() % 30 == 0)
        n_items = ndim + 1;
    for (int i = 0; i < n_items; i++)
        items[i] = rand_item(i < ndim ? shape[i] : 3);
    char spec[256];
    render(items, n_items, spec, sizeof(spec));

    struct ref_dim dims[4];
    char want_err[256] = "", err[256] = "";
    int ref_rc = ref_resolve(items, n_items, ndim, shape, dims, want_err, sizeof(want_err));
    uint64_t pstart[4096], pend[4096], ref_nelems = 0;
    size_t np = 0;
    if (ref_rc == 0) {
        np = ref_pieces(ndim, shape, dims, bits, pstart, pend, &ref_nelems);
        for (size_t i = 0; i < np; i++) {
            if (pstart[i] % 8 || pend[i] % 8) {
                ref_rc = -1;
                snprintf(want_err, sizeof(want_err), "slice cuts %s elements off a byte boundary",
                         dtype_info(dt)->name);
                break;
            }
        }
    }

    struct slice_plan plan;
    int rc = slice_plan_build(spec, strlen(spec), dt, (uint32_t)ndim, shape, &plan, err, sizeof(err));
    g_cases++;
    if (rc != ref_rc || (rc < 0 && !strstr(err, want_err))) {
        fprintf(stderr, "  dtype %s shape [", dtype_info(dt)->name);
        for (int d = 0; d < ndim; d++)
            fprintf(stderr, "%s%" PRIu64, d ? "," : "", shape[d]);
        fprintf(stderr, "] spec \"%s\": rc %d (%s), want %d (%s)\n", spec, rc, err, ref_rc, want_err);
        return 0;
    }
    if (rc < 0) {
        g_err_plans++;
        return 1;
    }
    g_ok_plans++;

    /* plan shape and invariants */
    int ok = 1;
    uint32_t rd = 0;
    for (int d = 0; d < ndim; d++) {
        if (dims[d].dropped)
            continue;
        if (rd >= plan.ndim || plan.shape[rd] != (uint64_t)dims[d].n)
            ok = 0;
        rd++;
    }
    uint64_t want_bytes = 0;
    for (size_t i = 0; i < np; i++)
        want_bytes += (pend[i] - pstart[i]) / 8;
    if (rd != plan.ndim || plan.nelems != ref_nelems || plan.nbytes != want_bytes)
        ok = 0;
    if (plan.nbytes != plan.n_runs * plan.run_bytes)
        ok = 0;
    /* the runs, in order, cover exactly the source bytes of the pieces (a
     * piece may hold several runs: stepped runs can abut across rows) */
    uint64_t piece = 0, at = np ? pstart[0] / 8 : 0;
    for (uint64_t k = 0; ok && k < plan.n_runs; k++) {
        uint64_t o = slice_run_offset(&plan, k);
        if (piece >= np || o != at || o + plan.run_bytes > pend[piece] / 8) {
            ok = 0;
            break;
        }
        at += plan.run_bytes;
        if (at == pend[piece] / 8 && ++piece < np)
            at = pstart[piece] / 8;
    }
    if (ok && piece != np)
        ok = 0;
    if (!ok) {
        fprintf(stderr, "  plan mismatch: dtype %s ndim %d spec \"%s\" nbytes %" PRIu64 " (want %"
                PRIu64 ") n_runs %" PRIu64 " (pieces %zu)\n", dtype_info(dt)->name, ndim, spec,
                plan.nbytes, want_bytes, plan.n_runs, np);
        return 0;
    }

    /* bytes: whole slice, then random windows, with several scratch sizes */
    uint8_t *file;
    int fd = make_file(tensor_bytes, &file);
    if (fd < 0) {
        fprintf(stderr, "  cannot create temp file\n");
        return 0;
    }
    uint8_t *want = malloc(want_bytes + 1), *got = malloc(want_bytes + 1);
    uint64_t w = 0;
    for (size_t i = 0; i < np; i++) {
        memcpy(want + w, file + FILE_PAD + pstart[i] / 8, (pend[i] - pstart[i]) / 8);
        w += (pend[i] - pstart[i]) / 8;
    }
    static uint8_t scratch[4096];
    static const size_t scratch_lens[] = {0, 1, 5, 64, 4096};
    for (int t = 0; t < 8 && ok; t++) {
        uint64_t off = 0, len = want_bytes;
        if (t > 0 && want_bytes) {
            off = rnd() % want_bytes;
            len = 1 + rnd() % (want_bytes - off);
        }
        memset(got, 0xa5, want_bytes + 1);
        int r;
        if (t == 0)
            r = slice_read(&plan, fd, FILE_PAD, off, got, (size_t)len);
        else {
            size_t sl = scratch_lens[rnd() % 5];
            r = slice_read_scratch(&plan, fd, FILE_PAD, off, got, (size_t)len, sl ? scratch : NULL, sl);
        }
        g_reads++;
        if (r != 0 || memcmp(got, want + off, len) != 0 || got[len] != 0xa5) {
            fprintf(stderr, "  read mismatch: dtype %s spec \"%s\" off %" PRIu64 " len %" PRIu64
                    " rc %d\n", dtype_info(dt)->name, spec, off, len, r);
            ok = 0;
        }
    }
    free(want);
    free(got);
    free(file);
    close(fd);
    return ok;
}

TEST(random_against_reference)
{
    int failures = 0;
    for (int i = 0; i < 20000 && failures < 10; i++) {
        if (!random_case())
            failures++;
    }
    CHECK(failures == 0);
    printf("  random: %d cases, %d plans, %d expected errors, %d reads compared\n", g_cases,
           g_ok_plans, g_err_plans, g_reads);
    CHECK(g_ok_plans > 5000);
    CHECK(g_err_plans > 500);
}

/* Builds a plan, expecting failure with a message containing want. */
static int plan_err(const char *spec, enum dtype dt, uint32_t ndim, const uint64_t *shape,
                    const char *want)
{
    struct slice_plan p;
    char err[256] = "";
    int rc = slice_plan_build(spec, strlen(spec), dt, ndim, shape, &p, err, sizeof(err));
    if (rc != -1 || !strstr(err, want)) {
        fprintf(stderr, "  \"%s\": rc %d err \"%s\", want \"%s\"\n", spec, rc, err, want);
        return 0;
    }
    return 1;
}

TEST(error_messages)
{
    uint64_t s2[2] = {4, 6}, s1[1] = {8};
    CHECK(plan_err("0,0,0", DT_F32, 2, s2, "too many indices: tensor has 2 dimensions, slice has 3"));
    CHECK(plan_err("0", DT_F32, 0, s2, "too many indices: tensor has 0 dimensions, slice has 1"));
    CHECK(plan_err("4", DT_F32, 2, s2, "dimension 0: index 4 out of range for size 4"));
    CHECK(plan_err("0,-7", DT_F32, 2, s2, "dimension 1: index -7 out of range for size 6"));
    CHECK(plan_err("::0", DT_F32, 2, s2, "dimension 0: step must not be zero"));
    CHECK(plan_err(":,::-1", DT_F4, 2, s2, "dimension 1: slice cuts F4 elements off a byte boundary"));
    CHECK(plan_err("0:1", DT_F4, 1, (uint64_t[]){10}, "dimension 0: slice cuts F4 elements off a byte boundary"));
    CHECK(plan_err("::2", DT_F4, 1, s1, "dimension 0: slice cuts F4 elements off a byte boundary"));
    CHECK(plan_err(":,1", DT_F4, 2, s2, "dimension 1: slice cuts F4 elements off a byte boundary"));
    CHECK(plan_err("1:3", DT_F6_E2M3, 1, s1, "slice cuts F6_E2M3 elements off a byte boundary"));
    /* syntax, naming the position (1-based) */
    CHECK(plan_err("0, 1", DT_F32, 2, s2, "slice syntax error at position 3: unexpected byte 0x20"));
    CHECK(plan_err("0,a", DT_F32, 2, s2, "position 3: unexpected 'a'"));
    CHECK(plan_err("0,", DT_F32, 2, s2, "position 3: unexpected end"));
    CHECK(plan_err(",0", DT_F32, 2, s2, "position 1: unexpected ','"));
    CHECK(plan_err("1:2:3:4", DT_F32, 2, s2, "position 6: unexpected ':'"));
    CHECK(plan_err("-", DT_F32, 2, s2, "position 2: unexpected end"));
    CHECK(plan_err("--1", DT_F32, 2, s2, "position 2: unexpected '-'"));
    CHECK(plan_err("1.5", DT_F32, 2, s2, "position 2: unexpected '.'"));
    CHECK(plan_err("0x1", DT_F32, 2, s2, "position 2: unexpected 'x'"));
    CHECK(plan_err("...", DT_F32, 2, s2, "position 1"));
    CHECK(plan_err("1:2\n", DT_F32, 2, s2, "unexpected byte 0x0a"));
    CHECK(plan_err(":,", DT_F32, 2, s2, "unexpected end"));
    /* syntax is checked before the dimension count */
    CHECK(plan_err("0,0,x", DT_F32, 2, s2, "position 5"));
    /* int64 overflow */
    CHECK(plan_err("9223372036854775808", DT_F32, 2, s2, "dimension 0: integer at position 1 does not fit in 64 bits"));
    CHECK(plan_err(":,1:99999999999999999999", DT_F32, 2, s2, "dimension 1: integer at position 5 does not fit"));
    CHECK(plan_err("-9223372036854775809", DT_F32, 2, s2, "does not fit in 64 bits"));
    /* INT64_MIN / MAX themselves are fine as slice bounds */
    struct slice_plan p;
    char err[256];
    const char *big = "-9223372036854775808:9223372036854775807:9223372036854775807";
    CHECK(slice_plan_build(big, strlen(big), DT_F32, 2, s2, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.shape[0], 1);
    CHECK(plan_err("-9223372036854775808", DT_F32, 2, s2, "index -9223372036854775808 out of range for size 4"));
    /* a message never overflows a small errbuf */
    char small[8];
    CHECK(slice_plan_build("0,0,0", 5, DT_F32, 2, s2, &p, small, sizeof(small)) == -1);
    CHECK(strlen(small) == 7);
}

TEST(plans_for_common_slices)
{
    uint64_t s[3] = {4, 5, 6};
    struct slice_plan p;
    char err[256];
    /* whole tensor: one run */
    CHECK(slice_plan_build("", 0, DT_F32, 3, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.n_runs, 1);
    CHECK_EQ_U64(p.run_bytes, 480);
    CHECK_EQ_U64(p.ndim, 3);
    CHECK(slice_plan_build(":,:,:", 5, DT_F32, 3, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.n_runs, 1);
    /* a row range: one run */
    CHECK(slice_plan_build("1:3", 3, DT_F32, 3, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.n_runs, 1);
    CHECK_EQ_U64(p.run_bytes, 240);
    CHECK_EQ_U64(p.base, 120);
    CHECK_EQ_U64(p.n_outer, 0);
    /* integer indices fold into base and drop their dimension */
    CHECK(slice_plan_build("2,3", 3, DT_F32, 3, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.ndim, 1);
    CHECK_EQ_U64(p.shape[0], 6);
    CHECK_EQ_U64(p.n_runs, 1);
    CHECK_EQ_U64(p.base, (2 * 30 + 3 * 6) * 4);
    /* a column: one element per run, two outer dims */
    CHECK(slice_plan_build(":,:,-1", 6, DT_F32, 3, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.ndim, 2);
    CHECK_EQ_U64(p.run_bytes, 4);
    CHECK_EQ_U64(p.n_runs, 20);
    CHECK_EQ_U64(p.n_outer, 2);
    CHECK_EQ_U64(p.outer_stride[0], 120);
    CHECK_EQ_U64(p.outer_stride[1], 24);
    CHECK_EQ_U64(slice_run_offset(&p, 19), 3 * 120 + 4 * 24 + 20);
    /* a middle index with count 1 folds away */
    CHECK(slice_plan_build("1:3,2", 5, DT_F32, 3, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.n_outer, 1);
    CHECK_EQ_U64(p.run_bytes, 24);
    CHECK_EQ_U64(p.n_runs, 2);
    /* empty selections and empty dimensions */
    CHECK(slice_plan_build("3:1", 3, DT_F32, 3, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.nbytes, 0);
    CHECK_EQ_U64(p.n_runs, 0);
    CHECK_EQ_U64(p.shape[0], 0);
    uint64_t z[2] = {0, 3};
    CHECK(slice_plan_build(":,1", 3, DT_F32, 2, z, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.nbytes, 0);
    CHECK_EQ_U64(p.ndim, 1);
    CHECK(plan_err("0", DT_F32, 2, z, "dimension 0: index 0 out of range for size 0"));
    /* scalars */
    CHECK(slice_plan_build("", 0, DT_F64, 0, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.nbytes, 8);
    CHECK_EQ_U64(p.n_runs, 1);
    CHECK_EQ_U64(p.ndim, 0);
    CHECK(slice_plan_build(NULL, 0, DT_F64, 0, s, &p, err, sizeof(err)) == 0);
    /* F4: pairs on byte boundaries are fine */
    uint64_t f4[2] = {3, 4};
    CHECK(slice_plan_build(":,2:4", 5, DT_F4, 2, f4, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.run_bytes, 1);
    CHECK_EQ_U64(p.n_runs, 3);
    CHECK_EQ_U64(p.base, 1);
    CHECK_EQ_U64(p.outer_stride[0], 2);
    /* misaligned contributions that cancel out: [k,3] F4, "1, 1:3" starts at bit 16 */
    uint64_t f43[2] = {2, 3};
    CHECK(slice_plan_build("1,1:3", 5, DT_F4, 2, f43, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.base, 2);
    CHECK_EQ_U64(p.run_bytes, 1);
    CHECK(plan_err("0,1:3", DT_F4, 2, f43, "dimension 1: slice cuts F4"));
}

TEST(large_plan_without_reading)
{
    uint64_t s[2] = {1ULL << 20, 1ULL << 20};
    struct slice_plan p;
    char err[256];
    CHECK(slice_plan_build(":,5", 3, DT_F32, 2, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.ndim, 1);
    CHECK_EQ_U64(p.shape[0], 1ULL << 20);
    CHECK_EQ_U64(p.run_bytes, 4);
    CHECK_EQ_U64(p.n_runs, 1ULL << 20);
    CHECK_EQ_U64(p.nbytes, 4ULL << 20);
    CHECK_EQ_U64(p.base, 20);
    CHECK_EQ_U64(p.n_outer, 1);
    CHECK_EQ_U64(p.outer_stride[0], 4ULL << 20);
    CHECK_EQ_U64(slice_run_offset(&p, (1ULL << 20) - 1), ((1ULL << 20) - 1) * (4ULL << 20) + 20);

    CHECK(slice_plan_build("-1", 2, DT_F32, 2, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.n_runs, 1);
    CHECK_EQ_U64(p.run_bytes, 4ULL << 20);
    CHECK_EQ_U64(p.base, (4ULL << 40) - (4ULL << 20));

    CHECK(slice_plan_build("::1024,100:200:2", 16, DT_BF16, 2, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.n_runs, 1024 * 50);
    CHECK_EQ_U64(p.run_bytes, 2);
    CHECK_EQ_U64(p.outer_stride[0], 1024ULL * (2ULL << 20));
    CHECK_EQ_U64(p.outer_stride[1], 4);
    CHECK_EQ_U64(slice_run_offset(&p, 1024 * 50 - 1), 1023ULL * 1024 * (2ULL << 20) + 200 + 49 * 4);

    /* a shape whose size in bits overflows is refused, not wrapped */
    uint64_t huge[2] = {1ULL << 32, 1ULL << 30};
    CHECK(plan_err(":,0", DT_U64, 2, huge, "overflows"));
    /* ... but a zero dimension makes any shape empty */
    uint64_t zhuge[3] = {0, UINT64_MAX, UINT64_MAX};
    CHECK(slice_plan_build("", 0, DT_F64, 3, zhuge, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.nbytes, 0);
}

TEST(read_errors_and_batching)
{
    uint64_t s[2] = {512, 64}; /* 512 rows of 256 bytes (F32) */
    struct slice_plan p;
    char err[256];
    uint8_t *file;
    int fd = make_file(512 * 64 * 4, &file);
    CHECK(fd >= 0);
    CHECK(slice_plan_build(":,7", 3, DT_F32, 2, s, &p, err, sizeof(err)) == 0);
    uint8_t out[2048];
    CHECK(slice_read(&p, fd, FILE_PAD, 0, out, sizeof(out)) == 0);
    for (int r = 0; r < 512; r++)
        CHECK(memcmp(out + 4 * r, file + FILE_PAD + r * 256 + 28, 4) == 0);
    CHECK(slice_read(&p, fd, FILE_PAD, 1, out, 2048) == -EINVAL);
    CHECK(slice_read(&p, fd, FILE_PAD, 2049, out, 0) == 0);
    /* truncated file: the tensor claims more bytes than there are */
    CHECK(slice_read(&p, fd, FILE_PAD + 256, 0, out, sizeof(out)) == -ENODATA);
    CHECK(slice_read_scratch(&p, fd, FILE_PAD + 256, 0, out, sizeof(out), NULL, 0) == -ENODATA);
    CHECK(slice_read(&p, -1, FILE_PAD, 0, out, 4) == -EBADF);
    close(fd);
    free(file);
}

TEST(negative_steps)
{
    uint64_t s[2] = {4, 6};
    struct slice_plan p;
    char err[256];
    /* rows reversed: whole rows are runs, walked backwards */
    CHECK(slice_plan_build("::-1", 4, DT_F32, 2, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.run_bytes, 24);
    CHECK_EQ_U64(p.n_runs, 4);
    CHECK_EQ_U64(p.base, 72);
    CHECK(p.outer_stride[0] == -24);
    CHECK_EQ_U64(slice_run_offset(&p, 3), 0);
    /* columns reversed with a step: one element per run */
    CHECK(slice_plan_build("1,::-2", 6, DT_F32, 2, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.shape[0], 3);
    CHECK_EQ_U64(p.base, 24 + 20);
    CHECK(p.outer_stride[0] == -8);
    CHECK_EQ_U64(slice_run_offset(&p, 2), 24 + 4);
    /* Python's clamping: start past the end starts at the last element,
     * stop -1 from the end stops before it, stop -100 runs to the first */
    CHECK(slice_plan_build("100:-100:-1", 11, DT_F32, 2, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.shape[0], 4);
    CHECK(slice_plan_build("2:-1:-1", 7, DT_F32, 2, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.shape[0], 0);
    CHECK(slice_plan_build("-1:0:-1", 7, DT_F32, 2, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.shape[0], 3);
    /* the extreme step */
    CHECK(slice_plan_build("::-9223372036854775808", 22, DT_F32, 2, s, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.shape[0], 1);
    CHECK_EQ_U64(p.base, 72);
}

TEST(narrowed)
{
    uint64_t s[3] = {4, 5, 6};
    struct slice_plan p, q;
    char err[256];
    /* "1:4,:,::2" then result dim 1 cut to [1, 3): the same as "1:4,1:3,::2" */
    struct slice_narrow n = {1, 1, 3};
    CHECK(slice_plan_build_narrowed("1:4,:,::2", 9, DT_F32, 3, s, &n, &p, err, sizeof(err)) == 0);
    CHECK(slice_plan_build("1:4,1:3,::2", 11, DT_F32, 3, s, &q, err, sizeof(err)) == 0);
    CHECK(memcmp(&p, &q, sizeof(p)) == 0);
    /* through a dropped dimension and a reversed one: "2,::-1" cut to [1, 4)
     * is "2,3:0:-1" */
    n = (struct slice_narrow){0, 1, 4};
    CHECK(slice_plan_build_narrowed("2,::-1", 6, DT_F32, 3, s, &n, &p, err, sizeof(err)) == 0);
    CHECK(slice_plan_build("2,3:0:-1", 8, DT_F32, 3, s, &q, err, sizeof(err)) == 0);
    CHECK(memcmp(&p, &q, sizeof(p)) == 0);
    /* empty and single-element cuts */
    n = (struct slice_narrow){2, 3, 3};
    CHECK(slice_plan_build_narrowed("", 0, DT_F32, 3, s, &n, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.nbytes, 0);
    CHECK_EQ_U64(p.shape[2], 0);
    n = (struct slice_narrow){0, 3, 4};
    CHECK(slice_plan_build_narrowed("::-1", 4, DT_F32, 3, s, &n, &p, err, sizeof(err)) == 0);
    CHECK_EQ_U64(p.base, 0);
    CHECK_EQ_U64(p.n_runs, 1);
    /* a dimension that does not exist, a cut outside the dimension */
    n = (struct slice_narrow){2, 0, 1};
    CHECK(slice_plan_build_narrowed("0", 1, DT_F32, 3, s, &n, &p, err, sizeof(err)) == -1);
    CHECK_CONTAINS(err, "dimension 2 to cut does not exist");
    n = (struct slice_narrow){0, 2, 5};
    CHECK(slice_plan_build_narrowed("", 0, DT_F32, 3, s, &n, &p, err, sizeof(err)) == -1);
    CHECK_CONTAINS(err, "is not inside its 4 elements");
}

TEST(runs_copy_reads_the_same)
{
    uint64_t s[3] = {5, 7, 9};
    uint8_t *file;
    int fd = make_file(5 * 7 * 9 * 2, &file);
    CHECK(fd >= 0);
    const char *specs[] = {"", "::-1", "1:4,::-2,3:8", ":,:,::-3", "-1,2", "::2,::3,::-1"};
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        struct slice_plan p;
        char err[256];
        CHECK(slice_plan_build(specs[i], strlen(specs[i]), DT_F16, 3, s, &p, err, sizeof(err)) == 0);
        struct slice_runs *r = malloc(slice_runs_size(&p));
        slice_runs_init(r, &p);
        uint8_t a[5 * 7 * 9 * 2], b[sizeof(a)];
        memset(a, 1, sizeof(a));
        memset(b, 2, sizeof(b));
        CHECK(slice_read(&p, fd, FILE_PAD, 0, a, (size_t)p.nbytes) == 0);
        CHECK(slice_runs_read(r, fd, FILE_PAD, 0, b, (size_t)p.nbytes) == 0);
        CHECK(memcmp(a, b, (size_t)p.nbytes) == 0);
        if (p.nbytes > 3) {
            CHECK(slice_runs_read(r, fd, FILE_PAD, 3, b, (size_t)p.nbytes - 3) == 0);
            CHECK(memcmp(a + 3, b, (size_t)p.nbytes - 3) == 0);
        }
        CHECK(slice_runs_read(r, fd, FILE_PAD, 1, b, (size_t)p.nbytes) == -EINVAL);
        CHECK(slice_runs_size(&p) == sizeof(struct slice_runs) + 16 * p.n_outer);
        free(r);
    }
    free(file);
    close(fd);
}

int main(void)
{
    RUN(random_against_reference);
    RUN(error_messages);
    RUN(negative_steps);
    RUN(narrowed);
    RUN(runs_copy_reads_the_same);
    RUN(plans_for_common_slices);
    RUN(large_plan_without_reading);
    RUN(read_errors_and_batching);
    return TEST_SUMMARY();
}
