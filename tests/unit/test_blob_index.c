/* blob_index: digests parsed as OCI writes them, files found once their
 * hashes are published (and not before), a new snapshot starting over. */
#include "blob_index.h"
#include "digest.h"
#include "registry.h"
#include "test.h"
#include "util.h"

static char base[] = "/tmp/tensord-blob-XXXXXX";

TEST(digest_syntax)
{
    uint8_t d[32];
    char good[] = "sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    CHECK(blob_digest_parse(good, strlen(good), d) == 0);
    CHECK(d[0] == 0x00 && d[1] == 0x11 && d[31] == 0xff);
    CHECK(blob_digest_parse(good, strlen(good) - 1, d) == -EINVAL);
    good[7] = 'A';
    CHECK(blob_digest_parse(good, strlen(good), d) == -EINVAL);
    CHECK(blob_digest_parse("sha512:ab", 9, d) == -ENOTSUP);
    CHECK(blob_digest_parse("b3+x:ab", 7, d) == -ENOTSUP);
    CHECK(blob_digest_parse(":ab", 3, d) == -EINVAL);
    CHECK(blob_digest_parse("SHA256:ab", 9, d) == -EINVAL);
    CHECK(blob_digest_parse("sha256", 6, d) == -EINVAL);
    CHECK(blob_digest_parse("a\0b:cd", 6, d) == -EINVAL);
}

static void fake_hash(const struct reg_file *f, uint8_t fill)
{
    uint8_t sha[32];
    memset(sha, fill, sizeof(sha));
    reg_file_set_hashes(f, sha, NULL);
}

TEST(found_once_hashed)
{
    static const char json[] = "{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    char *p = xasprintf("%s/m/model.safetensors", base);
    test_write_st(p, json, 4);
    free(p);
    p = xasprintf("%s/r/a/config.json", base);
    test_write_file(p, "{}", 2);
    free(p);
    struct st_error err;
    struct reg_scan_opts o = {0};
    struct reg_snapshot *s = reg_snapshot_scan(base, 1, &o, &err);
    CHECK(s != NULL);
    if (!s)
        return;
    struct blob_index *bi = blob_index_new();
    const struct reg_model *m = reg_snapshot_find_model(s, "m", 1);
    const struct reg_repo *r = reg_snapshot_find_repo(s, "r/a", 3);
    CHECK(m && r && r->n_files == 1);
    uint8_t want[32];
    const struct reg_root *root = NULL;
    memset(want, 7, sizeof(want));
    CHECK(blob_index_find(bi, s, want, &root) == NULL);
    fake_hash(&m->files[0], 7);
    CHECK(blob_index_find(bi, s, want, &root) == &m->files[0]);
    CHECK(root == m->root);
    memset(want, 9, sizeof(want));
    CHECK(blob_index_find(bi, s, want, &root) == NULL);
    fake_hash(&r->files[0], 9);
    CHECK(blob_index_find(bi, s, want, &root) == &r->files[0]);
    /* Another generation is indexed anew (here: nothing hashed in it). */
    struct reg_snapshot *s2 = reg_snapshot_scan(base, 2, &o, &err);
    CHECK(s2 != NULL);
    if (s2) {
        const struct reg_file *f = blob_index_find(bi, s2, want, &root);
        const struct reg_repo *r2 = reg_snapshot_find_repo(s2, "r/a", 3);
        CHECK(f == NULL || (r2 && f == &r2->files[0]));
        reg_snapshot_unref(s2);
    }
    blob_index_free(bi);
    reg_snapshot_unref(s);
}

int main(void)
{
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(digest_syntax);
    RUN(found_once_hashed);
    char *cmd = xasprintf("rm -rf %s", base);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", base);
    free(cmd);
    return TEST_SUMMARY();
}
