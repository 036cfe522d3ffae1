/* Tests for core/base/globpat.c. The table's expectations come from Python 3.11's
 * fnmatch.fnmatchcase (the reference the module follows), run on the same
 * pattern and name; tests/integration/test_fetch.py also compares the
 * daemon's split rules with fnmatchcase on random patterns. */
#include <stdlib.h>

#include "globpat.h"
#include "test.h"

static const struct glob_case {
    const char *pat, *name;
    int match;
} cases[] = {
    {"*", "", 1},
    {"*", "a", 1},
    {"*", "b", 1},
    {"", "", 1},
    {"", "a[", 0},
    {"", "y", 0},
    {"a", "a", 1},
    {"a", "x.weight2", 0},
    {"a", "\xc3\xb6", 0},
    {"a*", "a", 1},
    {"a*", "ab", 1},
    {"a*", "abc", 1},
    {"a*", "dx", 0},
    {"a*", "\xc3\xbc""a", 0},
    {"*b", "b", 1},
    {"*b", "ab", 1},
    {"*b", "a.b", 1},
    {"*b", "\xc3\xa4", 0},
    {"*b", "\xc3\xbc""a", 0},
    {"a?c", "abc", 1},
    {"a?c", "a.b", 0},
    {"a?c", "", 0},
    {"model.layers.*.q_proj.weight", "model.layers.0.q_proj.weight", 1},
    {"model.layers.*.q_proj.weight", "model.layers.10.q_proj.weight", 1},
    {"model.layers.*.q_proj.weight", "*", 0},
    {"model.layers.*.q_proj.weight", "\\*", 0},
    {"*.weight", "model.layers.0.q_proj.weight", 1},
    {"*.weight", "model.layers.10.q_proj.weight", 1},
    {"*.weight", "x.weight", 1},
    {"*.weight", "a[b", 0},
    {"*.weight", "[", 0},
    {"*[0-9]*", "model.layers.0.q_proj.weight", 1},
    {"*[0-9]*", "model.layers.10.q_proj.weight", 1},
    {"*[0-9]*", "x.weight2", 1},
    {"*[0-9]*", "?", 0},
    {"*[0-9]*", "c", 0},
    {"[!a]*", "b", 1},
    {"[!a]*", "model.layers.0.q_proj.weight", 1},
    {"[!a]*", "model.layers.10.q_proj.weight", 1},
    {"[!a]*", "ab/c", 0},
    {"[!a]*", "ab", 0},
    {"[]a]", "a", 1},
    {"[]a]", "]", 1},
    {"[]a]", "a[", 0},
    {"[]a]", "!", 0},
    {"[!]a]", "b", 1},
    {"[!]a]", "!", 1},
    {"[!]a]", "-", 1},
    {"[!]a]", "\xc3\xbc""a", 0},
    {"[!]a]", "\\*", 0},
    {"[!]", "", 0},
    {"[!]", "abc", 0},
    {"[z-a]", "]", 0},
    {"[z-a]", "b", 0},
    {"[z-a!]", "a", 1},
    {"[z-a!]", "b", 1},
    {"[z-a!]", "]", 1},
    {"[z-a!]", "a[b", 0},
    {"[z-a!]", "", 0},
    {"[!z-a]", "a", 1},
    {"[!z-a]", "b", 1},
    {"[!z-a]", "]", 1},
    {"[!z-a]", "a[", 0},
    {"[!z-a]", "a/b", 0},
    {"[a-]", "a", 1},
    {"[a-]", "-", 1},
    {"[a-]", "a/b", 0},
    {"[a-]", "ax", 0},
    {"[-a]", "a", 1},
    {"[-a]", "-", 1},
    {"[-a]", "ab/c", 0},
    {"[-a]", "dx", 0},
    {"[a--]", "x.weight", 0},
    {"[a--]", "\xc3\xbc""a", 0},
    {"[--a]", "a", 1},
    {"[--a]", "]", 1},
    {"[--a]", "-", 1},
    {"[--a]", "abc", 0},
    {"[--a]", "b", 0},
    {"[b-a-c]", "-", 1},
    {"[b-a-c]", "c", 1},
    {"[b-a-c]", "x.weight", 0},
    {"[b-a-c]", "?", 0},
    {"[a-b-c]", "a", 1},
    {"[a-b-c]", "b", 1},
    {"[a-b-c]", "-", 1},
    {"[a-b-c]", "a[", 0},
    {"[a-b-c]", "\\x", 0},
    {"[x-az-b]", "ab/c", 0},
    {"[x-az-b]", "\\x", 0},
    {"[^a]", "a", 1},
    {"[^a]", "^", 1},
    {"[^a]", "c", 0},
    {"[^a]", "aab", 0},
    {"[[:a:]]", "\xc3\xb6", 0},
    {"[[:a:]]", "\xc3\xbc", 0},
    {"a[", "a[", 1},
    {"a[", "y", 0},
    {"a[", "ab/c", 0},
    {"a[b", "a[b", 1},
    {"a[b", ":", 0},
    {"a[b", "\xc3\xbc", 0},
    {"\\*", "\\*", 1},
    {"\\*", "\\x", 1},
    {"\\*", "a", 0},
    {"\\*", "a[b", 0},
    {"*a*a*a*b", "aaaab", 1},
    {"*a*a*a*b", "]", 0},
    {"*a*a*a*b", "aaaa", 0},
    {"?", "a", 1},
    {"?", "b", 1},
    {"?", "]", 1},
    {"?", "ax", 0},
    {"?", "dx", 0},
    {"??", "ab", 1},
    {"??", "a[", 1},
    {"??", "\\*", 1},
    {"??", "\xc3\xbc", 0},
    {"??", "abc", 0},
    {"\xc3\xbc*", "\xc3\xbc", 1},
    {"\xc3\xbc*", "\xc3\xbc""a", 1},
    {"\xc3\xbc*", "^", 0},
    {"\xc3\xbc*", "a[b", 0},
    {"[\xc3\xa4-\xc3\xbc]", "\xc3\xbc", 1},
    {"[\xc3\xa4-\xc3\xbc]", "\xc3\xb6", 1},
    {"[\xc3\xa4-\xc3\xbc]", "\xc3\xa4", 1},
    {"[\xc3\xa4-\xc3\xbc]", "\\*", 0},
    {"[\xc3\xa4-\xc3\xbc]", "model.layers.10.q_proj.weight", 0},
    {"*/*", "a/b", 1},
    {"*/*", "ab/c", 1},
    {"*/*", "abc", 0},
    {"*/*", "*", 0},
    {"a**b", "ab", 1},
    {"a**b", "a.b", 1},
    {"a**b", "a[b", 1},
    {"a**b", "*", 0},
    {"a**b", "\xc3\xb6", 0},
    {"[!a-c]x", "\\x", 1},
    {"[!a-c]x", "dx", 1},
    {"[!a-c]x", "*", 0},
    {"[!a-c]x", "a.b", 0},
    {"[*]", "*", 1},
    {"[*]", "\xc3\xbc", 0},
    {"[*]", "abc", 0},
    {"[?]", "?", 1},
    {"[?]", "a/b", 0},
    {"[?]", "x.weight2", 0},
};

static int match(const char *pat, const char *name)
{
    struct globpat *g = globpat_compile(pat, strlen(pat));
    if (!g)
        return -1;
    int m = globpat_match(g, name, strlen(name), NULL);
    globpat_free(g);
    return m;
}

TEST(fnmatch_table)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int m = match(cases[i].pat, cases[i].name);
        if (m != cases[i].match) {
            fprintf(stderr, "  pattern \"%s\" name \"%s\": %d, fnmatchcase says %d\n",
                    cases[i].pat, cases[i].name, m, cases[i].match);
            test_failed_flag = 1;
        }
    }
}

TEST(tensor_names)
{
    CHECK(match("model.layers.*.self_attn.[qkv]_proj.weight",
                "model.layers.31.self_attn.k_proj.weight") == 1);
    CHECK(match("model.layers.*.self_attn.[qkv]_proj.weight",
                "model.layers.31.self_attn.o_proj.weight") == 0);
    CHECK(match("*.mlp.*", "model.layers.0/mlp.up") == 0);
    CHECK(match("*", "") == 1);
    CHECK(match("", "") == 1);
    CHECK(match("?", "\xf0\x9f\x98\x80") == 1);   /* one code point, four bytes */
    CHECK(match("??", "\xf0\x9f\x98\x80") == 0);
    CHECK(match("[\xf0\x9f\x98\x80-\xf0\x9f\x98\x8f]", "\xf0\x9f\x98\x85") == 1);
}

TEST(invalid_utf8)
{
    CHECK(globpat_compile("a\xff", 2) == NULL);
    CHECK(globpat_compile("\xc0\x80", 2) == NULL);      /* overlong NUL */
    CHECK(globpat_compile("\xed\xa0\x80", 3) == NULL);  /* surrogate */
    CHECK(globpat_compile("\xe2\x82", 2) == NULL);      /* cut short */
    CHECK(match("*", "a\xff") == 0);                    /* a name that is not UTF-8 never matches */
}

TEST(long_names_and_patterns)
{
    /* Names past the matcher's stack buffer are decoded on the heap. */
    char name[2048], pat[600];
    memset(name, 'a', sizeof(name) - 2);
    name[sizeof(name) - 2] = 'b';
    name[sizeof(name) - 1] = 0;
    CHECK(match("*b", name) == 1);
    CHECK(match("a*a*a*a*c", name) == 0);
    /* A near miss of many stars: quadratic, but bounded by the request limits. */
    for (size_t i = 0; i + 2 < sizeof(pat); i += 2)
        pat[i] = '*', pat[i + 1] = 'a';
    pat[sizeof(pat) - 2] = 'c';
    pat[sizeof(pat) - 1] = 0;
    CHECK(match(pat, name) == 0);
}

TEST(budget)
{
    /* "*" then 100 a's then b, against 200 a's: about 10,000 steps */
    char pat[104], name[201];
    pat[0] = '*';
    memset(pat + 1, 'a', 100);
    pat[101] = 'b';
    pat[102] = 0;
    memset(name, 'a', 200);
    name[200] = 0;
    struct globpat *g = globpat_compile(pat, strlen(pat));
    uint64_t budget = 1000;
    CHECK(globpat_match(g, name, 200, &budget) == -1 && budget == 0);
    budget = 1000000;
    CHECK(globpat_match(g, name, 200, &budget) == 0);
    uint64_t spent = 1000000 - budget;
    CHECK(spent > 5000 && spent < 30000);
    budget = spent;
    CHECK(globpat_match(g, name, 200, &budget) == 0 && budget == 0);
    budget = spent - 1;
    CHECK(globpat_match(g, name, 200, &budget) == -1);
    globpat_free(g);
    /* a plain match spends about the name's length */
    g = globpat_compile("model.*.weight", 14);
    budget = 1000;
    CHECK(globpat_match(g, "model.layers.0.weight", 21, &budget) == 1);
    CHECK(1000 - budget < 100);
    globpat_free(g);
}

TEST(nul_inside)
{
    /* Lengths, not NUL terminators, delimit both. */
    struct globpat *g = globpat_compile("a?b", 3);
    CHECK(g && globpat_match(g, "a\0b", 3, NULL) == 1);
    globpat_free(g);
    g = globpat_compile("a\0", 2);
    CHECK(g && globpat_match(g, "a\0", 2, NULL) == 1 && globpat_match(g, "a", 1, NULL) == 0);
    globpat_free(g);
}

int main(void)
{
    RUN(fnmatch_table);
    RUN(tensor_names);
    RUN(invalid_utf8);
    RUN(long_names_and_patterns);
    RUN(budget);
    RUN(nul_inside);
    return TEST_SUMMARY();
}
