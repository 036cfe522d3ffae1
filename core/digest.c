/* digest: one pass of pread feeding SHA-256 and, for small files, the git
 * blob SHA-1 (see digest.h). */
#include "digest.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

/* A context that cannot be set up means libcrypto is out of memory or
 * broken: like a failed small allocation, that stops the process. */
static EVP_MD_CTX *md_new(const EVP_MD *md)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c || EVP_DigestInit_ex(c, md, NULL) != 1) {
        fprintf(stderr, "tensord: libcrypto cannot start a digest\n");
        abort();
    }
    return c;
}

static void md_final(EVP_MD_CTX *c, uint8_t *out)
{
    unsigned n = 0;
    if (EVP_DigestFinal_ex(c, out, &n) != 1) {
        fprintf(stderr, "tensord: libcrypto cannot finish a digest\n");
        abort();
    }
    EVP_MD_CTX_free(c);
}

int digest_fd(int fd, uint64_t size, void *buf, size_t buflen, digest_pace_fn pace, void *ctx,
              struct digest_result *out)
{
    int rc = 0;
    memset(out, 0, sizeof(*out));
    if (size > (uint64_t)INT64_MAX)
        return -EOVERFLOW;
    EVP_MD_CTX *sha256 = md_new(EVP_sha256());
    EVP_MD_CTX *sha1 = NULL;
    if (size <= DIGEST_GIT_SHA1_MAX) {
        char head[32];
        int n = snprintf(head, sizeof(head), "blob %" PRIu64, size);
        sha1 = md_new(EVP_sha1());
        EVP_DigestUpdate(sha1, head, (size_t)n + 1); /* the NUL is part of the header */
    }
    uint64_t off = 0, ahead = 0;
    while (off < size) {
        size_t want = size - off < buflen ? (size_t)(size - off) : buflen;
        if (off >= ahead && ahead < size) {
            /* Small copies, large disk reads: ask for the next window early
             * (it leaves the descriptor's own readahead state alone, which
             * the serving side shares through dup). */
            uint64_t from = off > ahead ? off : ahead;
            posix_fadvise(fd, (off_t)from, (off_t)DIGEST_PREFETCH, POSIX_FADV_WILLNEED);
            ahead = from + DIGEST_PREFETCH / 2;
        }
        if (pace && pace(ctx, want) != 0) {
            rc = -ECANCELED;
            goto done;
        }
        ssize_t r = pread(fd, buf, want, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            goto done;
        }
        if (r == 0) {
            rc = -ENODATA;
            goto done;
        }
        EVP_DigestUpdate(sha256, buf, (size_t)r);
        if (sha1)
            EVP_DigestUpdate(sha1, buf, (size_t)r);
        off += (uint64_t)r;
    }
done:
    md_final(sha256, out->sha256);
    if (sha1) {
        md_final(sha1, out->git_sha1);
        out->has_git_sha1 = rc == 0;
    }
    if (rc != 0)
        memset(out, 0, sizeof(*out)); /* never a digest of part of a file */
    return rc;
}

struct digest_sha1 *digest_sha1_new(void)
{
    return (struct digest_sha1 *)md_new(EVP_sha1());
}

void digest_sha1_update(struct digest_sha1 *d, const void *p, size_t n)
{
    if (n && EVP_DigestUpdate((EVP_MD_CTX *)d, p, n) != 1) {
        fprintf(stderr, "tensord: libcrypto cannot update a digest\n");
        abort();
    }
}

void digest_sha1_final(struct digest_sha1 *d, uint8_t out[DIGEST_SHA1_LEN])
{
    md_final((EVP_MD_CTX *)d, out);
}

void digest_hex(const uint8_t *bytes, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex_lower[bytes[i] >> 4];
        out[2 * i + 1] = hex_lower[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

int digest_unhex(const char *s, size_t n, uint8_t *out)
{
    /* Lowercase only: one spelling per digest, so files compare bytewise.
     * A NUL stops the scan before the byte after it is read. */
    for (size_t i = 0; i < 2 * n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return -1;
    for (size_t i = 0; i < n; i++)
        out[i] = (uint8_t)(hex_digit_value((unsigned char)s[2 * i]) << 4 |
                           hex_digit_value((unsigned char)s[2 * i + 1]));
    return 0;
}
