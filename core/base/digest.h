/* digest: the content hashes of a file read through a descriptor.
 *
 * SHA-256 of the bytes (what Hugging Face calls a file's LFS oid) and, for
 * files up to DIGEST_GIT_SHA1_MAX, the git blob id: SHA-1 of "blob <size>\0"
 * followed by the bytes (what the Hub gives small files as their ETag). Both
 * come from one pass of pread into the caller's buffer: a file is never
 * mapped, so hashing a 100 GB shard costs the buffer, not 100 GB of resident
 * pages. The SHA implementations are OpenSSL's libcrypto, which uses the
 * CPU's SHA extensions where it has them (docs/PERFORMANCE.md compares it
 * with nettle on this project's machines). */
#ifndef TENSORD_DIGEST_H
#define TENSORD_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define DIGEST_SHA256_LEN 32
#define DIGEST_SHA1_LEN 20
/* Files up to this size also get their git blob id: it covers the Hub's
 * 10 MB line between plain git files and LFS files in either unit. */
#define DIGEST_GIT_SHA1_MAX (10ull * 1024 * 1024)

/* The block size to read with. Small on purpose: the block is copied out of
 * the page cache and then hashed, and one that stays in the core's L2
 * between the two makes hashing a cached file 1.4 GB/s instead of 1.0 GB/s
 * with 256 KiB or 1 MiB blocks (docs/PERFORMANCE.md "Content hashes"). */
#define DIGEST_BLOCK (64 * 1024)
/* How far ahead digest_fd asks the kernel to read (POSIX_FADV_WILLNEED),
 * so a file on disk is still read in large requests. */
#define DIGEST_PREFETCH (4u << 20)

struct digest_result {
    uint8_t sha256[DIGEST_SHA256_LEN];
    uint8_t git_sha1[DIGEST_SHA1_LEN]; /* valid when has_git_sha1 */
    int has_git_sha1;
};

/* Called before each read of n bytes; a non-zero return stops the pass
 * (digest_fd then returns -ECANCELED). The hasher paces and cancels here. */
typedef int (*digest_pace_fn)(void *ctx, size_t n);

/* Hashes fd[0..size) with pread in blocks of buflen bytes through buf
 * (buflen > 0). pace may be NULL. Returns 0, -ENODATA when the file ended
 * before size bytes, -ECANCELED, or another negative errno of pread. The
 * caller decides whether the bytes it read were one version of the file
 * (see hasher.c: the identity is compared before and after). */
int digest_fd(int fd, uint64_t size, void *buf, size_t buflen, digest_pace_fn pace, void *ctx,
              struct digest_result *out);

/* A pass over one file that can stop and later resume where it stopped,
 * keeping its digest contexts in between (the hasher's yielded jobs): a
 * yield costs nothing already read. digest_fd is one pass run to its end. */
struct digest_pass;
/* A pass over a file of size bytes (the git blob id is taken too when size
 * is at most DIGEST_GIT_SHA1_MAX). NULL when size is over INT64_MAX. */
struct digest_pass *digest_pass_new(uint64_t size);
/* Hashes fd from where the pass stopped to its end, in blocks of buflen
 * through buf, calling pace before each read. Returns 0 once every byte is
 * in (take the result with digest_pass_final), -ECANCELED when pace stopped
 * it (it may be run again later, on the same version of the file),
 * -ENODATA when the file ended early, or another negative errno of pread
 * (then free it). */
int digest_pass_run(struct digest_pass *p, int fd, void *buf, size_t buflen, digest_pace_fn pace,
                    void *ctx);
/* Bytes hashed so far. */
uint64_t digest_pass_offset(const struct digest_pass *p);
/* The digests of a pass that ran to its end; frees it. */
void digest_pass_final(struct digest_pass *p, struct digest_result *out);
void digest_pass_free(struct digest_pass *p);

/* An incremental SHA-1 over bytes in memory (a repo's commit id and git
 * tree and blob ids, core/registry/reg_repo). */
struct digest_sha1;
struct digest_sha1 *digest_sha1_new(void);
void digest_sha1_update(struct digest_sha1 *d, const void *p, size_t n);
/* Writes the digest into out and frees d. */
void digest_sha1_final(struct digest_sha1 *d, uint8_t out[DIGEST_SHA1_LEN]);

/* Writes n bytes as 2n lowercase hex digits and a NUL into out. */
void digest_hex(const uint8_t *bytes, size_t n, char *out);
/* The SHA-256 of p[0..n) in lowercase hex, NUL-terminated, into out. */
void digest_sha256_hex(const void *p, size_t n, char out[65]);
/* Parses exactly 2n lowercase hex digits from s into out. Returns 0 or
 * -EINVAL. */
int digest_unhex(const char *s, size_t n, uint8_t *out);

#endif
