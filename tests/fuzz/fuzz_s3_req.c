/* Fuzzes what the S3 API reads from a request (core/req/s3_req): the query,
 * ListObjectsV2's parameters and continuation token, a SigV4 Authorization
 * header or presigned query, and the canonical request built from them;
 * and the XML writer (core/base/xmlw) over the same bytes. The input is lines:
 * query, Authorization, X-Amz-Date, path, then header values for the
 * canonical request. No crash, no leak; a listing's "after" key is never
 * other than the half of the token it was decoded from; the XML never holds a raw '<' of
 * the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "s3_req.h"
#include "util.h"
#include "xmlw.h"

struct lines {
    char *l[5];
};

static const char *header(void *ctx, const char *name)
{
    struct lines *ls = ctx;
    /* Names the test never supplies are absent; the rest take line 4. */
    return strcmp(name, "absent") == 0 ? NULL : ls->l[4];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = xstrndup((const char *)data, size);
    struct lines ls = {{NULL}};
    char *p = text;
    for (int i = 0; i < 5; i++) {
        ls.l[i] = p;
        char *nl = p ? strchr(p, '\n') : NULL;
        if (nl)
            *nl = '\0';
        p = nl ? nl + 1 : NULL;
    }
    for (int i = 0; i < 5; i++)
        if (!ls.l[i])
            ls.l[i] = "";
    struct s3_query q;
    struct st_error err;
    if (s3_query_parse(ls.l[0], strlen(ls.l[0]), &q, &err) == 0) {
        struct s3_list l;
        /* A version 2 token decodes to a key of half its length. */
        if (s3_list_parse(&q, &l, &err) == 0 && l.v2 && l.token &&
            (!l.after || 2 * l.after_len != l.token_len))
            abort();
        s3_list_free(&l);
        struct s3_sigv4 sig;
        int kind = s3_sigv4_parse(ls.l[1][0] ? ls.l[1] : NULL, ls.l[2][0] ? ls.l[2] : NULL, &q,
                                  &sig, &err);
        if (kind > 0) {
            char *c = s3_sigv4_canonical("GET", ls.l[3], strlen(ls.l[3]), &q, &sig, header, &ls,
                                         &err);
            if (c) {
                char out[65];
                s3_sigv4_sign("secret", 6, &sig, c, out);
                if (strlen(out) != 64)
                    abort();
                free(c);
            }
        }
    }
    s3_query_free(&q);
    struct xmlw w;
    xmlw_init(&w);
    xmlw_text(&w, "K", (const char *)data, size);
    xmlw_url_text(&w, "U", (const char *)data, size);
    size_t len;
    char *x = xmlw_take(&w, &len);
    if (x) {
        /* Past the declaration, '<' only opens the four tags written. */
        size_t tags = 0;
        for (char *c = strchr(x + 1, '<'); c; c = strchr(c + 1, '<'))
            tags++;
        if (tags != 4)
            abort();
        char tok[2 * 8 + 3];
        s3_list_token("abcdefgh", 8, 1, tok);
        free(x);
    }
    free(text);
    return 0;
}
