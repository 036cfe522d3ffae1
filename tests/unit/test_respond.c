/* Unit tests for the helpers in server/respond.c that need no connection:
 * Content-Disposition (RFC 6266, 8187) and Content-Type by file name. */
#include <string.h>

#include "respond.h"
#include "test.h"

TEST(content_disposition)
{
    char out[256];
    CHECK_STR(respond_disposition(out, sizeof(out), "attachment", "a.npy", 5),
              "attachment; filename=\"a.npy\"; filename*=UTF-8''a.npy");
    const char *n = "x/\xc3\xbc \"q\"\\;.bin";
    CHECK_STR(respond_disposition(out, sizeof(out), "inline", n, strlen(n)),
              "inline; filename=\"x___ _q__;.bin\"; filename*=UTF-8''x_%C3%BC%20%22q%22%5C%3B.bin");
    CHECK(respond_disposition(out, 20, "attachment", "a.npy", 5) == NULL);
    CHECK_STR(respond_content_type("config.json"), "application/json");
    CHECK_STR(respond_content_type("w.safetensors"), "application/octet-stream");
}

int main(void)
{
    RUN(content_disposition);
    return TEST_SUMMARY();
}
