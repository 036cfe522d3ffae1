/* host_allow: the Host names a daemon without tokens answers.
 *
 * Without auth_token_file, anything that reaches the port reads every
 * model: on loopback that is meant to be the machine's own users. A web
 * page can reach it too, through DNS rebinding: its name is made to resolve
 * to 127.0.0.1 after the page loaded, so the browser sends the page's
 * requests to the daemon as same-origin ones and lets the page read the
 * answers (CORS does not apply). Such a request carries the page's own
 * name in Host. So a daemon without tokens answers only a Host that is an
 * IP address (an address is its own origin: nothing rebinds it), localhost
 * or a name under .localhost (browsers resolve those to loopback
 * themselves, RFC 6761), or a name listed in allowed_hosts. With tokens
 * every Host is answered: a rebinding page has no token to send. The
 * value must be a name or address and at most ":port" (digits): what
 * follows an IPv6 literal's "]" or a port's digits is never skipped. */
#ifndef TENSORD_HOST_ALLOW_H
#define TENSORD_HOST_ALLOW_H

#include "config.h"

/* 1 when a request with this Host header value (NULL: none, as HTTP/1.0
 * allows; browsers always send one) is answered by a daemon with bearer
 * tokens (tokens) or without, else 0. */
int host_allowed(const struct config *cfg, int tokens, const char *host);

#endif
