/* Unit tests for server/cli/mirror_start.c: no mirror without an upstream; a
 * mirror with its cache where the configuration says, or in the state
 * directory; the upstream token file's first line, and its errors named. */
#include "config.h"
#include "mirror.h"
#include "mirror_start.h"
#include "test.h"
#include "util.h"

static char dir[] = "/tmp/test_mirror_start.XXXXXX";

static struct mirror *start(const char *const *opts, int *rc, char *err)
{
    struct config cfg;
    config_defaults(&cfg);
    struct st_error e;
    for (const char *const *o = opts; *o; o += 2)
        CHECK(config_set(&cfg, o[0], o[1], &e) == 0);
    struct mirror *m = mirror_start(&cfg, rc, err, 512);
    config_free(&cfg);
    return m;
}

TEST(configurations)
{
    char err[512] = "";
    int rc = 1;
    static const char *const none[] = {NULL};
    CHECK(start(none, &rc, err) == NULL && rc == 0); /* no upstream: no mirror, no error */
    char *cache = xasprintf("%s/cache", dir), *state = xasprintf("%s/state", dir);
    const char *const with_cache[] = {"upstream", "http://127.0.0.1:9", "mirror_cache_dir", cache,
                                      NULL};
    struct mirror *m = start(with_cache, &rc, err);
    CHECK(m != NULL && rc == 0);
    mirror_free(m);
    struct stat st;
    CHECK(stat(cache, &st) == 0 && S_ISDIR(st.st_mode)); /* made when missing */
    const char *const in_state[] = {"upstream", "http://127.0.0.1:9", "state_dir", state, NULL};
    m = start(in_state, &rc, err);
    CHECK(m != NULL && rc == 0);
    mirror_free(m);
    char *in = xasprintf("%s/mirror", state);
    CHECK(stat(in, &st) == 0 && S_ISDIR(st.st_mode));
    free(in);
    char *tok = xasprintf("%s/token", dir);
    test_write_file(tok, "\nsecret\n", 8);
    const char *const empty_token[] = {"upstream", "http://127.0.0.1:9", "mirror_cache_dir", cache,
                                       "upstream_token_file", tok, NULL};
    CHECK(start(empty_token, &rc, err) == NULL && rc == -1);
    char *want = xasprintf("upstream_token_file %s: the first line is empty", tok);
    CHECK_STR(err, want);
    free(want);
    test_write_file(tok, "hf_secret\nignored\n", 18);
    m = start(empty_token, &rc, err);
    CHECK(m != NULL && rc == 0);
    mirror_free(m);
    unlink(tok);
    m = start(empty_token, &rc, err);
    CHECK(m == NULL && rc == -1);
    CHECK_CONTAINS(err, "No such file or directory");
    free(tok);
    free(cache);
    free(state);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    RUN(configurations);
    char *cmd = xasprintf("rm -rf '%s'", dir);
    int rc = system(cmd);
    free(cmd);
    (void)rc;
    return TEST_SUMMARY();
}
