/* slice: the plan and slice_read are checked against a brute-force NumPy
 * model written here from scratch (every selected element enumerated, its
 * source bits gathered), over thousands of random shapes and specs. Fixed
 * cases with known answers are in test_slice_cases.c. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "slice.h"
#include "slice_fixture.h"
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
    char want_err[256] = "";
    struct st_error err = {0};
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
    int rc = slice_plan_build(spec, strlen(spec), dt, (uint32_t)ndim, shape, &plan, &err);
    g_cases++;
    if ((rc < 0 ? -1 : rc) != ref_rc || (rc < 0 && (rc != -EINVAL || !strstr(err.message, want_err)))) {
        fprintf(stderr, "  dtype %s shape [", dtype_info(dt)->name);
        for (int d = 0; d < ndim; d++)
            fprintf(stderr, "%s%" PRIu64, d ? "," : "", shape[d]);
        fprintf(stderr, "] spec \"%s\": rc %d (%s), want %d (%s)\n", spec, rc, err.message, ref_rc,
                want_err);
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

int main(void)
{
    RUN(random_against_reference);
    return TEST_SUMMARY();
}
