/* util: allocation wrappers that abort on OOM, small string helpers. */
#ifndef TENSORD_UTIL_H
#define TENSORD_UTIL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Small allocations abort on failure (one place to report it); large data
 * never goes through malloc (it stays in files and goes out with sendfile). */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
/* Array arr (elements of `size` bytes, room for *cap) with room for at least
 * n + 1: arr itself while n < *cap, else arr grown through xrealloc to twice
 * *cap (`first` when it is 0), *cap updated. */
static inline void *xgrow(void *arr, size_t *cap, size_t n, size_t size, size_t first)
{
    if (n < *cap)
        return arr;
    *cap = *cap ? 2 * *cap : first;
    return xrealloc(arr, *cap * size);
}
/* Wipes the string s (a token) and frees it; NULL is fine. The wipe is one
 * the compiler may not drop as a dead store, as it may a memset before free. */
void free_secret(char *s);
/* Returns a NUL-terminated copy of s[0..n), caller frees. */
char *xstrndup(const char *s, size_t n);
char *xstrdup(const char *s);
/* printf into a new string, caller frees. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Checked arithmetic: return 0 on success, -EOVERFLOW on overflow. */
static inline int u64_mul(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -EOVERFLOW : 0;
}
static inline int u64_add(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_add_overflow(a, b, out) ? -EOVERFLOW : 0;
}

/* 64-bit FNV-1a, used for hash tables and ETag derivation. */
uint64_t hash_fnv1a(const void *data, size_t len, uint64_t seed);
#define HASH_FNV_SEED 0xcbf29ce484222325ULL

/* Copies at most max bytes of s[0..n) into out (max + 4 bytes), NUL-terminated,
 * for a message: control bytes become '?', a cut never splits a UTF-8
 * sequence (s must be UTF-8) and is marked "...". Reads s[max] when n > max.
 * Returns out. */
const char *str_excerpt(const char *s, size_t n, size_t max, char *out);

/* Whether s ends in suffix, with something before it. */
int str_has_suffix(const char *s, const char *suffix);

/* Returns 1 when s[0..n) is well-formed UTF-8 (no overlongs, no surrogates). */
int utf8_valid(const char *s, size_t n);
/* The length of the well-formed UTF-8 sequence at s[0..n) (n > 0), or 0;
 * its code point goes into *cp unless cp is NULL. */
size_t utf8_decode(const char *s, size_t n, uint32_t *cp);
/* The length of code point cp (<= 0x10FFFF) in UTF-8, 1..4 bytes. */
size_t utf8_len(uint32_t cp);
/* Writes cp (<= 0x10FFFF, not a surrogate) in UTF-8 into out; returns its
 * length, utf8_len(cp). */
size_t utf8_encode(uint32_t cp, unsigned char out[4]);

/* Percent-decodes s[0..n) into a new NUL-terminated string (caller frees),
 * its length in *out_len (may be NULL). With PCT_FORM '+' is a space, as
 * HTML forms and Python's urlencode write it (an escaped %2B stays '+').
 * NULL on a bad escape, or on a decoded NUL unless PCT_NUL. */
#define PCT_FORM 1
#define PCT_NUL 2
char *pct_decode(const char *s, size_t n, int flags, size_t *out_len);

/* The value of hexadecimal digit c (either case), or -1. */
int hex_digit_value(unsigned char c);
/* Hexadecimal digits by value: hex_lower[v & 15] is '0'..'9', 'a'..'f'. */
extern const char hex_lower[];
extern const char hex_upper[];

/* Writes the first ndim dimensions of shape in decimal, separated by sep
 * (", " or ","), into out[0..cap) (cap > 0), always NUL-terminated, cut
 * short when it does not fit. Returns the length written. The shape forms
 * of messages ("[2, 3]"), X-Tensor-Shape ("2,3") and inspect all use it. */
size_t shape_format(char *out, size_t cap, const uint64_t *shape, uint32_t ndim, const char *sep);

/* Reads the run of decimal digits that starts s[0..n) (no sign, no blanks;
 * leading zeros allowed: callers that refuse them check s[0]) into *value
 * and its length into *used; what follows the run is the caller's to check.
 * A NUL or any other non-digit ends the run, so a NUL-terminated s may pass
 * n = SIZE_MAX.
 * Returns 0, -EINVAL when s does not start with a digit, or -ERANGE when
 * the number does not fit in 64 bits (nothing is stored then). */
int decimal_u64(const char *s, size_t n, uint64_t *value, size_t *used);

/* Monotonic clock in nanoseconds. */
uint64_t time_mono_ns(void);
/* The CLOCK_REALTIME time ms from now: a deadline for pthread_cond_timedwait. */
struct timespec time_real_after(unsigned ms);
/* A secret seed for a hash table that hostile keys must not be able to aim
 * at: from getrandom, or, while the kernel's pool is not ready (early boot),
 * from the clock and `salt` (an address). */
uint64_t hash_seed(const void *salt);

#endif
