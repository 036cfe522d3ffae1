/* Unit tests for server/handlers/h_answer.c: the arena and its cleanups, the
 * headers an answer adds, what each constructor makes, the helpers
 * handlers share (Content-Disposition by RFC 6266 and 8187, Content-Type by
 * name, the JSON line) and the request view's decoded query and
 * preconditions. */
#include <string.h>

#include "jsonw.h"
#include "loopback.h"

static int order[8], n_order;

static void note(void *arg)
{
    order[n_order++] = (int)(intptr_t)arg;
}

TEST(arena_memory_and_cleanups)
{
    struct answer a;
    answer_init(&a);
    CHECK(a.fd == -1 && a.rep.body.fd == -1 && a.rep.mtime == -1 && a.kind == ANSWER_NONE);
    char *p[200];
    for (int i = 0; i < 200; i++) {
        p[i] = answer_alloc(&a, (size_t)i + 1);
        CHECK(((uintptr_t)p[i] & 15) == 0);   /* aligned for any type */
        CHECK(p[i][i] == 0);                  /* zeroed */
        memset(p[i], i, (size_t)i + 1);
    }
    char *big = answer_alloc(&a, 100000);     /* larger than a chunk */
    memset(big, 7, 100000);
    char *after = answer_alloc(&a, 8);        /* still fits the current chunk */
    CHECK(after != NULL);
    for (int i = 0; i < 200; i++)             /* no allocation overlaps another */
        CHECK(p[i][0] == (char)i && p[i][i] == (char)i);
    CHECK_STR(answer_strdup(&a, "abc"), "abc");
    CHECK_STR(answer_printf(&a, "%d-%s", 42, "x"), "42-x");
    n_order = 0;
    answer_defer(&a, note, (void *)1);
    answer_defer(&a, note, (void *)2);
    answer_defer(&a, free, xmalloc(10));      /* ASan reports a leak if it never runs */
    answer_free(&a);
    CHECK_EQ_U64(n_order, 2);
    CHECK(order[0] == 2 && order[1] == 1);    /* last deferred runs first */
    CHECK(a.chunks == NULL && a.cleanups == NULL && a.kind == ANSWER_NONE);
    answer_free(&a);                          /* twice is harmless */
}

TEST(rendered_drops_the_descriptor)
{
    struct answer a;
    answer_init(&a);
    a.fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int fd = a.fd;
    answer_rendered(&a);
    CHECK(a.fd == -1);
    CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF);
    answer_free(&a);
}

TEST(headers)
{
    struct answer a;
    answer_init(&a);
    char value[] = "v1";
    answer_header(&a, "X-One", value);
    value[1] = '9'; /* copied: the caller's buffer may go */
    static const char *const pairs[] = {"X-Two", "2", "X-Three", "3", NULL};
    answer_headers(&a, pairs);
    CHECK_EQ_U64(a.n_extra, 3);
    CHECK_STR(a.extra[1], "v1");
    CHECK_STR(a.extra[4], "X-Three");
    CHECK(a.extra[6] == NULL);
    for (int i = 0; i < 20; i++)              /* more than fit: the rest are dropped, safely */
        answer_header(&a, "X-More", "m");
    CHECK_EQ_U64(a.n_extra, ANSWER_MAX_EXTRA);
    CHECK(a.extra[2 * ANSWER_MAX_EXTRA] == NULL);
    answer_free(&a);
}

TEST(constructors)
{
    struct answer a;
    answer_init(&a);
    char code[] = "some_code";
    CHECK(answer_error(&a, 404, code, "no %s", "thing") == &a);
    code[0] = 'X'; /* the code is the answer's own copy */
    CHECK(a.kind == ANSWER_ERROR && a.status == 404 && !a.error.hub);
    CHECK_STR(a.error.code, "some_code");
    CHECK_STR(a.error.message, "no thing");
    answer_free(&a);

    answer_hub_error(&a, 503, NULL, 7, "busy");
    CHECK(a.kind == ANSWER_ERROR && a.error.hub && a.error.code == NULL &&
          a.error.retry_after == 7);
    answer_free(&a);

    answer_file_changed(&a);
    CHECK(a.status == 503 && a.rescan);
    CHECK_STR(a.error.code, "file_changed");
    answer_free(&a);

    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    jsonw_ku64(&w, "a", 1);
    jsonw_obj_end(&w);
    answer_jsonw(&a, 200, &w);
    CHECK(a.kind == ANSWER_BODY && a.status == 200);
    CHECK_EQ_U64(a.rep.body.prefix_len, 8);
    CHECK(memcmp(a.rep.body.prefix, "{\"a\":1}\n", 8) == 0);
    CHECK_STR(a.rep.etag, "");
    CHECK_STR(a.rep.content_type, "application/json");
    answer_free(&a);

    jsonw_obj(&w);
    jsonw_ku64(&w, "b", 2);
    jsonw_obj_end(&w);
    answer_jsonw(&a, 202, &w);
    CHECK(a.kind == ANSWER_DOC && a.status == 202 && a.text_len == 8);
    CHECK_STR(a.content_type, "application/json");
    answer_free(&a);

    jsonw_obj(&w);
    jsonw_fail(&w); /* the document could not be made */
    answer_jsonw(&a, 200, &w);
    CHECK(a.kind == ANSWER_ERROR && a.status == 503);
    CHECK_STR(a.error.code, "out_of_memory");
    answer_free(&a);

    char loc[] = "/x";
    answer_redirect(&a, 302, loc);
    loc[1] = 'y';
    CHECK(a.kind == ANSWER_REDIRECT && a.status == 302);
    CHECK_STR(a.location, "/x");
    answer_free(&a);

    char hdrs[] = "range";
    answer_preflight(&a, "GET, HEAD", hdrs);
    hdrs[0] = 'R';
    CHECK(a.kind == ANSWER_PREFLIGHT && a.status == 204);
    CHECK_STR(a.cors_methods, "GET, HEAD");
    CHECK_STR(a.cors_headers, "range"); /* copied */
    answer_free(&a);
}

static void *start_now(struct answer *a)
{
    answer_resume(a, 5);
    return (void *)a->wait.ctx;
}

static void done(void *arg, int result)
{
    *(int *)arg = result;
}

TEST(wait)
{
    struct answer a;
    int got = 0, ctx = 0;
    answer_init(&a);
    answer_wait(&a, start_now, NULL, &ctx);
    CHECK(a.kind == ANSWER_WAIT);
    a.wait.done = done;
    a.wait.done_arg = &got;
    CHECK(a.wait.start(&a) == &ctx);
    CHECK(got == 5);
    answer_free(&a);
}

TEST(json_line)
{
    size_t len = 3;
    char *t = answer_json_line(xstrdup("abc"), &len);
    CHECK_EQ_U64(len, 4);
    CHECK_STR(t, "abc\n");
    t = answer_json_line(t, &len); /* one newline, never two */
    CHECK_EQ_U64(len, 4);
    free(t);
}

TEST(content_disposition)
{
    struct answer a;
    answer_init(&a);
    CHECK_STR(answer_disposition(&a, "attachment", "a.npy", 5),
              "attachment; filename=\"a.npy\"; filename*=UTF-8''a.npy");
    const char *n = "x/\xc3\xbc \"q\"\\;.bin";
    CHECK_STR(answer_disposition(&a, "inline", n, strlen(n)),
              "inline; filename=\"x___ _q__;.bin\"; filename*=UTF-8''x_%C3%BC%20%22q%22%5C%3B.bin");
    char all[256];
    for (int i = 0; i < 255; i++)
        all[i] = (char)(i + 1);
    const char *d = answer_disposition(&a, "attachment", all, 255); /* the worst case fits */
    CHECK(strlen(d) < strlen("attachment") + 40 + 4 * 255);
    CHECK_STR(answer_content_type("config.json"), "application/json");
    CHECK_STR(answer_content_type("README.md"), "text/markdown; charset=utf-8");
    CHECK_STR(answer_content_type("notes.txt"), "text/plain; charset=utf-8");
    CHECK_STR(answer_content_type("w.safetensors"), "application/octet-stream");
    CHECK_STR(answer_content_type("json"), "application/octet-stream");
    answer_free(&a);
}

TEST(view)
{
    struct lb_request q;
    static const char *const h[] = {"If-Match: \"x\"", "X-Case: yes", NULL};
    struct request_view v = lb_view(&q, NULL, "POST", "/p?a=x%2By+z&f=a+b&bad=%zz&nul=%00&e=",
                                    h);
    int bad = 0;
    size_t len;
    char *s = view_query(&v, "a", 0, &len, &bad);
    CHECK_STR(s, "x+y+z");
    CHECK_EQ_U64(len, 5);
    free(s);
    s = view_query(&v, "f", 1, NULL, &bad);   /* a form value: '+' is a space */
    CHECK_STR(s, "a b");
    free(s);
    s = view_query(&v, "e", 0, NULL, &bad);
    CHECK_STR(s, "");
    free(s);
    CHECK(view_query(&v, "absent", 0, NULL, &bad) == NULL && !bad);
    CHECK(view_query(&v, "bad", 0, NULL, &bad) == NULL && bad);
    bad = 0;
    CHECK(view_query(&v, "nul", 0, NULL, &bad) == NULL && bad);
    CHECK_STR(view_header(&v, "x-case"), "yes");
    CHECK(!view_preconditions_hold(&v));      /* If-Match on a resource with no validator */
    free(q.query);
    static const char *const h2[] = {"If-None-Match: \"x\"", NULL};
    v = lb_view(&q, NULL, "DELETE", "/p", h2);
    CHECK(view_preconditions_hold(&v));
    free(q.query);
    static const char *const h3[] = {"If-None-Match: *", NULL};
    v = lb_view(&q, NULL, "DELETE", "/p", h3);
    CHECK(!view_preconditions_hold(&v));
    free(q.query);
}

int main(void)
{
    RUN(arena_memory_and_cleanups);
    RUN(rendered_drops_the_descriptor);
    RUN(headers);
    RUN(constructors);
    RUN(wait);
    RUN(json_line);
    RUN(content_disposition);
    RUN(view);
    return TEST_SUMMARY();
}
