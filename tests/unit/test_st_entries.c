/* Tests for core/format/st_header.c's tensor entries and metadata: the fields an
 * entry may hold, dtypes, shapes, offsets and alignment, numbers, and the
 * wording of every message (framing, JSON and read_fd are in
 * test_st_header.c). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "st_header_fixture.h"
#include "test.h"
#include "util.h"

TEST(metadata)
{
    struct st_error e;
    CHECK(parse("{\"__metadata__\":{\"format\":\"pt\",\"n\":1}}", 0, &e) == ST_ERR_METADATA);
    CHECK_CONTAINS(e.message, "\"n\"");
    CHECK(code_of("{\"__metadata__\":{\"n\":null}}", 0) == ST_ERR_METADATA);
    CHECK(code_of("{\"__metadata__\":{\"n\":{}}}", 0) == ST_ERR_METADATA);
    CHECK(code_of("{\"__metadata__\":{\"n\":[\"x\"]}}", 0) == ST_ERR_METADATA);
    CHECK(code_of("{\"__metadata__\":[]}", 0) == ST_ERR_METADATA);
    CHECK(code_of("{\"__metadata__\":null}", 0) == ST_ERR_METADATA);
    CHECK(code_of("{\"__metadata__\":\"x\"}", 0) == ST_ERR_METADATA);
}

TEST(tensor_info)
{
    struct st_error e;
    CHECK(parse("{\"w\":[1]}", 0, &e) == ST_ERR_TENSOR_INFO);
    CHECK_CONTAINS(e.message, "tensor \"w\"");
    CHECK(code_of("{\"w\":null}", 0) == ST_ERR_TENSOR_INFO);
    CHECK(code_of("{\"w\":\"F32\"}", 0) == ST_ERR_TENSOR_INFO);
    CHECK(parse("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, &e) == ST_ERR_TENSOR_INFO);
    CHECK_CONTAINS(e.message, "dtype");
    CHECK(parse("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, &e) == ST_ERR_TENSOR_INFO);
    CHECK_CONTAINS(e.message, "shape");
    CHECK(parse("{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, &e) == ST_ERR_TENSOR_INFO);
    CHECK_CONTAINS(e.message, "data_offsets");
    CHECK(code_of("{\"w\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1) ==
          ST_ERR_TENSOR_INFO);
    CHECK(code_of("{\"w\":{}}", 0) == ST_ERR_TENSOR_INFO);
}

TEST(unknown_field)
{
    struct st_error e;
    CHECK(parse("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":1}}", 1,
                &e) == ST_ERR_UNKNOWN_FIELD);
    CHECK_CONTAINS(e.message, "tensor \"w\": unknown field \"extra\"");
    CHECK(code_of("{\"w\":{\"Dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                  1) == ST_ERR_UNKNOWN_FIELD);
}

TEST(bad_dtype)
{
    struct st_error e;
    char *j = one("f32", "[1]", 0, 4);
    CHECK(parse(j, 4, &e) == ST_ERR_DTYPE);
    CHECK_CONTAINS(e.message, "tensor \"a\": unknown dtype the string \"f32\"");
    free(j);
    CHECK(code_one("F32 ", "[1]", 0, 4, 4) == ST_ERR_DTYPE);
    CHECK(code_one("", "[1]", 0, 4, 4) == ST_ERR_DTYPE);
    CHECK(code_one("F8", "[1]", 0, 1, 1) == ST_ERR_DTYPE);
    CHECK(code_one("C128", "[1]", 0, 16, 16) == ST_ERR_DTYPE);
    CHECK(code_of("{\"a\":{\"dtype\":\"F32\\u0000\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4) ==
          ST_ERR_JSON);
}

TEST(every_dtype)
{
    for (int d = 0; d < DT_COUNT; d++) {
        const struct dtype_info *di = dtype_info((enum dtype)d);
        uint64_t bytes = 8 * di->bits / 8; /* 8 elements are whole bytes for every width */
        struct st_header *h = NULL;
        struct st_error e;
        char *j = one(di->name, "[2,4]", 0, bytes);
        CHECK(ST_CODE(st_header_parse(j, strlen(j), bytes, FILE_NAME, &h, &e), &e) == ST_OK);
        if (h) {
            CHECK(h->tensors[0].dtype == (enum dtype)d);
            CHECK_EQ_U64(h->tensors[0].nelems, 8);
        } else {
            fprintf(stderr, "  dtype %s: %s\n", di->name, e.message);
        }
        st_header_free(h);
        free(j);
    }
    CHECK(code_one("F4", "[2]", 0, 1, 1) == ST_OK);
    CHECK(code_one("F4", "[6]", 0, 3, 3) == ST_OK);
    CHECK(code_one("F6_E2M3", "[4]", 0, 3, 3) == ST_OK);
    CHECK(code_one("F6_E3M2", "[2,2]", 0, 3, 3) == ST_OK);
    CHECK(code_one("F8_E8M0", "[3]", 0, 3, 3) == ST_OK);
}

TEST(misaligned)
{
    struct st_error e;
    char *j = one("F4", "[3]", 0, 2);
    CHECK(parse(j, 2, &e) == ST_ERR_MISALIGNED);
    CHECK_CONTAINS(e.message, "tensor \"a\": F4 [3] is 12 bits");
    free(j);
    CHECK(code_one("F4", "[1]", 0, 1, 1) == ST_ERR_MISALIGNED);
    CHECK(code_one("F6_E2M3", "[2]", 0, 2, 2) == ST_ERR_MISALIGNED);
    CHECK(code_one("F6_E3M2", "[6]", 0, 5, 5) == ST_ERR_MISALIGNED);
    CHECK(code_one("F4", "[0]", 0, 0, 0) == ST_OK);
}

TEST(bad_offsets)
{
    struct st_error e;
    CHECK(parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, &e) ==
          ST_ERR_OFFSETS);
    CHECK_CONTAINS(e.message, "tensor \"a\": data_offsets [4, 0] begin after they end");
    const char *bad[] = {"[0,1,2]", "[0]", "[]", "[0.0,1]", "[0,1.0]", "[\"0\",1]", "[0,null]",
                         "{}", "\"0,1\"", "0", "[0,[1]]", "[-1,0]", "[0,-1]", "[true,1]",
                         "[0,1e0]"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        char *j = xasprintf("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":%s}}", bad[i]);
        enum st_status rc = parse(j, 1, &e);
        CHECK(rc == ST_ERR_OFFSETS);
        if (rc != ST_ERR_OFFSETS)
            fprintf(stderr, "  offsets %s: %s\n", bad[i], e.message);
        CHECK_CONTAINS(e.message, "tensor \"a\"");
        free(j);
    }
    CHECK(parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1, &e) ==
          ST_ERR_OFFSETS);
    CHECK_CONTAINS(e.message, "3 entries");
    CHECK(parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":null}}", 1, &e) ==
          ST_ERR_OFFSETS);
    CHECK(strcmp(e.message + strlen(e.message) - strlen("got null"), "got null") == 0);
}

TEST(bad_shape)
{
    struct st_error e;
    const char *bad[] = {"[-1]", "[1.5]", "[2.0]", "[\"2\"]", "[null]", "[[2]]", "{}", "2",
                         "\"[2]\"", "null", "[1,-3]", "[true]"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        char *j = one("U8", bad[i], 0, 1);
        enum st_status rc = parse(j, 1, &e);
        CHECK(rc == ST_ERR_SHAPE);
        if (rc != ST_ERR_SHAPE)
            fprintf(stderr, "  shape %s: %s\n", bad[i], e.message);
        CHECK_CONTAINS(e.message, "tensor \"a\"");
        free(j);
    }
    /* At most ST_MAX_NDIM dimensions. */
    char shape[2 * (ST_MAX_NDIM + 1) + 2];
    size_t n = 0;
    shape[n++] = '[';
    for (int i = 0; i < ST_MAX_NDIM; i++) {
        shape[n++] = '1';
        shape[n++] = ',';
    }
    shape[n - 1] = ']';
    shape[n] = '\0';
    CHECK(code_one("U8", shape, 0, 1, 1) == ST_OK);
    shape[n - 1] = ',';
    shape[n++] = '1';
    shape[n++] = ']';
    shape[n] = '\0';
    char *j = one("U8", shape, 0, 1);
    CHECK(parse(j, 1, &e) == ST_ERR_SHAPE);
    CHECK_CONTAINS(e.message, "65 dimensions");
    free(j);
}

TEST(negative_and_huge_numbers)
{
    struct st_error e;
    /* jansson reads -0 as 0; the pre-pass saw the sign. */
    CHECK(parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[-0],\"data_offsets\":[0,0]}}", 0, &e) ==
          ST_ERR_JSON);
    CHECK_CONTAINS(e.message, "negative");
    CHECK(code_of("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[-0,0]}}", 0) ==
          ST_ERR_JSON);
    /* A '-' in a string is fine. */
    CHECK(code_of("{\"a-b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0) == ST_OK);
    /* Past INT64_MAX jansson has no integer: rejected as invalid JSON. */
    CHECK(parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,18446744073709551615]}}",
                1, &e) == ST_ERR_JSON);
    CHECK_CONTAINS(e.message, "too big");
    CHECK(code_one("U8", "[9223372036854775808]", 0, 1, 1) == ST_ERR_JSON);
    CHECK(code_one("U8", "[1e400]", 0, 1, 1) == ST_ERR_JSON);
    CHECK(code_one("U8", "[-9223372036854775809]", 0, 1, 1) == ST_ERR_JSON);
    /* INT64_MAX itself parses (and fails on the offset walk). */
    CHECK(code_one("U8", "[1]", 9223372036854775807ULL, 9223372036854775807ULL, 0) ==
          ST_ERR_INVALID_OFFSET);
}

TEST(messages)
{
    struct st_error e;
    struct st_header *h;
    /* Long names are cut; the message stays short and still names the file. */
    char name[1200];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    char *j = xasprintf("{\"%s\":{\"dtype\":\"F32\",\"shape\":[9223372036854775807,"
                        "9223372036854775807,9223372036854775807,9223372036854775807,"
                        "9223372036854775807,1],\"data_offsets\":[0,18]}}", name);
    char file[600];
    memset(file, 'f', sizeof(file) - 1);
    file[sizeof(file) - 1] = '\0';
    CHECK(ST_CODE(st_header_parse(j, strlen(j), 18, file, &h, &e), &e) == ST_ERR_OVERFLOW);
    CHECK(strlen(e.message) < 500);
    CHECK_CONTAINS(e.message, "nnnnnnnn...");
    CHECK_CONTAINS(e.message, "ffffffff...");
    free(j);
    j = xasprintf("{\"%s\":{\"dtype\":\"F32\",\"shape\":[9223372036854775807,9223372036854775807],"
                  "\"data_offsets\":[9223372036854775806,9223372036854775807]},"
                  "\"%s2\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", name, name);
    CHECK(ST_CODE(st_header_parse(j, strlen(j), 18, file, &h, &e), &e) == ST_ERR_INVALID_OFFSET);
    CHECK(strlen(e.message) < 500);
    free(j);
    /* No file name. */
    CHECK(ST_CODE(st_header_parse("[", 1, 0, NULL, &h, &e), &e) == ST_ERR_HEADER_START);
    CHECK_CONTAINS(e.message, "(header): ");
    /* Control bytes in names are shown as '?'. */
    CHECK(parse("{\"a\\nb\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}", 0, &e) ==
          ST_ERR_DTYPE);
    CHECK_CONTAINS(e.message, "tensor \"a?b\"");
    /* err may be NULL. */
    CHECK(st_header_parse("[", 1, 0, "f", &h, NULL) == -EINVAL);
    CHECK(st_header_parse("{}", 2, 0, "f", &h, NULL) == 0);
    st_header_free(h);
    st_header_free(NULL);
}

int main(void)
{
    RUN(metadata);
    RUN(tensor_info);
    RUN(unknown_field);
    RUN(bad_dtype);
    RUN(every_dtype);
    RUN(misaligned);
    RUN(bad_offsets);
    RUN(bad_shape);
    RUN(negative_and_huge_numbers);
    RUN(messages);
    return TEST_SUMMARY();
}
