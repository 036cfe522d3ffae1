/* Tests for core/format/st_header.c: the reference safetensors crate's cases plus
 * every rule of API.md "Validation" and every status code st_header uses.
 * This file covers framing, JSON, ordering and st_header_read_fd; tensor
 * entries, metadata and messages are in test_st_entries.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "st_header_fixture.h"
#include "test.h"
#include "util.h"

TEST(empty)
{
    struct st_header *h;
    struct st_error e;
    CHECK(ST_CODE(st_header_parse("{}", 2, 0, FILE_NAME, &h, &e), &e) == ST_OK);
    CHECK(h != NULL);
    if (h) {
        CHECK_EQ_U64(h->n_tensors, 0);
        CHECK_EQ_U64(h->n_metadata, 0);
        CHECK(!h->has_metadata);
        CHECK_EQ_U64(h->header_len, 2);
        CHECK_EQ_U64(h->data_len, 0);
    }
    st_header_free(h);
    CHECK(e.code == ST_OK);
    CHECK(code_of("{}      ", 0) == ST_OK); /* the crate pads "{}" to 8 */
    CHECK(code_of("{}", 1) == ST_ERR_DATA_LENGTH);
    CHECK(code_of("{\"__metadata__\":{}}", 0) == ST_OK);
}

TEST(zero_sized_tensor)
{
    struct st_header *h;
    struct st_error e;
    const char *j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[0,0]}}";
    CHECK(ST_CODE(st_header_parse(j, strlen(j), 0, FILE_NAME, &h, &e), &e) == ST_OK);
    if (h) {
        CHECK_EQ_U64(h->n_tensors, 1);
        CHECK_EQ_U64(h->tensors[0].nelems, 0);
        CHECK_EQ_U64(h->tensors[0].ndim, 2);
        CHECK_EQ_U64(h->tensors[0].shape[1], 0);
    }
    st_header_free(h);
    /* Two empty tensors may share an offset. */
    CHECK(code_of("{\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                  "\"a\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[0,0]}}", 0) == ST_OK);
}

TEST(scalar)
{
    struct st_header *h;
    struct st_error e;
    const char *j = "{\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}}";
    CHECK(ST_CODE(st_header_parse(j, strlen(j), 8, FILE_NAME, &h, &e), &e) == ST_OK);
    if (h) {
        CHECK_EQ_U64(h->tensors[0].ndim, 0);
        CHECK_EQ_U64(h->tensors[0].nelems, 1);
        CHECK(h->tensors[0].dtype == DT_F64);
    }
    st_header_free(h);
    CHECK(code_one("F64", "[]", 0, 4, 4) == ST_ERR_SIZE_MISMATCH);
}

TEST(whitespace)
{
    CHECK(code_of("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}     ", 1) == ST_OK);
    CHECK(code_of(" \t\r\n{ \"a\" : { \"dtype\" : \"U8\" , \"shape\" : [ 1 ] ,\n"
                  "\"data_offsets\" : [ 0 , 1 ] } }\n\t\r ", 1) == ST_OK);
    /* Only space, tab, CR and LF are JSON whitespace. */
    CHECK(code_of("\v{}", 0) == ST_ERR_HEADER_START);
    CHECK(code_of("\f{}", 0) == ST_ERR_HEADER_START);
    CHECK(code_of("{}\f", 0) == ST_ERR_JSON);
    CHECK(code_of("{}\xc2\xa0", 0) == ST_ERR_JSON); /* NBSP is UTF-8 but not JSON whitespace */
    CHECK(code_of("        ", 0) == ST_ERR_HEADER_START);
}

TEST(size_mismatch_message)
{
    struct st_error e;
    const char *j = "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}";
    CHECK(parse(j, 12, &e) == ST_ERR_SIZE_MISMATCH);
    CHECK_STR(e.message, "model.safetensors: tensor \"a.weight\": data_offsets [0, 12] span 12 "
                         "bytes but F32 [2, 2] needs 16");
}

TEST(overflow)
{
    /* (2^62)^2 overflows the element count. */
    CHECK(code_one("F32", "[4611686018427387904,4611686018427387904]", 0, 0, 0) == ST_ERR_OVERFLOW);
    /* 2^62 elements of 32 bits overflow the bit count. */
    CHECK(code_one("F32", "[4611686018427387904]", 0, 0, 0) == ST_ERR_OVERFLOW);
    /* Checked in order like the crate: the product overflows before the 0. */
    CHECK(code_one("U8", "[4294967296,4294967296,0]", 0, 0, 0) == ST_ERR_OVERFLOW);
    CHECK(code_one("U8", "[0,4294967296,4294967296]", 0, 0, 0) == ST_OK);
    struct st_error e;
    char *j = one("F32", "[9223372036854775807,2]", 0, 0);
    CHECK(parse(j, 0, &e) == ST_ERR_OVERFLOW);
    CHECK_CONTAINS(e.message, "tensor \"a\"");
    CHECK_CONTAINS(e.message, "9223372036854775807");
    free(j);
}

TEST(incomplete_buffer)
{
    struct st_error e;
    char *j = one("F32", "[2,2]", 0, 16);
    CHECK(parse(j, 16, &e) == ST_OK);
    CHECK(parse(j, 15, &e) == ST_ERR_DATA_LENGTH);
    CHECK_CONTAINS(e.message, "truncated");
    CHECK_CONTAINS(e.message, "\"a\"");
    CHECK(parse(j, 17, &e) == ST_ERR_DATA_LENGTH);
    CHECK_CONTAINS(e.message, "trailing");
    CHECK(parse(j, 0, &e) == ST_ERR_DATA_LENGTH);
    free(j);
}

TEST(json_attack)
{
    /* The crate's case: many tensors claim the same 16 bytes. */
    char buf[2048];
    size_t n = (size_t)snprintf(buf, sizeof(buf), "{");
    for (int i = 0; i < 10; i++)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n,
                              "%s\"weight_%d\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                              "\"data_offsets\":[0,16]}",
                              i ? "," : "", i);
    snprintf(buf + n, sizeof(buf) - n, "}");
    struct st_error e;
    CHECK(parse(buf, 16, &e) == ST_ERR_INVALID_OFFSET);
    CHECK_CONTAINS(e.message, "overlap");
    CHECK_CONTAINS(e.message, "weight_0");
    CHECK_CONTAINS(e.message, "weight_1");
}

TEST(offsets_contiguous)
{
    struct st_error e;
    /* A hole. */
    CHECK(parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}", 12, &e) ==
          ST_ERR_INVALID_OFFSET);
    CHECK_CONTAINS(e.message, "tensor \"b\": data_offsets [8, 12] leave a hole after tensor \"a\"");
    /* Not starting at 0. */
    CHECK(code_one("U8", "[4]", 4, 8, 8) == ST_ERR_INVALID_OFFSET);
    /* Overlap. */
    CHECK(code_of("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                  "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6) ==
          ST_ERR_INVALID_OFFSET);
}

TEST(sorted_output)
{
    struct st_header *h;
    struct st_error e;
    const char *j = "{\"__metadata__\":{\"format\":\"pt\",\"a\":\"1\",\"z\":\"\"},"
                    "\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]},"
                    "\"b\":{\"dtype\":\"F16\",\"shape\":[1,3],\"data_offsets\":[0,6]},"
                    "\"z0\":{\"dtype\":\"BOOL\",\"shape\":[0],\"data_offsets\":[8,8]},"
                    "\"y0\":{\"dtype\":\"BOOL\",\"shape\":[0],\"data_offsets\":[8,8]},"
                    "\"\xc3\xa9t\xc3\xa9\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}";
    CHECK(ST_CODE(st_header_parse(j, strlen(j), 16, FILE_NAME, &h, &e), &e) == ST_OK);
    CHECK(h != NULL);
    if (!h)
        return;
    CHECK_EQ_U64(h->n_tensors, 5);
    CHECK_STR(h->tensors[0].name, "b");
    CHECK_STR(h->tensors[1].name, "c");
    CHECK_STR(h->tensors[2].name, "y0");
    CHECK_STR(h->tensors[3].name, "z0");
    CHECK_STR(h->tensors[4].name, "\xc3\xa9t\xc3\xa9");
    CHECK_EQ_U64(h->tensors[4].name_len, 5);
    CHECK(h->tensors[0].dtype == DT_F16);
    CHECK_EQ_U64(h->tensors[0].ndim, 2);
    CHECK_EQ_U64(h->tensors[0].shape[0], 1);
    CHECK_EQ_U64(h->tensors[0].shape[1], 3);
    CHECK_EQ_U64(h->tensors[0].nelems, 3);
    CHECK_EQ_U64(h->tensors[0].begin, 0);
    CHECK_EQ_U64(h->tensors[0].end, 6);
    CHECK_EQ_U64(h->tensors[4].begin, 8);
    CHECK_EQ_U64(h->tensors[4].end, 16);
    CHECK(h->has_metadata);
    CHECK_EQ_U64(h->n_metadata, 3);
    CHECK_STR(h->metadata[0].key, "format");
    CHECK_STR(h->metadata[0].value, "pt");
    CHECK_STR(h->metadata[1].key, "a");
    CHECK_STR(h->metadata[2].key, "z");
    CHECK_STR(h->metadata[2].value, "");
    st_header_free(h);
}

TEST(prefix)
{
    unsigned char p[8] = {0};
    uint64_t n = 99;
    struct st_error e;
    CHECK(ST_CODE(st_header_check_prefix(p, 7, "f", &n, &e), &e) == ST_ERR_HEADER_TOO_SMALL);
    CHECK(e.code == ST_ERR_HEADER_TOO_SMALL);
    CHECK_CONTAINS(e.message, "f: ");
    CHECK(ST_CODE(st_header_check_prefix(p, 0, "f", &n, &e), &e) == ST_ERR_HEADER_TOO_SMALL);
    CHECK(ST_CODE(st_header_check_prefix(p, 100, "f", &n, &e), &e) == ST_ERR_HEADER_EMPTY);
    /* 100,000,000 is allowed, one more is not. */
    uint64_t max = ST_MAX_HEADER_LEN;
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(max >> (8 * i));
    CHECK(ST_CODE(st_header_check_prefix(p, max + 8, "f", &n, &e), &e) == ST_OK);
    CHECK_EQ_U64(n, max);
    CHECK(ST_CODE(st_header_check_prefix(p, max + 7, "f", &n, &e), &e) == ST_ERR_HEADER_LENGTH);
    p[0]++;
    CHECK(ST_CODE(st_header_check_prefix(p, UINT64_MAX, "f", &n, &e), &e) == ST_ERR_HEADER_TOO_LARGE);
    CHECK_CONTAINS(e.message, "100000001");
    memset(p, 0xff, sizeof(p));
    CHECK(ST_CODE(st_header_check_prefix(p, UINT64_MAX, "f", &n, &e), &e) == ST_ERR_HEADER_TOO_LARGE);
    memset(p, 0, sizeof(p));
    p[0] = 10;
    CHECK(ST_CODE(st_header_check_prefix(p, 17, "f", &n, &e), &e) == ST_ERR_HEADER_LENGTH);
    CHECK_CONTAINS(e.message, "17");
    CHECK(ST_CODE(st_header_check_prefix(p, 18, "f", &n, &e), &e) == ST_OK);
    CHECK_EQ_U64(n, 10);
    /* The crate checks the size first, whatever the prefix says. */
    CHECK(st_header_check_prefix(p, 5, "f", &n, NULL) == -EINVAL);
}

TEST(utf8)
{
    struct st_error e;
    CHECK(parse("{\"\xff\":1}", 0, &e) == ST_ERR_UTF8);
    CHECK_CONTAINS(e.message, "byte 2");
    CHECK(code_of("{\"\xc0\xaf\":1}", 0) == ST_ERR_UTF8);            /* overlong */
    CHECK(code_of("{\"\xed\xa0\x80\":1}", 0) == ST_ERR_UTF8);        /* surrogate */
    CHECK(code_of("{\"\xf4\x90\x80\x80\":1}", 0) == ST_ERR_UTF8);    /* > U+10FFFF */
    CHECK(code_of("{\"a\":1}\xe2\x82", 0) == ST_ERR_UTF8);           /* cut at the end */
    CHECK(code_of("{\"\x80\":1}", 0) == ST_ERR_UTF8);                /* lone continuation */
    CHECK(code_of("\xff{}", 0) == ST_ERR_UTF8);                      /* before the start check */
    CHECK(code_of("{\"\xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}",
                  1) == ST_OK);
}

TEST(header_start)
{
    struct st_error e;
    CHECK(parse("[]", 0, &e) == ST_ERR_HEADER_START);
    CHECK_CONTAINS(e.message, "0x5b");
    CHECK(code_of("  []", 0) == ST_ERR_HEADER_START);
    CHECK(code_of("\"{}\"", 0) == ST_ERR_HEADER_START);
    CHECK(code_of("1", 0) == ST_ERR_HEADER_START);
    CHECK(code_of("null", 0) == ST_ERR_HEADER_START);
    /* The start check comes before the depth check. */
    CHECK(code_of("[[[[[[[[[[[[]]]]]]]]]]]]", 0) == ST_ERR_HEADER_START);
}

TEST(depth)
{
    struct st_error e;
    /* Depth 9 under __metadata__. */
    CHECK(parse("{\"__metadata__\":{\"k\":[[[[[[[1]]]]]]]}}", 0, &e) == ST_ERR_DEPTH);
    CHECK_CONTAINS(e.message, "8");
    /* Depth 8 passes the depth check and fails on the value type. */
    CHECK(code_of("{\"__metadata__\":{\"k\":[[[[[[1]]]]]]}}", 0) == ST_ERR_METADATA);
    /* Brackets inside strings (with escaped quotes) do not count. */
    CHECK(code_of("{\"[[[[[[[[[[{{{{{{{{\\\"[[[[[[[[[\":{\"dtype\":\"U8\",\"shape\":[],"
                  "\"data_offsets\":[0,1]}}", 1) == ST_OK);
    /* A deep document that is not even balanced still gets the depth error. */
    char deep[2001];
    deep[0] = '{';
    memset(deep + 1, '[', sizeof(deep) - 2);
    deep[sizeof(deep) - 1] = '\0';
    CHECK(code_of(deep, 0) == ST_ERR_DEPTH);
}

TEST(json_errors)
{
    struct st_error e;
    CHECK(parse("{", 0, &e) == ST_ERR_JSON);
    CHECK_CONTAINS(e.message, "line 1");
    CHECK(code_of("{} x", 0) == ST_ERR_JSON);
    CHECK(code_of("{}{}", 0) == ST_ERR_JSON);
    CHECK(code_of("{}}", 0) == ST_ERR_JSON);
    CHECK(code_of("{\"a\":}", 0) == ST_ERR_JSON);
    CHECK(code_of("{'a':1}", 0) == ST_ERR_JSON);
    CHECK(code_of("{\"a\":1,}", 0) == ST_ERR_JSON);
    CHECK(code_one("U8", "[01]", 0, 1, 1) == ST_ERR_JSON); /* leading zero */
    /* NUL bytes: raw, after the value, inside a string, escaped in a key. */
    CHECK(parse_len("{}\0", 3, 0, &e) == ST_ERR_JSON);
    CHECK_CONTAINS(e.message, "NUL byte at offset 2");
    CHECK(parse_len("{\"a\0b\":{}}", 10, 0, &e) == ST_ERR_JSON);
    CHECK(parse_len("\0{}", 3, 0, &e) == ST_ERR_HEADER_START);
    CHECK(code_of("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", 1) ==
          ST_ERR_JSON);
    CHECK(code_of("{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0) == ST_ERR_JSON);
    /* A NUL right after a backslash (the pre-pass skips escaped bytes). */
    CHECK(parse_len("{\"a\\\0\":{}}", 10, 0, &e) == ST_ERR_JSON);
    CHECK_CONTAINS(e.message, "invalid escape");
}

TEST(duplicate_keys)
{
    struct st_error e;
    CHECK(parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, &e) ==
          ST_ERR_DUPLICATE_KEY);
    CHECK_CONTAINS(e.message, "duplicate");
    CHECK(code_of("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                  1) == ST_ERR_DUPLICATE_KEY);
    CHECK(code_of("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0) == ST_ERR_DUPLICATE_KEY);
    CHECK(code_of("{\"__metadata__\":{},\"__metadata__\":{}}", 0) == ST_ERR_DUPLICATE_KEY);
    /* A duplicate name is an error at its key, before any error inside its
     * entry (the name table is looked at only once the entry is read). */
    CHECK(parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                "\"a\":{\"dtype\":\"U8\",}}", 1, &e) == ST_ERR_DUPLICATE_KEY);
    CHECK_STR(e.message, FILE_NAME ": header JSON line 1 column 56: duplicate object key near "
                         "'\"a\"'");
    CHECK(parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"a\":1}", 1,
                &e) == ST_ERR_DUPLICATE_KEY);
    CHECK_CONTAINS(e.message, "line 1 column 56: duplicate");
    /* ... also when the text ends right after it (found by fuzz_st_index) */
    CHECK(parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"a\"", 1,
                &e) == ST_ERR_DUPLICATE_KEY);
    CHECK_CONTAINS(e.message, "duplicate object key");
    /* Escapes are decoded before comparing. */
    CHECK(code_of("{\"__metadata__\":{\"k\":\"1\",\"\\u006b\":\"2\"}}", 0) == ST_ERR_DUPLICATE_KEY);
}

/* Writes a temp file: 8-byte prefix for `n` (or the real length when n is
 * UINT64_MAX), the header, then `data` zero bytes; returns an fd at 0. */
static int temp_file(const char *json, uint64_t n, size_t data, size_t cut)
{
    char path[] = "/tmp/test_st_header_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    unlink(path);
    size_t len = strlen(json);
    if (n == UINT64_MAX)
        n = len;
    size_t total = 8 + len + data;
    unsigned char *buf = xcalloc(1, total);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, json, len);
    if (cut && cut < total)
        total = cut;
    if (write(fd, buf, total) != (ssize_t)total) {
        close(fd);
        fd = -1;
    }
    free(buf);
    return fd;
}

TEST(read_fd)
{
    struct st_header *h = NULL;
    struct st_error e;
    const char *j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}  ";
    int fd = temp_file(j, UINT64_MAX, 16, 0);
    CHECK(fd >= 0);
    CHECK(ST_CODE(st_header_read_fd(fd, "t.safetensors", 0, &h, &e), &e) == ST_OK);
    if (h) {
        CHECK_EQ_U64(h->header_len, strlen(j));
        CHECK_EQ_U64(h->data_len, 16);
        CHECK_EQ_U64(h->n_tensors, 1);
        CHECK_STR(h->tensors[0].name, "a");
    }
    st_header_free(h);
    close(fd);

    /* Data truncated by one byte, then one trailing byte. */
    fd = temp_file(j, UINT64_MAX, 15, 0);
    CHECK(ST_CODE(st_header_read_fd(fd, "t.safetensors", 0, &h, &e), &e) == ST_ERR_DATA_LENGTH);
    CHECK(h == NULL);
    CHECK_CONTAINS(e.message, "t.safetensors: tensor \"a\"");
    close(fd);
    fd = temp_file(j, UINT64_MAX, 17, 0);
    CHECK(ST_CODE(st_header_read_fd(fd, "t.safetensors", 0, &h, &e), &e) == ST_ERR_DATA_LENGTH);
    close(fd);

    /* File cut inside the header. */
    fd = temp_file(j, UINT64_MAX, 16, 20);
    CHECK(ST_CODE(st_header_read_fd(fd, "t.safetensors", 0, &h, &e), &e) == ST_ERR_HEADER_LENGTH);
    close(fd);
    /* File shorter than the prefix, and empty. */
    fd = temp_file(j, UINT64_MAX, 0, 5);
    CHECK(ST_CODE(st_header_read_fd(fd, "t.safetensors", 0, &h, &e), &e) == ST_ERR_HEADER_TOO_SMALL);
    close(fd);
    fd = temp_file("", 0, 0, 0);
    CHECK(ST_CODE(st_header_read_fd(fd, "t.safetensors", 0, &h, &e), &e) == ST_ERR_HEADER_EMPTY);
    close(fd);
    fd = temp_file("{}", 0, 0, 0);
    CHECK(ST_CODE(st_header_read_fd(fd, "t.safetensors", 0, &h, &e), &e) == ST_ERR_HEADER_EMPTY);
    close(fd);
    fd = temp_file("{}", ST_MAX_HEADER_LEN + 1, 0, 0);
    CHECK(ST_CODE(st_header_read_fd(fd, "t.safetensors", 0, &h, &e), &e) == ST_ERR_HEADER_TOO_LARGE);
    close(fd);
    /* Invalid JSON through the fd path. */
    fd = temp_file("{\"a\":", UINT64_MAX, 0, 0);
    CHECK(ST_CODE(st_header_read_fd(fd, "t.safetensors", 0, &h, &e), &e) == ST_ERR_JSON);
    close(fd);
    /* Header "{}" and no data: valid. */
    fd = temp_file("{}", UINT64_MAX, 0, 0);
    CHECK(ST_CODE(st_header_read_fd(fd, "t.safetensors", 0, &h, &e), &e) == ST_OK);
    if (h)
        CHECK_EQ_U64(h->header_len, 2);
    st_header_free(h);
    close(fd);
    /* A closed descriptor is an I/O error naming the cause. */
    CHECK(ST_CODE(st_header_read_fd(fd, "t.safetensors", 0, &h, &e), &e) == ST_ERR_IO);
    CHECK_CONTAINS(e.message, strerror(EBADF));
}

/* Out of memory at each step of reading a big header (the read buffer, the
 * arena, the name table) is ST_ERR_NO_MEMORY naming the file, never an
 * abort; with room again the same file is valid. */
TEST(read_fd_out_of_memory)
{
#if defined(__SANITIZE_ADDRESS__)
    printf("  SKIP: ASan needs its address space, no RLIMIT_AS test\n");
    return;
#endif
    size_t n = 200000, cap = n * 80 + 16, len = 1;
    char *json = xmalloc(cap);
    json[0] = '{';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(json + len, cap - len,
                                "%s\"t%07zu\":{\"dtype\":\"U8\",\"shape\":[1,1],\"data_offsets\":[%zu,%zu]}",
                                i ? "," : "", i, i, i + 1);
    json[len++] = '}';
    json[len] = '\0';
    int fd = temp_file(json, UINT64_MAX, n, 0);
    free(json);
    CHECK(fd >= 0);
    struct rlimit old, tight;
    CHECK(getrlimit(RLIMIT_AS, &old) == 0);
    /* the buffer is 12 MB, the arena ~30 MB, the name table 4 MB */
    static const size_t room_mib[] = {1, 8, 16, 24, 32, 40};
    for (size_t k = 0; k < ARRAY_LEN(room_mib); k++) {
        tight = old;
        tight.rlim_cur = vm_size_bytes() + (room_mib[k] << 20);
        CHECK(setrlimit(RLIMIT_AS, &tight) == 0);
        struct st_header *h = (struct st_header *)1;
        struct st_error e;
        enum st_status rc = ST_CODE(st_header_read_fd(fd, "big.safetensors", 0, &h, &e), &e);
        CHECK(setrlimit(RLIMIT_AS, &old) == 0);
        if (rc != ST_ERR_NO_MEMORY)
            fprintf(stderr, "  %zu MiB of room: %s %s\n", room_mib[k], st_status_name(rc), e.message);
        CHECK(rc == ST_ERR_NO_MEMORY);
        CHECK(h == NULL);
        CHECK_CONTAINS(e.message, "big.safetensors: not enough memory to read the");
    }
    struct st_header *h = NULL;
    struct st_error e;
    CHECK(ST_CODE(st_header_read_fd(fd, "big.safetensors", 0, &h, &e), &e) == ST_OK);
    CHECK(h && h->n_tensors == n);
    st_header_free(h);
    close(fd);
}

/* keep_max: the validated prefix and JSON are kept only when they fit. */
TEST(read_fd_keeps_raw)
{
    struct st_header *h = NULL;
    struct st_error e;
    const char *j = "{\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}";
    size_t n = strlen(j);
    int fd = temp_file(j, UINT64_MAX, 3, 0);
    CHECK(fd >= 0);
    CHECK(ST_CODE(st_header_read_fd(fd, "t.safetensors", ST_PREFIX_LEN + n, &h, &e), &e) == ST_OK);
    CHECK(h && h->raw);
    if (h && h->raw) {
        CHECK_EQ_U64(h->raw[0], n); /* little-endian length, n < 256 */
        CHECK(memcmp(h->raw + ST_PREFIX_LEN, j, n) == 0);
    }
    st_header_free(h);
    CHECK(ST_CODE(st_header_read_fd(fd, "t.safetensors", ST_PREFIX_LEN + n - 1, &h, &e), &e) == ST_OK);
    CHECK(h && !h->raw);
    st_header_free(h);
    close(fd);
}

int main(void)
{
    RUN(empty);
    RUN(read_fd_keeps_raw);
    RUN(zero_sized_tensor);
    RUN(scalar);
    RUN(whitespace);
    RUN(size_mismatch_message);
    RUN(overflow);
    RUN(incomplete_buffer);
    RUN(json_attack);
    RUN(offsets_contiguous);
    RUN(sorted_output);
    RUN(prefix);
    RUN(utf8);
    RUN(header_start);
    RUN(depth);
    RUN(json_errors);
    RUN(duplicate_keys);
    RUN(read_fd);
    RUN(read_fd_out_of_memory);
    return TEST_SUMMARY();
}
