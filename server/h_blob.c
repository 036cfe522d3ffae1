/* h_blob: content by digest, GET/HEAD /v1/blobs/sha256:{hex} (API.md
 * "Content by digest"), the address Kraken-style and OCI-style engines use.
 *
 * The answer is any served file whose SHA-256 is the digest, once the
 * hasher has computed it (404 until then: a digest is never guessed). The
 * bytes under one digest never change, so the answer is immutable and its
 * validator is the digest itself; it carries nothing that depends on the
 * file's name, inode or mtime, so every replica answers it identically. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "blob_index.h"
#include "digest.h"
#include "handlers.h"
#include "respond.h"
#include "route.h"

#define CACHE_IMMUTABLE "public, max-age=31536000, immutable"

enum MHD_Result handle_blob(struct MHD_Connection *conn, struct request *rq,
                            const struct reg_snapshot *reg, const struct route *rt)
{
    uint8_t digest[32];
    int rc = blob_digest_parse(rt->name, rt->name_len, digest);
    if (rc == -ENOTSUP)
        return respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "blob_not_found",
                             "only sha256 digests are served, not \"%.100s\"", rt->name);
    if (rc < 0)
        return respond_error(conn, rq, MHD_HTTP_BAD_REQUEST, "bad_digest",
                             "a digest is sha256: and 64 lowercase hex digits, not \"%.100s\"",
                             rt->name);
    char hex[65], etag[80], name[72];
    digest_hex(digest, 32, hex);
    const struct reg_root *root = NULL;
    const struct reg_file *f = blob_index_find(rq->srv->blobs, reg, digest, &root);
    if (!f)
        return respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "blob_not_found",
                             "no served file has the content sha256:%s (or its hash is not "
                             "computed yet)", hex);
    int fd = reg_open_below(root, f, O_RDONLY);
    if (fd == -ESTALE)
        return respond_file_changed(conn, rq);
    if (fd == -EMFILE || fd == -ENFILE)
        return respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "overloaded",
                             "out of file descriptors");
    if (fd < 0)
        return respond_error(conn, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, "io_error",
                             "the file with content sha256:%s could not be opened: %s", hex,
                             strerror(-fd));
    snprintf(etag, sizeof(etag), "\"sha256:%s\"", hex);
    snprintf(name, sizeof(name), "sha256:%s", hex);
    const char *extra[] = {"Docker-Content-Digest", name, NULL};
    struct representation rep = {
        .body = {.fd = fd, .data_off = 0, .data_len = f->st.size},
        .content_type = "application/octet-stream",
        .mtime = -1,
        .file_st = &f->st,
        .cache_control = CACHE_IMMUTABLE,
        .extra = extra,
    };
    snprintf(rep.etag, sizeof(rep.etag), "%s", etag);
    enum MHD_Result ret = respond_body(conn, rq, &rep);
    close(fd); /* the answer holds its own duplicate */
    return ret;
}
