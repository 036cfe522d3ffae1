/* Unit tests for mirror/upstream_addr.c: which addresses are public (the
 * special-purpose registries of IPv4 and IPv6, IPv4 inside IPv6), and where
 * a redirect away from the upstream may lead in each mode. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "test.h"
#include "upstream_addr.h"

/* text as a socket address (v4 or v6) in *ss. */
static const struct sockaddr *addr(const char *text, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, text, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons(80);
    } else {
        CHECK(inet_pton(AF_INET6, text, &in6->sin6_addr) == 1);
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(443);
    }
    return (const struct sockaddr *)ss;
}

static int public(const char *text)
{
    struct sockaddr_storage ss;
    return upstream_addr_public(addr(text, &ss));
}

TEST(special_addresses_are_not_public)
{
    static const char *const special[] = {
        "0.0.0.0", "10.1.2.3", "100.64.0.1", "100.127.255.255", "127.0.0.1", "127.255.0.9",
        "169.254.169.254", "172.16.0.1", "172.31.255.255", "192.0.0.8", "192.0.2.1",
        "192.168.1.1", "198.18.0.1", "198.19.255.255", "198.51.100.7", "203.0.113.9",
        "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
        "::", "::1", "::127.0.0.1", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1",
        "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1", "64:ff9b::a9fe:a9fe",
        "2001:db8::1", "2001::1", "2001:1::1", "100::1",
    };
    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++) {
        if (public(special[i]))
            fprintf(stderr, "  %s judged public\n", special[i]);
        CHECK(!public(special[i]));
    }
}

TEST(the_internet_is_public)
{
    static const char *const open[] = {
        "1.1.1.1", "8.8.8.8", "100.63.255.255", "100.128.0.0", "172.15.255.255", "172.32.0.0",
        "169.253.0.1", "192.169.0.1", "198.17.255.255", "198.20.0.0", "223.255.255.255",
        "2606:4700::1111", "2a00:1450:4001::1", "2001:200::1", "::ffff:8.8.8.8",
        "64:ff9b::808:808",
    };
    for (size_t i = 0; i < sizeof(open) / sizeof(open[0]); i++) {
        if (!public(open[i]))
            fprintf(stderr, "  %s judged not public\n", open[i]);
        CHECK(public(open[i]));
    }
    struct sockaddr unix_sa = {.sa_family = AF_UNIX};
    CHECK(!upstream_addr_public(&unix_sa));
}

TEST(where_a_redirect_may_lead)
{
    struct sockaddr_storage pub, priv;
    addr("8.8.8.8", &pub);
    addr("169.254.169.254", &priv);
    const struct sockaddr *p = (const struct sockaddr *)&pub, *q = (const struct sockaddr *)&priv;
    for (int origin = -1; origin <= 1; origin++) {
        CHECK(upstream_redirect_allowed(UPSTREAM_PRIVATE_AUTO, origin, p));
        CHECK(upstream_redirect_allowed(UPSTREAM_PRIVATE_NO, origin, p));
        CHECK(upstream_redirect_allowed(UPSTREAM_PRIVATE_YES, origin, q));
        CHECK(!upstream_redirect_allowed(UPSTREAM_PRIVATE_NO, origin, q));
        /* auto: only an upstream seen on a private address leads to one */
        CHECK(upstream_redirect_allowed(UPSTREAM_PRIVATE_AUTO, origin, q) == (origin == 1));
    }
    CHECK(upstream_private_mode("auto") == UPSTREAM_PRIVATE_AUTO);
    CHECK(upstream_private_mode("yes") == UPSTREAM_PRIVATE_YES);
    CHECK(upstream_private_mode("no") == UPSTREAM_PRIVATE_NO);
    CHECK(upstream_private_mode("maybe") == -1);
    char text[64];
    upstream_addr_text(q, text, sizeof(text));
    CHECK(strcmp(text, "169.254.169.254:80") == 0);
    struct sockaddr_storage v6;
    upstream_addr_text(addr("fe80::1", &v6), text, sizeof(text));
    CHECK(strcmp(text, "[fe80::1]:443") == 0);
}

int main(void)
{
    RUN(special_addresses_are_not_public);
    RUN(the_internet_is_public);
    RUN(where_a_redirect_may_lead);
    return TEST_SUMMARY();
}
