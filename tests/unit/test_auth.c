/* Unit tests for server/http/auth.c: the token file (its two roles, comments,
 * every malformed line named by number, tokens too short), the bearer
 * check (the scheme case-insensitive, spaces around the token, the admin
 * token granting read, read not granting admin), the constant-time
 * comparison, and reading PEM files. */
#include "auth.h"
#include "server.h"
#include "test.h"
#include "util.h"

static char dir[] = "/tmp/test_auth.XXXXXX";

static char *file(const char *name, const char *text)
{
    char *p = xasprintf("%s/%s", dir, name);
    test_write_file(p, text, strlen(text));
    return p;
}

static void release(struct server *srv)
{
    free(srv->read_token);
    free(srv->admin_token);
    srv->read_token = srv->admin_token = NULL;
}

TEST(token_file)
{
    struct server srv = {0};
    char err[512];
    CHECK(auth_load(&srv, NULL, err, sizeof(err)) == 0 && !srv.read_token); /* auth off */
    char *p = file("ok", "# tokens\n\n  read  rrrrrrrrrrrrrrrr\nadmin aaaaaaaaaaaaaaaa\r\n");
    CHECK(auth_load(&srv, p, err, sizeof(err)) == 0);
    CHECK_STR(srv.read_token, "rrrrrrrrrrrrrrrr");
    CHECK_STR(srv.admin_token, "aaaaaaaaaaaaaaaa");
    release(&srv);
    free(p);
    struct {
        const char *text, *err;
    } bad[] = {
        {"read short\n", ":1: expected \"read TOKEN\" or \"admin TOKEN\" (tokens of 16+ characters)"},
        {"# c\nwrite wwwwwwwwwwwwwwww\n", ":2: expected"},
        {"read rrrrrrrrrrrrrrrr extra\n", ":1: expected"},
        {"# nothing\n", ": no tokens"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        p = file("bad", bad[i].text);
        CHECK(auth_load(&srv, p, err, sizeof(err)) == -1);
        CHECK_CONTAINS(err, bad[i].err);
        CHECK(strncmp(err, p, strlen(p)) == 0); /* the file is named */
        release(&srv);
        free(p);
    }
    p = xasprintf("%s/missing", dir);
    CHECK(auth_load(&srv, p, err, sizeof(err)) == -1);
    CHECK_CONTAINS(err, "No such file or directory");
    free(p);
}

TEST(bearer_check)
{
    struct server srv = {0};
    CHECK(auth_check(&srv, NULL, 1)); /* auth off: anyone, even for admin */
    srv.read_token = xstrdup("rrrrrrrrrrrrrrrr");
    srv.admin_token = xstrdup("aaaaaaaaaaaaaaaa");
    CHECK(!auth_check(&srv, NULL, 0));
    CHECK(auth_check(&srv, "Bearer rrrrrrrrrrrrrrrr", 0));
    CHECK(auth_check(&srv, "bearer   rrrrrrrrrrrrrrrr \t", 0));
    CHECK(!auth_check(&srv, "Bearer rrrrrrrrrrrrrrrr", 1));
    CHECK(auth_check(&srv, "Bearer aaaaaaaaaaaaaaaa", 1));
    CHECK(auth_check(&srv, "Bearer aaaaaaaaaaaaaaaa", 0)); /* admin also reads */
    CHECK(!auth_check(&srv, "Bearer rrrrrrrrrrrrrrr", 0)); /* a prefix */
    CHECK(!auth_check(&srv, "Bearer rrrrrrrrrrrrrrrrr", 0));
    CHECK(!auth_check(&srv, "Basic rrrrrrrrrrrrrrrr", 0));
    CHECK(!auth_check(&srv, "Bearer", 0));
    free(srv.read_token);
    srv.read_token = NULL;
    CHECK(!auth_check(&srv, "Bearer rrrrrrrrrrrrrrrr", 0)); /* admin only */
    release(&srv);
    CHECK(auth_token_equal("abc", 3, "abc"));
    CHECK(!auth_token_equal("abd", 3, "abc"));
    CHECK(!auth_token_equal("ab", 2, "abc"));
    CHECK(!auth_token_equal("abcd", 4, "abc"));
}

TEST(pem_files)
{
    char err[512], *out = NULL;
    char *p = file("cert.pem", "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n");
    CHECK(auth_read_pem(p, &out, err, sizeof(err)) == 0);
    CHECK_CONTAINS(out, "BEGIN CERTIFICATE");
    free(out);
    CHECK(auth_read_pem("", &out, err, sizeof(err)) == -1);
    CHECK_STR(err, "tls_cert and tls_key must both be set");
    free(p);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    RUN(token_file);
    RUN(bearer_check);
    RUN(pem_files);
    char *cmd = xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        return 1;
    free(cmd);
    return TEST_SUMMARY();
}
