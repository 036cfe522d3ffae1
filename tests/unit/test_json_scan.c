/* Tests for core/base/json_scan.c: tokens and their values, string decoding,
 * and jansson's error texts, lines, columns and order of errors. The libFuzzer
 * target fuzz_json_scan compares it with jansson itself. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "json_scan.h"
#include "test.h"
#include "util.h"

/* Validates a NUL-terminated document; returns 0 or -1 and leaves the
 * scanner in *s for the caller to look at. */
static int doc(struct json_scan *s, const char *text)
{
    json_scan_init(s, text, strlen(text));
    return json_scan_document(s);
}

/* The error text of a document that must fail. */
static const char *fails(struct json_scan *s, const char *text)
{
    CHECK(doc(s, text) == -1);
    CHECK(s->failed);
    return s->text;
}

TEST(tokens)
{
    struct json_scan s;
    const char *t = " {\"a\" :[1, -2,3.5e1, true,false ,null]}\n";
    json_scan_init(&s, t, strlen(t));
    int want[] = {'{', JSON_TOK_STRING, ':', '[', JSON_TOK_INTEGER, ',', JSON_TOK_INTEGER, ',',
                  JSON_TOK_REAL, ',', JSON_TOK_TRUE, ',', JSON_TOK_FALSE, ',', JSON_TOK_NULL,
                  ']', '}', JSON_TOK_EOF, JSON_TOK_EOF};
    for (size_t i = 0; i < ARRAY_LEN(want); i++) {
        int tok = json_scan_next(&s);
        CHECK(tok == want[i]);
        if (i == 4)
            CHECK(s.integer == 1);
        if (i == 6)
            CHECK(s.integer == -2);
        if (i == 8)
            CHECK(s.real == 35.0);
    }
    CHECK(!s.failed);
}

TEST(integers)
{
    struct json_scan s;
    json_scan_init(&s, "9223372036854775807", 19);
    CHECK(json_scan_next(&s) == JSON_TOK_INTEGER);
    CHECK(s.integer == INT64_MAX);
    json_scan_init(&s, "-9223372036854775808", 20);
    CHECK(json_scan_next(&s) == JSON_TOK_INTEGER);
    CHECK(s.integer == INT64_MIN);
    json_scan_init(&s, "-0", 2);
    CHECK(json_scan_next(&s) == JSON_TOK_INTEGER);
    CHECK(s.integer == 0);
    /* Out of int64_t: an error, as strtoll's ERANGE was for jansson. */
    json_scan_init(&s, "9223372036854775808", 19);
    CHECK(json_scan_next(&s) == JSON_TOK_INVALID);
    CHECK_STR(s.text, "too big integer near '9223372036854775808'");
    json_scan_init(&s, "-9223372036854775809", 20);
    CHECK(json_scan_next(&s) == JSON_TOK_INVALID);
    CHECK_STR(s.text, "too big negative integer near '-9223372036854775809'");
    /* Past 20 bytes jansson quotes nothing. */
    json_scan_init(&s, "123456789012345678901", 21);
    CHECK(json_scan_next(&s) == JSON_TOK_INVALID);
    CHECK_STR(s.text, "too big integer");
}

TEST(reals)
{
    struct json_scan s;
    const char *ok[] = {"1.0", "1e3", "1E+2", "2e-1", "-0.0", "1e-400", "0.5"};
    double val[] = {1.0, 1000.0, 100.0, 0.2, -0.0, 0.0, 0.5};
    for (size_t i = 0; i < ARRAY_LEN(ok); i++) {
        json_scan_init(&s, ok[i], strlen(ok[i]));
        CHECK(json_scan_next(&s) == JSON_TOK_REAL);
        CHECK(s.real == val[i]);
    }
    json_scan_init(&s, "-1e400", 6);
    CHECK(json_scan_next(&s) == JSON_TOK_INVALID);
    CHECK_STR(s.text, "real number overflow near '-1e400'");
    /* A long real is copied before strtod. */
    char longreal[200];
    memset(longreal, '1', sizeof(longreal));
    longreal[1] = '.';
    json_scan_init(&s, longreal, sizeof(longreal));
    CHECK(json_scan_next(&s) == JSON_TOK_REAL);
    CHECK(s.real > 1.11 && s.real < 1.12);
}

TEST(malformed_numbers)
{
    /* Not numbers: an invalid token that the parser reports, quoting what
     * the lexer read (jansson stops before the byte that breaks it). */
    struct { const char *doc, *text; } cases[] = {
        {"[01]", "invalid token near '0'"},
        {"[-01]", "invalid token near '-0'"},
        {"[1.]", "invalid token near '1.'"},
        {"[1.e5]", "invalid token near '1.'"},
        {"[.5]", "invalid token near '.'"},
        {"[1e]", "invalid token near '1e'"},
        {"[1e+]", "invalid token near '1e+'"},
        {"[-]", "invalid token near '-'"},
        {"[-a]", "invalid token near '-'"},
        {"[+1]", "invalid token near '+'"},
        {"[NaN]", "invalid token near 'NaN'"},
        {"[Infinity]", "invalid token near 'Infinity'"},
        {"[-Infinity]", "invalid token near '-'"},
        {"[0x10]", "']' expected near 'x'"},
        {"[truex]", "invalid token near 'truex'"},
        {"[True]", "invalid token near 'True'"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct json_scan s;
        const char *got = fails(&s, cases[i].doc);
        if (strcmp(got, cases[i].text) != 0)
            fprintf(stderr, "  %s: %s\n", cases[i].doc, got);
        CHECK_STR(got, cases[i].text);
    }
}

TEST(strings)
{
    struct json_scan s;
    char out[64];
    const char *t = "\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u20AC\\ud83d\\ude00z\"";
    json_scan_init(&s, t, strlen(t));
    CHECK(json_scan_next(&s) == JSON_TOK_STRING);
    CHECK(s.str_escaped);
    CHECK(!s.str_nul);
    const char *want = "a\"\\/\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z";
    CHECK_EQ_U64(s.str_len, strlen(want));
    CHECK_EQ_U64(json_scan_decode(&s, out, sizeof(out)), strlen(want));
    CHECK(memcmp(out, want, strlen(want)) == 0);
    /* Cut short: only cap bytes are written, the whole length is returned. */
    memset(out, 'X', sizeof(out));
    CHECK_EQ_U64(json_scan_decode(&s, out, 11), strlen(want));
    CHECK(memcmp(out, want, 11) == 0);
    CHECK(out[11] == 'X');
    /* Plain strings are not escaped; UTF-8 passes through. */
    json_scan_init(&s, "\"d\xc3\xa9j\xc3\xa0\"", 8);
    CHECK(json_scan_next(&s) == JSON_TOK_STRING);
    CHECK(!s.str_escaped);
    CHECK_EQ_U64(s.str_len, 6);
    /* \u0000 decodes to a NUL: flagged, and refused as a value or a key. */
    json_scan_init(&s, "\"a\\u0000\"", 9);
    CHECK(json_scan_next(&s) == JSON_TOK_STRING);
    CHECK(s.str_nul);
    CHECK_EQ_U64(s.str_len, 2);
    CHECK_STR(fails(&s, "[\"a\\u0000\"]"),
              "\\u0000 is not allowed without JSON_ALLOW_NUL near '\"a\\u0000\"'");
    CHECK_STR(fails(&s, "{\"a\\u0000\":1}"),
              "NUL byte in object key not supported near '\"a\\u0000\"'");
}

TEST(string_errors)
{
    struct json_scan s;
    CHECK_STR(fails(&s, "[\"a\tb\"]"), "control character 0x9 near '\"a'");
    CHECK_STR(fails(&s, "[\"a\nb\"]"), "unexpected newline near '\"a'");
    CHECK_STR(fails(&s, "[\"a\\x\"]"), "invalid escape near '\"a\\x'");
    CHECK_STR(fails(&s, "[\"a\\u12G4\"]"), "invalid escape near '\"a\\u12G'");
    CHECK_STR(fails(&s, "[\"a\\u12"), "invalid escape near '\"a\\u12'");
    CHECK_STR(fails(&s, "[\"abc"), "premature end of input near '\"abc'");
    CHECK_STR(fails(&s, "[\"a\\"), "invalid escape near '\"a\\'");
    /* Surrogates are checked once the string is whole, like jansson's decode. */
    CHECK_STR(fails(&s, "[\"\\ud800\"]"), "invalid Unicode '\\uD800' near '\"\\ud800\"'");
    CHECK_STR(fails(&s, "[\"\\udc00\"]"), "invalid Unicode '\\uDC00' near '\"\\udc00\"'");
    CHECK_STR(fails(&s, "[\"\\ud800x\"]"), "invalid Unicode '\\uD800' near '\"\\ud800x\"'");
    CHECK_STR(fails(&s, "[\"\\ud800\\n\"]"), "invalid Unicode '\\uD800' near '\"\\ud800\\n\"'");
    CHECK_STR(fails(&s, "[\"\\ud800\\u0041\"]"),
              "invalid Unicode '\\uD800\\u0041' near '\"\\ud800\\u0041\"'");
    CHECK_STR(fails(&s, "[\"\\ud800\\ud800\\udc00\"]"),
              "invalid Unicode '\\uD800\\uD800' near '\"\\ud800\\ud800\\udc00\"'");
    /* 21 bytes of string: too long to quote. */
    CHECK_STR(fails(&s, "[\"\\ud800\\ud800\\udc00x\"]"), "invalid Unicode '\\uD800\\uD800'");
    /* ... so a bad escape later in the same string wins over them. */
    CHECK_STR(fails(&s, "[\"\\ud800 \\q\"]"), "invalid escape near '\"\\ud800 \\q'");
    /* A valid pair. */
    CHECK(doc(&s, "[\"\\uDBFF\\uDFFF\"]") == 0);
}

TEST(structure_errors)
{
    struct json_scan s;
    CHECK_STR(fails(&s, "{\"a\":1,}"), "string or '}' expected near '}'");
    CHECK_STR(fails(&s, "[1,]"), "unexpected token near ']'");
    CHECK_STR(fails(&s, "[1,"), "']' expected near end of file");
    CHECK_STR(fails(&s, "["), "']' expected near end of file");
    CHECK_STR(fails(&s, "[1 2]"), "']' expected near '2'");
    CHECK_STR(fails(&s, "{\"a\" 1}"), "':' expected near '1'");
    CHECK_STR(fails(&s, "{\"a\":1 \"b\":2}"), "'}' expected near '\"b\"'");
    CHECK_STR(fails(&s, "{\"a\":}"), "unexpected token near '}'");
    CHECK_STR(fails(&s, "{\"a\":"), "unexpected token near end of file");
    CHECK_STR(fails(&s, "{'a':1}"), "string or '}' expected near '''");
    CHECK_STR(fails(&s, "{} x"), "end of file expected near 'x'");
    CHECK_STR(fails(&s, "{}\xc2\xa0"), "end of file expected near '\xc2\xa0'");
    CHECK_STR(fails(&s, "1"), "'[' or '{' expected near '1'");
    CHECK_STR(fails(&s, ""), "'[' or '{' expected near end of file");
    CHECK_STR(fails(&s, "{\"a\":1,\"a\":2}"), "duplicate object key near '\"a\"'");
    CHECK(s.duplicate);
    /* Keys are compared decoded. */
    CHECK_STR(fails(&s, "[{\"k\":1,\"\\u006b\":2}]"), "duplicate object key near '\"\\u006b\"'");
    CHECK(s.duplicate);
    CHECK(doc(&s, "[{\"k\":1},{\"k\":2},{\"k\":{\"k\":3}}]") == 0);
}

TEST(positions)
{
    struct json_scan s;
    /* jansson's position is after the token, its column counts characters. */
    fails(&s, "{\n  \"a\": }");
    CHECK_EQ_U64(s.line, 2);
    CHECK_EQ_U64(s.column, 8);
    CHECK_EQ_U64(s.position, 10);
    fails(&s, "[\"\xc3\xa9\xc3\xa9\", x]");
    CHECK_EQ_U64(s.line, 1);
    CHECK_EQ_U64(s.column, 8);
    CHECK_EQ_U64(s.position, 10);
    /* A control byte is not consumed: the position stays before it. */
    fails(&s, "[\"ab\ncd\"]");
    CHECK_EQ_U64(s.line, 1);
    CHECK_EQ_U64(s.column, 4);
    CHECK_EQ_U64(s.position, 4);
    fails(&s, "[1,\n");
    CHECK_EQ_U64(s.line, 2);
    CHECK_EQ_U64(s.column, 0);
}

TEST(first_error_wins)
{
    struct json_scan s;
    json_scan_init(&s, "[1x", 3);
    json_scan_next(&s);
    json_scan_next(&s);
    CHECK(json_scan_fail(&s, JSON_ERR_ARRAY_END) == -1);
    CHECK(json_scan_fail(&s, JSON_ERR_DUPLICATE_KEY) == -1);
    CHECK_STR(s.text, "']' expected near '1'");
    CHECK(!s.duplicate);
    CHECK(json_scan_next(&s) == JSON_TOK_INVALID);
}

TEST(fail_at)
{
    struct json_scan s;
    /* An error at an earlier token replaces one found further on ... */
    const char *t = "{\"k\":[1,}";
    json_scan_init(&s, t, strlen(t));
    json_scan_next(&s);
    json_scan_next(&s);
    size_t start = s.start, end = s.pos;
    json_scan_init(&s, t, strlen(t));
    CHECK(json_scan_document(&s) == -1);
    CHECK_STR(s.text, "unexpected token near '}'");
    CHECK(json_scan_fail_at(&s, JSON_ERR_DUPLICATE_KEY, start, end) == -1);
    CHECK_STR(s.text, "duplicate object key near '\"k\"'");
    CHECK(s.duplicate);
    CHECK_EQ_U64(s.position, 4);
    CHECK_EQ_U64(s.column, 4);
    /* ... but not one before it. */
    CHECK(json_scan_fail_at(&s, JSON_ERR_COLON, 6, 8) == -1);
    CHECK_STR(s.text, "duplicate object key near '\"k\"'");
    CHECK(json_scan_next(&s) == JSON_TOK_INVALID);
}

TEST(depth)
{
    struct json_scan s;
    size_t n = JSON_SCAN_MAX_DEPTH;
    char *t = xmalloc(2 * n + 3);
    memset(t, '[', n);
    memset(t + n, ']', n);
    t[2 * n] = '\0';
    CHECK(doc(&s, t) == 0);
    free(t);
    /* One level more, counting the scalar inside as jansson does. */
    t = xmalloc(2 * n + 3);
    memset(t, '[', n);
    t[n] = '1';
    memset(t + n + 1, ']', n);
    t[2 * n + 1] = '\0';
    CHECK_STR(fails(&s, t), "maximum parsing depth reached near '1'");
    free(t);
    /* json_scan_value with a small limit. */
    json_scan_init(&s, "[[[]]]", 6);
    json_scan_next(&s);
    CHECK(json_scan_value(&s, 1, 2) == -1);
    CHECK_STR(s.text, "maximum parsing depth reached near '['");
    json_scan_init(&s, "[[[]]] ", 7);
    json_scan_next(&s);
    CHECK(json_scan_value(&s, 1, 3) == 0);
    CHECK(s.tok == ']');
    CHECK(json_scan_next(&s) == JSON_TOK_EOF);
}

TEST(allow_nul_in_values_only)
{
    struct json_scan s;
    const char *t = "{\"k\":[\"a\\u0000b\"]}";
    CHECK_STR(fails(&s, t), "\\u0000 is not allowed without JSON_ALLOW_NUL near '\"a\\u0000b\"'");
    json_scan_init(&s, t, strlen(t));
    s.allow_nul = 1;
    CHECK(json_scan_document(&s) == 0);
    /* a key never may hold one */
    t = "{\"k\\u0000\":1}";
    json_scan_init(&s, t, strlen(t));
    s.allow_nul = 1;
    CHECK(json_scan_document(&s) == -1);
    CHECK_STR(s.text, "NUL byte in object key not supported near '\"k\\u0000\"'");
}

TEST(keys_find_duplicates_through_escapes)
{
    /* "a\u0062" and "ab" are one key */
    struct json_scan s;
    const char *t = "{\"x\":1,\"a\\u0062\":2,\"ab\":3}";
    CHECK_STR(fails(&s, t), "duplicate object key near '\"ab\"'");
    CHECK(s.duplicate && !s.no_memory);
    /* the same through the keys API, as a caller reading its own object does */
    json_scan_init(&s, "\"q\\\"\" \"q\\u0022\" \"r\"", 19);
    struct json_scan_keys k = JSON_SCAN_KEYS_INIT;
    CHECK(json_scan_next(&s) == JSON_TOK_STRING && json_scan_keys_add(&s, &k) == 0);
    CHECK(json_scan_next(&s) == JSON_TOK_STRING && json_scan_keys_add(&s, &k) == -1);
    CHECK(s.duplicate);
    json_scan_keys_free(&k);
    json_scan_keys_free(&k); /* freeing twice is harmless: it resets */
}

TEST(out_of_memory_is_an_error)
{
#if defined(__SANITIZE_ADDRESS__)
    printf("  SKIP: ASan needs its address space, no RLIMIT_AS test\n");
    return;
#endif
    /* An object of 1.5M keys needs a 128 MB key table; a 200k-digit number
     * a 200 KB copy. Under a tight address-space limit both fail cleanly. */
    size_t n = 1500000, cap = n * 16 + 16, len = 0;
    char *t = xmalloc(cap);
    t[len++] = '{';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(t + len, cap - len, "%s\"%zu\":0", i ? "," : "", i);
    t[len++] = '}';
    size_t digits = 200000;
    char *num = xmalloc(digits + 8);
    memcpy(num, "[0.", 3);
    memset(num + 3, '7', digits);
    memcpy(num + 3 + digits, "]", 2);
    struct rlimit old, tight;
    CHECK(getrlimit(RLIMIT_AS, &old) == 0);
    tight = old;
    tight.rlim_cur = vm_size_bytes() + (16 << 20);
    CHECK(setrlimit(RLIMIT_AS, &tight) == 0);
    struct json_scan s;
    json_scan_init(&s, t, len);
    int rc = json_scan_document(&s);
    tight.rlim_cur = vm_size_bytes();
    setrlimit(RLIMIT_AS, &tight); /* not a byte more for the number */
    struct json_scan s2;
    json_scan_init(&s2, num, strlen(num));
    int rc2 = json_scan_document(&s2);
    CHECK(setrlimit(RLIMIT_AS, &old) == 0);
    CHECK(rc == -1 && s.failed && s.no_memory && !s.duplicate);
    CHECK_CONTAINS(s.text, "out of memory");
    CHECK(rc2 == -1 && s2.no_memory);
    /* with room, both are fine */
    json_scan_init(&s, t, len);
    CHECK(json_scan_document(&s) == 0);
    json_scan_init(&s2, num, strlen(num));
    CHECK(json_scan_document(&s2) == 0);
    free(t);
    free(num);
}

int main(void)
{
    RUN(tokens);
    RUN(integers);
    RUN(reals);
    RUN(malformed_numbers);
    RUN(strings);
    RUN(string_errors);
    RUN(structure_errors);
    RUN(positions);
    RUN(first_error_wins);
    RUN(fail_at);
    RUN(depth);
    RUN(allow_nul_in_values_only);
    RUN(keys_find_duplicates_through_escapes);
    RUN(out_of_memory_is_an_error);
    return TEST_SUMMARY();
}
