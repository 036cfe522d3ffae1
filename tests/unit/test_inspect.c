/* Unit tests for server/cli/inspect.c: `tensord inspect` on a file, a model
 * directory and a models root, what it prints, and its exit status for
 * valid, invalid, foreign and missing paths. */
#include "inspect.h"
#include "loopback.h"

static char root[64];

static int run(const char *const *args, char **out, char **err)
{
    return test_run_main(inspect_main, args, out, err);
}

TEST(paths)
{
    char *out, *err;
    char *file = xasprintf("%s/m/model.safetensors", root), *model = xasprintf("%s/m", root);
    const char *const one[] = {file, NULL};
    CHECK(run(one, &out, &err) == 0);
    /* Columns: tensor 48, dtype 12, shape 20, bytes 14 (right-aligned), file. */
    char *want = xasprintf("%s\n%-48s %-12s %-20s %14s  %s\n%-48s %-12s %-20s %14s  %s\n"
                           "valid: 1 tensors, 4 bytes, header 55 bytes\n\n"
                           "1 path checked: all valid\n",
                           file, "TENSOR", "DTYPE", "SHAPE", "BYTES", "FILE", "w", "U8", "[2, 2]",
                           "4", file);
    CHECK_STR(out, want);
    CHECK_STR(err, "");
    free(want);
    free(out);
    free(err);
    const char *const dir[] = {model, NULL};
    CHECK(run(dir, &out, &err) == 0);
    CHECK(strncmp(out, "model m\n", 8) == 0);
    CHECK_CONTAINS(out, "valid: 1 tensors, 4 bytes in 1 files\n");
    free(out);
    free(err);
    const char *const all[] = {root, NULL};
    CHECK(run(all, &out, &err) == 1); /* the root holds an invalid model */
    CHECK_CONTAINS(err, "model bad: invalid (");
    CHECK_CONTAINS(out, "1 path checked: INVALID (reasons above)\n");
    free(out);
    free(err);
    char *text = xasprintf("%s/notes.txt", root), *missing = xasprintf("%s/nope", root);
    const char *const foreign[] = {text, NULL};
    CHECK(run(foreign, &out, &err) == 1);
    CHECK_CONTAINS(err, "not a safetensors file: it does not start with an 8-byte header length");
    free(out);
    free(err);
    const char *const none[] = {missing, file, NULL};
    CHECK(run(none, &out, &err) == 2);
    CHECK_CONTAINS(err, "No such file or directory");
    CHECK_CONTAINS(out, "1 path checked: all valid; some could not be inspected (above)\n");
    free(out);
    free(err);
    const char *const nothing[] = {NULL};
    CHECK(run(nothing, &out, &err) == 2);
    CHECK(strncmp(err, "tensord inspect: no PATH given\nusage: tensord inspect PATH...\n",
                  62) == 0);
    free(out);
    free(err);
    free(text);
    free(missing);
    free(file);
    free(model);
}

int main(void)
{
    lb_new_root(root, sizeof(root));
    lb_write_st(root, "m/model.safetensors",
                "{\"w\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[0,4]}}", "\1\2\3\4", 4);
    lb_write(root, "bad/model.safetensors", "\x05\0\0\0\0\0\0\0{nope", 13);
    lb_write(root, "notes.txt", "just some text here\n", 20);
    RUN(paths);
    lb_remove_root(root);
    return TEST_SUMMARY();
}
