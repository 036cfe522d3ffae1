/* libFuzzer target for the request headers server/http/respond.c parses itself
 * (libmicrohttpd only splits them): HTTP dates (If-Modified-Since,
 * If-Unmodified-Since, If-Range) through http_date_parse, and entity-tag
 * lists (If-Match, If-None-Match, If-Range) through http_etag_match.
 *
 * Input: byte 0 picks weak or strong comparison; the rest is split at the
 * first '\n' into the header value and "our" ETag (the whole rest is also
 * tried as a date, and the value as a Host through host_allowed). Oracles
 * beyond "no crash, no UB":
 *  - a parsed date in years 1970..9999 formats back to an IMF-fixdate that
 *    parses to the same second;
 *  - a strong match implies a weak match; a weak ETag never matches strongly;
 *  - a list holding exactly our (quoted) ETag matches it, and "*" matches any
 *    non-empty ETag;
 *  - a Host answered without allowed_hosts is answered with any list, in any
 *    case, and with a port added; "*" answers every Host of a host's syntax
 *    (a name or an address, then at most ":port" of digits) and nothing
 *    else; a token answers every Host;
 *  - Accept-Encoding (encoding_choose): a value that names neither gzip nor
 *    "*" takes no gzip, and one that ends refusing gzip ("gzip;q=0") never
 *    takes it;
 *  - a preflight's Access-Control-Request-Headers (cors_allow_headers):
 *    what is allowed fits the buffer, is lower case, and allows again as
 *    itself. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ctype.h>

#include "conditional.h"
#include "cors.h"
#include "encoding.h"
#include "host_allow.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_date(const char *s)
{
    int64_t t;
    if (http_date_parse(s, &t) != 0)
        return;
    if (t < 0 || t >= 253402300800LL) /* outside years 1970..9999 */
        return;
    char buf[64];
    int64_t again;
    http_date_format(t, buf, sizeof(buf));
    if (http_date_parse(buf, &again) != 0 || again != t) {
        fprintf(stderr, "date \"%s\" -> %lld -> \"%s\" does not round-trip\n", s, (long long)t,
                buf);
        abort();
    }
}

static int valid_etag(const char *e)
{
    /* What our own ETags look like: optional W/, then "...", no inner quote. */
    if (e[0] == 'W' && e[1] == '/')
        e += 2;
    size_t n = strlen(e);
    return n >= 2 && e[0] == '"' && e[n - 1] == '"' && !memchr(e + 1, '"', n - 2);
}

static void check_etags(const char *list, const char *etag)
{
    int strong = http_etag_match(list, etag, 0);
    int weak = http_etag_match(list, etag, 1);
    if (strong && !weak) {
        fprintf(stderr, "strong match without weak match: [%s] vs [%s]\n", list, etag);
        abort();
    }
    if (strong && etag[0] == 'W' && etag[1] == '/' && strcmp(list, "*") != 0 &&
        strchr(list, '*') == NULL) {
        fprintf(stderr, "weak ETag matched strongly: [%s] vs [%s]\n", list, etag);
        abort();
    }
    /* "*" matches any current representation, with an ETag or without one
     * (RFC 9110 §13.1.1); nothing else matches an answer without an ETag. */
    if (!etag[0] && (strong || weak) && !strchr(list, '*')) {
        fprintf(stderr, "empty ETag matched [%s]\n", list);
        abort();
    }
    if (valid_etag(etag)) {
        int etag_weak = etag[0] == 'W';
        if (!http_etag_match(etag, etag, 1) || (!etag_weak && !http_etag_match(etag, etag, 0))) {
            fprintf(stderr, "ETag [%s] does not match itself\n", etag);
            abort();
        }
        if (!http_etag_match("*", etag, 0) || !http_etag_match("*", etag, 1)) {
            fprintf(stderr, "\"*\" does not match [%s]\n", etag);
            abort();
        }
    }
}

/* The syntax every Host must have, allowed_hosts = * or not (RFC 9110
 * section 7.2, host [ ":" port ]): a name or an address, in brackets when
 * it holds a ':', then nothing, or ':' and digits up to 65535. */
static int well_formed(const char *h)
{
    const char *port = h[0] == '[' ? strchr(h, ']') : strchr(h, ':');
    if (!port)
        return h[0] != '[';
    if (h[0] == '[')
        port++;
    if (!*port)
        return 1;
    if (*port != ':')
        return 0;
    unsigned long v = 0;
    for (const char *p = port + 1; *p; p++) {
        if (*p < '0' || *p > '9' || (v = v * 10 + (unsigned long)(*p - '0')) > 65535)
            return 0;
    }
    return 1;
}

static void check_host(const char *host)
{
    static char *list[] = {"gpu-box-1", "*.example"}, *any[] = {"*"};
    struct config cfg = {0};
    int plain = host_allowed(&cfg, 0, host);
    size_t n = strlen(host);
    char *other = malloc(n + 8);
    if (!other)
        return;
    for (size_t i = 0; i <= n; i++)
        other[i] = (char)toupper((unsigned char)host[i]);
    int upper = host_allowed(&cfg, 0, other);
    snprintf(other, n + 8, "%s:8077", host);
    int port = strchr(host, ':') || host[0] == '[' || host_allowed(&cfg, 0, other) == plain;
    free(other);
    memcpy(cfg.allowed_hosts, list, sizeof(list));
    cfg.n_allowed_hosts = 2;
    int listed = host_allowed(&cfg, 0, host);
    memcpy(cfg.allowed_hosts, any, sizeof(any));
    cfg.n_allowed_hosts = 1;
    int star = host_allowed(&cfg, 0, host);
    cfg.n_allowed_hosts = 0;
    int token = host_allowed(&cfg, 1, host);
    if (upper != plain || !port || (plain && !listed) || star != well_formed(host) || !token ||
        (plain && !star)) {
        fprintf(stderr, "host \"%s\": plain %d upper %d port %d listed %d * %d token %d\n", host,
                plain, upper, port, listed, star, token);
        abort();
    }
}

static void check_encoding(const char *value)
{
    enum encoding e = encoding_choose(value);
    int named = strchr(value, '*') != NULL;
    for (const char *p = value; *p && !named; p++)
        named = strncasecmp(p, "gzip", 4) == 0;
    size_t n = strlen(value);
    char *refused = malloc(n + 16);
    if (!refused)
        return;
    snprintf(refused, n + 16, "%s,gzip;q=0", value);
    if ((!named && e != ENCODING_IDENTITY) || encoding_choose(refused) != ENCODING_IDENTITY) {
        fprintf(stderr, "Accept-Encoding \"%s\" gives %d\n", value, (int)e);
        abort();
    }
    free(refused);
}

static void check_allow_headers(const char *value)
{
    char out[96], again[96];
    cors_allow_headers(value, out, sizeof(out));
    size_t n = strlen(out);
    for (size_t i = 0; i < n; i++) {
        if (out[i] >= 'A' && out[i] <= 'Z') {
            fprintf(stderr, "allowed headers \"%s\" are not lower case\n", out);
            abort();
        }
    }
    if (n >= sizeof(out) || strcmp(cors_allow_headers(out, again, sizeof(again)), out) != 0) {
        fprintf(stderr, "allowed headers \"%s\" do not allow themselves\n", out);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096)
        return 0;
    int weak_first = data[0] & 1;
    char *all = malloc(size);
    if (!all)
        return 0;
    memcpy(all, data + 1, size - 1);
    all[size - 1] = '\0';

    check_date(all);

    char *nl = strchr(all, '\n');
    const char *list = all, *etag = "\"v1\"";
    if (nl) {
        *nl = '\0';
        etag = nl + 1;
    }
    check_etags(list, etag);
    check_host(list);
    check_encoding(list);
    check_allow_headers(list);
    /* Same inputs in the other comparison mode first, to reach both orders. */
    (void)http_etag_match(list, etag, !weak_first);
    free(all);
    return 0;
}
