/* s3_req: what an S3 request says, read from its raw query string and
 * headers (the read-only S3 API, API.md "S3 API"): the query's parameters,
 * ListObjectsV2's, and AWS Signature Version 4 (an Authorization header
 * or a presigned URL's query) with the signature it should carry.
 *
 * Everything here is a pure function of bytes a client sent, bounded and
 * fuzzed (tests/fuzz/fuzz_s3_req.c): a malformed request gets an error
 * with a message, never a crash. No HTTP library is involved: the server
 * passes the raw request target and a header lookup. */
#ifndef TENSORD_S3_REQ_H
#define TENSORD_S3_REQ_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"

#define S3_MAX_PARAMS 64
#define S3_MAX_KEYS 1000        /* ListObjectsV2's max-keys ceiling, as S3's */
#define S3_MAX_EXPIRES 604800   /* a presigned URL lives at most 7 days, as S3's */
#define S3_MAX_SKEW_S 900       /* an Authorization header's date within 15 minutes */

/* One query parameter, percent-decoded ('+' kept: RFC 3986, as S3 reads
 * a query; clients encode a space as %20). value is "" for "?key". */
struct s3_param {
    char *key, *value;
    size_t key_len, value_len;
};

struct s3_query {
    size_t n;
    struct s3_param p[S3_MAX_PARAMS];
};

/* Parses the raw query q[0..len) (without '?'). Returns 0, or -EINVAL
 * with err on a malformed escape, a NUL, or more than S3_MAX_PARAMS
 * parameters. Free with s3_query_free in either case. */
int s3_query_parse(const char *q, size_t len, struct s3_query *out, struct st_error *err);
void s3_query_free(struct s3_query *q);
/* The value of the first parameter named key, or NULL; *len gets its length. */
const char *s3_query_get(const struct s3_query *q, const char *key, size_t *len);

/* ListObjectsV2's parameters, pointing into the query. */
struct s3_list {
    int v2;                         /* list-type=2 (else ListObjects, version 1) */
    const char *prefix, *delimiter, *start_after, *marker;
    size_t prefix_len, delimiter_len, start_after_len, marker_len;
    char *after;                    /* owned: list keys after this one (from the continuation
                                     * token, else start-after, else marker), or NULL */
    size_t after_len;
    const char *token;              /* the continuation token as sent, or NULL */
    size_t token_len;
    unsigned max_keys;              /* 0..S3_MAX_KEYS (default S3_MAX_KEYS) */
    int url_encoding;               /* encoding-type=url */
};

/* Reads the listing parameters of q. Returns 0, or -EINVAL with err (a
 * bad max-keys, list-type, encoding-type or continuation token). Free
 * with s3_list_free. */
int s3_list_parse(const struct s3_query *q, struct s3_list *l, struct st_error *err);
void s3_list_free(struct s3_list *l);

/* The continuation token that resumes a listing after key[0..n) (a key,
 * or a common prefix: then every key below it is skipped too), as
 * NUL-terminated text in out (2n + 2 bytes): opaque to clients. */
void s3_list_token(const char *key, size_t n, int skip_below, char *out);

/* A SigV4 signature as a request carries it. */
struct s3_sigv4 {
    int presigned;                  /* from the query (X-Amz-*), not a header */
    char access_key[129];
    char scope_date[9];             /* YYYYMMDD */
    char region[65];
    char service[17];
    char amz_date[17];              /* YYYYMMDDTHHMMSSZ */
    char signed_headers[1025];      /* lowercase names, ';'-separated, sorted */
    char signature[65];             /* lowercase hex */
    uint64_t expires;               /* presigned: X-Amz-Expires seconds */
};

enum s3_auth_kind {
    S3_AUTH_NONE,       /* anonymous */
    S3_AUTH_HEADER,     /* SigV4 in the Authorization header */
    S3_AUTH_QUERY,      /* SigV4 presigned */
    S3_AUTH_V2,         /* signature version 2 ("AWS KEY:SIG", or a presigned URL's
                         * AWSAccessKeyId and Signature), which is not checked */
};

/* Reads the signature of a request from its Authorization header (auth,
 * may be NULL), its X-Amz-Date header (amz_date, may be NULL) or its
 * query. Returns the kind found (S3_AUTH_NONE: anonymous; S3_AUTH_V2, out
 * left empty: signed the old way, for a message that says so), or -EINVAL
 * with err when it is malformed (another algorithm, a missing part, a
 * scope that is not DATE/REGION/s3/aws4_request, both forms at once). */
int s3_sigv4_parse(const char *auth, const char *amz_date, const struct s3_query *q,
                   struct s3_sigv4 *out, struct st_error *err);

/* Seconds since the epoch of "YYYYMMDDTHHMMSSZ", or -1. */
int64_t s3_amz_time(const char *s);

/* Looks a request header up by its lowercase name; NULL when absent. */
typedef const char *(*s3_header_fn)(void *ctx, const char *name);

/* The canonical request of SigV4 (AWS's "Create a canonical request"):
 * method, the path with every segment decoded and re-encoded as AWS does
 * (path is the raw path, without the query), the query without
 * X-Amz-Signature, sorted and re-encoded, the signed headers' values
 * (trimmed, inner runs of spaces made one), the signed header list, and
 * the payload hash (x-amz-content-sha256, or UNSIGNED-PAYLOAD for a
 * presigned URL). Returns a heap string, or NULL with err when a signed
 * header is missing or the path has a bad escape. */
char *s3_sigv4_canonical(const char *method, const char *path, size_t path_len,
                         const struct s3_query *q, const struct s3_sigv4 *sig,
                         s3_header_fn header, void *ctx, struct st_error *err);

/* The signature (64 lowercase hex digits and a NUL) that secret gives the
 * canonical request under sig's date and scope. */
void s3_sigv4_sign(const char *secret, size_t secret_len, const struct s3_sigv4 *sig,
                   const char *canonical, char out[65]);

/* Constant-time comparison of two signatures. */
int s3_sigv4_equal(const char *a, const char *b);

#endif
