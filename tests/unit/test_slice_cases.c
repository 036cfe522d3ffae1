/* slice: fixed cases with known answers: error messages, the plans for
 * common slices, a large plan built without reading, read errors and
 * batching, negative steps and narrowed tensors. The random
 * cases against the reference model are in test_slice.c. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "slice.h"
#include "slice_fixture.h"
#include "test.h"

/* Builds a plan, expecting failure with a message containing want. */
static int plan_err(const char *spec, enum dtype dt, uint32_t ndim, const uint64_t *shape,
                    const char *want)
{
    struct slice_plan p;
    struct st_error err = {0};
    int rc = slice_plan_build(spec, strlen(spec), dt, ndim, shape, &p, &err);
    if (rc != -EINVAL || err.code != ST_ERR_SLICE || !strstr(err.message, want)) {
        fprintf(stderr, "  \"%s\": rc %d err \"%s\", want \"%s\"\n", spec, rc, err.message, want);
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
    struct st_error err;
    const char *big = "-9223372036854775808:9223372036854775807:9223372036854775807";
    CHECK(slice_plan_build(big, strlen(big), DT_F32, 2, s2, &p, &err) == 0);
    CHECK_EQ_U64(p.shape[0], 1);
    CHECK(plan_err("-9223372036854775808", DT_F32, 2, s2, "index -9223372036854775808 out of range for size 4"));
    /* without an error to fill, only the errno */
    CHECK(slice_plan_build("0,0,0", 5, DT_F32, 2, s2, &p, NULL) == -EINVAL);
}

TEST(plans_for_common_slices)
{
    uint64_t s[3] = {4, 5, 6};
    struct slice_plan p;
    struct st_error err;
    /* whole tensor: one run */
    CHECK(slice_plan_build("", 0, DT_F32, 3, s, &p, &err) == 0);
    CHECK_EQ_U64(p.n_runs, 1);
    CHECK_EQ_U64(p.run_bytes, 480);
    CHECK_EQ_U64(p.ndim, 3);
    CHECK(slice_plan_build(":,:,:", 5, DT_F32, 3, s, &p, &err) == 0);
    CHECK_EQ_U64(p.n_runs, 1);
    /* a row range: one run */
    CHECK(slice_plan_build("1:3", 3, DT_F32, 3, s, &p, &err) == 0);
    CHECK_EQ_U64(p.n_runs, 1);
    CHECK_EQ_U64(p.run_bytes, 240);
    CHECK_EQ_U64(p.base, 120);
    CHECK_EQ_U64(p.n_outer, 0);
    /* integer indices fold into base and drop their dimension */
    CHECK(slice_plan_build("2,3", 3, DT_F32, 3, s, &p, &err) == 0);
    CHECK_EQ_U64(p.ndim, 1);
    CHECK_EQ_U64(p.shape[0], 6);
    CHECK_EQ_U64(p.n_runs, 1);
    CHECK_EQ_U64(p.base, (2 * 30 + 3 * 6) * 4);
    /* a column: one element per run, two outer dims */
    CHECK(slice_plan_build(":,:,-1", 6, DT_F32, 3, s, &p, &err) == 0);
    CHECK_EQ_U64(p.ndim, 2);
    CHECK_EQ_U64(p.run_bytes, 4);
    CHECK_EQ_U64(p.n_runs, 20);
    CHECK_EQ_U64(p.n_outer, 2);
    CHECK_EQ_U64(p.outer_stride[0], 120);
    CHECK_EQ_U64(p.outer_stride[1], 24);
    CHECK_EQ_U64(slice_run_offset(&p, 19), 3 * 120 + 4 * 24 + 20);
    /* a middle index with count 1 folds away */
    CHECK(slice_plan_build("1:3,2", 5, DT_F32, 3, s, &p, &err) == 0);
    CHECK_EQ_U64(p.n_outer, 1);
    CHECK_EQ_U64(p.run_bytes, 24);
    CHECK_EQ_U64(p.n_runs, 2);
    /* empty selections and empty dimensions */
    CHECK(slice_plan_build("3:1", 3, DT_F32, 3, s, &p, &err) == 0);
    CHECK_EQ_U64(p.nbytes, 0);
    CHECK_EQ_U64(p.n_runs, 0);
    CHECK_EQ_U64(p.shape[0], 0);
    uint64_t z[2] = {0, 3};
    CHECK(slice_plan_build(":,1", 3, DT_F32, 2, z, &p, &err) == 0);
    CHECK_EQ_U64(p.nbytes, 0);
    CHECK_EQ_U64(p.ndim, 1);
    CHECK(plan_err("0", DT_F32, 2, z, "dimension 0: index 0 out of range for size 0"));
    /* scalars */
    CHECK(slice_plan_build("", 0, DT_F64, 0, s, &p, &err) == 0);
    CHECK_EQ_U64(p.nbytes, 8);
    CHECK_EQ_U64(p.n_runs, 1);
    CHECK_EQ_U64(p.ndim, 0);
    CHECK(slice_plan_build(NULL, 0, DT_F64, 0, s, &p, &err) == 0);
    /* F4: pairs on byte boundaries are fine */
    uint64_t f4[2] = {3, 4};
    CHECK(slice_plan_build(":,2:4", 5, DT_F4, 2, f4, &p, &err) == 0);
    CHECK_EQ_U64(p.run_bytes, 1);
    CHECK_EQ_U64(p.n_runs, 3);
    CHECK_EQ_U64(p.base, 1);
    CHECK_EQ_U64(p.outer_stride[0], 2);
    /* misaligned contributions that cancel out: [k,3] F4, "1, 1:3" starts at bit 16 */
    uint64_t f43[2] = {2, 3};
    CHECK(slice_plan_build("1,1:3", 5, DT_F4, 2, f43, &p, &err) == 0);
    CHECK_EQ_U64(p.base, 2);
    CHECK_EQ_U64(p.run_bytes, 1);
    CHECK(plan_err("0,1:3", DT_F4, 2, f43, "dimension 1: slice cuts F4"));
}

TEST(large_plan_without_reading)
{
    uint64_t s[2] = {1ULL << 20, 1ULL << 20};
    struct slice_plan p;
    struct st_error err;
    CHECK(slice_plan_build(":,5", 3, DT_F32, 2, s, &p, &err) == 0);
    CHECK_EQ_U64(p.ndim, 1);
    CHECK_EQ_U64(p.shape[0], 1ULL << 20);
    CHECK_EQ_U64(p.run_bytes, 4);
    CHECK_EQ_U64(p.n_runs, 1ULL << 20);
    CHECK_EQ_U64(p.nbytes, 4ULL << 20);
    CHECK_EQ_U64(p.base, 20);
    CHECK_EQ_U64(p.n_outer, 1);
    CHECK_EQ_U64(p.outer_stride[0], 4ULL << 20);
    CHECK_EQ_U64(slice_run_offset(&p, (1ULL << 20) - 1), ((1ULL << 20) - 1) * (4ULL << 20) + 20);

    CHECK(slice_plan_build("-1", 2, DT_F32, 2, s, &p, &err) == 0);
    CHECK_EQ_U64(p.n_runs, 1);
    CHECK_EQ_U64(p.run_bytes, 4ULL << 20);
    CHECK_EQ_U64(p.base, (4ULL << 40) - (4ULL << 20));

    CHECK(slice_plan_build("::1024,100:200:2", 16, DT_BF16, 2, s, &p, &err) == 0);
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
    CHECK(slice_plan_build("", 0, DT_F64, 3, zhuge, &p, &err) == 0);
    CHECK_EQ_U64(p.nbytes, 0);
}

TEST(read_errors_and_batching)
{
    uint64_t s[2] = {512, 64}; /* 512 rows of 256 bytes (F32) */
    struct slice_plan p;
    struct st_error err;
    uint8_t *file = NULL;
    int fd = make_file(512 * 64 * 4, &file);
    CHECK(fd >= 0);
    CHECK(slice_plan_build(":,7", 3, DT_F32, 2, s, &p, &err) == 0);
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
    struct st_error err;
    /* rows reversed: whole rows are runs, walked backwards */
    CHECK(slice_plan_build("::-1", 4, DT_F32, 2, s, &p, &err) == 0);
    CHECK_EQ_U64(p.run_bytes, 24);
    CHECK_EQ_U64(p.n_runs, 4);
    CHECK_EQ_U64(p.base, 72);
    CHECK(p.outer_stride[0] == -24);
    CHECK_EQ_U64(slice_run_offset(&p, 3), 0);
    /* columns reversed with a step: one element per run */
    CHECK(slice_plan_build("1,::-2", 6, DT_F32, 2, s, &p, &err) == 0);
    CHECK_EQ_U64(p.shape[0], 3);
    CHECK_EQ_U64(p.base, 24 + 20);
    CHECK(p.outer_stride[0] == -8);
    CHECK_EQ_U64(slice_run_offset(&p, 2), 24 + 4);
    /* Python's clamping: start past the end starts at the last element,
     * stop -1 from the end stops before it, stop -100 runs to the first */
    CHECK(slice_plan_build("100:-100:-1", 11, DT_F32, 2, s, &p, &err) == 0);
    CHECK_EQ_U64(p.shape[0], 4);
    CHECK(slice_plan_build("2:-1:-1", 7, DT_F32, 2, s, &p, &err) == 0);
    CHECK_EQ_U64(p.shape[0], 0);
    CHECK(slice_plan_build("-1:0:-1", 7, DT_F32, 2, s, &p, &err) == 0);
    CHECK_EQ_U64(p.shape[0], 3);
    /* the extreme step */
    CHECK(slice_plan_build("::-9223372036854775808", 22, DT_F32, 2, s, &p, &err) == 0);
    CHECK_EQ_U64(p.shape[0], 1);
    CHECK_EQ_U64(p.base, 72);
}

TEST(narrowed)
{
    uint64_t s[3] = {4, 5, 6};
    struct slice_plan p, q;
    struct st_error err;
    /* "1:4,:,::2" then result dim 1 cut to [1, 3): the same as "1:4,1:3,::2" */
    struct slice_narrow n = {1, 1, 3};
    CHECK(slice_plan_build_narrowed("1:4,:,::2", 9, DT_F32, 3, s, &n, &p, &err) == 0);
    CHECK(slice_plan_build("1:4,1:3,::2", 11, DT_F32, 3, s, &q, &err) == 0);
    CHECK(memcmp(&p, &q, sizeof(p)) == 0);
    /* through a dropped dimension and a reversed one: "2,::-1" cut to [1, 4)
     * is "2,3:0:-1" */
    n = (struct slice_narrow){0, 1, 4};
    CHECK(slice_plan_build_narrowed("2,::-1", 6, DT_F32, 3, s, &n, &p, &err) == 0);
    CHECK(slice_plan_build("2,3:0:-1", 8, DT_F32, 3, s, &q, &err) == 0);
    CHECK(memcmp(&p, &q, sizeof(p)) == 0);
    /* empty and single-element cuts */
    n = (struct slice_narrow){2, 3, 3};
    CHECK(slice_plan_build_narrowed("", 0, DT_F32, 3, s, &n, &p, &err) == 0);
    CHECK_EQ_U64(p.nbytes, 0);
    CHECK_EQ_U64(p.shape[2], 0);
    n = (struct slice_narrow){0, 3, 4};
    CHECK(slice_plan_build_narrowed("::-1", 4, DT_F32, 3, s, &n, &p, &err) == 0);
    CHECK_EQ_U64(p.base, 0);
    CHECK_EQ_U64(p.n_runs, 1);
    /* a dimension that does not exist, a cut outside the dimension */
    n = (struct slice_narrow){2, 0, 1};
    CHECK(slice_plan_build_narrowed("0", 1, DT_F32, 3, s, &n, &p, &err) == -EINVAL);
    CHECK_CONTAINS(err.message, "dimension 2 to cut does not exist");
    n = (struct slice_narrow){0, 2, 5};
    CHECK(slice_plan_build_narrowed("", 0, DT_F32, 3, s, &n, &p, &err) == -EINVAL);
    CHECK_CONTAINS(err.message, "is not inside its 4 elements");
}

int main(void)
{
    RUN(error_messages);
    RUN(negative_steps);
    RUN(narrowed);
    RUN(plans_for_common_slices);
    RUN(large_plan_without_reading);
    RUN(read_errors_and_batching);
    return TEST_SUMMARY();
}
