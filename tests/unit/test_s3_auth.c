/* Unit tests for server/handlers/s3_auth.c, which it includes to set the clock:
 * AWS's own Signature Version 4 examples (the S3 GET Object request and
 * its presigned URL, signed with AWS's example key, from AWS's
 * documentation) checked at the time they were made, and every refusal:
 * an unsigned request, a malformed signature, an unknown key, a wrong
 * secret, a skewed clock, an expired URL, anonymous S3 behind tokens; and
 * loading the secret. */
#include <time.h>

static long long test_now;
static time_t test_time(time_t *t)
{
    if (t)
        *t = (time_t)test_now;
    return (time_t)test_now;
}
#define time(t) test_time(t)

#include "../../server/handlers/s3_auth.c"

#include "loopback.h"

#define AK "AKIAIOSFODNN7EXAMPLE"
#define SK "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define T0 1369353600LL /* 20130524T000000Z */

static const char auth_get[] =
    "Authorization: AWS4-HMAC-SHA256 Credential=" AK "/20130524/us-east-1/s3/aws4_request,"
    "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
    "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";

static enum s3_auth_result check(struct server *srv, const char *target,
                                 const char *const *headers, char *msg)
{
    struct lb_request q;
    struct request_view v = lb_view(&q, srv, "GET", target, headers);
    const char *qm = strchr(target, '?');
    size_t path_len = qm ? (size_t)(qm - target) : strlen(target);
    struct s3_query sq;
    struct st_error err;
    CHECK(s3_query_parse(qm ? qm + 1 : "", qm ? strlen(qm + 1) : 0, &sq, &err) == 0);
    enum s3_auth_result r = s3_auth_check(&v, target, path_len, &sq, msg, 256);
    s3_query_free(&sq);
    free(q.query);
    return r;
}

TEST(aws_examples)
{
    struct config cfg;
    config_defaults(&cfg);
    struct st_error se;
    char msg[256];
    CHECK(config_set(&cfg, "s3_access_key", AK, &se) == 0);
    struct server srv = {.cfg = &cfg, .s3_secret = xstrdup(SK), .s3_secret_len = strlen(SK)};
    const char *get[] = {"Host: examplebucket.s3.amazonaws.com", "Range: bytes=0-9",
                         "x-amz-content-sha256: "
                         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                         "x-amz-date: 20130524T000000Z", auth_get, NULL};
    test_now = T0 + 60;
    CHECK(check(&srv, "/test.txt", get, msg) == S3A_OK);
    test_now = T0 + 16 * 60; /* more than 15 minutes off */
    CHECK(check(&srv, "/test.txt", get, msg) == S3A_SKEWED);
    CHECK_STR(msg, "the difference between the request time and the server's time is too large");
    test_now = T0;
    CHECK(check(&srv, "/test2.txt", get, msg) == S3A_BAD_SIGNATURE); /* another path */
    CHECK_CONTAINS(msg, "the request signature we calculated does not match");
    const char *presigned =
        "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" AK "%2F20130524%2F"
        "us-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&"
        "X-Amz-SignedHeaders=host&X-Amz-Signature="
        "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
    const char *host[] = {"Host: examplebucket.s3.amazonaws.com", NULL};
    test_now = T0 + 86000;
    CHECK(check(&srv, presigned, host, msg) == S3A_OK);
    test_now = T0 + 86401;
    CHECK(check(&srv, presigned, host, msg) == S3A_DENIED);
    CHECK_STR(msg, "request has expired");
    free(srv.s3_secret);
    srv.s3_secret = xstrdup("another secret");
    srv.s3_secret_len = strlen(srv.s3_secret);
    test_now = T0;
    CHECK(check(&srv, "/test.txt", get, msg) == S3A_BAD_SIGNATURE);
    free(srv.s3_secret);
    config_free(&cfg);
}

TEST(refusals)
{
    struct config cfg;
    config_defaults(&cfg);
    struct st_error se;
    char msg[256];
    struct server srv = {.cfg = &cfg};
    CHECK(check(&srv, "/x", NULL, msg) == S3A_OK); /* anonymous, no tokens */
    const char *bad[] = {"Authorization: AWS4-HMAC-SHA256 nonsense", NULL};
    CHECK(check(&srv, "/x", bad, msg) == S3A_OK); /* not checked when anonymous */
    srv.read_token = "rrrrrrrrrrrrrrrr";
    CHECK(check(&srv, "/x", NULL, msg) == S3A_DENIED);
    CHECK_STR(msg, "the S3 API needs s3_access_key while bearer tokens are on");
    srv.read_token = NULL;
    CHECK(config_set(&cfg, "s3_access_key", AK, &se) == 0);
    srv.s3_secret = xstrdup(SK);
    srv.s3_secret_len = strlen(SK);
    CHECK(check(&srv, "/x", NULL, msg) == S3A_DENIED);
    CHECK_STR(msg, "requests must be signed (AWS Signature Version 4)");
    CHECK(check(&srv, "/x", bad, msg) == S3A_MALFORMED);
    /* Signature version 2, header or presigned: refused with what to use. */
    const char *v2[] = {"Authorization: AWS " AK ":frJIUN8DYpKDtOLCwo//yllqDzg=", NULL};
    CHECK(check(&srv, "/x", v2, msg) == S3A_UNSUPPORTED);
    CHECK_CONTAINS(msg, "signature version 2 is not supported");
    CHECK_CONTAINS(msg, "signature_version=\"s3v4\"");
    CHECK(check(&srv, "/x?AWSAccessKeyId=" AK "&Signature=abc%3D&Expires=1700000000", NULL,
                msg) == S3A_UNSUPPORTED);
    CHECK_CONTAINS(msg, "aws configure set default.s3.signature_version s3v4");
    const char *other_key[] = {
        "x-amz-date: 20130524T000000Z",
        "Authorization: AWS4-HMAC-SHA256 Credential=NOTMYKEY/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=host;x-amz-date,Signature="
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41", NULL};
    CHECK(check(&srv, "/x", other_key, msg) == S3A_UNKNOWN_KEY);
    CHECK_STR(msg, "the AWS access key id does not exist in our records");
    free(srv.s3_secret);
    config_free(&cfg);
}

TEST(loading_the_secret)
{
    char dir[] = "/tmp/test_s3_auth.XXXXXX", err[512];
    struct st_error se;
    CHECK(mkdtemp(dir) != NULL);
    struct config cfg;
    config_defaults(&cfg);
    struct server srv = {.cfg = &cfg};
    CHECK(s3_auth_load(&srv, err, sizeof(err)) == 0 && !srv.s3_secret); /* neither set */
    CHECK(config_set(&cfg, "s3_access_key", AK, &se) == 0);
    CHECK(s3_auth_load(&srv, err, sizeof(err)) == -1);
    CHECK_CONTAINS(err, "s3_access_key and s3_secret_key_file go together");
    char *p = xasprintf("%s/secret", dir);
    test_write_file(p, SK "\nsecond line\n", strlen(SK) + 13);
    CHECK(config_set(&cfg, "s3_secret_key_file", p, &se) == 0);
    CHECK(s3_auth_load(&srv, err, sizeof(err)) == 0);
    CHECK_STR(srv.s3_secret, SK); /* the first line */
    CHECK_EQ_U64(srv.s3_secret_len, strlen(SK));
    s3_auth_free(&srv);
    CHECK(srv.s3_secret == NULL);
    unlink(p);
    free(p);
    rmdir(dir);
    config_free(&cfg);
}

int main(void)
{
    RUN(aws_examples);
    RUN(refusals);
    RUN(loading_the_secret);
    return TEST_SUMMARY();
}
