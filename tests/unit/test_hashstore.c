/* hashstore: a hash is found for exactly the identity it was recorded
 * under; saves keep what is in use and a bounded number of others;
 * concurrent readers see whole entries. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "hashstore.h"
#include "test.h"
#include "util.h"

static struct hash_entry entry(uint64_t n)
{
    struct hash_entry e;
    memset(&e, 0, sizeof(e));
    e.id = (struct hash_id){.dev = 2049, .ino = 1000 + n, .size = n * 7,
                            .mtime_ns = (int64_t)n * 1000 - 5, .ctime_ns = (int64_t)n * 1000};
    for (int i = 0; i < DIGEST_SHA256_LEN; i++)
        e.sha256[i] = (uint8_t)(n * 31 + (uint64_t)i);
    e.has_git_sha1 = 1;
    e.git_sha1[0] = (uint8_t)n;
    return e;
}

/* Regression: the first entry of a new store was indexed before it was
 * written, so it could never be found again (and was hashed twice). */
TEST(every_entry_is_found)
{
    struct hashstore *s = hashstore_new();
    for (uint64_t n = 0; n < 5000; n++) {
        struct hash_entry e = entry(n);
        CHECK(hashstore_put(s, &e, 1) == 0);
    }
    CHECK_EQ_U64(hashstore_count(s), 5000);
    size_t found = 0;
    for (uint64_t n = 0; n < 5000; n++) {
        struct hash_entry want = entry(n), got;
        if (hashstore_lookup(s, &want.id, &got) && memcmp(&got, &want, sizeof(got)) == 0)
            found++;
    }
    CHECK_EQ_U64(found, 5000);
    hashstore_free(s);
}

TEST(identity_is_exact)
{
    struct hashstore *s = hashstore_new();
    struct hash_entry e = entry(7);
    hashstore_put(s, &e, 1);
    CHECK(hashstore_lookup(s, &e.id, NULL));
    struct hash_id ids[5];
    for (int i = 0; i < 5; i++)
        ids[i] = e.id;
    ids[0].dev++;
    ids[1].ino++;
    ids[2].size++;
    ids[3].mtime_ns++;
    ids[4].ctime_ns++; /* mtime restored by the writer, ctime moved anyway */
    for (int i = 0; i < 5; i++)
        CHECK(!hashstore_lookup(s, &ids[i], NULL));
    /* Recording under the same identity replaces. */
    e.sha256[0] ^= 0xff;
    hashstore_put(s, &e, 1);
    struct hash_entry got;
    CHECK(hashstore_lookup(s, &e.id, &got) && got.sha256[0] == e.sha256[0]);
    CHECK_EQ_U64(hashstore_count(s), 1);
    hashstore_free(s);
}

TEST(id_from_stat)
{
    struct fileio_stat st = {.size = 5, .mtime_ns = -3, .ctime_ns = 9, .dev = 1, .ino = 2};
    struct hash_id id, want = {.dev = 1, .ino = 2, .size = 5, .mtime_ns = -3, .ctime_ns = 9};
    hash_id_from_stat(&st, &id);
    CHECK(hash_id_equal(&id, &want));
}

TEST(save_plan_keeps_in_use_and_bounded_spares)
{
    struct hashstore *s = hashstore_new();
    size_t n_used = 10, n_old = HASHSTORE_SPARE_MIN + 100;
    for (uint64_t n = 0; n < n_old; n++) { /* older epochs: 1..n_old, most recent last */
        struct hash_entry e = entry(n);
        hashstore_put(s, &e, 1 + n);
    }
    for (uint64_t n = n_old; n < n_old + n_used; n++) {
        struct hash_entry e = entry(n);
        hashstore_put(s, &e, 100000);
    }
    const struct hash_entry *kept;
    size_t n_kept;
    struct hashstore_plan *p = hashstore_plan_save(s, 100000, &kept, &n_kept);
    CHECK(p != NULL);
    CHECK_EQ_U64(n_kept, n_used + HASHSTORE_SPARE_MIN);
    for (size_t i = 1; i < n_kept; i++) /* sorted by identity */
        CHECK(kept[i - 1].id.ino < kept[i].id.ino);
    /* The 100 least recently used are dropped, except one used again
     * between the plan and its end. */
    struct hash_entry again = entry(0);
    CHECK(hashstore_touch(s, &again.id, 100000, NULL));
    hashstore_end_save(s, p, 1);
    CHECK_EQ_U64(hashstore_count(s), n_used + HASHSTORE_SPARE_MIN + 1);
    CHECK(hashstore_lookup(s, &again.id, NULL));
    struct hash_entry gone = entry(1), young = entry(n_old - 1);
    CHECK(!hashstore_lookup(s, &gone.id, NULL));
    CHECK(hashstore_lookup(s, &young.id, NULL));
    /* Nothing put since: nothing to save. */
    CHECK(hashstore_plan_save(s, 100000, &kept, &n_kept) == NULL);
    struct hash_entry e = entry(999999);
    hashstore_put(s, &e, 100000);
    p = hashstore_plan_save(s, 100000, &kept, &n_kept);
    CHECK(p != NULL);
    hashstore_end_save(s, p, 0); /* the write failed: still unsaved, nothing dropped */
    p = hashstore_plan_save(s, 100000, &kept, &n_kept);
    CHECK(p != NULL);
    hashstore_end_save(s, p, 1);
    hashstore_free(s);
}

TEST(loaded)
{
    struct hashstore *s = hashstore_new();
    struct hash_entry e = entry(1);
    const struct hash_entry *kept;
    size_t n;
    hashstore_put(s, &e, 1);
    hashstore_loaded(s, 1);
    CHECK(hashstore_plan_save(s, 1, &kept, &n) == NULL);
    CHECK(hashstore_lookup(s, &e.id, NULL));
    hashstore_loaded(s, 0); /* a state file that failed half-way: nothing of it kept */
    CHECK(hashstore_plan_save(s, 1, &kept, &n) == NULL);
    CHECK_EQ_U64(hashstore_count(s), 0);
    CHECK(!hashstore_lookup(s, &e.id, NULL));
    hashstore_put(s, &e, 1);
    CHECK(hashstore_lookup(s, &e.id, NULL));
    hashstore_free(s);
}

static struct hashstore *shared;

static void *reader(void *arg)
{
    (void)arg;
    size_t torn = 0;
    for (int round = 0; round < 200; round++)
        for (uint64_t n = 0; n < 500; n++) {
            struct hash_entry want = entry(n), got;
            if (hashstore_lookup(shared, &want.id, &got) && memcmp(&got, &want, sizeof(got)) != 0)
                torn++;
        }
    return (void *)(uintptr_t)torn;
}

TEST(concurrent_lookups_see_whole_entries)
{
    shared = hashstore_new();
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, reader, NULL);
    for (uint64_t n = 0; n < 500; n++) {
        struct hash_entry e = entry(n);
        hashstore_put(shared, &e, 1);
    }
    for (int i = 0; i < 3; i++) {
        void *torn;
        pthread_join(t[i], &torn);
        CHECK(torn == NULL);
    }
    hashstore_free(shared);
}

/* Regression: the store's growth (its size is the state file's choice)
 * went through xrealloc and aborted the daemon when memory ran out. Now a
 * put that cannot grow returns -ENOMEM and leaves the store as it was. */
TEST(out_of_memory_leaves_the_store_intact)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    printf("  SKIP: ASan and TSan need their address space, no RLIMIT_AS test\n");
    return;
#endif
    struct hashstore *s = hashstore_new();
    struct rlimit old, tight;
    CHECK(getrlimit(RLIMIT_AS, &old) == 0);
    tight = old;
    tight.rlim_cur = vm_size_bytes() + (4u << 20); /* room for ~30k entries, not 1M */
    CHECK(setrlimit(RLIMIT_AS, &tight) == 0);
    uint64_t n = 0;
    int rc = 0;
    while (n < HASHSTORE_MAX_ENTRIES) {
        struct hash_entry e = entry(n);
        if ((rc = hashstore_put(s, &e, 1)) != 0)
            break;
        n++;
    }
    CHECK(setrlimit(RLIMIT_AS, &old) == 0);
    CHECK(rc == -ENOMEM);
    CHECK(n > 0 && n < HASHSTORE_MAX_ENTRIES);
    CHECK(hashstore_count(s) == n);
    struct hash_entry e = entry(n);
    CHECK(hashstore_put(s, &e, 1) == 0); /* with room again it grows */
    for (uint64_t i = 0; i <= n; i++) {
        e = entry(i);
        CHECK(hashstore_lookup(s, &e.id, NULL) == 1);
    }
    hashstore_free(s);
}

int main(void)
{
    RUN(every_entry_is_found);
    RUN(identity_is_exact);
    RUN(id_from_stat);
    RUN(save_plan_keeps_in_use_and_bounded_spares);
    RUN(loaded);
    RUN(concurrent_lookups_see_whole_entries);
    RUN(out_of_memory_leaves_the_store_intact);
    return TEST_SUMMARY();
}
