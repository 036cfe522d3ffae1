/* card_yaml: the README front matter huggingface_hub's REGEX_YAML_BLOCK
 * finds (its cases written out from the expression), and YAML read as the
 * YAML 1.2 core schema says (the expected JSON written by hand from the
 * spec), with what is refused: duplicate keys, complex keys, depth,
 * aliases that would blow up, a second document, bad syntax. */
#include <stdlib.h>

#include "card_yaml.h"
#include "test.h"

/* The YAML between the fences of text, or NULL when there is none (static). */
static const char *front(const char *text)
{
    static char out[4096];
    const char *y;
    size_t n;
    if (!card_yaml_front_matter(text, strlen(text), &y, &n))
        return NULL;
    snprintf(out, sizeof(out), "%.*s", (int)n, y);
    return out;
}

TEST(front_matter_fences)
{
    CHECK_STR(front("---\nlicense: mit\n---\n# Title\n"), "license: mit");
    CHECK_STR(front("\n \t---\r\na: 1\r\n---\r\nbody"), "a: 1");
    CHECK_STR(front("---\ra: 1\r---\n"), "a: 1");       /* \r alone breaks a line */
    CHECK_STR(front("---\na: 1\n---"), "a: 1");           /* the fence may end the text */
    CHECK_STR(front("---\na: 1\n--- \t\nb"), "a: 1");     /* blanks after the fence */
    CHECK_STR(front("---\na: 1\n---x\nb: 2\n---\n"), "a: 1\n---x\nb: 2");
    CHECK_STR(front("---\na: 1\n----\n---\n"), "a: 1\n----");
    CHECK_STR(front("---\n\n---\n"), "");                 /* an empty block */
    CHECK_STR(front("---\na\n---\nb\n---\n"), "a");       /* the first closing fence */
    CHECK(front("# Title\n---\na: 1\n---\n") == NULL);    /* not at the start */
    CHECK(front("--- \na: 1\n---\n") == NULL);            /* nothing after the opening one */
    CHECK(front("---\na: 1\n") == NULL);                  /* never closed */
    CHECK(front("---\na: 1\n---\r") == NULL);             /* a closing \r alone is not a break */
    CHECK(front("---\n---\n") == NULL);                   /* no line break before the fence */
    CHECK(front("") == NULL && front("--") == NULL);
    CHECK(front("\xef\xbb\xbf---\na: 1\n---\n") == NULL); /* a BOM is not whitespace */
}

/* The JSON of yaml (static), or "NONE" (0) or "ERR:<code>". */
static const char *conv(const char *yaml)
{
    static char out[8192];
    char *json = NULL;
    size_t n;
    struct st_error err;
    int rc = card_yaml_to_json(yaml, strlen(yaml), &json, &n, &err);
    if (rc == 1) {
        CHECK(json && strlen(json) == n);
        snprintf(out, sizeof(out), "%s", json);
    } else if (rc == 0) {
        CHECK(json == NULL);
        snprintf(out, sizeof(out), "NONE");
    } else {
        CHECK(json == NULL && err.message[0] && rc == st_status_errno(err.code));
        snprintf(out, sizeof(out), "ERR:%s", st_status_name(err.code));
    }
    free(json);
    return out;
}

TEST(core_schema_scalars)
{
    CHECK_STR(conv("license: apache-2.0\n"), "{\"license\":\"apache-2.0\"}");
    CHECK_STR(conv("a: ~\nb: null\nc:\nd: NULL\ne: nULL"),
              "{\"a\":null,\"b\":null,\"c\":null,\"d\":null,\"e\":\"nULL\"}");
    CHECK_STR(conv("a: true\nb: False\nc: TRUE\nd: yes\ne: on\nf: tRUE"),
              "{\"a\":true,\"b\":false,\"c\":true,\"d\":\"yes\",\"e\":\"on\",\"f\":\"tRUE\"}");
    CHECK_STR(conv("a: 12\nb: -7\nc: +3\nd: 0o17\ne: 0x1F\nf: 012\ng: 1_000\nh: 0b11"),
              "{\"a\":12,\"b\":-7,\"c\":3,\"d\":15,\"e\":31,\"f\":12,\"g\":\"1_000\",\"h\":\"0b11\"}");
    CHECK_STR(conv("a: 9223372036854775807\nb: -9223372036854775808\nc: 9223372036854775808"),
              "{\"a\":9223372036854775807,\"b\":-9223372036854775808,"
              "\"c\":9.2233720368547758e18}");
    CHECK_STR(conv("a: 1.5\nb: .5\nc: 1.\nd: -2e3\ne: 1E-2\nf: 1e400\ng: .\nh: 1e"),
              "{\"a\":1.5,\"b\":0.5,\"c\":1.0,\"d\":-2000.0,\"e\":0.01,\"f\":null,"
              "\"g\":\".\",\"h\":\"1e\"}");
    CHECK_STR(conv("a: .inf\nb: -.Inf\nc: .NaN\nd: .nan2"),
              "{\"a\":null,\"b\":null,\"c\":null,\"d\":\".nan2\"}");
    /* quoted scalars are strings, dates too */
    CHECK_STR(conv("a: '12'\nb: \"true\"\nc: 2024-01-02\nd: \"x\\ty\\u00e9\\0\""),
              "{\"a\":\"12\",\"b\":\"true\",\"c\":\"2024-01-02\",\"d\":\"x\\ty\xc3\xa9\\u0000\"}");
    /* tags */
    CHECK_STR(conv("a: !!str 12\nb: !!int \"12\"\nc: !!float 3\nd: !custom 5\ne: ! 7"),
              "{\"a\":\"12\",\"b\":12,\"c\":3,\"d\":\"5\",\"e\":\"7\"}");
    CHECK_STR(conv("a: !!int x"), "ERR:invalid_argument");
    CHECK_STR(conv("a: !!bool 1"), "ERR:invalid_argument");
}

TEST(collections_and_cards)
{
    CHECK_STR(conv("language:\n- en\n- fr\ntags: [a, 'b', 3]\nmodel-index:\n- name: m\n"
                   "  results: []\nempty: {}\n"),
              "{\"language\":[\"en\",\"fr\"],\"tags\":[\"a\",\"b\",3],\"model-index\":"
              "[{\"name\":\"m\",\"results\":[]}],\"empty\":{}}");
    /* keys are the scalar's text, whatever it resolves to */
    CHECK_STR(conv("1: a\ntrue: b\n~: c\n'q': d"), "{\"1\":\"a\",\"true\":\"b\",\"~\":\"c\",\"q\":\"d\"}");
    /* anchors and aliases, on values, collections and keys */
    CHECK_STR(conv("base: &b {x: 1, y: [2]}\nother: *b\nn: &n 5\nm: *n\n&k key: *k"),
              "{\"base\":{\"x\":1,\"y\":[2]},\"other\":{\"x\":1,\"y\":[2]},\"n\":5,\"m\":5,"
              "\"key\":\"key\"}");
    CHECK_STR(conv("a: &x 1\nb: &x 2\nc: *x"), "{\"a\":1,\"b\":2,\"c\":2}"); /* redefined */
    /* not a mapping at the top: no card */
    CHECK_STR(conv(""), "NONE");
    CHECK_STR(conv("# only a comment\n"), "NONE");
    CHECK_STR(conv("just text"), "NONE");
    CHECK_STR(conv("- a\n- b"), "NONE");
    CHECK_STR(conv("---\na: 1\n...\n"), "{\"a\":1}");
}

TEST(refused)
{
    CHECK_STR(conv("a: 1\na: 2"), "ERR:duplicate_key");
    CHECK_STR(conv("x: {a: 1, a: 1}"), "ERR:duplicate_key");
    CHECK_STR(conv("? [a, b]\n: c"), "ERR:invalid_argument");
    CHECK_STR(conv("*a : b"), "ERR:invalid_argument");     /* an alias as a key */
    CHECK_STR(conv("\"a\\0b\": 1"), "ERR:invalid_argument"); /* a NUL in a key */
    CHECK_STR(conv("a: *nope"), "ERR:invalid_argument");   /* unknown anchor */
    CHECK_STR(conv("a: 1\n---\nb: 2"), "ERR:invalid_argument");
    CHECK_STR(conv("a: [1, 2"), "ERR:invalid_argument");
    CHECK_STR(conv("a: \"\xff\""), "ERR:invalid_argument"); /* not UTF-8 */
    CHECK_STR(conv("a:\tb: c\n  d"), "ERR:invalid_argument");
    /* depth: 29 levels below the top mapping fit, 30 do not */
    char deep[256];
    snprintf(deep, sizeof(deep), "a: %.*s%.*s", 29, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
             29, "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
    CHECK(strncmp(conv(deep), "{\"a\":[[[", 8) == 0);
    snprintf(deep, sizeof(deep), "a: %.*s%.*s", 30, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
             30, "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
    CHECK_STR(conv(deep), "ERR:nesting_too_deep");
    /* a billion laughs stops at the output limit */
    CHECK_STR(conv("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
                   "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\n"
                   "e: &e [*d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e]\n"
                   "g: &g [*f, *f, *f, *f, *f, *f, *f, *f]\nh: [*g, *g, *g, *g, *g, *g, *g, *g]\n"),
              "ERR:limit_reached");
}

int main(void)
{
    RUN(front_matter_fences);
    RUN(core_schema_scalars);
    RUN(collections_and_cards);
    RUN(refused);
    return TEST_SUMMARY();
}
