/* Unit tests for mirror/mirror_names.c, the last answers a mirror's upstream
 * gave, kept for an outage: what was given without a token is served to
 * anyone; what a caller's token was given, to that token only and only
 * within mirror_auth_ttl; what the mirror's own questions were given, to
 * them; strict mode keeps nothing; the first two outlive the mirror (on
 * disk), a caller's do not; a file that is not what it names is ignored;
 * the disk keeps at most NAMES_DISK_FILES answers, and callers' never push
 * out the mirror's own. */
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include "log.h"
#include "mirror.h"
#include "mirror_names.h"
#include "test.h"
#include "util.h"

static char dir[] = "/tmp/test_mirror_names.XXXXXX";

static struct mirror *start(unsigned ttl, int serve_stale)
{
    char *cache = xasprintf("%s/cache", dir);
    struct mirror_options o = {.upstream = "http://127.0.0.1:9", .cache_dir = cache,
                               .max_bytes = 1 << 20, .block_bytes = 65536, .fetch_threads = 1,
                               .auth_ttl = ttl, .own_auth = "Bearer own", .serve_stale = serve_stale,
                               .stale_max_age = 3600};
    struct st_error err;
    struct mirror *m = mirror_new(&o, &err);
    CHECK(m != NULL);
    free(cache);
    return m;
}

static const struct mirror_asker nobody = {NULL, 0}, alice = {"Bearer alice", 0},
                                 bob = {"Bearer bob", 0}, own = {"Bearer own", 1};

/* Whether asker gets key's answer, and it is want. */
static int gets(struct mirror *m, const char *key, const struct mirror_asker *a, const char *want)
{
    char *data;
    size_t len;
    int64_t age = -1;
    int found = mirror_names_get(m, key, a, &data, &len, &age);
    if (!found)
        return 0;
    int same = len == strlen(want) && memcmp(data, want, len) == 0 && age >= 0 && age < 5;
    free(data);
    return same ? 1 : -1;
}

/* Whether asker gets key's answer, whatever its age (a flood of answers
 * on a loaded machine takes longer than gets allows). */
static int kept(struct mirror *m, const char *key, const struct mirror_asker *a, const char *want)
{
    char *data;
    size_t len;
    int64_t age;
    if (!mirror_names_get(m, key, a, &data, &len, &age))
        return 0;
    int same = len == strlen(want) && memcmp(data, want, len) == 0;
    free(data);
    return same;
}

TEST(whom_answers_are_served_to)
{
    struct mirror *m = start(30, 1);
    mirror_names_put(m, "public", &nobody, "p", 1);
    mirror_names_put(m, "gated", &alice, "g", 1);
    mirror_names_put(m, "mine", &own, "o", 1);
    CHECK(gets(m, "public", &nobody, "p") == 1);
    CHECK(gets(m, "public", &alice, "p") == 1); /* served without a token: to everyone */
    CHECK(gets(m, "public", &own, "p") == 1);
    CHECK(gets(m, "gated", &alice, "g") == 1);
    CHECK(gets(m, "gated", &bob, "g") == 0);    /* another token: nothing */
    CHECK(gets(m, "gated", &nobody, "g") == 0);
    CHECK(gets(m, "gated", &own, "g") == 0);
    CHECK(gets(m, "mine", &own, "o") == 1);
    CHECK(gets(m, "mine", &nobody, "o") == 0);  /* the mirror's token opens it for its routes */
    CHECK(gets(m, "mine", &alice, "o") == 0);
    CHECK(gets(m, "absent", &nobody, "") == 0);
    /* A newer answer replaces the older. */
    mirror_names_put(m, "public", &nobody, "p2", 2);
    CHECK(gets(m, "public", &nobody, "p2") == 1);
    mirror_free(m);
}

TEST(outlive_the_mirror_on_disk_but_a_token)
{
    struct mirror *m = start(30, 1);
    mirror_names_put(m, "public", &nobody, "kept", 4);
    mirror_names_put(m, "mine", &own, "own's", 5);
    mirror_names_put(m, "gated", &alice, "gone", 4);
    mirror_free(m);
    m = start(30, 1);
    CHECK(gets(m, "public", &nobody, "kept") == 1);
    CHECK(gets(m, "mine", &own, "own's") == 1);
    CHECK(gets(m, "gated", &alice, "gone") == 0); /* a token's answers are never written */
    mirror_free(m);
    /* A file that does not hold the key it is named by is ignored. */
    char *names = xasprintf("%s/cache/names", dir);
    DIR *d = opendir(names);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.') {
            char *p = xasprintf("%s/%s", names, de->d_name);
            int fd = open(p, O_WRONLY | O_TRUNC);
            CHECK(fd >= 0 && write(fd, "tensord-mirror-name 1\n3\nkey\nx", 29) == 29);
            close(fd);
            free(p);
        }
    if (d)
        closedir(d);
    free(names);
    m = start(30, 1);
    CHECK(gets(m, "public", &nobody, "kept") == 0);
    CHECK(gets(m, "mine", &own, "own's") == 0);
    mirror_free(m);
}

TEST(ttl_zero_and_strict_keep_nothing)
{
    struct mirror *m = start(0, 1); /* mirror_auth_ttl 0: a token's yes is never reused */
    mirror_names_put(m, "gated", &alice, "g", 1);
    CHECK(gets(m, "gated", &alice, "g") == 0);
    mirror_free(m);
    m = start(30, 0); /* mirror_offline = strict */
    mirror_names_put(m, "strict", &nobody, "s", 1);
    CHECK(gets(m, "strict", &nobody, "s") == 0);
    mirror_free(m);
}

TEST(the_disk_is_bounded)
{
    struct mirror *m = start(30, 1);
    char key[32];
    /* The mirror's own answer, older than every caller's that follow:
     * callers' questions never push it out (they pushed out every answer). */
    mirror_names_put(m, "mine", &own, "own's", 5);
    for (unsigned i = 0; i < NAMES_DISK_FILES + 10; i++) {
        snprintf(key, sizeof(key), "k%u", i);
        mirror_names_put(m, key, &nobody, key, strlen(key));
    }
    mirror_free(m);
    char *names = xasprintf("%s/cache/names", dir);
    DIR *d = opendir(names);
    unsigned n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    free(names);
    unsigned callers = NAMES_DISK_FILES - NAMES_DISK_OWN_FILES;
    CHECK(n <= callers + 1 && n > callers - 64);
    m = start(30, 1); /* the newest are the ones kept, and the mirror's own */
    snprintf(key, sizeof(key), "k%u", NAMES_DISK_FILES + 9);
    CHECK(gets(m, key, &nobody, key) == 1);
    CHECK(gets(m, "k0", &nobody, "k0") == 0);
    CHECK(kept(m, "mine", &own, "own's"));
    /* Read back at the start as the mirror's own: still apart. */
    for (unsigned i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "j%u", i);
        mirror_names_put(m, key, &nobody, key, strlen(key));
    }
    CHECK(kept(m, "mine", &own, "own's"));
    mirror_free(m);
}

int main(void)
{
    log_init("error", "off");
    CHECK(mkdtemp(dir) != NULL);
    RUN(whom_answers_are_served_to);
    RUN(outlive_the_mirror_on_disk_but_a_token);
    RUN(ttl_zero_and_strict_keep_nothing);
    RUN(the_disk_is_bounded);
    char *cmd = xasprintf("rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    free(cmd);
    return TEST_SUMMARY();
}
