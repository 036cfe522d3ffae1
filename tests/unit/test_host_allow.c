/* host_allow: without tokens only addresses, localhost and the listed names
 * are answered (a DNS-rebinding page sends its own name); with tokens,
 * every Host. */
#include <string.h>

#include "config.h"
#include "host_allow.h"
#include "test.h"

static struct config cfg;
static int tokens;

static void set_hosts(const char *const *names)
{
    cfg.n_allowed_hosts = 0;
    for (; *names; names++)
        cfg.allowed_hosts[cfg.n_allowed_hosts++] = (char *)*names;
}

TEST(addresses_and_localhost_are_answered)
{
    set_hosts((const char *const[]){NULL});
    const char *yes[] = {"127.0.0.1", "127.0.0.1:8077", "10.1.2.3:80", "[::1]", "[::1]:8077",
                         "[fe80::1]:1", "localhost", "localhost:8077", "LOCALHOST",
                         "localhost.", "localhost.:8077", "app.localhost:3000", "127.0.0.1.",
                         "localhost:", "[::1]:", "127.0.0.1:65535",
                         NULL};
    for (const char **h = yes; *h; h++)
        CHECK(host_allowed(&cfg, tokens, *h) == 1);
    CHECK(host_allowed(&cfg, tokens, NULL) == 1); /* HTTP/1.0 without Host */
}

TEST(other_names_are_refused)
{
    set_hosts((const char *const[]){NULL});
    const char *no[] = {"evil.example", "evil.example:8077", "127.0.0.1.evil.example",
                        "localhost.evil.example", "evillocalhost", "0x7f000001", "2130706433",
                        "127.1", "", ":8077", "[::1", "[evil]:80", "[127.0.0.1]", "gpu-box-1",
                        /* after "]" only ":port", and a port is digits */
                        "[::1]evil.example", "[::1]:80evil.example", "[::1].evil", "[::1]]",
                        "[::1]:8077:1", "localhost:80evil.example", "localhost:http",
                        "127.0.0.1:8077:1", "127.0.0.1: 80", "localhost:99999", "::1", NULL};
    for (const char **h = no; *h; h++) {
        if (host_allowed(&cfg, tokens, *h) != 0)
            fprintf(stderr, "  answered: \"%s\"\n", *h);
        CHECK(host_allowed(&cfg, tokens, *h) == 0);
    }
}

TEST(listed_names_and_domains)
{
    set_hosts((const char *const[]){"gpu-box-1", "*.models.example", NULL});
    CHECK(host_allowed(&cfg, tokens, "gpu-box-1:8077") == 1);
    CHECK(host_allowed(&cfg, tokens, "GPU-BOX-1") == 1);
    CHECK(host_allowed(&cfg, tokens, "gpu-box-10") == 0);
    CHECK(host_allowed(&cfg, tokens, "a.models.example") == 1);
    CHECK(host_allowed(&cfg, tokens, "a.b.Models.Example:443") == 1);
    CHECK(host_allowed(&cfg, tokens, "models.example") == 0);      /* the domain itself is not under it */
    CHECK(host_allowed(&cfg, tokens, "evilmodels.example") == 0);
    CHECK(host_allowed(&cfg, tokens, "a.models.example.evil") == 0);
    set_hosts((const char *const[]){"*", NULL});
    CHECK(host_allowed(&cfg, tokens, "anything.example") == 1);
    CHECK(host_allowed(&cfg, tokens, "anything.example:8077") == 1);
    /* "*" is any name, not any text: a Host no browser sends stays refused */
    CHECK(host_allowed(&cfg, tokens, "[::1]evil.example") == 0);
    CHECK(host_allowed(&cfg, tokens, "anything.example:80x") == 0);
}

TEST(with_tokens_every_host_is_answered)
{
    set_hosts((const char *const[]){NULL});
    tokens = 1;
    CHECK(host_allowed(&cfg, tokens, "evil.example") == 1);
    CHECK(host_allowed(&cfg, tokens, "") == 1);
    tokens = 0;
    CHECK(host_allowed(&cfg, tokens, "evil.example") == 0);
}

int main(void)
{
    RUN(addresses_and_localhost_are_answered);
    RUN(other_names_are_refused);
    RUN(listed_names_and_domains);
    RUN(with_tokens_every_host_is_answered);
    return TEST_SUMMARY();
}
