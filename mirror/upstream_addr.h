/*
 * upstream_addr: where a redirect from the upstream may lead the mirror.
 *
 * The upstream's answers are not trusted: a redirect (the Hub's to its CDN
 * is one) could send the mirror's requests to an address only the mirror
 * can reach, a cloud's metadata service or another internal service
 * (server-side request forgery). So a connection for a redirect that left
 * the upstream's origin goes to a public address only, unless the upstream
 * itself is on a private one (an internal registry redirecting to internal
 * storage) or upstream_redirect_private says otherwise. Pure functions,
 * unit-tested; upstream.c applies them to every socket libcurl opens.
 */
#ifndef TENSORD_UPSTREAM_ADDR_H
#define TENSORD_UPSTREAM_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

/* upstream_redirect_private: auto, yes or no. */
enum upstream_private {
    UPSTREAM_PRIVATE_AUTO, /* only when the upstream's own address is private */
    UPSTREAM_PRIVATE_YES,  /* always */
    UPSTREAM_PRIVATE_NO,   /* never */
};

/* The mode named s ("auto", "yes", "no"); -1 for anything else. */
int upstream_private_mode(const char *s);

/* Whether sa (AF_INET or AF_INET6) is an address of the public internet:
 * not unspecified, loopback, private (RFC 1918, fc00::/7), shared
 * (100.64.0.0/10), link-local, benchmarking, documentation, multicast or
 * reserved. An IPv4-mapped or NAT64 IPv6 address is judged as its IPv4
 * one. Any other family is not public. */
int upstream_addr_public(const struct sockaddr *sa);

/* sa as text ("10.0.0.1:80", "[fe80::1]:443") in out[cap]. */
void upstream_addr_text(const struct sockaddr *sa, char *out, size_t cap);

/* Whether a redirect that left the upstream's origin may connect to sa,
 * given mode and whether the upstream's own address was private (1), public
 * (0) or not seen yet (-1). */
int upstream_redirect_allowed(enum upstream_private mode, int origin_private,
                              const struct sockaddr *sa);

#endif
