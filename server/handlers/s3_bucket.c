/* s3_bucket: see s3_bucket.h. */
#include "s3_bucket.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conditional.h"
#include "range.h"
#include "server.h"
#include "util.h"
#include "xmlw.h"

/* ---- answers ---------------------------------------------------------------- */

struct answer *s3_send_xml(struct answer *a, unsigned status, struct xmlw *w)
{
    size_t len;
    char *text = xmlw_take(w, &len);
    if (!text)
        return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                            "out of memory rendering the answer");
    answer_defer(a, free, text);
    return answer_doc(a, status, S3_XML, text, len);
}

static void iso_time(int64_t ns, char *out, size_t len)
{
    time_t t = (time_t)(ns / 1000000000);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || tm.tm_year < 0 || tm.tm_year > 9999 - 1900)
        memset(&tm, 0, sizeof(tm)), tm.tm_year = 70, tm.tm_mday = 1;
    snprintf(out, len, "%04d-%02d-%02dT%02d:%02d:%02d.000Z", (tm.tm_year + 1900) % 10000,
             (tm.tm_mon + 1) % 100, tm.tm_mday % 100, tm.tm_hour % 100, tm.tm_min % 100,
             tm.tm_sec % 100);
}

char *s3_bucket_name(const char *id)
{
    const char *slash = strchr(id, '/');
    if (!slash)
        return xstrdup(id);
    return xasprintf("%.*s--%s", (int)(slash - id), id, slash + 1);
}

void s3_bucket_entry(struct xmlw *w, const char *name, int64_t created_ns)
{
    char when[40];
    iso_time(created_ns, when, sizeof(when));
    xmlw_open(w, "Bucket", NULL);
    xmlw_cstr(w, "Name", name);
    xmlw_cstr(w, "CreationDate", when);
    xmlw_close(w, "Bucket");
}

/* ---- listings ------------------------------------------------------------------ */

static int key_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

static void put_value(struct xmlw *w, const char *name, const char *v, size_t n, int url)
{
    (url ? xmlw_url_text : xmlw_text)(w, name, v, n);
}

static const char *key_at(const struct s3_bucket *b, size_t i)
{
    struct s3_object o;
    b->get(b->ctx, i, &o);
    return o.key;
}

/* The first object (they are sorted by key, bytes) that is not below
 * key[0..n) (strictly above it when after): where a page starts, so that
 * listing N objects P at a time costs N log N, not N^2 / P. */
static size_t first_object(const struct s3_bucket *b, const char *key, size_t n, int after)
{
    size_t lo = 0, hi = b->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *name = key_at(b, mid);
        int c = key_cmp(name, strlen(name), key, n);
        if (c < 0 || (after && c == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* One entry of a listing page: an object, or a common prefix of its
 * key[0..len). */
struct entry {
    struct s3_object o;
    size_t len;
};

static struct answer *list_objects(const struct request_view *v, struct answer *a,
                                   const struct s3_bucket *b, const struct s3_query *q)
{
    struct s3_list l;
    struct st_error err;
    if (s3_list_parse(q, &l, &err) < 0) {
        answer_s3_error(a, HTTP_BAD_REQUEST, "InvalidArgument", NULL, "%s", err.message);
        goto out;
    }
    struct entry *page = answer_alloc(a, (l.max_keys + 1) * sizeof(*page));
    size_t *objects = answer_alloc(a, (l.max_keys + 1) * sizeof(*objects));
    size_t n = 0, n_objects = 0;
    int truncated = 0;
    const char *last_cp = NULL;
    size_t last_cp_len = 0;
    /* The keys under the prefix are one run of the sorted objects; the
     * page starts past `after` within it. */
    size_t at = l.prefix ? first_object(b, l.prefix, l.prefix_len, 0) : 0;
    if (l.after) {
        size_t past = first_object(b, l.after, l.after_len, 1);
        at = past > at ? past : at;
    }
    for (; at < b->n && !truncated; at++) {
        struct s3_object o;
        b->get(b->ctx, at, &o);
        size_t klen = strlen(o.key);
        if (l.prefix && (klen < l.prefix_len || memcmp(o.key, l.prefix, l.prefix_len) != 0))
            break; /* past the prefix's run */
        size_t len = klen, plen = l.prefix ? l.prefix_len : 0;
        if (l.delimiter) {
            const char *d = memmem(o.key + plen, klen - plen, l.delimiter, l.delimiter_len);
            if (d)
                len = (size_t)(d - o.key) + l.delimiter_len;
        }
        int is_cp = len < klen;
        if (is_cp && last_cp && last_cp_len == len && memcmp(last_cp, o.key, len) == 0)
            continue; /* this common prefix is listed already */
        if (n == l.max_keys) {
            /* max-keys=0 asks for nothing: AWS says not truncated (a truncated
             * page with no key has no token to go on from, and a client that
             * follows IsTruncated would ask again forever). */
            truncated = n > 0;
            break;
        }
        page[n++] = (struct entry){o, len};
        if (is_cp)
            last_cp = o.key, last_cp_len = len;
        else
            objects[n_objects++] = at;
    }
    if (b->ready && !b->ready(v, a, b->ctx, objects, n_objects))
        goto out;

    struct xmlw w;
    xmlw_init(&w);
    xmlw_open(&w, "ListBucketResult", S3_NS);
    xmlw_cstr(&w, "Name", b->name);
    put_value(&w, "Prefix", l.prefix ? l.prefix : "", l.prefix ? l.prefix_len : 0,
              l.url_encoding);
    if (l.delimiter)
        put_value(&w, "Delimiter", l.delimiter, l.delimiter_len, l.url_encoding);
    xmlw_u64(&w, "MaxKeys", l.max_keys);
    if (l.url_encoding)
        xmlw_cstr(&w, "EncodingType", "url");
    xmlw_bool(&w, "IsTruncated", truncated);
    char *token = NULL;
    if (truncated) {
        const struct entry *e = &page[n - 1];
        token = answer_alloc(a, 2 * e->len + 3);
        s3_list_token(e->o.key, e->len, e->len < strlen(e->o.key), token);
    }
    if (l.v2) {
        xmlw_u64(&w, "KeyCount", n);
        if (l.token)
            xmlw_text(&w, "ContinuationToken", l.token, l.token_len);
        if (token)
            xmlw_cstr(&w, "NextContinuationToken", token);
        if (l.start_after)
            put_value(&w, "StartAfter", l.start_after, l.start_after_len, l.url_encoding);
    } else {
        put_value(&w, "Marker", l.marker ? l.marker : "", l.marker ? l.marker_len : 0,
                  l.url_encoding);
        if (truncated)
            put_value(&w, "NextMarker", page[n - 1].o.key, page[n - 1].len, l.url_encoding);
    }
    for (size_t i = 0; i < n; i++) {
        /* (A local file's ETag is its hash's text, which ready waited for,
         * in the file's own memory: the copy points at it.) */
        const struct s3_object o = page[i].o;
        if (page[i].len < strlen(o.key))
            continue;
        char when[40];
        iso_time(o.mtime_ns, when, sizeof(when));
        xmlw_open(&w, "Contents", NULL);
        put_value(&w, "Key", o.key, page[i].len, l.url_encoding);
        xmlw_cstr(&w, "LastModified", when);
        xmlw_cstr(&w, "ETag", o.etag);
        xmlw_u64(&w, "Size", o.size);
        xmlw_cstr(&w, "StorageClass", "STANDARD");
        xmlw_close(&w, "Contents");
    }
    for (size_t i = 0; i < n; i++) {
        if (page[i].len == strlen(page[i].o.key))
            continue;
        xmlw_open(&w, "CommonPrefixes", NULL);
        put_value(&w, "Prefix", page[i].o.key, page[i].len, l.url_encoding);
        xmlw_close(&w, "CommonPrefixes");
    }
    xmlw_close(&w, "ListBucketResult");
    s3_send_xml(a, HTTP_OK, &w);
out:
    s3_list_free(&l);
    return a;
}

struct answer *s3_bucket_answer(const struct request_view *v, struct answer *a,
                                const struct s3_bucket *b, const struct s3_query *q)
{
    if (v->is_head) {
        answer_header(a, "x-amz-bucket-region", S3_REGION);
        return answer_doc(a, HTTP_OK, S3_XML, "", 0);
    }
    if (s3_query_get(q, "location", NULL)) {
        struct xmlw w;
        xmlw_init(&w);
        xmlw_open(&w, "LocationConstraint", S3_NS);
        xmlw_close(&w, "LocationConstraint");
        return s3_send_xml(a, HTTP_OK, &w);
    }
    return list_objects(v, a, b, q);
}

int s3_object_check(const struct request_view *v, struct answer *a, uint64_t size,
                    const char *etag, const struct s3_query *q, const char *resource)
{
    size_t pn_len;
    const char *pn = s3_query_get(q, "partNumber", &pn_len);
    if (pn && !(pn_len == 1 && pn[0] == '1')) {
        answer_s3_error(a, HTTP_RANGE_NOT_SATISFIABLE, "InvalidPartNumber", resource,
                        "the object has one part");
        return -1;
    }
    /* A Range none of whose parts overlaps the object is S3's InvalidRange
     * (the front's 416 speaks tensord's JSON). */
    const char *range = view_header(v, "Range");
    if (range && cond_if_range_allows(view_header(v, "If-Range"), etag)) {
        struct byte_range br[16];
        size_t nr;
        unsigned max = v->srv->cfg->max_ranges < 16 ? v->srv->cfg->max_ranges : 16;
        if (range_parse(range, size, max, br, &nr) == RANGE_UNSATISFIABLE) {
            answer_header(a, "Content-Range", answer_printf(a, "bytes */%" PRIu64, size));
            answer_s3_error(a, HTTP_RANGE_NOT_SATISFIABLE, "InvalidRange", resource,
                            "The requested range is not satisfiable");
            return -1;
        }
    }
    return 0;
}
