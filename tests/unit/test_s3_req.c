/* s3_req and xmlw: the query and listing parameters, SigV4 against the
 * worked examples of AWS's "Signature Calculations for the Authorization
 * Header" and "Query Parameters" pages (their signatures are the oracle),
 * and the XML writer's escaping. */
#include "s3_req.h"
#include "test.h"
#include "util.h"
#include "xmlw.h"

static const char *headers_of(void *ctx, const char *name)
{
    const char *const *h = ctx;
    for (; h[0]; h += 2)
        if (strcmp(h[0], name) == 0)
            return h[1];
    return NULL;
}

static const char secret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

TEST(aws_get_object_example)
{
    const char *h[] = {"host", "examplebucket.s3.amazonaws.com", "range", "bytes=0-9",
                       "x-amz-content-sha256",
                       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                       "x-amz-date", "20130524T000000Z", NULL};
    struct s3_query q;
    struct st_error err;
    CHECK(s3_query_parse("", 0, &q, &err) == 0);
    struct s3_sigv4 sig;
    const char *auth = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
                       "aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
                       "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
    CHECK(s3_sigv4_parse(auth, "20130524T000000Z", &q, &sig, &err) == S3_AUTH_HEADER);
    CHECK_STR(sig.access_key, "AKIAIOSFODNN7EXAMPLE");
    char *c = s3_sigv4_canonical("GET", "/test.txt", 9, &q, &sig, headers_of, h, &err);
    CHECK(c != NULL);
    char out[65];
    s3_sigv4_sign(secret, strlen(secret), &sig, c, out);
    CHECK_STR(out, sig.signature);
    CHECK(s3_sigv4_equal(out, sig.signature));
    free(c);
    s3_query_free(&q);
}

TEST(aws_list_objects_example)
{
    const char *h[] = {"host", "examplebucket.s3.amazonaws.com", "x-amz-content-sha256",
                       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                       "x-amz-date", "20130524T000000Z", NULL};
    struct s3_query q;
    struct st_error err;
    CHECK(s3_query_parse("max-keys=2&prefix=J", 19, &q, &err) == 0);
    struct s3_sigv4 sig;
    const char *auth = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
                       "aws4_request,SignedHeaders=host;x-amz-content-sha256;x-amz-date,"
                       "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7";
    CHECK(s3_sigv4_parse(auth, "20130524T000000Z", &q, &sig, &err) == S3_AUTH_HEADER);
    char *c = s3_sigv4_canonical("GET", "/", 1, &q, &sig, headers_of, h, &err);
    char out[65];
    s3_sigv4_sign(secret, strlen(secret), &sig, c, out);
    CHECK_STR(out, sig.signature);
    free(c);
    s3_query_free(&q);
}

TEST(aws_presigned_example)
{
    const char *h[] = {"host", "examplebucket.s3.amazonaws.com", NULL};
    const char *qs = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F"
                     "20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&"
                     "X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature="
                     "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
    struct s3_query q;
    struct st_error err;
    CHECK(s3_query_parse(qs, strlen(qs), &q, &err) == 0);
    struct s3_sigv4 sig;
    CHECK(s3_sigv4_parse(NULL, NULL, &q, &sig, &err) == S3_AUTH_QUERY);
    CHECK(sig.expires == 86400);
    char *c = s3_sigv4_canonical("GET", "/test.txt", 9, &q, &sig, headers_of, h, &err);
    char out[65];
    s3_sigv4_sign(secret, strlen(secret), &sig, c, out);
    CHECK_STR(out, sig.signature);
    free(c);
    s3_query_free(&q);
}

TEST(malformed_signatures)
{
    struct s3_query q;
    struct st_error err;
    struct s3_sigv4 sig;
    CHECK(s3_query_parse("", 0, &q, &err) == 0);
    const char *bad[] = {
        "AWS4-HMAC-SHA1 Credential=A/20130524/us-east-1/s3/aws4_request,SignedHeaders=host,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
        "AWS4-HMAC-SHA256 Credential=A/20130524/us-east-1/ec2/aws4_request,SignedHeaders=host,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
        "AWS4-HMAC-SHA256 Credential=A/20130524/us-east-1/s3/aws4_request,SignedHeaders=range,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
        "AWS4-HMAC-SHA256 Credential=A/20130524/us-east-1/s3/aws4_request,SignedHeaders=x;host,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
        "AWS4-HMAC-SHA256 Credential=A/20130524/us-east-1/s3/aws4_request,SignedHeaders=host,"
        "Signature=F0E8BDB87C964420E857BD35B5D6ED310BD44F0170ABA48DD91039C6036BDB41",
        "AWS4-HMAC-SHA256 Credential=A/20130524/us-east-1/s3/aws4_request,SignedHeaders=host",
        "AWS4-HMAC-SHA256 Credential=A/20130525/us-east-1/s3/aws4_request,SignedHeaders=host,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        if (s3_sigv4_parse(bad[i], "20130524T000000Z", &q, &sig, &err) != -EINVAL)
            fprintf(stderr, "  accepted: %s\n", bad[i]), test_failed_flag = 1;
    }
    CHECK(s3_sigv4_parse(NULL, NULL, &q, &sig, &err) == S3_AUTH_NONE);
    s3_query_free(&q);
    CHECK(s3_amz_time("20130524T000000Z") == 1369353600);
    CHECK(s3_amz_time("20131324T000000Z") == -1);
    CHECK(s3_amz_time("20130524T000000") == -1);
}

TEST(listing_parameters)
{
    struct s3_query q;
    struct st_error err;
    struct s3_list l;
    char tok[32];
    s3_list_token("a/b", 3, 0, tok);
    CHECK_STR(tok, "612f62");
    s3_list_token("a/", 2, 1, tok);
    CHECK_STR(tok, "612fff");
    char *qs = xasprintf("list-type=2&prefix=x%%20y&max-keys=5000&continuation-token=%s&"
                         "delimiter=%%2F&start-after=zz", tok);
    CHECK(s3_query_parse(qs, strlen(qs), &q, &err) == 0);
    CHECK(s3_list_parse(&q, &l, &err) == 0);
    CHECK(l.v2 && l.max_keys == 1000 && l.prefix_len == 3 && memcmp(l.prefix, "x y", 3) == 0);
    CHECK(l.delimiter_len == 1 && l.delimiter[0] == '/');
    CHECK(l.after_len == 3 && memcmp(l.after, "a/\xff", 3) == 0); /* the token wins */
    s3_list_free(&l);
    s3_query_free(&q);
    free(qs);
    const char *bad[] = {"list-type=3", "max-keys=-1", "max-keys=",
                         "list-type=2&continuation-token=zz", "list-type=2&continuation-token=abc",
                         "list-type=2&continuation-token=0061", "encoding-type=xml"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        char *b = xstrdup(bad[i]);
        CHECK(s3_query_parse(b, strlen(b), &q, &err) == 0);
        if (s3_list_parse(&q, &l, &err) != -EINVAL)
            fprintf(stderr, "  accepted: %s\n", bad[i]), test_failed_flag = 1;
        s3_list_free(&l);
        s3_query_free(&q);
        free(b);
    }
    CHECK(s3_query_parse("a=%zz", 5, &q, &err) == -EINVAL);
    s3_query_free(&q);
    CHECK(s3_query_parse("a=%00", 5, &q, &err) == -EINVAL);
    s3_query_free(&q);
}

TEST(xml_escaping)
{
    struct xmlw w;
    xmlw_init(&w);
    xmlw_open(&w, "R", "urn:x");
    xmlw_text(&w, "K", "a&b<c>\"'\r\x01\xff\xc3\xa9", 13);
    xmlw_url_text(&w, "U", "a b+/\xc3\xa9~", 8);
    xmlw_u64(&w, "N", 18446744073709551615ull);
    xmlw_close(&w, "R");
    size_t len;
    char *x = xmlw_take(&w, &len);
    CHECK_STR(x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<R xmlns=\"urn:x\">"
                 "<K>a&amp;b&lt;c&gt;&quot;&apos;&#13;\xef\xbf\xbd\xef\xbf\xbd\xc3\xa9</K>"
                 "<U>a%20b%2B/%C3%A9~</U><N>18446744073709551615</N></R>\n");
    CHECK(len == strlen(x));
    free(x);
    /* U+FFFE and U+FFFF are valid UTF-8 but no XML Char: a file so named
     * made the whole listing unreadable to an XML parser. */
    xmlw_init(&w);
    xmlw_text(&w, "K", "\xef\xbf\xbe\xef\xbf\xbf\xef\xbf\xbd", 9);
    x = xmlw_take(&w, &len);
    CHECK_STR(x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                 "<K>\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd</K>\n");
    free(x);
}

int main(void)
{
    RUN(aws_get_object_example);
    RUN(aws_list_objects_example);
    RUN(aws_presigned_example);
    RUN(malformed_signatures);
    RUN(listing_parameters);
    RUN(xml_escaping);
    return TEST_SUMMARY();
}
