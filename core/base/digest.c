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

#include "fileio.h"
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

struct digest_pass {
    EVP_MD_CTX *sha256;
    EVP_MD_CTX *sha1;   /* NULL for files over DIGEST_GIT_SHA1_MAX */
    uint64_t size, off; /* the file's size; bytes hashed so far */
    uint64_t ahead;     /* prefetch asked for up to here */
};

struct digest_pass *digest_pass_new(uint64_t size)
{
    if (size > (uint64_t)INT64_MAX)
        return NULL;
    struct digest_pass *p = xcalloc(1, sizeof(*p));
    p->size = size;
    p->sha256 = md_new(EVP_sha256());
    if (size <= DIGEST_GIT_SHA1_MAX) {
        char head[32];
        int n = snprintf(head, sizeof(head), "blob %" PRIu64, size);
        p->sha1 = md_new(EVP_sha1());
        EVP_DigestUpdate(p->sha1, head, (size_t)n + 1); /* the NUL is part of the header */
    }
    return p;
}

int digest_pass_run(struct digest_pass *p, int fd, void *buf, size_t buflen, digest_pace_fn pace,
                    void *ctx)
{
    p->ahead = p->off; /* a resumed pass asks for its window again */
    while (p->off < p->size) {
        size_t want = p->size - p->off < buflen ? (size_t)(p->size - p->off) : buflen;
        if (p->off >= p->ahead && p->ahead < p->size) {
            /* Small copies, large disk reads: ask for the next window early
             * (it leaves the descriptor's own readahead state alone, which
             * the serving side shares through dup). */
            posix_fadvise(fd, (off_t)p->off, (off_t)DIGEST_PREFETCH, POSIX_FADV_WILLNEED);
            p->ahead = p->off + DIGEST_PREFETCH / 2;
        }
        if (pace && pace(ctx, want) != 0)
            return -ECANCELED;
        int rc = fileio_pread_full(fd, buf, want, p->off);
        if (rc != 0)
            return rc;
        EVP_DigestUpdate(p->sha256, buf, want);
        if (p->sha1)
            EVP_DigestUpdate(p->sha1, buf, want);
        p->off += want;
    }
    return 0;
}

uint64_t digest_pass_offset(const struct digest_pass *p)
{
    return p->off;
}

void digest_pass_final(struct digest_pass *p, struct digest_result *out)
{
    memset(out, 0, sizeof(*out));
    md_final(p->sha256, out->sha256);
    if (p->sha1) {
        md_final(p->sha1, out->git_sha1);
        out->has_git_sha1 = 1;
    }
    free(p);
}

void digest_pass_free(struct digest_pass *p)
{
    if (!p)
        return;
    EVP_MD_CTX_free(p->sha256);
    EVP_MD_CTX_free(p->sha1);
    free(p);
}

int digest_fd(int fd, uint64_t size, void *buf, size_t buflen, digest_pace_fn pace, void *ctx,
              struct digest_result *out)
{
    memset(out, 0, sizeof(*out)); /* never a digest of part of a file */
    struct digest_pass *p = digest_pass_new(size);
    if (!p)
        return -EOVERFLOW;
    int rc = digest_pass_run(p, fd, buf, buflen, pace, ctx);
    if (rc == 0)
        digest_pass_final(p, out);
    else
        digest_pass_free(p);
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

void digest_sha256_hex(const void *p, size_t n, char out[65])
{
    uint8_t md[DIGEST_SHA256_LEN];
    EVP_Digest(p, n, md, NULL, EVP_sha256(), NULL);
    digest_hex(md, DIGEST_SHA256_LEN, out);
}

int digest_unhex(const char *s, size_t n, uint8_t *out)
{
    /* Lowercase only: one spelling per digest, so files compare bytewise.
     * A NUL stops the scan before the byte after it is read. */
    for (size_t i = 0; i < 2 * n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return -EINVAL;
    for (size_t i = 0; i < n; i++)
        out[i] = (uint8_t)(hex_digit_value((unsigned char)s[2 * i]) << 4 |
                           hex_digit_value((unsigned char)s[2 * i + 1]));
    return 0;
}
