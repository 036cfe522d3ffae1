/* upstream: the pull-through mirror's HTTP client of its upstream (another
 * tensord, or any Hugging Face compatible endpoint), on libcurl.
 *
 * Three requests, each on a `struct upstream_conn` that keeps its
 * connection alive between them (one per thread: a libcurl easy handle is
 * never shared):
 *
 *   - the metadata of a file, `HEAD /{repo}/resolve/{rev}/{path}`, following
 *     only redirects that stay on the upstream (a branch's 302 to its
 *     commit URL, the Hub's 307 to its resolve cache) and stopping at one
 *     that leaves it (the Hub's 302 to its CDN), whose headers carry the
 *     metadata, as huggingface_hub does;
 *   - a document (`/api/...`), bounded, passed through as it is;
 *   - a byte range of a file at a commit, following every redirect (the
 *     Hub's CDN), streamed into a sink as it arrives, and refused unless it
 *     is the 206 of exactly that range of a file of the expected size.
 *
 * The caller's Authorization value is sent as it came; libcurl (7.58 and
 * later) keeps it from a host a redirect leads to. Nothing here logs: the
 * mirror's messages name URLs, which never hold a token (the upstream
 * option refuses a user part and a query). No HTTP server code here: core/
 * holds the client, server/ answers from the mirror. */
#ifndef TENSORD_UPSTREAM_H
#define TENSORD_UPSTREAM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "st_error.h"
#include "upstream_addr.h"
#include "upstream_answer.h"

struct upstream;
struct upstream_conn;

/* Receives body bytes of a range as they arrive; returns 0, or -errno to
 * stop the transfer (upstream_get_range then returns that errno). */
typedef int (*upstream_sink)(void *arg, const void *data, size_t len);

/* Once per process, before any other thread runs (curl_global_init).
 * Returns 0 or -1. */
int upstream_global_init(void);

/* The upstream at base_url (http[s]://host[:port][/prefix], no trailing
 * '/' needed), whose redirects away from its origin lead to private
 * addresses as redirect_private says (upstream_addr.h). (Pacing is the
 * caller's: the mirror paces all its fetchers on one schedule.) */
struct upstream *upstream_new(const char *base_url, enum upstream_private redirect_private);
void upstream_free(struct upstream *u);
/* The base URL, as configured (without a trailing '/'). */
const char *upstream_base(const struct upstream *u);

/* A connection of one thread; NULL when libcurl cannot make a handle. Its
 * transfers stop (failing with -ECANCELED) soon after *abort becomes
 * non-zero, even one that is waiting for bytes. abort may be NULL. */
struct upstream_conn *upstream_conn_new(struct upstream *u, const atomic_int *abort);
/* That flag (may be NULL), for a wait of the connection's thread that is
 * not a transfer to stop with its transfers (mirror_wait_range). */
const atomic_int *upstream_conn_abort(const struct upstream_conn *c);
void upstream_conn_free(struct upstream_conn *c);

/* HEAD of file path of repo at rev (each percent-encoded here). auth is
 * the Authorization header's value or NULL. Returns 0 with *a (any status:
 * 404 is an answer), or -errno with err when no answer came (connection,
 * timeout, too many redirects); *a is the caller's to free either way. */
int upstream_head_file(struct upstream_conn *c, const char *repo, const char *rev,
                       const char *path, const char *auth, struct upstream_answer *a,
                       struct st_error *err);

/* method (GET, HEAD or POST, with body/body_len and content_type) of
 * target, a path with its query as the client sent it (kept encoded),
 * following redirects that stay on the upstream. The body read, at most
 * max bytes, goes to *out (malloc'd, NUL-terminated; the caller frees it)
 * and *out_len. Returns 0 with *a, -EFBIG when the body is larger than max,
 * or -errno with err; *a is the caller's to free (upstream_answer_free)
 * either way. */
int upstream_request(struct upstream_conn *c, const char *method, const char *target,
                     const char *body, size_t body_len, const char *content_type,
                     const char *auth, size_t max, char **out, size_t *out_len,
                     struct upstream_answer *a, struct st_error *err);

/* GET bytes [off, off + len) of file path of repo at commit into sink,
 * following every redirect. The answer must be a 206 whose Content-Range
 * starts at off, ends within the range and names a file of `size` bytes,
 * whose X-Repo-Commit (when sent) is commit and whose X-Linked-Etag (when
 * sent) or 64-hex-digit ETag (when the upstream itself sent it, not where a
 * redirect led: a CDN's ETag names its own object) is sha256_hex (when not
 * NULL).
 * *got counts the bytes the sink took (also on failure: a retry resumes
 * there). Returns 0 when the answer ended (*got may be less than len when
 * the upstream sent less), -ESTALE with err when it named another version
 * (changed upstream: never retried), -EPROTO for an answer that was not
 * the range, -EACCES for 401/403, -ENOENT for 404, -EPERM for a redirect
 * to an address upstream_addr.h refuses, or -errno. *a holds no Link
 * (nothing to free). */
int upstream_get_range(struct upstream_conn *c, const char *repo, const char *commit,
                       const char *path, const char *auth, uint64_t off, uint64_t len,
                       uint64_t size, const char *sha256_hex, upstream_sink sink, void *arg,
                       uint64_t *got, struct upstream_answer *a, struct st_error *err);

/* Appends s percent-encoded to out[0..cap) at *len (RFC 3986 unreserved
 * bytes kept, and '/' when keep_slash). Returns 0, or -1 when it does not
 * fit (out is then cut, NUL-terminated). */
int upstream_encode(char *out, size_t cap, size_t *len, const char *s, int keep_slash);

#endif
