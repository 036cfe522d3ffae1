/* upstream_addr: see upstream_addr.h. */
#include "upstream_addr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

int upstream_private_mode(const char *s)
{
    return strcmp(s, "auto") == 0 ? UPSTREAM_PRIVATE_AUTO
           : strcmp(s, "yes") == 0 ? UPSTREAM_PRIVATE_YES
           : strcmp(s, "no") == 0  ? UPSTREAM_PRIVATE_NO
                                   : -1;
}

/* Whether a (host order) is in the IPv4 network net/bits. */
static int in4(uint32_t a, uint32_t net, unsigned bits)
{
    return (a >> (32 - bits)) == (net >> (32 - bits));
}

static int public4(uint32_t a)
{
    static const struct { uint32_t net; unsigned bits; } special[] = {
        {0x00000000, 8},  /* "this network" */
        {0x0A000000, 8},  /* private */
        {0x64400000, 10}, /* shared (carrier-grade NAT) */
        {0x7F000000, 8},  /* loopback */
        {0xA9FE0000, 16}, /* link-local (a cloud's metadata service) */
        {0xAC100000, 12}, /* private */
        {0xC0000000, 24}, /* IETF protocol assignments */
        {0xC0000200, 24}, /* documentation */
        {0xC0A80000, 16}, /* private */
        {0xC6120000, 15}, /* benchmarking */
        {0xC6336400, 24}, /* documentation */
        {0xCB007100, 24}, /* documentation */
        {0xE0000000, 4},  /* multicast */
        {0xF0000000, 4},  /* reserved, and the broadcast address */
    };
    for (size_t i = 0; i < ARRAY_LEN(special); i++)
        if (in4(a, special[i].net, special[i].bits))
            return 0;
    return 1;
}

static uint32_t be32_at(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int public6(const uint8_t b[16])
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};
    if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0)
        return public4(be32_at(b + 12));
    /* Global unicast is 2000::/3; of it, documentation (2001:db8::/32) and
     * the ORCHID and benchmarking blocks of 2001::/23 are not public. */
    if ((b[0] & 0xe0) != 0x20)
        return 0; /* ::, ::1, IPv4-compatible, fc00::/7, fe80::/10, ff00::/8, ... */
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8)
        return 0;
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] < 0x02)
        return 0; /* 2001::/23: Teredo, benchmarking, ORCHID */
    return 1;
}

int upstream_addr_public(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in in;
        memcpy(&in, sa, sizeof(in));
        return public4(ntohl(in.sin_addr.s_addr));
    }
    if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 in6;
        memcpy(&in6, sa, sizeof(in6));
        return public6(in6.sin6_addr.s6_addr);
    }
    return 0;
}

void upstream_addr_text(const struct sockaddr *sa, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in in;
        memcpy(&in, sa, sizeof(in));
        inet_ntop(AF_INET, &in.sin_addr, host, sizeof(host));
        snprintf(out, cap, "%s:%u", host, (unsigned)ntohs(in.sin_port));
    } else if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 in6;
        memcpy(&in6, sa, sizeof(in6));
        inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof(host));
        snprintf(out, cap, "[%s]:%u", host, (unsigned)ntohs(in6.sin6_port));
    } else {
        snprintf(out, cap, "an address of family %d", sa->sa_family);
    }
}

int upstream_redirect_allowed(enum upstream_private mode, int origin_private,
                              const struct sockaddr *sa)
{
    if (upstream_addr_public(sa) || mode == UPSTREAM_PRIVATE_YES)
        return 1;
    return mode == UPSTREAM_PRIVATE_AUTO && origin_private == 1;
}
