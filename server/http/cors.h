/* cors: Cross-Origin Resource Sharing (the Fetch standard's CORS protocol)
 * for scripts on other origins, such as huggingface.js in a browser.
 *
 * Off unless cors_origins is set. With a list of origins, an answer to a
 * request whose Origin is in the list carries Access-Control-Allow-Origin
 * with that origin and Access-Control-Allow-Credentials: true, and every
 * answer carries Vary: Origin (a cache must not give one origin's answer to
 * another, or to a request without Origin). With "*" (alone), every answer
 * carries Access-Control-Allow-Origin: * and never credentials, and varies
 * by nothing. Allowed answers also expose the headers scripts read
 * (CORS_EXPOSE). A preflight (OPTIONS with an allowed Origin and
 * Access-Control-Request-Method) is answered 204 before authentication
 * (browsers send it without credentials), with the route's methods and
 * those of the headers it asks for that a script may send
 * (cors_allow_headers). Every route has them, the S3 API's included. */
#ifndef TENSORD_CORS_H
#define TENSORD_CORS_H

#include <stddef.h>

#include "config.h"

/* The response headers a script may read besides the safelisted ones:
 * every header tensord sends that a client reads (huggingface.js the Hub's,
 * the AWS SDKs x-amz-bucket-region, pagination its Link). */
#define CORS_EXPOSE                                                                          \
    "ETag, Content-Range, Content-Length, Content-Disposition, Accept-Ranges, X-Repo-Commit, " \
    "X-Linked-Etag, X-Linked-Size, X-Error-Code, X-Error-Message, Location, X-Tensor-Dtype, "  \
    "X-Tensor-Shape, Retry-After, Last-Modified, Link, Allow, WWW-Authenticate, "             \
    "x-amz-bucket-region, Docker-Content-Digest, Age, X-Tensord-Stale"
/* How long a browser may keep a preflight's answer (Chromium keeps 2 h at most). */
#define CORS_MAX_AGE "600"

/* Checks cors_origins as a whole: "*" must be its only entry. Returns 0,
 * or -1 with the reason in err. */
int cors_check_config(const struct config *cfg, char *err, size_t errlen);

/* Whether a request is a preflight to answer: CORS on, method OPTIONS, an
 * Origin that may read answers and an Access-Control-Request-Method
 * (request_method; origin and request_method are NULL when absent). */
int cors_is_preflight(const struct config *cfg, const char *method, const char *origin,
                      const char *request_method);

/* The headers a script may send, of those a preflight asks for
 * (requested: its Access-Control-Request-Headers, a comma-separated list of
 * names; may be NULL): the conditional ones, Range, Authorization,
 * Content-Type, and the AWS SDKs' own (x-amz-*, amz-sdk-*), written to out
 * (at most cap bytes with the NUL) as "name, name", in the order asked and
 * in lower case, as the Fetch standard sends them. A name the list lacks is
 * left out, so the browser refuses the request that would send it; a
 * list longer than cap is cut at a name. Returns out. */
char *cors_allow_headers(const char *requested, char *out, size_t cap);

/* The most headers cors_headers writes. */
#define CORS_MAX_HEADERS 6

/* Writes into out (name/value pairs) the CORS headers an answer to a
 * request from origin (NULL when absent) gets (none when CORS is off);
 * returns how many pairs. methods: the Allow-Methods of a preflight's
 * answer, NULL for any other answer; allow_headers: its Allow-Headers
 * (cors_allow_headers; left out when empty). */
size_t cors_headers(const struct config *cfg, const char *origin, const char *methods,
                    const char *allow_headers, const char *out[2 * CORS_MAX_HEADERS]);

/* Whether a request that changes something (a preload, an evict), from
 * origin with Host host (each NULL when absent), comes from a page of
 * another origin and must be refused: its Origin is neither in
 * cors_origins nor the daemon's own (scheme://Host). A browser sends a
 * cross-site POST with a text/plain body without a preflight and only
 * hides the answer from the page, so without tokens any site a user opens
 * could act; clients that are no browser send no Origin. */
int cors_refuses_write(const struct config *cfg, const char *origin, const char *host);

#endif
