/* s3_auth: see s3_auth.h. */
#include "s3_auth.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fileio.h"
#include "st_error.h"

int s3_auth_load(struct server *srv, char *errbuf, size_t errlen)
{
    const struct config *cfg = srv->cfg;
    int key = cfg->s3_access_key && cfg->s3_access_key[0];
    int file = cfg->s3_secret_key_file && cfg->s3_secret_key_file[0];
    if (key != file) {
        snprintf(errbuf, errlen, "s3_access_key and s3_secret_key_file go together: set both "
                                 "or neither");
        return -1;
    }
    struct st_error e;
    if (key && fileio_read_secret("s3_secret_key_file", cfg->s3_secret_key_file,
                                  &srv->s3_secret, &srv->s3_secret_len, &e) < 0) {
        snprintf(errbuf, errlen, "%s", e.message);
        return -1;
    }
    return 0;
}

void s3_auth_free(struct server *srv)
{
    if (srv->s3_secret)
        OPENSSL_cleanse(srv->s3_secret, srv->s3_secret_len);
    free(srv->s3_secret);
    srv->s3_secret = NULL;
}

static const char *header_of(void *ctx, const char *name)
{
    return view_header(ctx, name);
}

enum s3_auth_result s3_auth_check(const struct request_view *v, const char *path,
                                  size_t path_len, const struct s3_query *q, char *msg,
                                  size_t msglen)
{
    const struct server *srv = v->srv;
    struct s3_sigv4 sig;
    struct st_error err;
    int kind = s3_sigv4_parse(view_header(v, "authorization"), view_header(v, "x-amz-date"), q,
                              &sig, &err);
    if (!srv->s3_secret) {
        if (srv->read_token || srv->admin_token) {
            snprintf(msg, msglen, "the S3 API needs s3_access_key while bearer tokens are on");
            return S3A_DENIED;
        }
        return S3A_OK; /* anonymous: a signature, even a malformed one, is not checked */
    }
    if (kind < 0) {
        snprintf(msg, msglen, "%s", err.message);
        return S3A_MALFORMED;
    }
    if (kind == S3_AUTH_V2) {
        snprintf(msg, msglen, "AWS signature version 2 is not supported: sign with version 4 "
                              "(AWS4-HMAC-SHA256). boto3: Config(signature_version=\"s3v4\"); "
                              "AWS CLI: aws configure set default.s3.signature_version s3v4");
        return S3A_UNSUPPORTED;
    }
    if (kind == S3_AUTH_NONE) {
        snprintf(msg, msglen, "requests must be signed (AWS Signature Version 4)");
        return S3A_DENIED;
    }
    if (!s3_sigv4_equal(sig.access_key, srv->cfg->s3_access_key)) {
        snprintf(msg, msglen, "the AWS access key id does not exist in our records");
        return S3A_UNKNOWN_KEY;
    }
    int64_t now = (int64_t)time(NULL), at = s3_amz_time(sig.amz_date);
    if (kind == S3_AUTH_HEADER && (at > now + S3_MAX_SKEW_S || at < now - S3_MAX_SKEW_S)) {
        snprintf(msg, msglen, "the difference between the request time and the server's time "
                              "is too large");
        return S3A_SKEWED;
    }
    if (kind == S3_AUTH_QUERY && (now > at + (int64_t)sig.expires || at > now + S3_MAX_SKEW_S)) {
        snprintf(msg, msglen, "request has expired");
        return S3A_DENIED;
    }
    char *canon = s3_sigv4_canonical(v->method, path, path_len, q, &sig, header_of, (void *)v,
                                     &err);
    if (!canon) {
        snprintf(msg, msglen, "%s", err.message);
        return S3A_MALFORMED;
    }
    char want[65];
    s3_sigv4_sign(srv->s3_secret, srv->s3_secret_len, &sig, canon, want);
    free(canon);
    int ok = s3_sigv4_equal(want, sig.signature);
    OPENSSL_cleanse(want, sizeof(want));
    if (!ok) {
        snprintf(msg, msglen, "the request signature we calculated does not match the signature "
                              "you provided; check your key and signing method");
        return S3A_BAD_SIGNATURE;
    }
    return S3A_OK;
}
