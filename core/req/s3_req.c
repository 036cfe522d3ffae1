/* s3_req: see s3_req.h. */
#include "s3_req.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "digest.h"
#include "strbuf.h"
#include "util.h"

/* ---- the query ------------------------------------------------------------ */

int s3_query_parse(const char *q, size_t len, struct s3_query *out, struct st_error *err)
{
    memset(out, 0, sizeof(*out));
    const char *p = q, *end = q + len;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        if (stop > p) {
            if (out->n == S3_MAX_PARAMS)
                return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                                     "the query has more than %d parameters", S3_MAX_PARAMS);
            const char *eq = memchr(p, '=', (size_t)(stop - p));
            struct s3_param *pa = &out->p[out->n];
            pa->key = pct_decode(p, (size_t)((eq ? eq : stop) - p), 0, &pa->key_len);
            pa->value = eq ? pct_decode(eq + 1, (size_t)(stop - eq - 1), 0, &pa->value_len)
                           : xstrdup(""); /* value_len stays 0, as the memset left it */
            if (!pa->key || !pa->value) {
                free(pa->key);
                free(pa->value);
                return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                                     "a query parameter has a malformed percent-escape or a NUL");
            }
            out->n++;
        }
        p = stop + 1;
    }
    return 0;
}

void s3_query_free(struct s3_query *q)
{
    for (size_t i = 0; i < q->n; i++) {
        free(q->p[i].key);
        free(q->p[i].value);
    }
    q->n = 0;
}

const char *s3_query_get(const struct s3_query *q, const char *key, size_t *len)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < q->n; i++)
        if (q->p[i].key_len == kl && memcmp(q->p[i].key, key, kl) == 0) {
            if (len)
                *len = q->p[i].value_len;
            return q->p[i].value;
        }
    return NULL;
}

/* ---- listings ------------------------------------------------------------- */

void s3_list_token(const char *key, size_t n, int skip_below, char *out)
{
    /* Hex of the key; a common prefix gets a 0xff byte after it, which no
     * UTF-8 key holds, so "after it" is after every key below it too. */
    digest_hex((const uint8_t *)key, n, out);
    if (skip_below)
        memcpy(out + 2 * n, "ff", 3);
}

static int token_decode(const char *t, size_t n, char **out, size_t *out_len)
{
    if (n % 2 || n > 4 * 1024 * 2)
        return -1;
    char *k = xmalloc(n / 2 + 1);
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hex_digit_value((unsigned char)t[2 * i]);
        int lo = hex_digit_value((unsigned char)t[2 * i + 1]);
        if (hi < 0 || lo < 0 || (hi << 4 | lo) == 0) {
            free(k);
            return -1;
        }
        k[i] = (char)(hi << 4 | lo);
    }
    k[n / 2] = '\0';
    *out = k;
    *out_len = n / 2;
    return 0;
}

int s3_list_parse(const struct s3_query *q, struct s3_list *l, struct st_error *err)
{
    memset(l, 0, sizeof(*l));
    size_t n;
    const char *v = s3_query_get(q, "list-type", &n);
    if (v && !(n == 1 && (v[0] == '1' || v[0] == '2')))
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "list-type must be 1 or 2");
    l->v2 = v && v[0] == '2';
    l->prefix = s3_query_get(q, "prefix", &l->prefix_len);
    l->delimiter = s3_query_get(q, "delimiter", &l->delimiter_len);
    if (l->delimiter && l->delimiter_len == 0)
        l->delimiter = NULL;
    l->start_after = s3_query_get(q, "start-after", &l->start_after_len);
    l->marker = s3_query_get(q, "marker", &l->marker_len);
    v = s3_query_get(q, "encoding-type", &n);
    if (v && !(n == 3 && memcmp(v, "url", 3) == 0))
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "encoding-type must be url");
    l->url_encoding = v != NULL;
    l->max_keys = S3_MAX_KEYS;
    v = s3_query_get(q, "max-keys", &n);
    if (v) {
        uint64_t mk;
        size_t used;
        if (n == 0 || n > 12 || decimal_u64(v, n, &mk, &used) < 0 || used != n)
            return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                                 "max-keys must be a non-negative integer");
        l->max_keys = mk > S3_MAX_KEYS ? S3_MAX_KEYS : (unsigned)mk;
    }
    l->token = s3_query_get(q, "continuation-token", &l->token_len);
    if (l->token && l->v2) {
        if (token_decode(l->token, l->token_len, &l->after, &l->after_len) < 0)
            return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                                 "the continuation token is not one this server gave");
    } else if (l->v2 && l->start_after) {
        l->after = xstrndup(l->start_after, l->start_after_len);
        l->after_len = l->start_after_len;
    } else if (!l->v2 && l->marker) {
        l->after = xstrndup(l->marker, l->marker_len);
        l->after_len = l->marker_len;
    }
    return 0;
}

void s3_list_free(struct s3_list *l)
{
    free(l->after);
    l->after = NULL;
}

/* ---- SigV4 ---------------------------------------------------------------- */

int64_t s3_amz_time(const char *s)
{
    if (strlen(s) != 16 || s[8] != 'T' || s[15] != 'Z')
        return -1;
    for (int i = 0; i < 15; i++)
        if (i != 8 && !(s[i] >= '0' && s[i] <= '9'))
            return -1;
    struct tm tm = {0};
#define D2(o) ((s[o] - '0') * 10 + (s[(o) + 1] - '0'))
    tm.tm_year = D2(0) * 100 + D2(2) - 1900;
    tm.tm_mon = D2(4) - 1;
    tm.tm_mday = D2(6);
    tm.tm_hour = D2(9);
    tm.tm_min = D2(11);
    tm.tm_sec = D2(13);
#undef D2
    if (tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
        tm.tm_min > 59 || tm.tm_sec > 60)
        return -1;
    return (int64_t)timegm(&tm);
}

/* Copies s[0..n) into out (cap bytes with the NUL); -1 when it does not
 * fit, is empty, or holds a byte outside printable ASCII. */
static int copy_field(char *out, size_t cap, const char *s, size_t n)
{
    if (n == 0 || n >= cap)
        return -1;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
            return -1;
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

/* "AKID/20240101/us-east-1/s3/aws4_request" into sig. */
static int parse_credential(const char *s, size_t n, struct s3_sigv4 *sig)
{
    const char *part[5];
    size_t len[5], k = 0;
    const char *p = s, *end = s + n;
    /* The access key may not hold '/', the four fields after it do not. */
    while (k < 5) {
        const char *slash = k < 4 ? memchr(p, '/', (size_t)(end - p)) : NULL;
        part[k] = p;
        len[k] = (size_t)((slash ? slash : end) - p);
        k++;
        if (!slash)
            break;
        p = slash + 1;
    }
    if (k != 5 || copy_field(sig->access_key, sizeof(sig->access_key), part[0], len[0]) < 0 ||
        len[1] != 8 || copy_field(sig->scope_date, sizeof(sig->scope_date), part[1], 8) < 0 ||
        copy_field(sig->region, sizeof(sig->region), part[2], len[2]) < 0 ||
        copy_field(sig->service, sizeof(sig->service), part[3], len[3]) < 0 ||
        strcmp(sig->service, "s3") != 0 || len[4] != 12 || memcmp(part[4], "aws4_request", 12) != 0)
        return -1;
    for (int i = 0; i < 8; i++)
        if (!(sig->scope_date[i] >= '0' && sig->scope_date[i] <= '9'))
            return -1;
    return 0;
}

/* Signed header names: lowercase, ';'-separated, sorted, no repeats. */
static int check_signed_headers(const char *s)
{
    const char *prev = NULL;
    size_t prev_len = 0;
    for (const char *p = s;;) {
        const char *semi = strchr(p, ';');
        size_t len = semi ? (size_t)(semi - p) : strlen(p);
        if (len == 0)
            return -1;
        for (size_t i = 0; i < len; i++)
            if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '-' ||
                  p[i] == '_' || p[i] == '.'))
                return -1;
        if (prev) {
            int c = memcmp(prev, p, prev_len < len ? prev_len : len);
            if (c > 0 || (c == 0 && prev_len >= len))
                return -1;
        }
        prev = p;
        prev_len = len;
        if (!semi)
            return 0;
        p = semi + 1;
    }
}

static int parse_header(const char *auth, struct s3_sigv4 *sig)
{
    static const char alg[] = "AWS4-HMAC-SHA256 ";
    if (strncmp(auth, alg, sizeof(alg) - 1) != 0)
        return -1;
    int have_cred = 0, have_sh = 0, have_sig = 0;
    for (const char *p = auth + sizeof(alg) - 1; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *eq = strchr(p, '=');
        if (!eq)
            return -1;
        const char *stop = eq + strcspn(eq, ", ");
        size_t klen = (size_t)(eq - p), vlen = (size_t)(stop - eq - 1);
        if (klen == 10 && memcmp(p, "Credential", 10) == 0 && !have_cred) {
            if (parse_credential(eq + 1, vlen, sig) < 0)
                return -1;
            have_cred = 1;
        } else if (klen == 13 && memcmp(p, "SignedHeaders", 13) == 0 && !have_sh) {
            if (copy_field(sig->signed_headers, sizeof(sig->signed_headers), eq + 1, vlen) < 0)
                return -1;
            have_sh = 1;
        } else if (klen == 9 && memcmp(p, "Signature", 9) == 0 && !have_sig) {
            if (vlen != 64 || copy_field(sig->signature, sizeof(sig->signature), eq + 1, 64) < 0)
                return -1;
            have_sig = 1;
        } else {
            return -1;
        }
        p = stop;
    }
    return have_cred && have_sh && have_sig ? 0 : -1;
}

static int parse_query_auth(const struct s3_query *q, struct s3_sigv4 *sig)
{
    size_t n;
    const char *v = s3_query_get(q, "X-Amz-Algorithm", &n);
    if (!v || n != 16 || memcmp(v, "AWS4-HMAC-SHA256", 16) != 0)
        return -1;
    v = s3_query_get(q, "X-Amz-Credential", &n);
    if (!v || parse_credential(v, n, sig) < 0)
        return -1;
    v = s3_query_get(q, "X-Amz-Date", &n);
    if (!v || copy_field(sig->amz_date, sizeof(sig->amz_date), v, n) < 0)
        return -1;
    v = s3_query_get(q, "X-Amz-SignedHeaders", &n);
    if (!v || copy_field(sig->signed_headers, sizeof(sig->signed_headers), v, n) < 0)
        return -1;
    v = s3_query_get(q, "X-Amz-Signature", &n);
    if (!v || n != 64 || copy_field(sig->signature, sizeof(sig->signature), v, n) < 0)
        return -1;
    v = s3_query_get(q, "X-Amz-Expires", &n);
    size_t used;
    if (!v || n == 0 || n > 7 || decimal_u64(v, n, &sig->expires, &used) < 0 || used != n ||
        sig->expires < 1 || sig->expires > S3_MAX_EXPIRES)
        return -1;
    sig->presigned = 1;
    return 0;
}

int s3_sigv4_parse(const char *auth, const char *amz_date, const struct s3_query *q,
                   struct s3_sigv4 *out, struct st_error *err)
{
    memset(out, 0, sizeof(*out));
    int in_query = s3_query_get(q, "X-Amz-Algorithm", NULL) != NULL ||
                   s3_query_get(q, "X-Amz-Signature", NULL) != NULL;
    if (auth && in_query)
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                             "a request is signed by its Authorization header or its query, "
                             "not both");
    /* Signature version 2, which boto3's generate_presigned_url and the
     * AWS CLI's presign still make by default in some regions: told apart
     * so that its refusal can say what to use instead. */
    if (auth ? strncmp(auth, "AWS ", 4) == 0
             : !in_query && (s3_query_get(q, "AWSAccessKeyId", NULL) ||
                             s3_query_get(q, "Signature", NULL)))
        return S3_AUTH_V2;
    if (!auth && !in_query)
        return S3_AUTH_NONE;
    if (auth) {
        if (parse_header(auth, out) < 0)
            return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                                 "the Authorization header is not AWS4-HMAC-SHA256 "
                                 "Credential=KEY/DATE/REGION/s3/aws4_request, "
                                 "SignedHeaders=..., Signature=<64 hex digits>");
        if (!amz_date || copy_field(out->amz_date, sizeof(out->amz_date), amz_date,
                                    strlen(amz_date)) < 0)
            return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                                 "a signed request needs an X-Amz-Date header");
    } else if (parse_query_auth(q, out) < 0) {
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                             "the presigned URL's X-Amz-Algorithm, -Credential, -Date, -Expires "
                             "(1..604800), -SignedHeaders or -Signature is missing or malformed");
    }
    if (s3_amz_time(out->amz_date) < 0 || memcmp(out->amz_date, out->scope_date, 8) != 0)
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                             "X-Amz-Date must be YYYYMMDDTHHMMSSZ on the credential's date");
    /* AWS requires Host among the signed headers: it ties the signature
     * to this server. */
    char list[sizeof(out->signed_headers) + 2];
    snprintf(list, sizeof(list), ";%s;", out->signed_headers);
    if (check_signed_headers(out->signed_headers) < 0 || !strstr(list, ";host;"))
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                             "SignedHeaders must be lowercase names, sorted, ';'-separated, "
                             "host among them");
    for (size_t i = 0; out->signature[i]; i++)
        if (!((out->signature[i] >= '0' && out->signature[i] <= '9') ||
              (out->signature[i] >= 'a' && out->signature[i] <= 'f')))
            return st_error_fail(err, ST_ERR_INVALID_ARGUMENT,
                                 "the signature must be 64 lowercase hex digits");
    return auth ? S3_AUTH_HEADER : S3_AUTH_QUERY;
}

struct enc_param {
    char *k, *v;
};

static int enc_param_cmp(const void *a, const void *b)
{
    const struct enc_param *x = a, *y = b;
    int c = strcmp(x->k, y->k);
    return c ? c : strcmp(x->v, y->v);
}

static char *encoded(const char *s, size_t n)
{
    struct strbuf b = STRBUF_INIT;
    strbuf_pct_encode(&b, s, n, 0);
    strbuf_putc(&b, '\0'); /* an empty value is still a string */
    char *t = strbuf_detach(&b, NULL);
    return t ? t : xstrdup("");
}

static void canonical_query(struct strbuf *b, const struct s3_query *q)
{
    struct enc_param e[S3_MAX_PARAMS];
    size_t n = 0;
    for (size_t i = 0; i < q->n; i++) {
        if (strcmp(q->p[i].key, "X-Amz-Signature") == 0)
            continue;
        e[n].k = encoded(q->p[i].key, q->p[i].key_len);
        e[n].v = encoded(q->p[i].value, q->p[i].value_len);
        n++;
    }
    qsort(e, n, sizeof(e[0]), enc_param_cmp);
    for (size_t i = 0; i < n; i++) {
        if (i)
            strbuf_putc(b, '&');
        strbuf_puts(b, e[i].k);
        strbuf_putc(b, '=');
        strbuf_puts(b, e[i].v);
        free(e[i].k);
        free(e[i].v);
    }
}

/* value trimmed, runs of spaces inside it made one. */
static void header_value(struct strbuf *b, const char *v)
{
    while (*v == ' ' || *v == '\t')
        v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    for (size_t i = 0; i < n; i++) {
        int sp = v[i] == ' ' || v[i] == '\t';
        if (sp && i && (v[i - 1] == ' ' || v[i - 1] == '\t'))
            continue;
        strbuf_putc(b, sp ? ' ' : v[i]);
    }
}

char *s3_sigv4_canonical(const char *method, const char *path, size_t path_len,
                         const struct s3_query *q, const struct s3_sigv4 *sig,
                         s3_header_fn header, void *ctx, struct st_error *err)
{
    struct strbuf b = STRBUF_INIT;
    strbuf_puts(&b, method);
    strbuf_putc(&b, '\n');
    /* The path: each segment decoded, then encoded as AWS does, so that
     * two spellings of one key sign alike. */
    const char *p = path, *end = path + path_len;
    do {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        size_t seg = (size_t)((slash ? slash : end) - p), dlen;
        char *d = pct_decode(p, seg, 0, &dlen);
        if (!d) {
            strbuf_release(&b);
            st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "the path has a malformed escape");
            return NULL;
        }
        strbuf_pct_encode(&b, d, dlen, 0);
        free(d);
        if (slash)
            strbuf_putc(&b, '/');
        p = slash ? slash + 1 : end;
    } while (p < end);
    strbuf_putc(&b, '\n');
    canonical_query(&b, q);
    strbuf_putc(&b, '\n');
    char name[1025];
    for (const char *h = sig->signed_headers;;) {
        const char *semi = strchr(h, ';');
        size_t len = semi ? (size_t)(semi - h) : strlen(h);
        memcpy(name, h, len);
        name[len] = '\0';
        const char *v = header(ctx, name);
        if (!v) {
            strbuf_release(&b);
            st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "signed header %s is missing", name);
            return NULL;
        }
        strbuf_puts(&b, name);
        strbuf_putc(&b, ':');
        header_value(&b, v);
        strbuf_putc(&b, '\n');
        if (!semi)
            break;
        h = semi + 1;
    }
    strbuf_putc(&b, '\n');
    strbuf_puts(&b, sig->signed_headers);
    strbuf_putc(&b, '\n');
    const char *payload = sig->presigned ? NULL : header(ctx, "x-amz-content-sha256");
    strbuf_puts(&b, payload ? payload : "UNSIGNED-PAYLOAD");
    char *text = strbuf_detach(&b, NULL);
    if (!text)
        st_error_fail(err, ST_ERR_NO_MEMORY, "out of memory");
    return text;
}

static void hmac(const void *key, size_t klen, const char *msg, unsigned char out[32])
{
    unsigned int n = 32;
    HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, strlen(msg), out, &n);
}

void s3_sigv4_sign(const char *secret, size_t secret_len, const struct s3_sigv4 *sig,
                   const char *canonical, char out[65])
{
    unsigned char k[32], hash[32];
    char *kdate = xmalloc(secret_len + 5);
    memcpy(kdate, "AWS4", 4);
    memcpy(kdate + 4, secret, secret_len);
    hmac(kdate, secret_len + 4, sig->scope_date, k);
    OPENSSL_cleanse(kdate, secret_len + 4);
    free(kdate);
    hmac(k, 32, sig->region, k);
    hmac(k, 32, sig->service, k);
    hmac(k, 32, "aws4_request", k);
    SHA256((const unsigned char *)canonical, strlen(canonical), hash);
    char hex[65];
    digest_hex(hash, 32, hex);
    char *sts = xasprintf("AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s", sig->amz_date,
                          sig->scope_date, sig->region, sig->service, hex);
    hmac(k, 32, sts, hash);
    OPENSSL_cleanse(k, sizeof(k));
    free(sts);
    digest_hex(hash, 32, out);
}

int s3_sigv4_equal(const char *a, const char *b)
{
    size_t n = strlen(a);
    return n == strlen(b) && CRYPTO_memcmp(a, b, n) == 0;
}
