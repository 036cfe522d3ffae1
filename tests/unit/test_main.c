/* Unit tests for server/cli/main.c, which it includes (its main renamed): the
 * command line's options (--config applied first, then the others in
 * order; --name=value and --name value; '-' for '_'; a boolean alone), its
 * errors, the commands it hands to, and the listen exposure check. */
#include <stdio.h>

int tensord_main(int argc, char **argv);
#define main tensord_main
#include "../../server/cli/main.c"
#undef main

#include "test.h"
#include "util.h"

static char dir[] = "/tmp/test_main.XXXXXX";

static int parse(struct config *cfg, int *print, const char *const *args)
{
    int n = 0;
    while (args[n])
        n++;
    config_defaults(cfg);
    return parse_options(n, (char **)args, cfg, print);
}

TEST(options)
{
    struct config cfg;
    int print = PRINT_NOTHING;
    char *conf = xasprintf("%s/t.conf", dir);
    test_write_file(conf, "[server]\nthreads = 3\nlisten = 127.0.0.1:1\n", 42);
    const char *const a[] = {"--listen", "127.0.0.1:2", "--config", conf, "--hash-wait=4",
                             "--insecure-listen", "--print-socket", NULL};
    CHECK(parse(&cfg, &print, a) == 0);
    CHECK_STR(cfg.listen, "127.0.0.1:2"); /* the command line wins, wherever --config is */
    CHECK_EQ_U64(cfg.threads, 3);
    CHECK_EQ_U64(cfg.hash_wait, 4);
    CHECK(cfg.insecure_listen == 1);
    CHECK(print == PRINT_SOCKET);
    config_free(&cfg);
    const char *const bad[][3] = {{"serve", NULL}, {"--no-such-option", "1", NULL},
                                  {"--threads", NULL}, {"--threads", "many", NULL},
                                  {"--", NULL}};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        CHECK(parse(&cfg, &print, bad[i]) == -1);
        config_free(&cfg);
    }
    char *missing = xasprintf("%s/missing.conf", dir);
    const char *const no_file[] = {"--config", missing, NULL};
    CHECK(parse(&cfg, &print, no_file) == -1);
    config_free(&cfg);
    free(missing);
    unlink(conf);
    free(conf);
}

TEST(exposure)
{
    struct config cfg;
    config_defaults(&cfg);
    struct st_error err;
    CHECK(exposure_accepted(&cfg)); /* loopback */
    CHECK(config_set(&cfg, "listen", "0.0.0.0:8077", &err) == 0);
    CHECK(!exposure_accepted(&cfg));
    CHECK(config_set(&cfg, "insecure_listen", "true", &err) == 0);
    CHECK(exposure_accepted(&cfg));
    CHECK(config_set(&cfg, "insecure_listen", "false", &err) == 0);
    CHECK(config_set(&cfg, "auth_token_file", "/etc/tensord/tokens", &err) == 0);
    CHECK(exposure_accepted(&cfg));
    config_free(&cfg);
}

TEST(commands)
{
    char *v[] = {"tensord", "--version", NULL};
    CHECK(tensord_main(2, v) == 0);
    char *h[] = {"tensord", "help", NULL};
    CHECK(tensord_main(2, h) == 0);
    char *u[] = {"tensord", "frobnicate", NULL};
    CHECK(tensord_main(2, u) == 2);
    char *i[] = {"tensord", "inspect", NULL}; /* handed over: its usage error */
    CHECK(tensord_main(2, i) == 2);
    char *vf[] = {"tensord", "verify", NULL};
    CHECK(tensord_main(2, vf) == 2);
    char *pc[] = {"tensord", "serve", "--print-config", "--threads", "7", NULL};
    CHECK(tensord_main(5, pc) == 0);
    char *bad[] = {"tensord", "--threads", NULL};
    CHECK(tensord_main(2, bad) == 2);
    char *open_wide[] = {"tensord", "--listen", "0.0.0.0:1", NULL};
    CHECK(tensord_main(3, open_wide) == 2); /* refused before anything starts */
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    RUN(options);
    RUN(exposure);
    RUN(commands);
    rmdir(dir);
    return TEST_SUMMARY();
}
