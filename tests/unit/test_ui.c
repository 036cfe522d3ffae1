/* Unit tests for server/handlers/ui.c through the loopback driver: the console's
 * page and assets with their security headers and validators, the bare
 * /ui redirect, a missing asset, the console switched off, and "/": a
 * browser sent to the console, anything else told where the API is. */
#include <zlib.h>

#include "encoding.h"
#include "loopback.h"
#include "ui.h"

static char root[64];

#define SECURITY                                                                            \
    "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; "    \
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "       \
    "frame-ancestors 'none'\r\nX-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\n" \
    "Referrer-Policy: no-referrer\r\n"

TEST(assets)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    CHECK(ui_assets_count >= 3);
    for (size_t i = 0; i < ui_assets_count; i++) {
        const struct ui_asset *u = &ui_assets[i];
        char *target = xasprintf("/ui/%s", u->name);
        struct lb_answer r = lb_get(&s, target, NULL);
        int big = u->len >= ENCODING_MIN_BYTES;
        char *head = xasprintf("Content-Type: %s\r\nAccept-Ranges: bytes\r\n"
                               "Cache-Control: no-cache\r\n" SECURITY "ETag: %s\r\n%s",
                               u->content_type, u->etag,
                               big ? "Vary: Accept-Encoding\r\n" : "");
        CHECK_EQ_U64(r.status, 200);
        CHECK_STR(r.head, head);
        CHECK(r.len == u->len && memcmp(r.body, u->data, u->len) == 0);
        lb_free(&r);
        /* compressed at build time: the gzip form inflates to the file */
        static const char *const gzip[] = {"Accept-Encoding: gzip", NULL};
        r = lb_get(&s, target, gzip);
        CHECK(u->gzip && u->gzip_len > 18);
        if (big) {
            CHECK_CONTAINS(r.head, "Content-Encoding: gzip\r\n");
            CHECK(r.len == u->gzip_len && memcmp(r.body, u->gzip, r.len) == 0);
            char *back = xmalloc(u->len + 1);
            uLongf n = u->len + 1;
            z_stream z = {.next_in = (Bytef *)(uintptr_t)u->gzip, .avail_in = (uInt)u->gzip_len,
                          .next_out = (Bytef *)back, .avail_out = (uInt)n};
            CHECK(inflateInit2(&z, 15 + 16) == Z_OK && inflate(&z, Z_FINISH) == Z_STREAM_END);
            CHECK(z.total_out == u->len && memcmp(back, u->data, u->len) == 0);
            inflateEnd(&z);
            free(back);
        }
        char *inm = xasprintf("If-None-Match: %s", u->etag);
        const char *const h304[] = {inm, NULL};
        lb_free(&r);
        r = lb_get(&s, target, h304);
        CHECK_EQ_U64(r.status, 304);
        CHECK_CONTAINS(r.head, "X-Frame-Options: DENY\r\n");
        lb_free(&r);
        free(inm);
        free(head);
        free(target);
    }
    struct lb_answer r = lb_get(&s, "/ui", NULL);
    CHECK_ANSWER(r, 301, "Content-Type: text/plain; charset=utf-8\r\nLocation: /ui/\r\n" SECURITY,
                 "Found. Redirecting to /ui/\n");
    lb_free(&r);
    r = lb_get(&s, "/ui/nope.js", NULL);
    CHECK_ANSWER(r, 404, "Content-Type: application/json\r\n",
                 "{\"error\":{\"code\":\"not_found\",\"message\":\"the web console has no file "
                 "\\\"nope.js\\\"\"}}\n");
    lb_free(&r);
    lb_stop(&s);
}

TEST(root)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    static const char *const browser[] = {
        "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", NULL};
    struct lb_answer r = lb_get(&s, "/", browser);
    CHECK_ANSWER(r, 302, "Content-Type: text/plain; charset=utf-8\r\nLocation: /ui/\r\n"
                         "Vary: Accept\r\n",
                 "Found. Redirecting to /ui/\n");
    lb_free(&r);
    static const char *const curl[] = {"Accept: */*", NULL};
    r = lb_get(&s, "/", curl);
    CHECK_EQ_U64(r.status, 404);
    CHECK_CONTAINS(r.head, "Vary: Accept\r\n");
    CHECK_CONTAINS(r.body, "/v1/openapi.json");
    CHECK_CONTAINS(r.body, "the web console is /ui/");
    lb_free(&r);
    r = lb_get(&s, "//", browser); /* only "/" itself */
    CHECK_EQ_U64(r.status, 404);
    lb_free(&r);
    lb_stop(&s);
    static const char *const off[] = {"ui=false", NULL};
    lb_start(&s, root, 0, off);
    r = lb_get(&s, "/", browser);
    CHECK_EQ_U64(r.status, 404);
    CHECK(!strstr(r.body, "/ui/"));
    lb_free(&r);
    lb_stop(&s);
}

TEST(off)
{
    struct lb_server s;
    static const char *const off[] = {"ui=false", NULL};
    lb_start(&s, root, 0, off);
    struct lb_answer r = lb_get(&s, "/ui/", NULL);
    CHECK_ANSWER(r, 404, "Content-Type: application/json\r\n",
                 "{\"error\":{\"code\":\"not_found\",\"message\":\"the web console is off (ui = "
                 "false)\"}}\n");
    lb_free(&r);
    lb_stop(&s);
}

int main(void)
{
    lb_new_root(root, sizeof(root));
    RUN(assets);
    RUN(root);
    RUN(off);
    lb_remove_root(root);
    return TEST_SUMMARY();
}
