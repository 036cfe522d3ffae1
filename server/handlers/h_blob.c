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

#include "blob_index.h"
#include "digest.h"
#include "h_mirror.h"
#include "handlers.h"
#include "mirror.h"
#include "route.h"

/* The answer for the file fd (size bytes; st its validated version, or
 * NULL for a mirror's file, which never changes) with digest hex. */
static struct answer *send_blob(struct answer *a, int fd, uint64_t size,
                                const struct fileio_stat *st, const char *hex)
{
    answer_header(a, "Docker-Content-Digest", answer_printf(a, "sha256:%s", hex));
    struct representation rep = {
        .body = {.fd = fd, .data_off = 0, .data_len = size},
        .content_type = "application/octet-stream",
        .mtime = -1,
        .file_st = st,
        .cache_control = "public, max-age=31536000, immutable",
    };
    snprintf(rep.etag, sizeof(rep.etag), "\"sha256:%s\"", hex);
    return answer_body(a, &rep);
}

struct answer *handle_blob(const struct request_view *v, struct answer *a,
                           const struct reg_snapshot *reg, const struct route *rt)
{
    uint8_t digest[32];
    int rc = blob_digest_parse(rt->name, rt->name_len, digest);
    if (rc == -ENOTSUP)
        return answer_error(a, HTTP_NOT_FOUND, "blob_not_found",
                            "only sha256 digests are served, not \"%.100s\"", rt->name);
    if (rc < 0)
        return answer_error(a, HTTP_BAD_REQUEST, "bad_digest",
                            "a digest is sha256: and 64 lowercase hex digits, not \"%.100s\"",
                            rt->name);
    char hex[65];
    digest_hex(digest, 32, hex);
    const struct reg_root *root = NULL;
    const struct reg_file *f = blob_index_find(v->srv->blobs, reg, digest, &root);
    struct mirror_file *mf = f || !v->srv->mirror ? NULL
                                                  : mirror_find_complete(v->srv->mirror, digest);
    if (mf) { /* a mirror's complete file: held until the request ends */
        mirror_answer_hold(a, v->srv->mirror, mf);
        return send_blob(a, mirror_file_fd(mf), mirror_file_size(mf), NULL, hex);
    }
    if (!f)
        return answer_error(a, HTTP_NOT_FOUND, "blob_not_found",
                            "no served file has the content sha256:%s (or its hash is not "
                            "computed yet)", hex);
    int fd = reg_open_below(root, f, O_RDONLY);
    if (fd == -ESTALE)
        return answer_file_changed(a);
    if (fd == -EMFILE || fd == -ENFILE)
        return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "overloaded", "out of file descriptors");
    if (fd < 0)
        return answer_error(a, HTTP_INTERNAL_SERVER_ERROR, "io_error",
                            "the file with content sha256:%s could not be opened: %s", hex,
                            strerror(-fd));
    a->fd = fd; /* the response holds its own duplicate */
    return send_blob(a, fd, f->st.size, &f->st, hex);
}
