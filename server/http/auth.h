/* auth: optional bearer tokens (read and admin) and TLS material loading.
 *
 * The token file holds lines "read TOKEN" and "admin TOKEN" (# comments);
 * the admin token also grants read access. Tokens are compared in constant
 * time and never logged. */
#ifndef TENSORD_AUTH_H
#define TENSORD_AUTH_H

#include <stddef.h>

#include "handlers.h"

struct server;

/* Loads cfg->auth_token_file into srv (no-op when unset). Returns 0 or -1 with errbuf. */
int auth_load(struct server *srv, const char *path, char *errbuf, size_t errlen);
/* 1 when bearer tokens are on (a token file was loaded). */
int auth_on(const struct server *srv);
/* Returns 1 when a request with this Authorization header (NULL when
 * absent) may proceed (auth off, or a matching token). */
int auth_check(const struct server *srv, const char *authorization, int need_admin);
/* What a request with this Authorization header (NULL when absent) may
 * do: AUTH_ADMIN with the admin token or when tokens are off (everything
 * is open), AUTH_READ with the read token, else AUTH_NONE. */
enum auth_role auth_role(const struct server *srv, const char *authorization);
/* Constant-time comparison of a presented token with the expected one. */
int auth_token_equal(const char *presented, size_t len, const char *expected);
/* Reads a PEM file into a new NUL-terminated buffer. Returns 0 or -1 with errbuf. */
int auth_read_pem(const char *path, char **out, char *errbuf, size_t errlen);

#endif
