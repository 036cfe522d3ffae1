/* s3_auth: who may use the S3 API. With s3_access_key set, every request
 * must carry an AWS Signature Version 4 (Authorization header or presigned
 * URL) made with that key's secret, checked here (core/req/s3_req builds what
 * the signature covers); without it, the API is anonymous, and only while
 * the daemon has no bearer tokens (an S3 client cannot send one, and
 * anonymous S3 must not open what the tokens close). */
#ifndef TENSORD_S3_AUTH_H
#define TENSORD_S3_AUTH_H

#include <stddef.h>

#include "h_answer.h"
#include "s3_req.h"
#include "server.h"

/* Reads s3_secret_key_file when s3_access_key is set (its first line;
 * both or neither must be set). Returns 0, or -1 with errbuf. */
int s3_auth_load(struct server *srv, char *errbuf, size_t errlen);
void s3_auth_free(struct server *srv);

enum s3_auth_result {
    S3A_OK,
    S3A_DENIED,          /* AccessDenied: anonymous where a signature is needed, an expired URL */
    S3A_MALFORMED,       /* AuthorizationHeaderMalformed (400) */
    S3A_UNKNOWN_KEY,     /* InvalidAccessKeyId (403) */
    S3A_BAD_SIGNATURE,   /* SignatureDoesNotMatch (403) */
    S3A_SKEWED,          /* RequestTimeTooSkewed (403) */
    S3A_UNSUPPORTED,     /* InvalidRequest (400): signed with signature version 2 */
};

/* Checks request v (its raw path without the query, and its parsed
 * query) against the configuration; msg gets the reason when it is
 * refused. Never logs a secret or a signature. */
enum s3_auth_result s3_auth_check(const struct request_view *v, const char *path,
                                  size_t path_len, const struct s3_query *q, char *msg,
                                  size_t msglen);

#endif
