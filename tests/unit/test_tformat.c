/* tformat: .npy files built here are loaded by NumPy itself (via
 * /usr/bin/python3, skipped with a message when absent); safetensors
 * prefixes are checked byte for byte and parsed by Python's json. */
#include <stdlib.h>
#include <unistd.h>

#include "tformat.h"
#include "test.h"

#define PY "/usr/bin/python3"

static int have_numpy(void)
{
    static int cached = -1;
    if (cached < 0) {
        cached = access(PY, X_OK) == 0 &&
                 system(PY " -c 'import numpy' >/dev/null 2>&1") == 0;
        if (!cached)
            printf("  SKIP: %s with numpy not available, NumPy load checks skipped\n", PY);
    }
    return cached;
}

static uint64_t le(const char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | (unsigned char)p[i];
    return v;
}

/* Checks the framing of an npy prefix: magic, version, length, alignment, '\n'. */
static int npy_framing_ok(const char *h, size_t len)
{
    if (len % 64 || memcmp(h, "\x93NUMPY", 6) != 0 || h[len - 1] != '\n')
        return 0;
    if (h[6] == 1 && h[7] == 0)
        return le(h + 8, 2) + 10 == len;
    if (h[6] == 2 && h[7] == 0)
        return le(h + 8, 4) + 12 == len;
    return 0;
}

/* Writes prefix + data to a temp .npy and has NumPy load it and evaluate
 * `check` (a Python expression over the loaded array `a`). */
static int numpy_loads(enum dtype dt, uint32_t ndim, const uint64_t *shape, const void *data,
                       size_t nbytes, const char *check, int raw)
{
    char *pre;
    struct st_error err = {.message = "raw"};
    size_t pre_len;
    if ((raw ? tformat_npy_raw_prefix(dt, ndim, shape, nbytes, &pre, &pre_len)
             : tformat_npy_prefix(dt, ndim, shape, &pre, &pre_len, &err)) != 0) {
        fprintf(stderr, "  npy prefix failed: %s\n", err.message);
        return 0;
    }
    int ok = npy_framing_ok(pre, pre_len);
    if (!ok)
        fprintf(stderr, "  bad npy framing (%zu bytes)\n", pre_len);
    if (ok && have_numpy()) {
        char path[] = "/tmp/test_tformat_XXXXXX";
        int fd = mkstemp(path);
        ok = fd >= 0 && write(fd, pre, pre_len) == (ssize_t)pre_len &&
             write(fd, data, nbytes) == (ssize_t)nbytes;
        if (fd >= 0)
            close(fd);
        char cmd[1024];
        /* h: the header dict's line as stored, for the checks of the comment */
        snprintf(cmd, sizeof(cmd),
                 PY " -c 'import sys, numpy; a = numpy.load(sys.argv[1]); "
                 "h = open(sys.argv[1], \"rb\").read(%zu).decode(\"latin-1\"); "
                 "sys.exit(0 if (%s) else 3)' %s", pre_len, check, path);
        if (ok && system(cmd) != 0) {
            fprintf(stderr, "  numpy rejected: %s\n", check);
            ok = 0;
        }
        unlink(path);
    }
    free(pre);
    return ok;
}

static int numpy_accepts(enum dtype dt, uint32_t ndim, const uint64_t *shape, const void *data,
                         size_t nbytes, const char *check)
{
    return numpy_loads(dt, ndim, shape, data, nbytes, check, 0);
}

TEST(parse)
{
    enum tformat f = (enum tformat)-1;
    CHECK(tformat_parse("raw", &f) == 0 && f == TFORMAT_RAW);
    CHECK(tformat_parse("npy", &f) == 0 && f == TFORMAT_NPY);
    CHECK(tformat_parse("safetensors", &f) == 0 && f == TFORMAT_SAFETENSORS);
    CHECK(tformat_parse("NPY", &f) == -EINVAL);
    CHECK(tformat_parse("", &f) == -EINVAL);
    CHECK(tformat_parse("npy ", &f) == -EINVAL);
    CHECK(tformat_parse("numpy", &f) == -EINVAL);
    CHECK(tformat_parse(NULL, &f) == -EINVAL);
}

TEST(npy_exact_header)
{
    uint64_t shape[2] = {2, 3};
    char *pre;
    struct st_error err;
    size_t len;
    CHECK(tformat_npy_prefix(DT_F32, 2, shape, &pre, &len, &err) == 0);
    CHECK_EQ_U64(len, 128); /* 10 + 60-byte dict + '\n' rounds up to 128, as NumPy does */
    CHECK(pre[len] == 0);
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    CHECK(memcmp(pre + 10, dict, strlen(dict)) == 0);
    for (size_t i = 10 + strlen(dict); i < len - 1; i++)
        CHECK(pre[i] == ' ');
    CHECK(npy_framing_ok(pre, len));
    free(pre);
    uint64_t one = 5;
    CHECK(tformat_npy_prefix(DT_I64, 1, &one, &pre, &len, &err) == 0);
    CHECK(strstr(pre + 10, "'shape': (5,), }") != NULL);
    free(pre);
    CHECK(tformat_npy_prefix(DT_U8, 0, NULL, &pre, &len, &err) == 0);
    CHECK(strstr(pre + 10, "'descr': '|u1'") != NULL);
    CHECK(strstr(pre + 10, "'shape': (), }") != NULL);
    free(pre);
}

TEST(npy_no_numpy_dtype)
{
    const enum dtype none[] = {DT_BF16, DT_F8_E4M3, DT_F8_E5M2, DT_F8_E4M3FNUZ, DT_F8_E5M2FNUZ,
                               DT_F8_E8M0, DT_F6_E2M3, DT_F6_E3M2, DT_F4};
    uint64_t shape[1] = {4};
    char *pre = (char *)1;
    struct st_error err;
    size_t len = 1;
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
        CHECK(tformat_npy_prefix(none[i], 1, shape, &pre, &len, &err) == -EINVAL);
        CHECK(pre == NULL && len == 0);
    }
    CHECK(tformat_npy_prefix(DT_BF16, 1, shape, &pre, &len, &err) == -EINVAL);
    CHECK_CONTAINS(err.message, "dtype BF16 has no NumPy equivalent; use npy_dtype=raw");
}

TEST(npy_raw_bits)
{
    uint16_t bf[6] = {0x3f80, 0xc000, 0, 1, 2, 0xffff};
    uint64_t s23[2] = {2, 3}, s4[1] = {4}, s48[2] = {4, 8}, s44[2] = {4, 4}, s23f4[2] = {2, 3};
    CHECK(numpy_loads(DT_BF16, 2, s23, bf, 12, "a.dtype == numpy.uint16 and a.shape == (2, 3) "
                      "and a[0, 0] == 0x3f80 and \"# tensord: dtype=BF16 shape=2,3 \" in h", 1));
    uint8_t f8[32];
    for (int i = 0; i < 32; i++)
        f8[i] = (uint8_t)(i * 7);
    CHECK(numpy_loads(DT_F8_E4M3, 1, s4, f8, 4, "a.dtype == numpy.uint8 and list(a) == [0, 7, 14, "
                      "21] and \"dtype=F8_E4M3 shape=4 \" in h", 1));
    CHECK(numpy_loads(DT_F8_E8M0, 0, NULL, f8 + 1, 1, "a.shape == () and a == 7 and "
                      "\"dtype=F8_E8M0 shape= \" in h", 1));
    /* sub-byte: packed, the last dimension in bytes, or flat */
    CHECK(numpy_loads(DT_F4, 2, s48, f8, 16, "a.dtype == numpy.uint8 and a.shape == (4, 4) and "
                      "\"dtype=F4 shape=4,8 \" in h", 1));
    CHECK(numpy_loads(DT_F6_E3M2, 2, s44, f8, 12, "a.shape == (4, 3) and a[3, 2] == 77", 1));
    CHECK(numpy_loads(DT_F4, 2, s23f4, f8, 3, "a.shape == (3,) and \"dtype=F4 shape=2,3 \" in h",
                      1));
    /* dtypes NumPy has are not changed by raw */
    float f[2] = {1.5f, 2.5f};
    uint64_t s2[1] = {2};
    CHECK(numpy_loads(DT_F32, 1, s2, f, 8, "a.dtype == numpy.float32 and \"tensord\" not in h", 1));
    char *pre;
    size_t len;
    CHECK(tformat_npy_raw_prefix(DT_COUNT, 1, s2, 2, &pre, &len) == -EINVAL);
}

TEST(npy_loads_in_numpy)
{
    float f[24];
    for (int i = 0; i < 24; i++)
        f[i] = (float)i * 0.5f;
    uint64_t s23[2] = {2, 3}, s234[3] = {2, 3, 4}, s24[1] = {24}, s0[2] = {0, 7};
    CHECK(numpy_accepts(DT_F32, 2, s23, f, 24, "a.dtype == numpy.float32 and a.shape == (2, 3) and "
                        "(a.ravel() == numpy.arange(6) * 0.5).all()"));
    CHECK(numpy_accepts(DT_F32, 3, s234, f, 96, "a.shape == (2, 3, 4) and a[1, 2, 3] == 11.5 and "
                        "a.flags.c_contiguous"));
    CHECK(numpy_accepts(DT_F32, 1, s24, f, 96, "a.shape == (24,) and a[-1] == 11.5"));
    CHECK(numpy_accepts(DT_F32, 0, NULL, f + 3, 4, "a.shape == () and a == 1.5"));
    CHECK(numpy_accepts(DT_F32, 2, s0, f, 0, "a.shape == (0, 7) and a.size == 0"));

    uint8_t b[6] = {0, 1, 1, 0, 1, 0};
    CHECK(numpy_accepts(DT_BOOL, 2, s23, b, 6, "a.dtype == numpy.bool_ and a.sum() == 3"));
    CHECK(numpy_accepts(DT_U8, 2, s23, b, 6, "a.dtype == numpy.uint8 and a[0, 1] == 1"));
    int64_t q[6] = {-1, 2, -3, 4, -5, 1LL << 40};
    CHECK(numpy_accepts(DT_I64, 2, s23, q, 48, "a.dtype == numpy.int64 and a[1, 2] == 2**40 and "
                        "a[0, 0] == -1"));
    float c[4] = {1, 2, 3, 4};
    uint64_t s2[1] = {2};
    CHECK(numpy_accepts(DT_C64, 1, s2, c, 16, "a.dtype == numpy.complex64 and a[1] == 3+4j"));
    uint16_t h[2] = {0x3c00, 0xc000};
    CHECK(numpy_accepts(DT_F16, 1, s2, h, 4, "a.dtype == numpy.float16 and list(a) == [1.0, -2.0]"));
    /* many and large dimensions still give an aligned v1 header NumPy reads */
    uint64_t many[32];
    for (int i = 0; i < 32; i++)
        many[i] = 1;
    many[31] = 2;
    CHECK(numpy_accepts(DT_F32, 32, many, f, 8, "a.ndim == 32 and a.size == 2"));
    uint64_t bigdim[2] = {0, 18446744073709551615ULL};
    char *pre;
    struct st_error err;
    size_t len;
    CHECK(tformat_npy_prefix(DT_F32, 2, bigdim, &pre, &len, &err) == 0);
    CHECK(npy_framing_ok(pre, len));
    CHECK(strstr(pre + 10, "(0, 18446744073709551615)") != NULL);
    free(pre);
}

TEST(npy_version2_for_huge_dicts)
{
    static uint64_t shape[4000];
    for (int i = 0; i < 4000; i++)
        shape[i] = 12345678901234567ULL;
    char *pre;
    struct st_error err;
    size_t len;
    CHECK(tformat_npy_prefix(DT_F64, 4000, shape, &pre, &len, &err) == 0);
    CHECK(pre[6] == 2 && npy_framing_ok(pre, len));
    CHECK(len > 65535 + 12);
    free(pre);
}

/* Checks the framing of a safetensors prefix and returns its JSON (NUL-terminated copy). */
static char *st_json(const char *pre, size_t len)
{
    if (len < 8 || len % 8 || le(pre, 8) != len - 8)
        return NULL;
    char *j = malloc(len - 7);
    memcpy(j, pre + 8, len - 8);
    j[len - 8] = 0;
    return j;
}

TEST(safetensors_exact)
{
    uint64_t shape[2] = {2, 3};
    char *pre;
    size_t len;
    CHECK(tformat_safetensors_prefix("w", DT_F32, 2, shape, 24, &pre, &len) == 0);
    char *j = st_json(pre, len);
    CHECK(j != NULL);
    const char *want = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
    CHECK(j && strncmp(j, want, strlen(want)) == 0);
    for (size_t i = strlen(want); j && i < len - 8; i++)
        CHECK(j[i] == ' ');
    free(j);
    free(pre);
    CHECK(tformat_safetensors_prefix("s", DT_BF16, 0, NULL, 2, &pre, &len) == 0);
    j = st_json(pre, len);
    CHECK(j && strstr(j, "\"shape\":[],\"data_offsets\":[0,2]"));
    free(j);
    free(pre);
    CHECK(tformat_safetensors_prefix("f4", DT_F4, 1, (const uint64_t[]){8}, 4, &pre, &len) == 0);
    j = st_json(pre, len);
    CHECK(j && strstr(j, "{\"f4\":{\"dtype\":\"F4\",\"shape\":[8],\"data_offsets\":[0,4]}}"));
    free(j);
    free(pre);
}

TEST(safetensors_escaping)
{
    const char *names[] = {
        "plain.weight", "q\"uote", "back\\slash", "tab\there", "nl\nline", "ctl\x01\x1f\x7f",
        "gr\xc3\xb6\xc3\x9f\x65 \xe2\x82\xac \xf0\x9f\x98\x80", "/slash/", "</script>", "",
    };
    const char *escaped[] = {
        "plain.weight", "q\\\"uote", "back\\\\slash", "tab\\there", "nl\\nline", "ctl\\u0001\\u001f\x7f",
        "gr\xc3\xb6\xc3\x9f\x65 \xe2\x82\xac \xf0\x9f\x98\x80", "/slash/", "</script>", "",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char *pre;
        size_t len;
        uint64_t shape[1] = {3};
        CHECK(tformat_safetensors_prefix(names[i], DT_U8, 1, shape, 3, &pre, &len) == 0);
        char *j = st_json(pre, len);
        CHECK(j != NULL);
        char want[256];
        snprintf(want, sizeof(want), "{\"%s\":{", escaped[i]);
        if (j && strncmp(j, want, strlen(want)) != 0) {
            fprintf(stderr, "  name %zu: got %s\n", i, j);
            test_failed_flag = 1;
        }
        /* Python's json agrees: the key decodes back to the original bytes */
        if (j && have_numpy()) {
            char jp[] = "/tmp/test_tformat_j_XXXXXX", np_[] = "/tmp/test_tformat_n_XXXXXX";
            int fj = mkstemp(jp), fn = mkstemp(np_);
            CHECK(fj >= 0 && fn >= 0);
            CHECK(write(fj, j, strlen(j)) == (ssize_t)strlen(j));
            CHECK(write(fn, names[i], strlen(names[i])) == (ssize_t)strlen(names[i]));
            close(fj);
            close(fn);
            char cmd[512];
            snprintf(cmd, sizeof(cmd),
                     PY " -c 'import sys, json; d = json.loads(open(sys.argv[1], \"rb\").read()); "
                     "n = open(sys.argv[2], \"rb\").read().decode(); "
                     "sys.exit(0 if list(d) == [n] and d[n][\"data_offsets\"] == [0, 3] else 3)' %s %s",
                     jp, np_);
            CHECK(system(cmd) == 0);
            unlink(jp);
            unlink(np_);
        }
        free(j);
        free(pre);
    }
}

int main(void)
{
    RUN(parse);
    RUN(npy_exact_header);
    RUN(npy_no_numpy_dtype);
    RUN(npy_raw_bits);
    RUN(npy_loads_in_numpy);
    RUN(npy_version2_for_huge_dicts);
    RUN(safetensors_exact);
    RUN(safetensors_escaping);
    return TEST_SUMMARY();
}
