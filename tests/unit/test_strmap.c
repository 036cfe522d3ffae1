/* strmap: put/get, duplicates, keys that differ only in length or one
 * byte, growth from a tiny size hint, and 500k keys in well under a second. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "strmap.h"
#include "test.h"
#include "util.h"

TEST(basic)
{
    struct strmap *m = strmap_new(0);
    int a = 1, b = 2;
    CHECK(strmap_get(m, "a", 1) == NULL);
    CHECK(strmap_put(m, "a", 1, &a) == 0);
    CHECK(strmap_put(m, "b", 1, &b) == 0);
    CHECK(strmap_get(m, "a", 1) == &a);
    CHECK(strmap_get(m, "b", 1) == &b);
    CHECK(strmap_get(m, "c", 1) == NULL);
    strmap_free(m);
}

TEST(duplicates_rejected)
{
    struct strmap *m = strmap_new(4);
    int a = 1, b = 2;
    CHECK(strmap_put(m, "key", 3, &a) == 0);
    CHECK(strmap_put(m, "key", 3, &b) == -EEXIST);
    CHECK(strmap_get(m, "key", 3) == &a); /* unchanged */
    strmap_free(m);
}

TEST(length_and_prefix)
{
    /* Keys are byte strings: "ab" in "abc" with len 2 is "ab", and the empty
     * key and keys with NUL bytes are ordinary keys. */
    struct strmap *m = strmap_new(1);
    int v[5];
    CHECK(strmap_put(m, "abc", 2, &v[0]) == 0);
    CHECK(strmap_put(m, "abc", 3, &v[1]) == 0);
    CHECK(strmap_put(m, "", 0, &v[2]) == 0);
    CHECK(strmap_put(m, "a\0b", 3, &v[3]) == 0);
    CHECK(strmap_put(m, "a\0c", 3, &v[4]) == 0);
    CHECK(strmap_get(m, "ab", 2) == &v[0]);
    CHECK(strmap_get(m, "abc", 3) == &v[1]);
    CHECK(strmap_get(m, "", 0) == &v[2]);
    CHECK(strmap_get(m, NULL, 0) == &v[2]);
    CHECK(strmap_get(m, "a\0b", 3) == &v[3]);
    CHECK(strmap_get(m, "a\0c", 3) == &v[4]);
    CHECK(strmap_get(m, "a", 1) == NULL);
    CHECK(strmap_put(m, "", 0, &v[0]) == -EEXIST);
    strmap_free(m);
}

TEST(null_map)
{
    CHECK(strmap_get(NULL, "x", 1) == NULL);
    strmap_free(NULL);
}

/* Keys that collide on their home slot: in a table of 8 slots many keys
 * share one, so probing, wrap-around and growth are all exercised. */
TEST(collisions)
{
    enum { N = 200 };
    static char keys[N][16];
    struct strmap *m = strmap_new(0);
    for (int i = 0; i < N; i++) {
        int n = snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        CHECK(strmap_put(m, keys[i], (size_t)n, keys[i]) == 0);
        /* every earlier key still found after each insertion (and growth) */
        for (int k = 0; k <= i; k += 37)
            CHECK(strmap_get(m, keys[k], strlen(keys[k])) == keys[k]);
    }
    for (int i = 0; i < N; i++)
        CHECK(strmap_get(m, keys[i], strlen(keys[i])) == keys[i]);
    CHECK(strmap_get(m, "k200", 4) == NULL);
    strmap_free(m);
}

static double now(void)
{
    return (double)time_mono_ns() / 1e9;
}

TEST(half_million_keys)
{
    enum { N = 500000 };
    char *buf = xmalloc((size_t)N * 32);
    size_t *len = xmalloc(N * sizeof(*len));
    for (size_t i = 0; i < N; i++)
        len[i] = (size_t)snprintf(buf + i * 32, 32, "model.layers.%zu.weight", i);
    double t0 = now();
    struct strmap *m = strmap_new(16); /* grows all the way */
    for (size_t i = 0; i < N; i++)
        CHECK(strmap_put(m, buf + i * 32, len[i], (void *)(uintptr_t)(i + 1)) == 0);
    for (size_t i = 0; i < N; i++)
        if ((uintptr_t)strmap_get(m, buf + i * 32, len[i]) != i + 1) {
            CHECK(!"lookup");
            break;
        }
    for (size_t i = 0; i < N; i += 1000)
        CHECK(strmap_put(m, buf + i * 32, len[i], NULL) == -EEXIST);
    CHECK(strmap_get(m, "model.layers.500000.weight", 26) == NULL);
    double dt = now() - t0;
    printf("  500k puts + gets: %.3f s\n", dt);
    CHECK(dt < 2.0);
    strmap_free(m);
    free(buf);
    free(len);
}

TEST(fallible_variants)
{
    /* try_new: up to `expected` keys go in without the table growing */
    struct strmap *m = strmap_try_new(1000);
    CHECK(m != NULL);
    char keys[1000][8];
    for (int i = 0; i < 1000; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        CHECK(strmap_try_put(m, keys[i], strlen(keys[i]), keys[i]) == 0);
    }
    CHECK(strmap_try_put(m, "k7", 2, NULL) == -EEXIST);
    CHECK(strmap_get(m, "k7", 2) == keys[7]);
    /* past it, the table grows (and could fail with -ENOMEM, unchanged) */
    CHECK(strmap_try_put(m, "extra", 5, NULL) == 0);
    CHECK(strmap_get(m, "k999", 4) == keys[999]);
    strmap_free(m);
    /* a count no table can hold is refused, not attempted */
    CHECK(strmap_try_new(SIZE_MAX / 2) == NULL);
    CHECK(strmap_try_new((size_t)1 << 62) == NULL);
}

int main(void)
{
    RUN(basic);
    RUN(duplicates_rejected);
    RUN(length_and_prefix);
    RUN(null_map);
    RUN(collisions);
    RUN(half_million_keys);
    RUN(fallible_variants);
    return TEST_SUMMARY();
}
