/* host_allow: see host_allow.h. */
#include "host_allow.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "util.h"

/* 1 when name[0..n) is a listed name: "*", NAME exactly, or under *.DOMAIN
 * (a name longer than the domain, ending in ".DOMAIN"); any case. */
static int listed(const struct config *cfg, const char *name, size_t n)
{
    for (unsigned i = 0; i < cfg->n_allowed_hosts; i++) {
        const char *p = cfg->allowed_hosts[i];
        size_t pl = strlen(p);
        if (strcmp(p, "*") == 0)
            return 1;
        if (p[0] == '*' && n > pl - 1 && strncasecmp(name + n - (pl - 1), p + 1, pl - 1) == 0)
            return 1;
        if (pl == n && strncasecmp(name, p, n) == 0)
            return 1;
    }
    return 0;
}

/* 1 when text[0..n) is an address inet_pton reads for family af. */
static int is_address(int af, const char *text, size_t n)
{
    char buf[INET6_ADDRSTRLEN + 1];
    unsigned char out[sizeof(struct in6_addr)];
    if (n >= sizeof(buf))
        return 0;
    memcpy(buf, text, n);
    buf[n] = '\0';
    return inet_pton(af, buf, out) == 1;
}

/* 1 when port[0..n) is a port: digits only (RFC 3986 allows none at all),
 * at most 65535. */
static int is_port(const char *port, size_t n)
{
    uint64_t v;
    size_t used;
    return n == 0 || (decimal_u64(port, n, &v, &used) == 0 && used == n && v <= 65535);
}

int host_allowed(const struct config *cfg, int tokens, const char *host)
{
    if (tokens || !host)
        return 1;
    size_t n = strlen(host);
    /* host [ ":" port ] (RFC 9110 section 7.2): a name or address first,
     * then nothing but a port. A value that is neither is refused even
     * under "*": no browser sends one. */
    const char *end = host[0] == '[' ? memchr(host, ']', n) : NULL;
    const char *colon = memchr(end ? end : host, ':', n - (size_t)((end ? end : host) - host));
    if (host[0] == '[' && (!end || (end[1] != '\0' && end[1] != ':')))
        return 0; /* "[::1", "[::1]evil.example" */
    if (colon && !is_port(colon + 1, n - (size_t)(colon + 1 - host)))
        return 0; /* "localhost:80evil", "a:b:c" */
    if (colon)
        n = (size_t)(colon - host);
    if (end) /* "[v6]" or "[v6]:port"; a name in brackets only under "*" */
        return is_address(AF_INET6, host + 1, (size_t)(end - host - 1)) || listed(cfg, host, n);
    if (n && host[n - 1] == '.')
        n--; /* "localhost." names the same host */
    if (is_address(AF_INET, host, n))
        return 1;
    static const char local[] = "localhost", sub[] = ".localhost";
    if ((n == sizeof(local) - 1 && strncasecmp(host, local, n) == 0) ||
        (n > sizeof(sub) - 1 && strncasecmp(host + n - (sizeof(sub) - 1), sub, sizeof(sub) - 1) == 0))
        return 1;
    return listed(cfg, host, n);
}
