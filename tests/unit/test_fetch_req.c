/* Tests for core/req/fetch_req.c: the grammar, every error with its place, the
 * bounds, and the first-match rule lookup. */
#include <errno.h>
#include <stdlib.h>

#include "fetch_req.h"
#include "slice.h"
#include "test.h"

static const struct fetch_limits lim = {.max_tensors = 4};

/* Parses text and expects status st with a message containing want. */
static int parse_fails(const char *text, enum st_status st, const char *want)
{
    struct fetch_req r;
    struct st_error err;
    enum st_status got = ST_CODE(fetch_req_parse(text, strlen(text), &lim, &r, &err), &err);
    if (got != st || !strstr(err.message, want)) {
        fprintf(stderr, "  %s: status %d \"%s\", want %d \"%s\"\n", text, got, err.message, st,
                want);
        if (got == ST_OK)
            fetch_req_free(&r);
        return 0;
    }
    /* a failed parse leaves nothing to free */
    return r.items == NULL && r.rules == NULL && r.arena == NULL;
}

TEST(full_request)
{
    const char *t = "{\"tensors\": [\"a.weight\", {\"name\": \"b\\u00fc\", \"slice\": \"::-1,0\"},"
                    " {\"slice\": \"1\", \"name\": \"c\"}],"
                    " \"split\": {\"rules\": [{\"match\": \"*.weight\", \"dim\": 1},"
                    " {\"dim\": -1, \"match\": \"*\"}], \"world\": 4, \"rank\": 3}}";
    struct fetch_req r;
    struct st_error err;
    CHECK(ST_CODE(fetch_req_parse(t, strlen(t), &lim, &r, &err), &err) == ST_OK);
    CHECK(!r.all);
    CHECK_EQ_U64(r.n_items, 3);
    CHECK_STR(r.items[0].name, "a.weight");
    CHECK(r.items[0].slice == NULL);
    CHECK_STR(r.items[1].name, "b\xc3\xbc");
    CHECK_EQ_U64(r.items[1].name_len, 3);
    CHECK_STR(r.items[1].slice, "::-1,0");
    CHECK_STR(r.items[2].name, "c");
    CHECK_STR(r.items[2].slice, "1");
    CHECK(r.has_split);
    CHECK_EQ_U64(r.world, 4);
    CHECK_EQ_U64(r.rank, 3);
    CHECK_EQ_U64(r.n_rules, 2);
    CHECK(r.rules[1].dim == -1);
    /* first match wins */
    int ex;
    CHECK(fetch_req_rule_for(&r, "x.weight", 8, NULL, &ex) == &r.rules[0] && !ex);
    CHECK(fetch_req_rule_for(&r, "x.bias", 6, NULL, &ex) == &r.rules[1] && !ex);
    /* a budget too small to try the second rule */
    uint64_t budget = 10;
    CHECK(fetch_req_rule_for(&r, "x.bias", 6, &budget, &ex) == NULL && ex && budget == 0);
    fetch_req_free(&r);
}

TEST(defaults)
{
    struct fetch_req r;
    struct st_error err;
    const char *texts[] = {"", "  \n", "{}", " { } "};
    for (size_t i = 0; i < 4; i++) {
        CHECK(ST_CODE(fetch_req_parse(texts[i], strlen(texts[i]), &lim, &r, &err), &err) ==
              ST_OK);
        CHECK(r.all && r.n_items == 0 && !r.has_split);
        int ex;
        CHECK(fetch_req_rule_for(&r, "x", 1, NULL, &ex) == NULL && !ex);
        fetch_req_free(&r);
    }
    CHECK(ST_CODE(fetch_req_parse("{\"tensors\":[]}", 14, &lim, &r, &err), &err) == ST_OK);
    CHECK(!r.all && r.n_items == 0);
    fetch_req_free(&r);
    const char *t = "{\"split\":{\"world\":1,\"rank\":0,\"rules\":[]}}";
    CHECK(ST_CODE(fetch_req_parse(t, strlen(t), &lim, &r, &err), &err) == ST_OK);
    CHECK(r.all && r.has_split && r.n_rules == 0);
    fetch_req_free(&r);
}

TEST(schema_errors)
{
    CHECK(parse_fails("[]", ST_ERR_INVALID_ARGUMENT, "request must be a JSON object, not an array"));
    CHECK(parse_fails("\"x\"", ST_ERR_INVALID_ARGUMENT, "not a string"));
    CHECK(parse_fails("{\"tensor\": []}", ST_ERR_INVALID_ARGUMENT, "request: unknown key \"tensor\""));
    CHECK(parse_fails("{\"tensors\": [], \"tensors\": []}", ST_ERR_INVALID_ARGUMENT,
                      "request: duplicate key \"tensors\""));
    CHECK(parse_fails("{\"tensors\": {}}", ST_ERR_INVALID_ARGUMENT, "tensors must be an array, not an object"));
    CHECK(parse_fails("{\"tensors\": [1]}", ST_ERR_INVALID_ARGUMENT,
                      "tensors[0] must be a tensor name or an object"));
    CHECK(parse_fails("{\"tensors\": [\"a\", {\"slice\": \"1\"}]}", ST_ERR_INVALID_ARGUMENT,
                      "tensors[1]: \"name\" is missing"));
    CHECK(parse_fails("{\"tensors\": [{\"name\": \"a\", \"slice\": 1}]}", ST_ERR_INVALID_ARGUMENT,
                      "tensors[0].slice must be a string, not an integer"));
    CHECK(parse_fails("{\"tensors\": [{\"name\": \"a\", \"dim\": 1}]}", ST_ERR_INVALID_ARGUMENT,
                      "tensors[0]: unknown key \"dim\""));
    CHECK(parse_fails("{\"tensors\": [{\"name\": \"a\", \"name\": \"b\"}]}", ST_ERR_INVALID_ARGUMENT,
                      "tensors[0]: duplicate key \"name\""));
    CHECK(parse_fails("{\"split\": []}", ST_ERR_INVALID_ARGUMENT, "split must be an object"));
    CHECK(parse_fails("{\"split\": {\"world\": 2, \"rank\": 0}}", ST_ERR_INVALID_ARGUMENT,
                      "split: \"rules\" is missing"));
    CHECK(parse_fails("{\"split\": {\"world\": 0, \"rank\": 0, \"rules\": []}}", ST_ERR_INVALID_ARGUMENT,
                      "split.world must be at least 1, not 0"));
    CHECK(parse_fails("{\"split\": {\"world\": 2, \"rank\": 2, \"rules\": []}}", ST_ERR_INVALID_ARGUMENT,
                      "split.rank must be in [0, 2), not 2"));
    CHECK(parse_fails("{\"split\": {\"world\": 2, \"rank\": -1, \"rules\": []}}", ST_ERR_INVALID_ARGUMENT,
                      "not -1"));
    CHECK(parse_fails("{\"split\": {\"world\": 2.0, \"rank\": 0, \"rules\": []}}", ST_ERR_INVALID_ARGUMENT,
                      "split.world must be an integer, not a number"));
    CHECK(parse_fails("{\"split\": {\"world\": 2, \"rank\": 0, \"rules\": [{\"match\": \"*\"}]}}",
                      ST_ERR_INVALID_ARGUMENT, "split.rules[0]: \"dim\" is missing"));
    CHECK(parse_fails("{\"split\": {\"world\": 2, \"rank\": 0, \"rules\": [{\"match\": 1, \"dim\": 0}]}}",
                      ST_ERR_INVALID_ARGUMENT, "split.rules[0].match must be a string"));
    CHECK(parse_fails("{\"split\": {\"world\": 2, \"rank\": 0, \"rules\": [{\"match\": \"[z-a\", "
                      "\"dim\": true}]}}", ST_ERR_INVALID_ARGUMENT, "split.rules[0].dim must be an "
                      "integer, not a boolean"));
    CHECK(parse_fails("{\"split\": {\"world\": 2, \"rank\": 0, \"rules\": [5]}}", ST_ERR_INVALID_ARGUMENT,
                      "split.rules[0] must be an object, not an integer"));
    CHECK(parse_fails("{\"split\": {\"world\": 2, \"rank\": 0, \"rules\": [], \"ranks\": 1}}",
                      ST_ERR_INVALID_ARGUMENT, "split: unknown key \"ranks\""));
    /* an unknown key is quoted, cut short when long */
    CHECK(parse_fails("{\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": 1}",
                      ST_ERR_INVALID_ARGUMENT, "unknown key \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...\""));
}

TEST(json_errors)
{
    CHECK(parse_fails("{\"tensors\": [\"a\",]}", ST_ERR_JSON,
                      "request is not valid JSON: unexpected token near ']' at line 1"));
    CHECK(parse_fails("{\"tensors\": [\"a\"", ST_ERR_JSON, "']' expected"));
    CHECK(parse_fails("{\"tensors\": []} x", ST_ERR_JSON, "end of file expected"));
    CHECK(parse_fails("{\"tensors\": [\"a\\u0000\"]}", ST_ERR_JSON, "\\u0000 is not allowed"));
    CHECK(parse_fails("{\n\"tensors\": [\"a\" \"b\"]}", ST_ERR_JSON, "line 2"));
    CHECK(parse_fails("{tensors: 1}", ST_ERR_JSON, "not valid JSON"));
    CHECK(parse_fails("nul", ST_ERR_JSON, "not valid JSON"));
    CHECK(parse_fails("{\"tensors\": [\"\\ud800\"]}", ST_ERR_JSON, "invalid Unicode"));
    CHECK(parse_fails("{\"a\xff\": 1}", ST_ERR_UTF8, "not UTF-8"));
    struct fetch_req r;
    struct st_error err;
    CHECK(ST_CODE(fetch_req_parse("{}\0", 3, &lim, &r, &err), &err) == ST_ERR_UTF8);
}

TEST(bounds)
{
    CHECK(parse_fails("{\"tensors\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", ST_ERR_LIMIT,
                      "more than 4 tensors in one request"));
    struct fetch_req r;
    struct st_error err;
    const char *four = "{\"tensors\": [\"a\", \"b\", \"c\", \"d\"]}";
    CHECK(ST_CODE(fetch_req_parse(four, strlen(four), &lim, &r, &err), &err) == ST_OK);
    fetch_req_free(&r);
    /* rules: FETCH_MAX_RULES and no more */
    char text[8192];
    size_t n = (size_t)snprintf(text, sizeof(text), "{\"split\":{\"world\":2,\"rank\":0,\"rules\":[");
    for (int i = 0; i <= FETCH_MAX_RULES; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "%s{\"match\":\"x%d\",\"dim\":0}",
                              i ? "," : "", i);
    snprintf(text + n, sizeof(text) - n, "]}}");
    CHECK(parse_fails(text, ST_ERR_INVALID_ARGUMENT, "split.rules has more than 64 rules"));
    /* a glob of FETCH_MAX_GLOB bytes is fine, one more is not */
    char glob[FETCH_MAX_GLOB + 2];
    memset(glob, 'a', sizeof(glob));
    glob[FETCH_MAX_GLOB] = 0;
    snprintf(text, sizeof(text), "{\"split\":{\"world\":2,\"rank\":0,\"rules\":[{\"match\":\"%s\","
             "\"dim\":0}]}}", glob);
    CHECK(ST_CODE(fetch_req_parse(text, strlen(text), &lim, &r, &err), &err) == ST_OK);
    fetch_req_free(&r);
    glob[FETCH_MAX_GLOB] = 'a';
    glob[FETCH_MAX_GLOB + 1] = 0;
    snprintf(text, sizeof(text), "{\"split\":{\"world\":2,\"rank\":0,\"rules\":[{\"match\":\"%s\","
             "\"dim\":0}]}}", glob);
    CHECK(parse_fails(text, ST_ERR_INVALID_ARGUMENT, "split.rules[0].match is longer than 1024 bytes"));
    /* extreme integers */
    const char *big = "{\"split\":{\"world\":9223372036854775807,\"rank\":9223372036854775806,"
                      "\"rules\":[{\"match\":\"*\",\"dim\":-9223372036854775808}]}}";
    CHECK(ST_CODE(fetch_req_parse(big, strlen(big), &lim, &r, &err), &err) == ST_OK);
    CHECK(r.rules[0].dim == INT64_MIN && r.rank == 9223372036854775806ULL);
    fetch_req_free(&r);
    CHECK(parse_fails("{\"split\":{\"world\":9223372036854775808}}", ST_ERR_JSON,
                      "too big"));
}

TEST(error_is_optional)
{
    struct fetch_req r;
    CHECK(fetch_req_parse("[]", 2, &lim, &r, NULL) == -EINVAL);
    CHECK(fetch_req_parse("{}", 2, &lim, &r, NULL) == 0);
    fetch_req_free(&r);
}

/* A "split" alone, as POST .../gpu sends it: with its rank, or without
 * (every rank placed on a device of its own), with the fetch's checks. */
TEST(split_alone)
{
    struct fetch_req r;
    struct st_error err;
    const char *t = "{\"world\": 2, \"rank\": 1, \"rules\": [{\"match\": \"*\", \"dim\": 0}]}";
    CHECK(fetch_req_parse_split(t, strlen(t), 1, &r, &err) == 0);
    CHECK(r.all && r.has_split && r.world == 2 && r.rank == 1 && r.n_rules == 1);
    fetch_req_free(&r);
    t = "{\"world\": 8, \"rules\": []}";
    CHECK(fetch_req_parse_split(t, strlen(t), 0, &r, &err) == 0);
    CHECK(r.world == 8 && r.rank == 0 && r.n_rules == 0);
    fetch_req_free(&r);
    CHECK(fetch_req_parse_split(t, strlen(t), 1, &r, &err) < 0);
    CHECK_CONTAINS(err.message, "rank");
    t = "{\"world\": 2, \"rank\": 0, \"rules\": []}";
    CHECK(fetch_req_parse_split(t, strlen(t), 0, &r, &err) < 0);
    CHECK_CONTAINS(err.message, "rank");
    t = "{\"world\": 2, \"rank\": 0, \"rules\": []} x";
    CHECK(fetch_req_parse_split(t, strlen(t), 1, &r, &err) < 0 && err.code == ST_ERR_JSON);
    CHECK(r.rules == NULL && r.arena == NULL);
}

/* A tensor's plan as the fetch, the preload and the client's check take
 * it: the first matching rule cuts its dim as numpy.array_split would; a
 * scalar, or a tensor no rule matches, is whole; a dim out of range is
 * refused naming the tensor. */
TEST(plan_tensor_parts)
{
    struct fetch_req r;
    struct st_error err;
    const char *t = "{\"world\": 3, \"rank\": 2, \"rules\": [{\"match\": \"*.w\", \"dim\": -1},"
                    " {\"match\": \"big.*\", \"dim\": 5}]}";
    CHECK(fetch_req_parse_split(t, strlen(t), 1, &r, &err) == 0);
    uint64_t shape[2] = {4, 10};
    struct slice_plan plan;
    struct fetch_part part;
    CHECK(fetch_req_plan_tensor(&r, "a.w", 3, NULL, 0, DT_F32, 2, shape, NULL, &plan, &part,
                                &err) == 0);
    /* 10 in 3 parts: 4, 3, 3: rank 2 keeps [7, 10) */
    CHECK(part.split && part.dim == 1 && part.lo == 7 && part.hi == 10 && part.full == 10);
    CHECK(plan.ndim == 2 && plan.shape[0] == 4 && plan.shape[1] == 3 && plan.nbytes == 48);
    CHECK(fetch_req_plan_tensor(&r, "a.b", 3, NULL, 0, DT_F32, 2, shape, NULL, &plan, &part,
                                &err) == 0);
    CHECK(!part.split && plan.nbytes == 160);
    CHECK(fetch_req_plan_tensor(&r, "s.w", 3, NULL, 0, DT_F32, 0, shape, NULL, &plan, &part,
                                &err) == 0);
    CHECK(!part.split && plan.nbytes == 4);
    CHECK(fetch_req_plan_tensor(&r, "big.x", 5, NULL, 0, DT_F32, 2, shape, NULL, &plan, &part,
                                &err) < 0);
    CHECK(err.code == ST_ERR_SPLIT);
    CHECK_CONTAINS(err.message, "big.x");
    CHECK_CONTAINS(err.message, "out of range");
    uint64_t b = 2;
    CHECK(fetch_req_plan_tensor(&r, "zzzzzzzzzzzzzzzzzzzz", 20, NULL, 0, DT_F32, 2, shape, &b,
                                &plan, &part, &err) < 0);
    CHECK(err.code == ST_ERR_SPLIT);
    CHECK_CONTAINS(err.message, "steps");
    fetch_req_free(&r);
}

int main(void)
{
    RUN(full_request);
    RUN(defaults);
    RUN(schema_errors);
    RUN(json_errors);
    RUN(bounds);
    RUN(error_is_optional);
    RUN(split_alone);
    RUN(plan_tensor_parts);
    return TEST_SUMMARY();
}
