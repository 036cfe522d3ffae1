/* Unit tests for server/handlers/h_s3.c through the loopback driver, byte for byte
 * against the S3 API's documents: ListBuckets, ListObjectsV2 and
 * ListObjects (prefix, delimiter, pages), GetObject and HeadObject with
 * Range (its own InvalidRange error), partNumber, HeadBucket,
 * GetBucketLocation, the read-only 405, unknown buckets and keys, and the
 * wait for ETags (the files' SHA-256, computed here with OpenSSL). */
#include <openssl/sha.h>

#include "loopback.h"

static char root[64], sha_a[65], sha_b[65];

#define XML_HEAD "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define NS "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""
#define DATE "2023-11-14T22:13:20.000Z"

static void sha(const char *text, char out[65])
{
    unsigned char md[32];
    SHA256((const unsigned char *)text, strlen(text), md);
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", md[i]);
}

static void make_root(void)
{
    lb_new_root(root, sizeof(root));
    lb_write(root, "r/a.txt", "aaa\n", 4);
    lb_write(root, "r/d/b.txt", "bb\n", 3);
    lb_write(root, "org/x/c.txt", "c\n", 2);
    sha("aaa\n", sha_a);
    sha("bb\n", sha_b);
}

static char *contents(const char *key, const char *etag, size_t size)
{
    return xasprintf("<Contents><Key>%s</Key><LastModified>" DATE "</LastModified><ETag>&quot;"
                     "%s&quot;</ETag><Size>%zu</Size><StorageClass>STANDARD</StorageClass>"
                     "</Contents>", key, etag, size);
}

TEST(listings)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_get(&s, "/s3/", NULL);
    CHECK_ANSWER(r, 200, "Content-Type: application/xml\r\n",
                 XML_HEAD "<ListAllMyBucketsResult " NS "><Owner><ID>tensord</ID><DisplayName>"
                 "tensord</DisplayName></Owner><Buckets><Bucket><Name>org--x</Name><CreationDate>"
                 DATE "</CreationDate></Bucket><Bucket><Name>r</Name><CreationDate>" DATE
                 "</CreationDate></Bucket></Buckets></ListAllMyBucketsResult>\n");
    lb_free(&r);
    char *ca = contents("a.txt", sha_a, 4), *cb = contents("d/b.txt", sha_b, 3);
    char *want = xasprintf(XML_HEAD "<ListBucketResult " NS "><Name>r</Name><Prefix></Prefix>"
                           "<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated><KeyCount>2"
                           "</KeyCount>%s%s</ListBucketResult>\n", ca, cb);
    r = lb_get(&s, "/s3/r?list-type=2", NULL);
    CHECK_ANSWER(r, 200, "Content-Type: application/xml\r\n", want);
    lb_free(&r);
    free(want);
    /* A page of one, then the next from its token ("a.txt" in hex). */
    want = xasprintf(XML_HEAD "<ListBucketResult " NS "><Name>r</Name><Prefix></Prefix>"
                     "<Delimiter>/</Delimiter><MaxKeys>1</MaxKeys><IsTruncated>true</IsTruncated>"
                     "<KeyCount>1</KeyCount><NextContinuationToken>612e747874"
                     "</NextContinuationToken>%s</ListBucketResult>\n", ca);
    r = lb_get(&s, "/s3/r?list-type=2&delimiter=/&max-keys=1", NULL);
    CHECK_STR(r.body, want);
    lb_free(&r);
    free(want);
    r = lb_get(&s, "/s3/r?list-type=2&delimiter=/&continuation-token=612e747874", NULL);
    CHECK_STR(r.body, XML_HEAD "<ListBucketResult " NS "><Name>r</Name><Prefix></Prefix>"
                      "<Delimiter>/</Delimiter><MaxKeys>1000</MaxKeys><IsTruncated>false"
                      "</IsTruncated><KeyCount>1</KeyCount><ContinuationToken>612e747874"
                      "</ContinuationToken><CommonPrefixes><Prefix>d/</Prefix></CommonPrefixes>"
                      "</ListBucketResult>\n");
    lb_free(&r);
    want = xasprintf(XML_HEAD "<ListBucketResult " NS "><Name>r</Name><Prefix></Prefix>"
                     "<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated><Marker>a.txt"
                     "</Marker>%s</ListBucketResult>\n", cb);
    r = lb_get(&s, "/s3/r?marker=a.txt", NULL); /* ListObjects version 1 */
    CHECK_STR(r.body, want);
    lb_free(&r);
    free(want);
    r = lb_get(&s, "/s3/r?list-type=2&max-keys=x", NULL);
    CHECK_EQ_U64(r.status, 400);
    CHECK(strncmp(r.body, XML_HEAD "<Error><Code>InvalidArgument</Code><Message>",
                  strlen(XML_HEAD "<Error><Code>InvalidArgument</Code><Message>")) == 0);
    lb_free(&r);
    r = lb_get(&s, "/s3/r?location", NULL);
    CHECK_ANSWER(r, 200, "Content-Type: application/xml\r\n",
                 XML_HEAD "<LocationConstraint " NS "></LocationConstraint>\n");
    lb_free(&r);
    r = lb_request(&s, "HEAD", "/s3/org--x", NULL, NULL);
    CHECK_ANSWER(r, 200, "Content-Type: application/xml\r\nx-amz-bucket-region: us-east-1\r\n",
                 "");
    lb_free(&r);
    free(ca);
    free(cb);
    lb_stop(&s);
}

TEST(objects)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    char *head = xasprintf("Content-Type: text/plain; charset=utf-8\r\nAccept-Ranges: bytes\r\n"
                           "Cache-Control: no-cache\r\nETag: \"%s\"\r\n"
                           "Last-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\n", sha_b);
    struct lb_answer r = lb_get(&s, "/s3/r/d/b.txt", NULL);
    CHECK_ANSWER(r, 200, head, "bb\n");
    lb_free(&r);
    free(head);
    static const char *const range[] = {"Range: bytes=1-1", NULL};
    r = lb_get(&s, "/s3/r/d/b.txt", range);
    CHECK_EQ_U64(r.status, 206);
    CHECK_STR(r.body, "b");
    lb_free(&r);
    static const char *const unsat[] = {"Range: bytes=10-", NULL};
    r = lb_get(&s, "/s3/r/d/b.txt", unsat);
    CHECK_ANSWER(r, 416, "Content-Type: application/xml\r\nContent-Range: bytes */3\r\n",
                 XML_HEAD "<Error><Code>InvalidRange</Code><Message>The requested range is not "
                 "satisfiable</Message><Resource>/r/d/b.txt</Resource><RequestId>tensord"
                 "</RequestId></Error>\n");
    lb_free(&r);
    r = lb_get(&s, "/s3/r/d/b.txt?partNumber=2", NULL);
    CHECK_ANSWER(r, 416, "Content-Type: application/xml\r\n",
                 XML_HEAD "<Error><Code>InvalidPartNumber</Code><Message>the object has one part"
                 "</Message><Resource>/r/d/b.txt</Resource><RequestId>tensord</RequestId>"
                 "</Error>\n");
    lb_free(&r);
    r = lb_get(&s, "/s3/r/nope", NULL);
    CHECK_ANSWER(r, 404, "Content-Type: application/xml\r\n",
                 XML_HEAD "<Error><Code>NoSuchKey</Code><Message>The specified key does not "
                 "exist.</Message><Resource>/r/nope</Resource><RequestId>tensord</RequestId>"
                 "</Error>\n");
    lb_free(&r);
    r = lb_get(&s, "/s3/nope/x", NULL);
    CHECK_ANSWER(r, 404, "Content-Type: application/xml\r\n",
                 XML_HEAD "<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not "
                 "exist</Message><Resource>/nope/x</Resource><RequestId>tensord</RequestId>"
                 "</Error>\n");
    lb_free(&r);
    r = lb_request(&s, "PUT", "/s3/r/x", NULL, "x");
    CHECK_ANSWER(r, 405, "Content-Type: application/xml\r\nAllow: GET, HEAD\r\n",
                 XML_HEAD "<Error><Code>MethodNotAllowed</Code><Message>this S3 API is read-only: "
                 "PUT is not allowed</Message><RequestId>tensord</RequestId></Error>\n");
    lb_free(&r);
    lb_stop(&s);
}

TEST(etags_wait_for_hashes)
{
    struct lb_server s;
    lb_start(&s, root, LB_NO_HASHER, NULL);
    struct lb_answer r = lb_get(&s, "/s3/r/d/b.txt", NULL);
    CHECK_ANSWER(r, 503, "Content-Type: application/xml\r\nRetry-After: 1\r\n",
                 XML_HEAD "<Error><Code>SlowDown</Code><Message>the content hashes (ETags) of 1 "
                 "object(s) are being computed; retry in 1 s</Message><RequestId>tensord"
                 "</RequestId></Error>\n");
    lb_free(&r);
    lb_stop(&s);
    /* With a hasher, the request waits for it and answers. */
    char r2[64];
    lb_new_root(r2, sizeof(r2));
    lb_write(r2, "r/a.txt", "aaa\n", 4);
    lb_touch(r2, "r/a.txt");
    static const char *const wait5[] = {"hash_wait=5", NULL};
    lb_start(&s, r2, 0, wait5);
    r = lb_get(&s, "/s3/r?list-type=2", NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK(r.waited);
    CHECK_CONTAINS(r.body, sha_a);
    lb_free(&r);
    lb_stop(&s);
    lb_remove_root(r2);
}

TEST(signatures_when_tokens_are_on)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    s.srv.read_token = xstrdup("rrrrrrrrrrrrrrrr");
    struct lb_answer r = lb_get(&s, "/s3/", NULL);
    CHECK_ANSWER(r, 403, "Content-Type: application/xml\r\n",
                 XML_HEAD "<Error><Code>AccessDenied</Code><Message>the S3 API needs "
                 "s3_access_key while bearer tokens are on</Message><RequestId>tensord"
                 "</RequestId></Error>\n");
    lb_free(&r);
    lb_stop(&s);
}

int main(void)
{
    make_root();
    RUN(listings);
    RUN(objects);
    RUN(etags_wait_for_hashes);
    RUN(signatures_when_tokens_are_on);
    lb_remove_root(root);
    return TEST_SUMMARY();
}
