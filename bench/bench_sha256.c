/* Benchmark: SHA-256 (and SHA-1, which git blob ids use) throughput on one
 * core, OpenSSL's libcrypto against nettle, on the same buffer.
 *
 *   make bench-sha256          (builds build/bench_sha256 and runs it)
 *   build/bench_sha256 [MiB] [runs]
 *
 * Each run hashes MiB mebibytes of pseudo-random bytes held in memory (so no
 * I/O is measured), fed in 1 MiB updates as the hasher feeds file blocks;
 * the median run is reported in GB/s (10^9 bytes per second). The process
 * is pinned to the CPU it starts on so one core is measured. The digests of
 * both libraries are compared: a mismatch fails the run. Whether the CPU has
 * the SHA extensions (sha_ni in /proc/cpuinfo) is printed alongside. */
#include <nettle/sha1.h>
#include <nettle/sha2.h>
#include <nettle/version.h>
#include <openssl/evp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHUNK (1u << 20)
#define MAX_RUNS 31

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

enum lib { LIB_OPENSSL, LIB_NETTLE };
enum algo { ALGO_SHA256, ALGO_SHA1 };

/* Hashes buf[0..len) once; returns the digest length written to out. */
static size_t hash_once(enum lib lib, enum algo algo, const unsigned char *buf, size_t len,
                        unsigned char *out)
{
    if (lib == LIB_OPENSSL) {
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        unsigned n = 0;
        if (!ctx || !EVP_DigestInit_ex(ctx, algo == ALGO_SHA256 ? EVP_sha256() : EVP_sha1(), NULL))
            abort();
        for (size_t off = 0; off < len; off += CHUNK)
            EVP_DigestUpdate(ctx, buf + off, len - off < CHUNK ? len - off : CHUNK);
        EVP_DigestFinal_ex(ctx, out, &n);
        EVP_MD_CTX_free(ctx);
        return n;
    }
    if (algo == ALGO_SHA256) {
        struct sha256_ctx c;
        sha256_init(&c);
        for (size_t off = 0; off < len; off += CHUNK)
            sha256_update(&c, len - off < CHUNK ? len - off : CHUNK, buf + off);
        sha256_digest(&c, SHA256_DIGEST_SIZE, out);
        return SHA256_DIGEST_SIZE;
    }
    struct sha1_ctx c;
    sha1_init(&c);
    for (size_t off = 0; off < len; off += CHUNK)
        sha1_update(&c, len - off < CHUNK ? len - off : CHUNK, buf + off);
    sha1_digest(&c, SHA1_DIGEST_SIZE, out);
    return SHA1_DIGEST_SIZE;
}

/* Median GB/s over runs; out gets the digest. */
static double measure(enum lib lib, enum algo algo, const unsigned char *buf, size_t len,
                      int runs, unsigned char *out)
{
    uint64_t t[MAX_RUNS];
    hash_once(lib, algo, buf, len, out); /* warm-up: caches, frequency */
    for (int i = 0; i < runs; i++) {
        uint64_t t0 = now_ns();
        hash_once(lib, algo, buf, len, out);
        t[i] = now_ns() - t0;
    }
    qsort(t, (size_t)runs, sizeof(t[0]), cmp_u64);
    return (double)len / (double)t[runs / 2];
}

static int cpu_has_sha_ni(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f))
        found = strncmp(line, "flags", 5) == 0 && strstr(line, " sha_ni") != NULL;
    if (f)
        fclose(f);
    return found;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 256;
    int runs = argc > 2 ? atoi(argv[2]) : 7;
    if (mib == 0 || mib > 4096 || runs < 1 || runs > MAX_RUNS) {
        fprintf(stderr, "usage: bench_sha256 [MiB 1..4096] [runs 1..%d]\n", MAX_RUNS);
        return 2;
    }
    int cpu = sched_getcpu();
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof(set), &set);
    }
    size_t len = mib << 20;
    unsigned char *buf = malloc(len);
    if (!buf)
        return 1;
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < len; i++) { /* xorshift: incompressible, reproducible */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    printf("cpu %d, sha_ni %s, %s, nettle %d.%d, %zu MiB x %d runs (median)\n", cpu,
           cpu_has_sha_ni() ? "yes" : "no", OpenSSL_version(OPENSSL_VERSION),
           NETTLE_VERSION_MAJOR, NETTLE_VERSION_MINOR, mib, runs);
    static const char *const algo_names[] = {"sha256", "sha1"};
    int bad = 0;
    for (int a = ALGO_SHA256; a <= ALGO_SHA1; a++) {
        unsigned char d1[64], d2[64];
        double o = measure(LIB_OPENSSL, (enum algo)a, buf, len, runs, d1);
        size_t n = hash_once(LIB_NETTLE, (enum algo)a, buf, len, d2);
        double nt = measure(LIB_NETTLE, (enum algo)a, buf, len, runs, d2);
        int same = memcmp(d1, d2, n) == 0;
        bad |= !same;
        printf("%-6s  openssl %6.2f GB/s   nettle %6.2f GB/s   digests %s\n", algo_names[a], o,
               nt, same ? "agree" : "DIFFER");
    }
    free(buf);
    return bad;
}
