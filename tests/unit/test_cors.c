/* Unit tests for server/http/cors.c: which origins read answers and the headers
 * each answer gets (the Fetch standard's CORS protocol: a listed origin is
 * echoed with credentials and Vary: Origin, "*" answers any origin without
 * credentials), what is a preflight, the configuration's one rule, and
 * which preloads and evicts come from a page of another origin. */
#include "config.h"
#include "cors.h"
#include "test.h"

static char *join(const char *const *h, size_t n)
{
    static char buf[2048];
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s: %s\n", h[2 * i], h[2 * i + 1]);
    return buf;
}

TEST(listed_origins)
{
    struct config cfg;
    config_defaults(&cfg);
    const char *h[2 * CORS_MAX_HEADERS];
    CHECK_EQ_U64(cors_headers(&cfg, "http://a.example", NULL, NULL, h), 0); /* off */
    CHECK(!cors_is_preflight(&cfg, "OPTIONS", "http://a.example", "GET"));
    char err[256];
    struct st_error se;
    CHECK(config_set(&cfg, "cors_origins", "http://a.example,https://b.example", &se) == 0);
    CHECK_STR(join(h, cors_headers(&cfg, "http://a.example", NULL, NULL, h)),
              "Vary: Origin\nAccess-Control-Allow-Origin: http://a.example\n"
              "Access-Control-Allow-Credentials: true\nAccess-Control-Expose-Headers: " CORS_EXPOSE
              "\n");
    CHECK_STR(join(h, cors_headers(&cfg, "http://c.example", NULL, NULL, h)), "Vary: Origin\n");
    CHECK_STR(join(h, cors_headers(&cfg, NULL, NULL, NULL, h)), "Vary: Origin\n");
    CHECK_STR(join(h, cors_headers(&cfg, "https://b.example", "GET, HEAD", "range", h)),
              "Vary: Origin\nAccess-Control-Allow-Origin: https://b.example\n"
              "Access-Control-Allow-Credentials: true\nAccess-Control-Allow-Methods: GET, HEAD\n"
              "Access-Control-Allow-Headers: range\n"
              "Access-Control-Max-Age: 600\n");
    CHECK(cors_is_preflight(&cfg, "OPTIONS", "http://a.example", "GET"));
    CHECK(!cors_is_preflight(&cfg, "OPTIONS", "http://a.example", NULL));
    CHECK(!cors_is_preflight(&cfg, "OPTIONS", "http://c.example", "GET"));
    CHECK(!cors_is_preflight(&cfg, "GET", "http://a.example", "GET"));
    CHECK(cors_check_config(&cfg, err, sizeof(err)) == 0);
    config_free(&cfg);
}

TEST(any_origin)
{
    struct config cfg;
    config_defaults(&cfg);
    char err[256];
    struct st_error se;
    CHECK(config_set(&cfg, "cors_origins", "*", &se) == 0);
    const char *h[2 * CORS_MAX_HEADERS];
    CHECK_STR(join(h, cors_headers(&cfg, "http://x.example", NULL, NULL, h)),
              "Access-Control-Allow-Origin: *\nAccess-Control-Expose-Headers: " CORS_EXPOSE "\n");
    CHECK_STR(join(h, cors_headers(&cfg, NULL, NULL, NULL, h)), /* varies by nothing */
              "Access-Control-Allow-Origin: *\nAccess-Control-Expose-Headers: " CORS_EXPOSE "\n");
    CHECK(cors_is_preflight(&cfg, "OPTIONS", "null", "DELETE"));
    CHECK(cors_check_config(&cfg, err, sizeof(err)) == 0);
    config_free(&cfg);
    config_defaults(&cfg);
    CHECK(config_set(&cfg, "cors_origins", "*,http://a.example", &se) == 0);
    CHECK(cors_check_config(&cfg, err, sizeof(err)) == -1);
    CHECK_CONTAINS(err, "\"*\" (any origin, no credentials) must be its only entry");
    config_free(&cfg);
}

/* Whether a preload or evict is refused: an Origin that is neither listed
 * nor the daemon's own (scheme://Host, as the browser wrote Host). */
TEST(writes_from_other_origins)
{
    struct config cfg;
    config_defaults(&cfg);
    struct st_error se;
    CHECK(!cors_refuses_write(&cfg, NULL, "h:1"));                /* no browser */
    CHECK(!cors_refuses_write(&cfg, "http://h:1", "h:1"));        /* the console */
    CHECK(!cors_refuses_write(&cfg, "https://H:1", "h:1"));       /* host names ignore case */
    CHECK(cors_refuses_write(&cfg, "http://h:2", "h:1"));
    CHECK(cors_refuses_write(&cfg, "http://h:1", NULL));
    CHECK(cors_refuses_write(&cfg, "http://h:1", ""));
    CHECK(cors_refuses_write(&cfg, "null", "h:1"));               /* a sandboxed page */
    CHECK(cors_refuses_write(&cfg, "http://a.example", "h:1"));
    CHECK(config_set(&cfg, "cors_origins", "http://a.example", &se) == 0);
    CHECK(!cors_refuses_write(&cfg, "http://a.example", "h:1"));  /* listed */
    CHECK(cors_refuses_write(&cfg, "http://b.example", "h:1"));
    config_free(&cfg);
    config_defaults(&cfg);
    CHECK(config_set(&cfg, "cors_origins", "*", &se) == 0);
    CHECK(!cors_refuses_write(&cfg, "http://b.example", "h:1"));  /* any origin */
    config_free(&cfg);
}


/* The request headers a preflight may ask for: the listed names and the AWS
 * SDKs' prefixes, case folded, in the order asked; nothing else, nothing
 * malformed, and nothing past the buffer. */
TEST(allow_headers)
{
    char out[128];
    CHECK_STR(cors_allow_headers(NULL, out, sizeof(out)), "");
    CHECK_STR(cors_allow_headers("", out, sizeof(out)), "");
    CHECK_STR(cors_allow_headers("Range, If-None-Match,if-range ,\tAuthorization", out,
                                 sizeof(out)),
              "range, if-none-match, if-range, authorization");
    CHECK_STR(cors_allow_headers("x-amz-date,amz-sdk-request,X-Amz-Security-Token", out,
                                 sizeof(out)),
              "x-amz-date, amz-sdk-request, x-amz-security-token");
    /* not allowed: other names, a bare prefix, a name with a space or a
     * character no field name has, an empty element */
    CHECK_STR(cors_allow_headers("cookie,x-amz-,amz-sdk-,x-amz date,x-amz-a\"b,,range", out,
                                 sizeof(out)),
              "range");
    /* a name longer than any allowed one is skipped, not cut */
    char longname[200];
    memset(longname, 'a', sizeof(longname));
    memcpy(longname, "x-amz-", 6);
    longname[sizeof(longname) - 1] = '\0';
    CHECK_STR(cors_allow_headers(longname, out, sizeof(out)), "");
    /* a list longer than the buffer stops at a whole name */
    char small[20];
    CHECK_STR(cors_allow_headers("range, if-none-match, authorization", small, sizeof(small)),
              "range");
}

int main(void)
{
    RUN(listed_origins);
    RUN(any_origin);
    RUN(writes_from_other_origins);
    RUN(allow_headers);
    return TEST_SUMMARY();
}
