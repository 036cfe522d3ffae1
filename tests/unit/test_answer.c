/* Tests for client/answer.c and answer_open.c: the client library reads
 * the daemon's answers with json_scan. What every answer carries (ok, the daemon's error, the
 * lease), the open answer's tables and their cross-checks, hostile answers
 * (huge numbers, deep nesting, bad UTF-8, NUL bytes, duplicate keys,
 * trailing bytes), and running out of memory at every allocation. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "answer_open.h"
#include "client_int.h"
#include "cmem.h"
#include "test.h"
#include "util.h"

static int read_text(const char *text, struct answer *a, char *err, size_t errlen)
{
    return answer_read(text, strlen(text), a, err, errlen);
}

/* answer_read must refuse text with want in its message. */
static void expect_refused(const char *text, size_t len, const char *want)
{
    struct answer a;
    char err[512] = "";
    int rc = answer_read(text, len, &a, err, sizeof(err));
    if (rc != -1 || !strstr(err, want)) {
        fprintf(stderr, "  for %.80s\n  got rc %d, \"%s\", want \"%s\"\n", text, rc, err, want);
        test_failed_flag = 1;
    }
}

#define REFUSED(text, want) expect_refused(text, strlen(text), want)

TEST(ok_and_lease)
{
    struct answer a;
    char err[256] = "";
    CHECK(read_text("{\"ok\":true}", &a, err, sizeof(err)) == 0 && a.ok && !a.has_lease);
    CHECK(read_text(" {\"ok\" : true , \"lease\": 9223372036854775807 }\n", &a, err,
                    sizeof(err)) == 0);
    CHECK(a.has_lease && a.lease == INT64_MAX);
    /* Members it does not know are skipped, whatever they hold. */
    CHECK(read_text("{\"protocols\":[1,2],\"server\":\"tensord\",\"x\":{\"y\":[{},[],null,1.5e3]},"
                    "\"ok\":true,\"lease\":7}", &a, err, sizeof(err)) == 0);
    CHECK(a.ok && a.has_lease && a.lease == 7);
    /* A lease that is no non-negative integer is no lease. */
    CHECK(read_text("{\"ok\":true,\"lease\":-1}", &a, err, sizeof(err)) == 0 && !a.has_lease);
    CHECK(read_text("{\"ok\":true,\"lease\":1.0}", &a, err, sizeof(err)) == 0 && !a.has_lease);
    CHECK(read_text("{\"ok\":true,\"lease\":\"1\"}", &a, err, sizeof(err)) == 0 &&
          !a.has_lease);
    /* Keys are compared decoded. */
    CHECK(read_text("{\"\\u006fk\":true}", &a, err, sizeof(err)) == 0 && a.ok);
    /* No error buffer: still answers. */
    CHECK(read_text("{\"ok\":false}", &a, NULL, 0) == -1);
}

TEST(refusals_carry_the_daemons_error)
{
    REFUSED("{\"ok\":false,\"error\":{\"code\":\"not_loaded\",\"message\":\"model m is not "
            "loaded\"}}", "not_loaded: model m is not loaded");
    REFUSED("{\"error\":{\"message\":\"x\",\"code\":\"bad_request\",\"extra\":[1]},\"ok\":false}",
            "bad_request: x");
    REFUSED("{}", "error: request failed");
    REFUSED("{\"ok\":1}", "error: request failed");
    REFUSED("{\"ok\":\"true\"}", "error: request failed");
    REFUSED("{\"ok\":false,\"error\":\"gone\"}", "error: request failed");
    REFUSED("{\"ok\":false,\"error\":{\"code\":7,\"message\":null}}", "error: request failed");
    REFUSED("{\"ok\":false,\"error\":{\"code\":\"c\\u00e9\\ud83d\\ude00\",\"message\":\"a\\nb\"}}",
            "c\xc3\xa9\xf0\x9f\x98\x80: a\nb");
    /* A long message is cut to the buffer, never overrun. */
    char big[4096];
    int n = snprintf(big, sizeof(big),
                     "{\"ok\":false,\"error\":{\"code\":\"limit\",\"message\":\"");
    memset(big + n, 'm', 3000);
    strcpy(big + n + 3000, "\"}}");
    struct answer a;
    char err[16];
    CHECK(answer_read(big, strlen(big), &a, err, sizeof(err)) == -1);
    CHECK_STR(err, "limit: mmmmmmmm");
}

TEST(hostile_numbers)
{
    REFUSED("{\"ok\":true,\"lease\":9223372036854775808}", "too big integer");
    REFUSED("{\"ok\":true,\"lease\":18446744073709551616}", "too big integer");
    REFUSED("{\"ok\":true,\"lease\":-9223372036854775809}", "too big negative integer");
    REFUSED("{\"ok\":true,\"x\":1e999}", "real number overflow");
    REFUSED("{\"ok\":true,\"lease\":01}", "invalid token");
    REFUSED("{\"ok\":true,\"lease\":1.}", "invalid token");
    REFUSED("{\"ok\":true,\"lease\":-}", "invalid token");
    /* A number of 100,000 digits: an error, read in bounded memory. */
    size_t len = 100000 + 32;
    char *t = malloc(len);
    int n = snprintf(t, len, "{\"ok\":true,\"x\":");
    memset(t + n, '7', 100000);
    strcpy(t + n + 100000, "}");
    expect_refused(t, strlen(t), "too big integer");
    memset(t + n, '7', 100000);
    t[n + 50000] = '.';
    strcpy(t + n + 100000, "}");
    expect_refused(t, strlen(t), "real number overflow");
    free(t);
}

TEST(hostile_nesting)
{
    /* The answer itself is depth 1: 31 more levels are fine, 32 are not. */
    char t[512];
    int n = snprintf(t, sizeof(t), "{\"ok\":true,\"x\":");
    memset(t + n, '[', ANSWER_MAX_DEPTH - 1);
    memset(t + n + ANSWER_MAX_DEPTH - 1, ']', ANSWER_MAX_DEPTH - 1);
    strcpy(t + n + 2 * (ANSWER_MAX_DEPTH - 1), "}");
    struct answer a;
    char err[256] = "";
    CHECK(read_text(t, &a, err, sizeof(err)) == 0);
    memset(t + n, '[', ANSWER_MAX_DEPTH);
    memset(t + n + ANSWER_MAX_DEPTH, ']', ANSWER_MAX_DEPTH);
    strcpy(t + n + 2 * ANSWER_MAX_DEPTH, "}");
    REFUSED(t, "maximum parsing depth reached");
    /* Objects count too, and in the error member as well: 33 levels. */
    n = snprintf(t, sizeof(t), "{\"error\":");
    for (int i = 0; i < ANSWER_MAX_DEPTH - 1; i++)
        n += snprintf(t + n, sizeof(t) - (size_t)n, "{\"k\":");
    n += snprintf(t + n, sizeof(t) - (size_t)n, "{}");
    for (int i = 0; i < ANSWER_MAX_DEPTH; i++)
        t[n++] = '}';
    t[n] = '\0';
    REFUSED(t, "maximum parsing depth reached");
    /* A million brackets: refused at the limit, never deeper (no stack use). */
    size_t big = 1000000;
    char *deep = malloc(big + 16);
    memcpy(deep, "{\"x\":", 5);
    memset(deep + 5, '[', big);
    expect_refused(deep, big + 5, "maximum parsing depth reached");
    free(deep);
}

TEST(hostile_text)
{
    expect_refused("{\"ok\":true,\"x\":\"\xc0\xaf\"}", 18, "not valid UTF-8");       /* overlong */
    expect_refused("{\"ok\":true,\"x\":\"\x80\"}", 17, "not valid UTF-8");           /* lone */
    expect_refused("{\"ok\":true,\"x\":\"\xed\xa0\x80\"}", 19, "not valid UTF-8");   /* surrogate */
    expect_refused("{\"ok\":true,\"x\":\"\xf4\x90\x80\x80\"}", 20, "not valid UTF-8"); /* big */
    expect_refused("{\"ok\":true,\"x\":\"\xe2\x82\"}", 18, "not valid UTF-8");       /* cut */
    expect_refused("{\"ok\":true}\0", 12, "a NUL byte");
    expect_refused("{\"ok\":true,\"x\":\"a\0b\"}", 20, "a NUL byte");
    REFUSED("{\"ok\":true,\"x\":\"a\\u0000b\"}", "\\u0000 is not allowed");
    REFUSED("{\"ok\":true,\"x\":\"\\ud800\"}", "invalid Unicode");
    REFUSED("{\"ok\":true,\"x\":\"\\q\"}", "invalid escape");
    REFUSED("{\"ok\":true,\"x\":\"tab\there\"}", "control character");
}

TEST(hostile_structure)
{
    REFUSED("", "'[' or '{' expected");
    REFUSED("[{\"ok\":true}]", "'[' or '{' expected");
    REFUSED("\"ok\"", "'[' or '{' expected");
    REFUSED("nonsense", "invalid token");
    REFUSED("{\"ok\":true", "'}' expected");
    REFUSED("{\"ok\":true,}", "string or '}' expected");
    REFUSED("{\"ok\" true}", "':' expected");
    REFUSED("{\"ok\":true,\"x\":[1,]}", "unexpected token");
    REFUSED("{\"ok\":true} {}", "end of file expected");
    REFUSED("{\"ok\":true}x", "end of file expected");
    /* Duplicate keys, which a first-match reader would resolve one way and
     * another reader the other: refused at every level. */
    REFUSED("{\"ok\":false,\"ok\":true}", "duplicate object key");
    REFUSED("{\"ok\":true,\"\\u006fk\":false}", "duplicate object key");
    REFUSED("{\"ok\":true,\"lease\":1,\"lease\":2}", "duplicate object key");
    REFUSED("{\"ok\":false,\"error\":{\"code\":\"a\",\"code\":\"b\"}}", "duplicate object key");
    REFUSED("{\"ok\":true,\"x\":[{\"a\":1,\"a\":1}]}", "duplicate object key");
    /* Errors say where. */
    REFUSED("{\"ok\":true,\n \"x\":tru}", "(line 2, column");
}

/* ---- the open answer ------------------------------------------------------ */

#define SUM "00000000000000ff"

static const char good_open[] =
    "{\"ok\":true,\"lease\":3,\"model\":\"m\\u00e9\",\"generation\":4,\"backend\":\"host\","
    "\"device\":\"host\",\"device_index\":0,\"device_uuid\":\"\",\"allocations\":["
    "{\"id\":0,\"file\":\"a.safetensors\",\"byte_size\":100,\"alloc_size\":4096,"
    "\"handle_type\":\"memfd\",\"fd_index\":0,\"checksum\":\"" SUM "\"},"
    "{\"id\":1,\"file\":\"b.safetensors\",\"byte_size\":8,\"alloc_size\":4096,"
    "\"handle_type\":\"memfd\",\"fd_index\":1,\"checksum\":\"FFFFFFFFFFFFFFFF\","
    "\"legacy\":{\"handle\":\"AAAA\",\"size\":[1,2]}}],"
    "\"tensors\":[{\"name\":\"w\",\"dtype\":\"F32\",\"shape\":[5,5],\"alloc\":0,\"offset\":0,"
    "\"nbytes\":100},{\"name\":\"s\",\"dtype\":\"U8\",\"shape\":[],\"alloc\":1,\"offset\":7,"
    "\"nbytes\":1},{\"name\":\"a/b\\\"c\",\"dtype\":\"I64\",\"shape\":[1],\"alloc\":1,"
    "\"offset\":0,\"nbytes\":8}]}";

static void model_release(struct tensord_model *m)
{
    answer_open_free(m);
    memset(m, 0, sizeof(*m));
}

static int open_text(const char *text, size_t n_fds, struct tensord_model *m, char *err,
                     size_t errlen)
{
    memset(m, 0, sizeof(*m));
    return answer_open(text, strlen(text), n_fds, m, err, errlen);
}

TEST(open_tables)
{
    struct tensord_model m;
    char err[256] = "";
    CHECK(open_text(good_open, 2, &m, err, sizeof(err)) == 0);
    CHECK_STR(m.name, "m\xc3\xa9");
    CHECK_STR(m.backend, "host");
    CHECK_STR(m.device, "host");
    CHECK_STR(m.uuid, "");
    CHECK(!m.is_cuda && m.generation == 4 && m.dev_index == 0);
    CHECK(m.n_allocs == 2 && m.n_tensors == 3 && m.cow);
    CHECK_STR(m.allocs[0].file, "a.safetensors");
    CHECK(m.allocs[0].byte_size == 100 && m.allocs[0].alloc_size == 4096);
    CHECK(m.allocs[0].checksum == 0xff && m.allocs[1].checksum == UINT64_MAX);
    CHECK_STR(m.tensors[0].name, "w");
    CHECK_STR(m.tensors[0].dtype, "F32");
    CHECK(m.tensors[0].ndim == 2 && m.tensors[0].shape[0] == 5 && m.tensors[0].shape[1] == 5);
    CHECK(m.tensors[1].ndim == 0 && m.tensors[1].shape && m.tensors[1].alloc == 1);
    CHECK(m.tensors[1].offset == 7 && m.tensors[1].nbytes == 1);
    CHECK_STR(m.tensors[2].name, "a/b\"c");
    model_release(&m);
    /* Fields it may leave out read as "". */
    CHECK(open_text("{\"ok\":true,\"backend\":\"cuda\",\"generation\":1,\"allocations\":[],"
                    "\"tensors\":[]}", 0, &m, err, sizeof(err)) == 0);
    CHECK(m.is_cuda && m.n_allocs == 0 && m.n_tensors == 0);
    CHECK_STR(m.name, "");
    CHECK_STR(m.uuid, "");
    model_release(&m);
}

/* good_open with `from` replaced by `to` must be refused with want. */
static void expect_open_refused(const char *from, const char *to, size_t n_fds,
                                const char *want)
{
    char text[4096], err[256] = "";
    const char *at = strstr(good_open, from);
    if (!at) {
        fprintf(stderr, "  test bug: %s not in the answer\n", from);
        test_failed_flag = 1;
        return;
    }
    snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - good_open), good_open, to,
             at + strlen(from));
    struct tensord_model m;
    int rc = open_text(text, n_fds, &m, err, sizeof(err));
    if (rc != -1 || !strstr(err, want)) {
        fprintf(stderr, "  %s -> %s: rc %d, \"%s\", want \"%s\"\n", from, to, rc, err, want);
        test_failed_flag = 1;
    }
    model_release(&m);
}

TEST(open_cross_checks)
{
    const char *model = "malformed open answer";
    expect_open_refused("\"generation\":4", "\"generation\":-4", 2, model);
    expect_open_refused("\"generation\":4", "\"generation\":\"4\"", 2, model);
    expect_open_refused("\"tensors\":[", "\"tensors\":{\"x\":[", 2, "bad answer"); /* not JSON */
    expect_open_refused("\"allocations\":[", "\"allocs\":[", 2, model);
    expect_open_refused("\"backend\":\"host\"", "\"backend\":\"tpu\"", 2,
                        "unknown backend \"tpu\"");
    expect_open_refused("\"backend\":\"host\"", "\"backend\":7", 2, "unknown backend \"\"");
    expect_open_refused("\"ok\":true", "\"ok\":true", 1, "lists 2 allocations but carried 1");
    expect_open_refused("\"ok\":true", "\"ok\":true", 3, "lists 2 allocations but carried 3");
    const char *alloc1 = "malformed allocation 1";
    expect_open_refused("\"fd_index\":1", "\"fd_index\":0", 2, alloc1);
    expect_open_refused("\"fd_index\":1", "\"fd\":1", 2, alloc1);
    expect_open_refused("\"byte_size\":8", "\"byte_size\":4097", 2, alloc1);
    expect_open_refused("\"byte_size\":8,\"alloc_size\":4096", "\"byte_size\":0,\"alloc_size\":0",
                        2, alloc1);
    expect_open_refused("FFFFFFFFFFFFFFFF", "FFFFFFFFFFFFFFF", 2, alloc1);
    expect_open_refused("FFFFFFFFFFFFFFFF", "FFFFFFFFFFFFFFFFF", 2, alloc1);
    expect_open_refused("FFFFFFFFFFFFFFFF", "FFFFFFFFFFFFFFFG", 2, alloc1);
    expect_open_refused("FFFFFFFFFFFFFFFF", "-FFFFFFFFFFFFFFF", 2, alloc1);
    expect_open_refused("\"FFFFFFFFFFFFFFFF\"", "18446744073709551615", 2, "too big integer");
    expect_open_refused("\"FFFFFFFFFFFFFFFF\"", "255", 2, alloc1);
    expect_open_refused("{\"id\":1,", "7,{\"id\":1,", 3, "malformed allocation 1");
    const char *tensor1 = "malformed tensor 1";
    expect_open_refused("\"alloc\":1,\"offset\":7", "\"alloc\":2,\"offset\":7", 2, tensor1);
    expect_open_refused("\"offset\":7,\"nbytes\":1", "\"offset\":7,\"nbytes\":2", 2, tensor1);
    expect_open_refused("\"offset\":7,\"nbytes\":1",
                        "\"offset\":9223372036854775807,\"nbytes\":9223372036854775807", 2,
                        tensor1);
    expect_open_refused("\"offset\":7", "\"offset\":-7", 2, tensor1);
    expect_open_refused("\"shape\":[],\"alloc\":1", "\"shape\":{},\"alloc\":1", 2, tensor1);
    expect_open_refused("\"shape\":[],\"alloc\":1", "\"alloc\":1", 2, tensor1);
    expect_open_refused("\"shape\":[5,5]", "\"shape\":[5,-5]", 2, "malformed shape of tensor w");
    expect_open_refused("\"shape\":[5,5]", "\"shape\":[5,5.0]", 2, "malformed shape of tensor w");
    expect_open_refused("\"shape\":[5,5]", "\"shape\":[5,[5]]", 2, "malformed shape of tensor w");
    expect_open_refused("\"shape\":[5,5]", "\"shape\":[5,5],\"shape\":[5,5]", 2,
                        "duplicate object key");
    /* dtype and shape must make exactly nbytes (a DLPack tensor is built
     * from the shape): more elements, fewer, sub-byte sizes off a byte,
     * products that overflow, dtypes the library does not know. */
    expect_open_refused("\"shape\":[5,5]", "\"shape\":[5,6]", 2,
                        "tensor \"w\" in the open answer: a F32 tensor of its shape is 960 bits, "
                        "not its nbytes 100");
    expect_open_refused("\"shape\":[5,5]", "\"shape\":[5,4]", 2, "640 bits, not its nbytes 100");
    expect_open_refused("\"shape\":[5,5]", "\"shape\":[5,5,0]", 2, "0 bits, not its nbytes 100");
    expect_open_refused("\"dtype\":\"F32\"", "\"dtype\":\"F4\"", 2,
                        "a F4 tensor of its shape is 100 bits");
    expect_open_refused("\"dtype\":\"F32\"", "\"dtype\":\"f32\"", 2,
                        "tensor \"w\" in the open answer has an unknown dtype \"f32\"");
    expect_open_refused("\"dtype\":\"F32\"", "\"dtype\":7", 2, "unknown dtype \"\"");
    expect_open_refused("\"shape\":[5,5]",
                        "\"shape\":[9223372036854775807,9223372036854775807]", 2,
                        "tensor \"w\" in the open answer: its shape overflows");
    expect_open_refused("\"shape\":[5,5]", "\"shape\":[2305843009213693952]", 2,
                        "its shape overflows"); /* 2^61 elements of 32 bits: 2^66 bits */
    /* The first bad tensor is named, and only a tensor's own fields come
     * before its shape. */
    expect_open_refused("\"shape\":[5,5],\"alloc\":0", "\"shape\":[-1],\"alloc\":9", 2,
                        "malformed tensor 0");
    /* Rank: 64 dimensions are fine, 65 are not. */
    char dims[512] = "\"shape\":[1", from[] = "\"shape\":[]";
    for (int i = 1; i < 64; i++)
        strcat(dims, ",1");
    strcat(dims, "]");
    char text[4096], err[256];
    const char *at = strstr(good_open, from);
    snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - good_open), good_open, dims,
             at + strlen(from));
    struct tensord_model m;
    CHECK(open_text(text, 2, &m, err, sizeof(err)) == 0 && m.tensors[1].ndim == 64);
    model_release(&m);
    strcpy(dims + strlen(dims) - 1, ",1]");
    expect_open_refused(from, dims, 2, tensor1);
}

/* A partition's open answer: its world, rank and split, and each cut
 * tensor's part, which must be numpy.array_split's part for the rank and
 * match the shape. */
static const char part_open[] =
    "{\"ok\":true,\"lease\":1,\"generation\":1,\"backend\":\"host\",\"world\":3,\"rank\":2,"
    "\"split\":{\"world\":3,\"rank\":2,\"rules\":[{\"match\":\"*.weight\",\"dim\":1}]},"
    "\"allocations\":[{\"id\":0,\"byte_size\":100,\"alloc_size\":4096,\"fd_index\":0}],"
    "\"tensors\":[{\"name\":\"l.weight\",\"dtype\":\"F32\",\"shape\":[4,3],\"alloc\":0,"
    "\"offset\":0,\"nbytes\":48,\"part\":{\"dim\":1,\"start\":7,\"stop\":10,\"length\":10}},"
    "{\"name\":\"l.bias\",\"dtype\":\"F32\",\"shape\":[10],\"alloc\":0,\"offset\":48,"
    "\"nbytes\":40}]}";

static void expect_part_refused(const char *from, const char *to, const char *want)
{
    char text[4096], err[256] = "";
    const char *at = strstr(part_open, from);
    CHECK(at != NULL);
    snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - part_open), part_open, to,
             at + strlen(from));
    struct tensord_model m;
    int rc = open_text(text, 1, &m, err, sizeof(err));
    if (rc != -1 || !strstr(err, want)) {
        fprintf(stderr, "  %s -> %s: rc %d, \"%s\", want \"%s\"\n", from, to, rc, err, want);
        test_failed_flag = 1;
    }
    model_release(&m);
}

TEST(open_partition)
{
    struct tensord_model m;
    char err[256] = "";
    CHECK(open_text(part_open, 1, &m, err, sizeof(err)) == 0);
    CHECK(m.world == 3 && m.rank == 2);
    CHECK_STR(m.split, "{\"world\":3,\"rank\":2,\"rules\":[{\"match\":\"*.weight\",\"dim\":1}]}");
    CHECK(m.tensors[0].part_dim == 1 && m.tensors[0].part_start == 7 &&
          m.tensors[0].part_stop == 10 && m.tensors[0].part_length == 10);
    CHECK(m.tensors[1].part_dim == -1);
    model_release(&m);
    /* a whole model: world 1, no split, no parts */
    CHECK(open_text(good_open, 2, &m, err, sizeof(err)) == 0);
    CHECK(m.world == 1 && m.rank == 0 && !m.split && m.tensors[0].part_dim == -1);
    model_release(&m);
    const char *bad = "malformed open answer (world";
    expect_part_refused("\"rank\":2,\"split\"", "\"rank\":3,\"split\"", bad);
    expect_part_refused("\"world\":3,\"rank\":2,\"split\"", "\"world\":0,\"rank\":0,\"split\"",
                        bad);
    expect_part_refused("\"world\":3,\"rank\":2,\"split\"", "\"world\":-3,\"rank\":2,\"split\"",
                        bad);
    expect_part_refused("\"split\":{\"world\":3,", "\"split\":[{\"world\":3,", "bad answer");
    expect_part_refused("\"split\":{", "\"splat\":{", bad);
    /* rank 2 of 3 of 10 is [7, 10): any other part, or a shape that is not
     * the part's, is refused naming the tensor */
    expect_part_refused("\"start\":7", "\"start\":6", "does not fit its shape");
    expect_part_refused("\"shape\":[4,3]", "\"shape\":[4,4]", "not its nbytes 48"); /* first */
    expect_part_refused("\"start\":7,\"stop\":10,\"length\":10",
                        "\"start\":6,\"stop\":9,\"length\":10", "not rank 2 of 3's [7, 10)");
    expect_part_refused("\"start\":7,\"stop\":10,\"length\":10",
                        "\"start\":7,\"stop\":10,\"length\":11", "not rank 2 of 3's [8, 11)");
    expect_part_refused("\"dim\":1,\"start\"", "\"dim\":2,\"start\"", "does not fit");
    expect_part_refused("\"dim\":1,\"start\"", "\"dim\":-1,\"start\"", "malformed part");
    expect_part_refused("\"dim\":1,\"start\"", "\"start\"", "malformed part");
    expect_part_refused("\"part\":{", "\"part\":[{", "bad answer");
    expect_part_refused("\"stop\":10,", "\"stop\":10,\"stop\":10,", "duplicate object key");
}

/* Every allocation failing in turn: an error, never a crash or a leak
 * (ASan's leak check runs over this test in `make SANITIZER=...`). */
TEST(open_out_of_memory)
{
    struct tensord_model m;
    char err[256];
    int failed = 0, ok = 0;
    for (long n = 0; n < 1000 && !ok; n++) {
        cmem_fail_after(n);
        int rc = open_text(good_open, 2, &m, err, sizeof(err));
        cmem_fail_after(-1);
        if (rc == 0)
            ok = 1;
        else if (strstr(err, "out of memory"))
            failed++;
        else
            CHECK_STR(err, "out of memory ...");
        model_release(&m);
    }
    CHECK(ok && failed > 10);
}

int main(void)
{
    RUN(ok_and_lease);
    RUN(refusals_carry_the_daemons_error);
    RUN(hostile_numbers);
    RUN(hostile_nesting);
    RUN(hostile_text);
    RUN(hostile_structure);
    RUN(open_tables);
    RUN(open_cross_checks);
    RUN(open_partition);
    RUN(open_out_of_memory);
    return TEST_SUMMARY();
}
