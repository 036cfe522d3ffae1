/* reg_repo: which directories are repos and which files they serve, reuse
 * across rescans, and the revision: the commit formula, and blob and tree
 * ids equal to what git computes for the same files with LFS pointers
 * (the expected ids below were computed with git write-tree). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "digest.h"
#include "reg_repo.h"
#include "registry.h"
#include "test.h"
#include "util.h"

static char base[] = "/tmp/test_reg_repo.XXXXXX";
static char root[600];
static int n_roots;

static void new_root(void)
{
    snprintf(root, sizeof(root), "%s/r%d", base, n_roots++);
    CHECK(mkdir(root, 0755) == 0);
}

static void write_file(const char *rel, const void *data, size_t n)
{
    char *p = xasprintf("%s/%s", root, rel);
    test_write_file(p, data, n);
    free(p);
}

static void write_text(const char *rel, const char *text)
{
    write_file(rel, text, strlen(text));
}

/* A valid safetensors file with one U8 [4] tensor. */
static void write_st(const char *rel)
{
    static const char json[] = "{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    unsigned char buf[8 + sizeof(json) - 1 + 4] = {sizeof(json) - 1};
    memcpy(buf + 8, json, sizeof(json) - 1);
    write_file(rel, buf, sizeof(buf));
}

static struct reg_snapshot *scan(const struct reg_snapshot *prev)
{
    struct st_error err;
    struct reg_scan_opts o = {.prev = prev};
    struct reg_snapshot *r = reg_snapshot_scan(root, 1, &o, &err);
    CHECK(r != NULL);
    return r;
}

static const struct reg_repo *repo(const struct reg_snapshot *r, const char *id)
{
    return reg_snapshot_find_repo(r, id, strlen(id));
}

static int has(const struct reg_repo *r, const char *name)
{
    return reg_repo_find_file(r, name, strlen(name)) != NULL;
}

/* Hashes every file of r the way the hasher does and publishes it. */
static void hash_all(const struct reg_repo *r)
{
    void *buf = xmalloc(DIGEST_BLOCK);
    for (size_t i = 0; i < r->n_files; i++) {
        const struct reg_file *f = &r->files[i];
        int fd = reg_open_below(r->root, f, O_RDONLY);
        CHECK(fd >= 0);
        struct digest_result d;
        CHECK(digest_fd(fd, f->st.size, buf, DIGEST_BLOCK, NULL, NULL, &d) == 0);
        close(fd);
        reg_file_set_hashes(f, d.sha256, d.has_git_sha1 ? d.git_sha1 : NULL);
    }
    free(buf);
}

TEST(which_directories_are_repos)
{
    new_root();
    write_st("top.safetensors");              /* a root model, in no repo */
    write_text("single/config.json", "{}");   /* depth 1 with a file: repo "single" */
    write_st("single/sub/model.safetensors");
    write_text("single/.hidden", "x");
    write_text("org/sd/model_index.json", "{}"); /* depth 1 with only dirs: an org */
    write_st("org/sd/unet/diffusion_pytorch_model.safetensors");
    write_text("org/sd/unet/config.json", "{}");
    write_text("org/deep/a/b/c.txt", "c");
    char *p = xasprintf("%s/org/empty", root);
    CHECK(mkdir(p, 0755) == 0); /* no file: no repo */
    free(p);
    p = xasprintf("%s/org/deep/passwd", root);
    CHECK(symlink("/etc/passwd", p) == 0);
    free(p);
    p = xasprintf("%s/org/deep/index.json", root);
    CHECK(symlink("../sd/model_index.json", p) == 0);
    free(p);
    struct reg_snapshot *r = scan(NULL);
    CHECK_EQ_U64(r->n_repos, 3);
    CHECK(repo(r, "top") == NULL && repo(r, "org") == NULL && repo(r, "org/empty") == NULL);
    const struct reg_repo *s = repo(r, "single");
    CHECK(s && s->n_files == 2 && has(s, "config.json") && has(s, "sub/model.safetensors"));
    CHECK(s && !has(s, ".hidden"));
    const struct reg_repo *sd = repo(r, "org/sd");
    CHECK(sd && sd->n_files == 3 && has(sd, "unet/diffusion_pytorch_model.safetensors"));
    /* The component is a /v1 model of its own. */
    CHECK(reg_snapshot_find_model(r, "org/sd/unet", 11) != NULL);
    const struct reg_repo *deep = repo(r, "org/deep");
    CHECK(deep && has(deep, "a/b/c.txt") && has(deep, "index.json") && !has(deep, "passwd"));
    CHECK(deep && strcmp(deep->files[0].name, "a/b/c.txt") == 0); /* sorted */
    CHECK_EQ_U64(r->n_repo_files, 2 + 3 + 2);
    for (size_t i = 0; s && i < s->n_files; i++)
        CHECK(s->files[i].fd == -1); /* never kept open */
    reg_snapshot_unref(r);
}

TEST(revision_and_git_ids)
{
    new_root();
    write_text("r/a.txt", "hi\n");
    write_text("r/b.bin", "x");
    write_text("r/d/w.safetensors", "12345678");
    struct reg_snapshot *r = scan(NULL);
    const struct reg_repo *p = repo(r, "r");
    CHECK(p && p->n_files == 3);
    if (!p) {
        reg_snapshot_unref(r);
        return;
    }
    CHECK(reg_repo_revision(p) == NULL); /* no hash yet */
    hash_all(p);
    const struct reg_repo_rev *rev = reg_repo_revision(p);
    CHECK(rev != NULL);
    if (rev) {
        CHECK(reg_repo_revision(p) == rev); /* computed once */
        CHECK_STR(rev->commit, "a9b3ba9a7e8f46d883526e26689fe66a824b51d5");
        char hex[41];
        const struct reg_repo_dir *top = reg_repo_find_dir(rev, "", 0);
        const struct reg_repo_dir *d = reg_repo_find_dir(rev, "d", 1);
        CHECK(top && d && reg_repo_find_dir(rev, "a.txt", 5) == NULL);
        if (top && d) {
            digest_hex(top->tree, 20, hex);
            CHECK_STR(hex, "6c07ce03880d6b91c76a5dff8e8c3d98d30321b9");
            digest_hex(d->tree, 20, hex);
            CHECK_STR(hex, "ad4678092ce1a02071383f73adc54e53bfee16ea");
            CHECK(top->first == 0 && top->end == 3 && d->first == 2 && d->end == 3);
        }
        digest_hex(rev->blob[0], 20, hex);
        CHECK_STR(hex, "45b983be36b73c0788dc9cbcb76cbb80fc7bb057");
        digest_hex(rev->blob[2], 20, hex); /* the LFS pointer's blob */
        CHECK_STR(hex, "2cb08f114de09e5550c9dc19b1323acbb64f75cc");
        CHECK(!reg_repo_file_is_lfs(&p->files[0]) && reg_repo_file_is_lfs(&p->files[2]));
    }
    reg_snapshot_unref(r);
}

TEST(reused_until_a_file_changes)
{
    new_root();
    write_text("a/x.txt", "1");
    write_text("b/y.txt", "2");
    struct reg_snapshot *r1 = scan(NULL);
    struct reg_snapshot *r2 = scan(r1);
    CHECK(repo(r1, "a") == repo(r2, "a") && repo(r1, "b") == repo(r2, "b"));
    sleep(0); /* mtime granularity is ns here; the size changes anyway */
    write_text("a/x.txt", "changed");
    struct reg_snapshot *r3 = scan(r2);
    CHECK(repo(r3, "a") != repo(r2, "a") && repo(r3, "b") == repo(r2, "b"));
    CHECK(repo(r3, "a") && repo(r3, "a")->files[0].st.size == 7);
    write_text("a/new.txt", "n");
    struct reg_snapshot *r4 = scan(r3);
    CHECK(repo(r4, "a") != repo(r3, "a") && repo(r4, "a")->n_files == 2);
    reg_snapshot_unref(r1);
    reg_snapshot_unref(r2);
    reg_snapshot_unref(r3);
    reg_snapshot_unref(r4);
}

TEST(no_repos_for_a_single_model)
{
    new_root();
    write_st("m/model.safetensors");
    struct st_error err;
    char *dir = xasprintf("%s/m", root);
    struct reg_scan_opts o = {.single_model = 1};
    struct reg_snapshot *r = reg_snapshot_scan(dir, 1, &o, &err);
    CHECK(r && r->n_repos == 0);
    reg_snapshot_unref(r);
    free(dir);
}

int main(void)
{
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(which_directories_are_repos);
    RUN(revision_and_git_ids);
    RUN(reused_until_a_file_changes);
    RUN(no_repos_for_a_single_model);
    char *cmd = xasprintf("rm -rf %s", base);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", base);
    free(cmd);
    return TEST_SUMMARY();
}
