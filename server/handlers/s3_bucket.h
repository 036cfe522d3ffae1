/* s3_bucket: the S3 API's answers over a bucket, whatever holds it (a repo
 * of the models root: server/handlers/h_s3.c; a mirrored repo:
 * h_mirror_s3.c): its listings (ListObjectsV2 and version 1, with prefix,
 * delimiter, pages), HEAD and ?location, an object's checks (partNumber,
 * an unsatisfiable Range), and ListBuckets' entries. Errors are S3's XML
 * documents with S3's codes. */
#ifndef TENSORD_S3_BUCKET_H
#define TENSORD_S3_BUCKET_H

#include <stddef.h>
#include <stdint.h>

#include "h_answer.h"
#include "s3_req.h"

struct xmlw;

#define S3_NS "http://s3.amazonaws.com/doc/2006-03-01/"
#define S3_XML "application/xml"
#define S3_REGION "us-east-1"

/* An object as a listing shows it; its strings live as long as its bucket. */
struct s3_object {
    const char *key;
    uint64_t size;
    int64_t mtime_ns;
    const char *etag;          /* with its quotes */
};

/* A bucket: n objects sorted by key (bytes), object i read with get. */
struct s3_bucket {
    const char *name;
    size_t n;
    void (*get)(const void *ctx, size_t i, struct s3_object *o);
    const void *ctx;
    /* Whether the ETags of objects idx[0..k) (in the arena) are known: 1,
     * or 0 with the answer made (a wait, a 503). NULL: always. */
    int (*ready)(const struct request_view *v, struct answer *a, const void *ctx,
                 const size_t *idx, size_t k);
};

/* HEAD of the bucket, ?location, or a listing. */
struct answer *s3_bucket_answer(const struct request_view *v, struct answer *a,
                                const struct s3_bucket *b, const struct s3_query *q);
/* The checks of GET or HEAD of an object of size bytes and ETag etag
 * (partNumber, a Range none of whose parts overlaps it): 0 when it may be
 * answered, -1 with the answer made. */
int s3_object_check(const struct request_view *v, struct answer *a, uint64_t size,
                    const char *etag, const struct s3_query *q, const char *resource);
/* The bucket name of repo id (the caller frees it): '/' spelled "--". */
char *s3_bucket_name(const char *id);
/* A ListBuckets entry. */
void s3_bucket_entry(struct xmlw *w, const char *name, int64_t created_ns);
/* Answers the document w holds (taken) with status. */
struct answer *s3_send_xml(struct answer *a, unsigned status, struct xmlw *w);

#endif
