/* Unit tests for server/cli/verify.c: `tensord verify` against the state
 * directory a hasher saved, over files, model directories and a models
 * root: every file matches (0), a file changed since it was hashed has no
 * recorded hash (3), a missing path is an error (1), and its usage
 * errors (2). */
#include "hasher.h"
#include "loopback.h"
#include "verify.h"

static char root[64], state[64];

static int run(const char *const *args, char **out, char **err)
{
    return test_run_main(verify_main, args, out, err);
}

/* Hashes every file under root and saves the hashes in state. */
static void hash_root(void)
{
    struct st_error e;
    struct reg_snapshot *reg = reg_snapshot_scan(root, 1, NULL, &e);
    struct hasher_opts ho = {.threads = 1, .state_dir = state};
    struct hasher *h = hasher_new(&ho, &e);
    CHECK(h != NULL);
    hasher_submit(h, reg);
    for (int i = 0; i < 3000; i++) {
        struct hasher_progress hp;
        hasher_progress(h, &hp);
        if (hp.files_pending == 0 && hp.files_known == hp.files)
            break;
        usleep(10000);
    }
    hasher_stop(h); /* saves the store */
    hasher_free(h);
    reg_snapshot_unref(reg);
}

TEST(against_the_state)
{
    char *out, *err;
    const char *const all[] = {"--state-dir", state, root, NULL};
    CHECK(run(all, &out, &err) == 0);
    CHECK_CONTAINS(out, "OK        ");
    CHECK_CONTAINS(out, "/m/model.safetensors\n");
    CHECK_CONTAINS(out, "2 files: 2 ok, 0 mismatched, 0 not cached, 0 errors (state "
                        "directory ");
    CHECK_CONTAINS(err, "tensord verify: reading 2 hashes recorded in ");
    free(out);
    free(err);
    char *file = xasprintf("%s/m/config.json", root);
    const char *const one[] = {"--state_dir", state, file, NULL};
    CHECK(run(one, &out, &err) == 0);
    CHECK_CONTAINS(out, "1 files: 1 ok");
    free(out);
    free(err);
    lb_touch(root, "m/config.json"); /* another version: its hash is not recorded */
    CHECK(run(one, &out, &err) == 3);
    CHECK(strncmp(out, "UNCACHED  ", 10) == 0);
    free(out);
    free(err);
    char *missing = xasprintf("%s/nope", root);
    const char *const none[] = {"--state-dir", state, missing, NULL};
    CHECK(run(none, &out, &err) == 2); /* not checked: tensord(8)'s 2 */
    CHECK_CONTAINS(out, "ERROR     -  ");
    CHECK_CONTAINS(out, "No such file or directory");
    free(out);
    free(err);
    free(missing);
    free(file);
}

TEST(usage)
{
    char *out, *err;
    const char *const nothing[] = {"--state-dir", state, NULL};
    CHECK(run(nothing, &out, &err) == 2);
    CHECK(strncmp(err, "tensord verify: no PATH given\nusage: tensord verify [--config FILE] "
                       "[--state-dir DIR] PATH...\n", 92) == 0);
    free(out);
    free(err);
    const char *const unknown[] = {"--frob", "x", root, NULL};
    CHECK(run(unknown, &out, &err) == 2);
    CHECK(strncmp(err, "tensord verify: unknown option \"--frob\"\nusage:", 46) == 0);
    free(out);
    free(err);
    const char *const no_value[] = {"--state-dir", NULL};
    CHECK(run(no_value, &out, &err) == 2);
    CHECK_STR(err, "tensord verify: --state-dir needs a value\n");
    free(out);
    free(err);
    char *empty = xasprintf("%s/empty", state);
    CHECK(mkdir(empty, 0755) == 0);
    const char *const no_hashes[] = {"--state-dir", empty, root, NULL};
    CHECK(run(no_hashes, &out, &err) == 3); /* nothing recorded: nothing can match */
    CHECK_CONTAINS(err, "records no hashes yet\n");
    free(out);
    free(err);
    free(empty);
}

int main(void)
{
    lb_new_root(root, sizeof(root));
    lb_new_root(state, sizeof(state));
    lb_write_st(root, "m/model.safetensors",
                "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", "\1\2\3\4", 4);
    lb_write(root, "m/config.json", "{}\n", 3);
    hash_root();
    RUN(against_the_state);
    RUN(usage);
    lb_remove_root(root);
    lb_remove_root(state);
    return TEST_SUMMARY();
}
