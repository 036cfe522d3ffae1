/* Unit tests for server/handlers/h_hub_api.c through the loopback driver: the Hub's
 * /api documents of a repo, byte for byte, with their ids computed here by
 * the specifications they follow (git's blob id: SHA-1 of "blob <size>\0"
 * and the bytes; an LFS file's pointer text by the git-lfs spec v1, whose
 * blob id the tree names), the model card's front matter as cardData, the
 * repo list's filters, refs and commits, and a README written since it was
 * hashed. */
#include <openssl/sha.h>

#include "loopback.h"
#include "metrics.h"

static char root[64], commit[41];
static const char readme[] = "---\nlicense: mit\ntags:\n- a\n---\n# hi\n";
static const char config_json[] = "{\"model_type\": \"t\"}\n";
static const char st_json[] = "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";

static void hex(const unsigned char *md, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", md[i]);
}

/* git's blob id of bytes p[0..n). */
static void git_id(const void *p, size_t n, char out[41])
{
    char head[32];
    int k = snprintf(head, sizeof(head), "blob %zu", n);
    unsigned char *obj = xmalloc((size_t)k + 1 + n), md[20];
    memcpy(obj, head, (size_t)k + 1);
    memcpy(obj + k + 1, p, n);
    SHA1(obj, (size_t)k + 1 + n, md);
    hex(md, 20, out);
    free(obj);
}

static char st_sha[65], st_pointer_id[41], readme_id[41], config_id[41], x_id[41];
static size_t st_size, pointer_size;

static void make_root(void)
{
    lb_new_root(root, sizeof(root));
    lb_write_st(root, "r/model.safetensors", st_json, "\1\2\3\4", 4);
    lb_write(root, "r/config.json", config_json, strlen(config_json));
    lb_write(root, "r/README.md", readme, strlen(readme));
    lb_write(root, "r/sub/x.txt", "x\n", 2);
    lb_write(root, "org/other/config.json", config_json, strlen(config_json));
    unsigned char st[256], md[32];
    st_size = 8 + strlen(st_json) + 4;
    for (int i = 0; i < 8; i++)
        st[i] = (unsigned char)(strlen(st_json) >> (8 * i));
    memcpy(st + 8, st_json, strlen(st_json));
    memcpy(st + 8 + strlen(st_json), "\1\2\3\4", 4);
    SHA256(st, st_size, md);
    hex(md, 32, st_sha);
    char pointer[200];
    pointer_size = (size_t)snprintf(pointer, sizeof(pointer),
                                    "version https://git-lfs.github.com/spec/v1\n"
                                    "oid sha256:%s\nsize %zu\n", st_sha, st_size);
    git_id(pointer, pointer_size, st_pointer_id);
    git_id(readme, strlen(readme), readme_id);
    git_id(config_json, strlen(config_json), config_id);
    git_id("x\n", 2, x_id);
}


static char *head_of(const char *body, const char *cache, int with_commit)
{
    char c[64] = "";
    if (with_commit)
        snprintf(c, sizeof(c), "X-Repo-Commit: %s\r\n", commit);
    return xasprintf("Content-Type: application/json\r\nAccept-Ranges: bytes\r\n"
                     "Cache-Control: %s\r\n%sETag: \"h%016" PRIx64 "\"\r\n",
                     cache, c, lb_fnv1a(body, strlen(body)));
}

static void check_doc(struct lb_server *s, const char *target, const char *body, const char *cache,
                      int with_commit)
{
    struct lb_answer r = lb_get(s, target, NULL);
    char *head = head_of(body, cache, with_commit);
    CHECK_ANSWER(r, 200, head, body);
    free(head);
    lb_free(&r);
}

static char *file_entry(const char *path, size_t size, const char *oid, int lfs)
{
    if (!lfs)
        return xasprintf("{\"type\":\"file\",\"oid\":\"%s\",\"size\":%zu,\"path\":\"%s\"}", oid,
                         size, path);
    return xasprintf("{\"type\":\"file\",\"oid\":\"%s\",\"size\":%zu,\"path\":\"%s\",\"lfs\":"
                     "{\"oid\":\"%s\",\"size\":%zu,\"pointerSize\":%zu}}",
                     oid, size, path, st_sha, size, pointer_size);
}

TEST(repo_document)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_get(&s, "/api/models/r/refs", NULL);
    snprintf(commit, sizeof(commit), "%s", lb_header(&r, "X-Repo-Commit"));
    lb_free(&r);
    CHECK_EQ_U64(strlen(commit), 40);
    size_t used = strlen(readme) + strlen(config_json) + st_size + 2;
    char *body = xasprintf(
        "{\"_id\":\"r\",\"id\":\"r\",\"modelId\":\"r\",\"sha\":\"%s\","
        "\"lastModified\":\"1970-01-01T00:00:00.000Z\",\"createdAt\":\"1970-01-01T00:00:00.000Z\","
        "\"private\":false,\"gated\":false,\"disabled\":false,\"downloads\":0,\"likes\":0,"
        "\"tags\":[\"safetensors\"],\"usedStorage\":%zu,\"safetensors\":{\"parameters\":"
        "{\"U8\":4},\"total\":4},\"cardData\":{\"license\":\"mit\",\"tags\":[\"a\"]},"
        "\"siblings\":[{\"rfilename\":\"README.md\",\"size\":%zu,\"blobId\":\"%s\"},"
        "{\"rfilename\":\"config.json\",\"size\":%zu,\"blobId\":\"%s\"},"
        "{\"rfilename\":\"model.safetensors\",\"size\":%zu,\"blobId\":\"%s\",\"lfs\":"
        "{\"sha256\":\"%s\",\"size\":%zu,\"pointerSize\":%zu}},"
        "{\"rfilename\":\"sub/x.txt\",\"size\":2,\"blobId\":\"%s\"}],\"spaces\":[]}\n",
        commit, used, strlen(readme), readme_id, strlen(config_json), config_id, st_size,
        st_pointer_id, st_sha, st_size, pointer_size, x_id);
    check_doc(&s, "/api/models/r", body, "no-cache", 1);
    check_doc(&s, "/api/models/r/revision/main", body, "no-cache", 1);
    char *by_commit = xasprintf("/api/models/r/revision/%s", commit);
    check_doc(&s, by_commit, body, "public, max-age=31536000, immutable", 1);
    free(by_commit);
    free(body);
    r = lb_get(&s, "/api/models/r/revision/v1", NULL);
    CHECK_EQ_U64(r.status, 404);
    CHECK_STR(lb_header(&r, "X-Error-Code"), "RevisionNotFound");
    lb_free(&r);
    lb_stop(&s);
}

TEST(tree_and_paths_info)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    char *readme_e = file_entry("README.md", strlen(readme), readme_id, 0);
    char *config_e = file_entry("config.json", strlen(config_json), config_id, 0);
    char *st_e = file_entry("model.safetensors", st_size, st_pointer_id, 1);
    char *x_e = file_entry("sub/x.txt", 2, x_id, 0);
    /* "sub" by git's tree id: SHA-1 of "tree <size>\0" and its one entry,
     * "100644 x.txt\0" and the file's 20-byte blob id. */
    unsigned char tree[64], raw[20], md[20];
    size_t tn = (size_t)sprintf((char *)tree, "tree %d", 13 + 20) + 1;
    memcpy(tree + tn, "100644 x.txt", 13);
    for (int i = 0; i < 20; i++)
        sscanf(x_id + 2 * i, "%2hhx", &raw[i]);
    memcpy(tree + tn + 13, raw, 20);
    SHA1(tree, tn + 33, md);
    char sub_tree[41];
    hex(md, 20, sub_tree);
    /* The tree: directories before their contents. */
    struct lb_answer r = lb_get(&s, "/api/models/r/tree/main", NULL);
    char *dir_e = xasprintf("{\"type\":\"directory\",\"oid\":\"%s\",\"size\":0,\"path\":\"sub\"}",
                            sub_tree);
    char *body = xasprintf("[%s,%s,%s,%s]\n", readme_e, config_e, st_e, dir_e);
    char *head = head_of(body, "no-cache", 1);
    CHECK_ANSWER(r, 200, head, body);
    free(head);
    free(body);
    lb_free(&r);
    body = xasprintf("[%s,%s,%s,%s,%s]\n", readme_e, config_e, st_e, dir_e, x_e);
    check_doc(&s, "/api/models/r/tree/main?recursive=True", body, "no-cache", 1);
    free(body);
    body = xasprintf("[%s]\n", x_e);
    check_doc(&s, "/api/models/r/tree/main/sub", body, "no-cache", 1);
    free(body);
    r = lb_get(&s, "/api/models/r/tree/main/nope", NULL);
    CHECK_EQ_U64(r.status, 404);
    CHECK_STR(lb_header(&r, "X-Error-Code"), "EntryNotFound");
    lb_free(&r);

    /* paths-info: JSON or a form, each path once, absent ones left out. */
    body = xasprintf("[%s,%s]\n", config_e, dir_e);
    static const char *const json[] = {"Content-Type: application/json", NULL};
    r = lb_request(&s, "POST", "/api/models/r/paths-info/main", json,
                   "{\"paths\": [\"config.json\", \"sub/\", \"config.json\", \"nope\"]}");
    head = head_of(body, "no-cache", 1);
    CHECK_ANSWER(r, 200, head, body);
    free(head);
    lb_free(&r);
    r = lb_request(&s, "POST", "/api/models/r/paths-info/main", NULL,
                   "paths=config.json&paths=sub&expand=0");
    CHECK_STR(r.body, body);
    lb_free(&r);
    free(body);
    /* expand: each entry's last commit, the revision's one */
    r = lb_request(&s, "POST", "/api/models/r/paths-info/main", NULL,
                   "paths=config.json&expand=True");
    char *last = xasprintf("\"lastCommit\":{\"id\":\"%s\",\"title\":\"Content as served "
                           "by tensord\",\"date\":\"1970-01-01T00:00:00.000Z\"}}]\n", commit);
    CHECK_CONTAINS(r.body, last);
    lb_free(&r);
    r = lb_get(&s, "/api/models/r/tree/main?expand=true", NULL);
    CHECK_CONTAINS(r.body, "\"lastCommit\":{\"id\":\"");
    lb_free(&r);
    free(last);
    r = lb_request(&s, "POST", "/api/models/r/paths-info/main", json, "[1]");
    CHECK_EQ_U64(r.status, 400);
    CHECK(strncmp(r.body, "{\"error\":\"", 10) == 0);
    CHECK(lb_header(&r, "X-Error-Code") == NULL);
    lb_free(&r);
    free(dir_e);
    free(readme_e);
    free(config_e);
    free(st_e);
    free(x_e);
    lb_stop(&s);
}

TEST(refs_commits_and_lists)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    char *body = xasprintf("{\"branches\":[{\"name\":\"main\",\"ref\":\"refs/heads/main\","
                           "\"targetCommit\":\"%s\"}],\"converts\":[],\"tags\":[],"
                           "\"pullRequests\":[]}\n", commit);
    check_doc(&s, "/api/models/r/refs", body, "no-cache", 1);
    free(body);
    body = xasprintf("[{\"id\":\"%s\",\"title\":\"Content as served by tensord\",\"message\":"
                     "\"The files of r as tensord serves them. tensord keeps no history: this "
                     "commit's id is a hash of the content.\",\"authors\":[],"
                     "\"date\":\"1970-01-01T00:00:00.000Z\"}]\n", commit);
    check_doc(&s, "/api/models/r/commits/main", body, "no-cache", 1);
    free(body);
    check_doc(&s, "/api/spaces", "[]\n", "no-cache", 0);
    check_doc(&s, "/api/datasets", "[]\n", "no-cache", 0);
    struct lb_answer r = lb_get(&s, "/api/models?author=org&full=1", NULL);
    CHECK_EQ_U64(r.status, 200);
    const char *want = "[{\"_id\":\"org/other\",\"id\":\"org/other\",\"modelId\":\"org/other\","
                       "\"author\":\"org\",\"sha\":\"";
    CHECK(strncmp(r.body, want, strlen(want)) == 0);
    CHECK_CONTAINS(r.body, "\"tags\":[],\"siblings\":[{\"rfilename\":\"config.json\"}]}]\n");
    lb_free(&r);
    r = lb_get(&s, "/api/models?search=R&limit=1", NULL); /* case-insensitive */
    CHECK(strncmp(r.body, "[{\"_id\":\"org/other\"", 19) == 0 && strstr(r.body, "},{") == NULL);
    lb_free(&r);
    r = lb_get(&s, "/api/models?limit=0", NULL);
    CHECK_STR(r.body, "[]\n");
    lb_free(&r);
    r = lb_get(&s, "/api/models?limit=x", NULL);
    CHECK_ANSWER(r, 400,
                 "Content-Type: application/json\r\nX-Error-Message: limit must be a "
                 "non-negative integer, not \"x\"\r\n",
                 "{\"error\":\"limit must be a non-negative integer, not \\\"x\\\"\"}\n");
    lb_free(&r);
    lb_stop(&s);
}

TEST(readme_written_since_hashed)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    lb_touch(root, "r/README.md");
    struct lb_answer r = lb_get(&s, "/api/models/r", NULL);
    CHECK_ANSWER(r, 503,
                 "Content-Type: application/json\r\nX-Error-Message: r/README.md changed on disk "
                 "since it was hashed; retry once the daemon has rescanned it\r\nRetry-After: 1\r\n",
                 "{\"error\":\"r/README.md changed on disk since it was hashed; retry once the "
                 "daemon has rescanned it\"}\n");
    CHECK(r.rescan);
    lb_free(&r);
    lb_stop(&s);
}

/* The card is read once per repo: a README.md written after that changes
 * nothing for the repo's snapshot (its card is the commit's), where a
 * first read after the write is refused above. */
TEST(card_read_once)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_get(&s, "/api/models/r", NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK_CONTAINS(r.body, "\"cardData\":{\"license\":\"mit\",\"tags\":[\"a\"]}");
    lb_free(&r);
    lb_touch(root, "r/README.md");
    r = lb_get(&s, "/api/models/r", NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK_CONTAINS(r.body, "\"cardData\":{\"license\":\"mit\",\"tags\":[\"a\"]}");
    lb_free(&r);
    lb_stop(&s);
}

/* Renders made so far (tensord_documents_rendered_total). */
static uint64_t rendered(void)
{
    const char *series = "\ntensord_documents_rendered_total ";
    char *p = metrics_render_prometheus();
    const char *at = strstr(p, series);
    uint64_t n = at ? strtoull(at + strlen(series), NULL, 10) : 0;
    free(p);
    return n;
}

/* Paths whose byte order interleaves folders and files ("a-b/" < "a.txt"
 * < "a/"): each folder before its contents, a folder's children in the
 * order they first appear. The repo's document and its listing are made
 * once, by the renderer, and every tree and paths-info answer after is a
 * view of the listing: nothing more is rendered. */
TEST(listing_order_and_made_once)
{
    char lay[64];
    lb_new_root(lay, sizeof(lay));
    const char *names[] = {"q/a-b/z", "q/a.txt", "q/a/b.txt", "q/a/b/c", "q/a/x", "q/z.txt", NULL};
    for (const char **n = names; *n; n++)
        lb_write(lay, *n, "1", 1);
    struct lb_server s;
    lb_start(&s, lay, LB_HASHED, NULL);
    uint64_t before = rendered();
    struct {
        const char *target;
        const char *paths;  /* in the answer's order */
    } cases[] = {
        {"/api/models/q/tree/main?recursive=1", "a-b a-b/z a.txt a a/b.txt a/b a/b/c a/x z.txt"},
        {"/api/models/q/tree/main", "a-b a.txt a z.txt"},
        {"/api/models/q/tree/main/a", "a/b.txt a/b a/x"},
        {"/api/models/q/tree/main/a?recursive=true", "a/b.txt a/b a/b/c a/x"},
        {"/api/models/q/tree/main/a/b", "a/b/c"},
        {"/api/models/q/tree/main/a-b?recursive=true", "a-b/z"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct lb_answer r = lb_get(&s, cases[i].target, NULL);
        CHECK_EQ_U64(r.status, 200);
        char got[256] = "";
        for (const char *p = r.body; (p = strstr(p, "\"path\":\"")) != NULL;) {
            p += 8;
            size_t n = strcspn(p, "\"");
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%.*s", got[0] ? " " : "",
                     (int)n, p);
        }
        if (strcmp(got, cases[i].paths) != 0)
            fprintf(stderr, "  %s: %s\n", cases[i].target, got);
        CHECK_STR(got, cases[i].paths);
        char *etag = xasprintf("\"h%016" PRIx64 "\"", lb_fnv1a(r.body, r.len));
        CHECK_STR(lb_header(&r, "ETag"), etag);
        free(etag);
        lb_free(&r);
    }
    static const char *const form[] = {"Content-Type: application/x-www-form-urlencoded", NULL};
    struct lb_answer r = lb_request(&s, "POST", "/api/models/q/paths-info/main", form,
                                    "paths=z.txt&paths=a%2Fb&paths=a-b%2Fz&paths=z.txt");
    CHECK_EQ_U64(r.status, 200);
    CHECK(strstr(r.body, "\"path\":\"z.txt\"") < strstr(r.body, "\"path\":\"a/b\"") &&
          strstr(r.body, "\"path\":\"a/b\"") < strstr(r.body, "\"path\":\"a-b/z\""));
    CHECK(r.body[0] == '[' && r.body[1] == '{' && strcmp(r.body + r.len - 3, "}]\n") == 0);
    lb_free(&r);
    CHECK_EQ_U64(rendered() - before, 1); /* the listing, once */
    r = lb_get(&s, "/api/models/q", NULL);
    CHECK_EQ_U64(r.status, 200);
    lb_free(&r);
    r = lb_get(&s, "/api/models/q/revision/main", NULL);
    CHECK_EQ_U64(r.status, 200);
    lb_free(&r);
    CHECK_EQ_U64(rendered() - before, 2); /* and the repo's document, once */
    lb_stop(&s);
    lb_remove_root(lay);
}

int main(void)
{
    make_root();
    RUN(repo_document);
    RUN(tree_and_paths_info);
    RUN(refs_commits_and_lists);
    RUN(listing_order_and_made_once);
    RUN(readme_written_since_hashed); /* these touch a file of the root */
    RUN(card_read_once);
    lb_remove_root(root);
    return TEST_SUMMARY();
}
