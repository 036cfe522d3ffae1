/* nameset: adds, duplicates (found through their hash tag and bytes, with
 * the equal name handed back), growth from an empty set to 300,000 names,
 * names that differ only in length or in their last byte, and sizes no
 * table can have refused rather than attempted. */
#include <errno.h>
#include <stdlib.h>

#include "nameset.h"
#include "test.h"
#include "util.h"

/* A region of NUL-terminated names "n0", "n1", ... and their offsets. */
static char *make_region(size_t n, size_t *offs)
{
    char *r = xmalloc(n * 12 + 1), *p = r;
    for (size_t i = 0; i < n; i++) {
        offs[i] = (size_t)(p - r);
        p += sprintf(p, "n%zu", i) + 1;
    }
    return r;
}

static int add(struct nameset *ns, const char *name, const char **found)
{
    size_t len = strlen(name);
    return nameset_add(ns, nameset_hash(ns, name, len), name, len, found);
}

TEST(add_and_find_duplicates)
{
    char region[] = "alpha\0beta\0alpha\0alph\0alphab\0";
    struct nameset ns;
    CHECK(nameset_init(&ns, 4, region) == 0);
    const char *found = NULL;
    CHECK(add(&ns, region, &found) == 0);
    CHECK(add(&ns, region + 6, &found) == 0);
    /* an equal name elsewhere in the region: the first is handed back */
    CHECK(add(&ns, region + 11, &found) == -EEXIST);
    CHECK(found == region);
    /* a prefix and an extension are different names */
    CHECK(add(&ns, region + 17, NULL) == 0);
    CHECK(add(&ns, region + 22, NULL) == 0);
    CHECK_EQ_U64(ns.count, 4);
    nameset_free(&ns);
    nameset_free(&ns); /* harmless twice */
}

TEST(grows_from_empty)
{
    size_t n = 300000;
    size_t *offs = xmalloc(n * sizeof(*offs));
    char *r = make_region(n, offs);
    struct nameset ns;
    CHECK(nameset_init(&ns, 0, r) == 0);
    size_t first_slots = ns.mask + 1;
    for (size_t i = 0; i < n; i++)
        CHECK(add(&ns, r + offs[i], NULL) == 0);
    CHECK(ns.mask + 1 > first_slots);
    CHECK(ns.count == n && (ns.mask + 1) >= 2 * n);
    /* after all the growing, every name is still found */
    for (size_t i = 0; i < n; i += 997) {
        const char *found = NULL;
        CHECK(add(&ns, r + offs[i], &found) == -EEXIST);
        CHECK(found == r + offs[i]);
    }
    nameset_free(&ns);
    free(r);
    free(offs);
}

TEST(sized_sets_do_not_grow)
{
    size_t n = 1000, offs[1000];
    char *r = make_region(n, offs);
    struct nameset ns;
    CHECK(nameset_init(&ns, n, r) == 0);
    uint64_t *slots = ns.slots;
    for (size_t i = 0; i < n; i++)
        CHECK(add(&ns, r + offs[i], NULL) == 0);
    CHECK(ns.slots == slots);
    nameset_free(&ns);
    free(r);
}

TEST(impossible_sizes_are_refused)
{
    struct nameset ns;
    CHECK(nameset_init(&ns, SIZE_MAX / 2, "") == -ENOMEM);
    CHECK(ns.slots == NULL);
    nameset_free(&ns);
}

int main(void)
{
    RUN(add_and_find_duplicates);
    RUN(grows_from_empty);
    RUN(sized_sets_do_not_grow);
    RUN(impossible_sizes_are_refused);
    return TEST_SUMMARY();
}
