#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fileio.h"
#include "server.h"
#include "util.h"

#define MAX_TOKEN_FILE (64 * 1024)

static int read_small_file(const char *path, char **out, size_t *len, char *errbuf, size_t errlen)
{
    int rc = fileio_read_small(path, MAX_TOKEN_FILE, out, len);
    if (rc != 0) {
        snprintf(errbuf, errlen, "%s: %s", path,
                 rc == -EFBIG ? "larger than 64 KiB" : strerror(-rc));
        return -1;
    }
    return 0;
}

int auth_read_pem(const char *path, char **out, char *errbuf, size_t errlen)
{
    size_t len;
    if (!path || !path[0]) {
        snprintf(errbuf, errlen, "tls_cert and tls_key must both be set");
        return -1;
    }
    return read_small_file(path, out, &len, errbuf, errlen);
}

int auth_load(struct server *srv, const char *path, char *errbuf, size_t errlen)
{
    if (!path || !path[0])
        return 0;
    char *buf;
    size_t len;
    if (read_small_file(path, &buf, &len, errbuf, errlen) < 0)
        return -1;
    int lineno = 0, rc = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        char role[16], token[512];
        char extra;
        while (*line == ' ' || *line == '\t')
            line++;
        if (*line == '#' || *line == '\0' || *line == '\r')
            continue;
        if (sscanf(line, "%15s %511s %c", role, token, &extra) != 2 ||
            (strcmp(role, "read") != 0 && strcmp(role, "admin") != 0) || strlen(token) < 16) {
            snprintf(errbuf, errlen,
                     "%s:%d: expected \"read TOKEN\" or \"admin TOKEN\" (tokens of 16+ characters)",
                     path, lineno);
            rc = -1;
            break;
        }
        char **slot = strcmp(role, "read") == 0 ? &srv->read_token : &srv->admin_token;
        free(*slot);
        *slot = xstrdup(token);
    }
    if (rc == 0 && !srv->read_token && !srv->admin_token) {
        snprintf(errbuf, errlen, "%s: no tokens", path);
        rc = -1;
    }
    explicit_bzero(buf, len);
    free(buf);
    return rc;
}

int auth_token_equal(const char *presented, size_t len, const char *expected)
{
    size_t elen = strlen(expected);
    unsigned char diff = (unsigned char)(len != elen);
    /* Walk the expected token's length whatever was presented, so timing
     * reveals neither a prefix match nor the presented length. */
    for (size_t i = 0; i < elen; i++) {
        unsigned char p = i < len ? (unsigned char)presented[i] : 0;
        diff |= p ^ (unsigned char)expected[i];
    }
    return diff == 0;
}

int auth_on(const struct server *srv)
{
    return srv->read_token || srv->admin_token;
}

enum auth_role auth_role(const struct server *srv, const char *h)
{
    if (!auth_on(srv))
        return AUTH_ADMIN;
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return AUTH_NONE;
    const char *tok = h + 7;
    while (*tok == ' ')
        tok++;
    size_t len = strlen(tok);
    while (len && (tok[len - 1] == ' ' || tok[len - 1] == '\t'))
        len--;
    if (srv->admin_token && auth_token_equal(tok, len, srv->admin_token))
        return AUTH_ADMIN;
    if (srv->read_token && auth_token_equal(tok, len, srv->read_token))
        return AUTH_READ;
    return AUTH_NONE;
}

int auth_check(const struct server *srv, const char *h, int need_admin)
{
    enum auth_role role = auth_role(srv, h);
    return need_admin ? role == AUTH_ADMIN : role != AUTH_NONE;
}
