/* hashfile: the state file round-trips; every kind of damage is refused
 * with a message naming the file and line, and loads nothing (all or
 * nothing); the file is replaced atomically and never followed through a
 * symlink or opened as a FIFO. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hashfile.h"
#include "test.h"
#include "util.h"

static char dir[] = "/tmp/test_hashfile.XXXXXX";
static int dfd = -1;

static struct hash_entry entry(uint64_t n, uint64_t size)
{
    struct hash_entry e;
    memset(&e, 0, sizeof(e));
    e.id = (struct hash_id){.dev = n, .ino = UINT64_MAX - n, .size = size,
                            .mtime_ns = n % 2 ? INT64_MIN : -(int64_t)n, .ctime_ns = INT64_MAX};
    for (int i = 0; i < DIGEST_SHA256_LEN; i++)
        e.sha256[i] = (uint8_t)(n + (uint64_t)i);
    e.has_git_sha1 = size <= DIGEST_GIT_SHA1_MAX;
    for (int i = 0; e.has_git_sha1 && i < DIGEST_SHA1_LEN; i++)
        e.git_sha1[i] = (uint8_t)(n * 3 + (uint64_t)i);
    return e;
}

struct sink {
    struct hash_entry e[16];
    size_t n;
};

static int collect(void *ctx, const struct hash_entry *e)
{
    struct sink *s = ctx;
    for (size_t i = 0; i < s->n; i++)
        if (hash_id_equal(&s->e[i].id, &e->id))
            return 1;
    if (s->n == 16)
        return -1;
    s->e[s->n++] = *e;
    return 0;
}

static enum st_status parse(const char *text, struct st_error *err)
{
    struct sink s = {.n = 0};
    return ST_CODE(hashfile_parse(text, strlen(text), "st", collect, &s, err), err);
}

/* A valid file of three entries with line `line` (1-based, 2..4 are the
 * entries) replaced by `repl`, and the end line recomputed so that only
 * the replaced line can be what is wrong. */
static char *with_line(int line, const char *repl)
{
    struct hash_entry e[3] = {entry(1, 10), entry(2, DIGEST_GIT_SHA1_MAX + 1), entry(3, 0)};
    size_t len;
    char *text = hashfile_format(e, 3, &len);
    char *out = xmalloc(len + 512), *p = out;
    const char *q = text;
    for (int i = 1; *q; i++) {
        const char *nl = strchr(q, '\n');
        if (i == line) {
            p += sprintf(p, "%s\n", repl);
        } else if (strncmp(q, "end ", 4) != 0) {
            memcpy(p, q, (size_t)(nl - q) + 1);
            p += nl - q + 1;
        }
        q = nl + 1;
    }
    *p = '\0';
    if (line == 5) /* the end line itself is what is wrong */
        return free(text), out;
    /* Recompute the end line over what is there now. */
    struct sink s = {.n = 0};
    struct st_error err;
    (void)hashfile_parse(out, strlen(out), "x", collect, &s, &err);
    free(text);
    text = hashfile_format(s.e, s.n, &len);
    const char *end = strstr(text, "\nend ") + 1;
    strcat(out, end);
    free(text);
    return out;
}

TEST(round_trip)
{
    struct hash_entry e[4] = {entry(0, 0), entry(1, 5), entry(2, DIGEST_GIT_SHA1_MAX),
                              entry(3, DIGEST_GIT_SHA1_MAX + 1)};
    size_t len;
    char *text = hashfile_format(e, 4, &len);
    CHECK_EQ_U64(strlen(text), len);
    CHECK(strncmp(text, "tensord-hashes 1\n", 17) == 0);
    struct sink s = {.n = 0};
    struct st_error err;
    CHECK(ST_CODE(hashfile_parse(text, len, "st", collect, &s, &err), &err) == ST_OK);
    CHECK_EQ_U64(s.n, 4);
    CHECK(memcmp(s.e, e, sizeof(e)) == 0);
    free(text);
    text = hashfile_format(NULL, 0, &len); /* an empty store is a valid file */
    CHECK(ST_CODE(hashfile_parse(text, len, "st", collect, &s, &err), &err) == ST_OK);
    free(text);
}

TEST(damage_is_refused_with_its_line)
{
    static const struct {
        int line;
        const char *text;
        enum st_status code;
        const char *msg;
    } cases[] = {
        {1, "tensord-hashes 2", ST_ERR_STATE_VERSION, "st:1: format version 2"},
        {1, "tensord-hashes 01", ST_ERR_STATE_FORMAT, "st:1: not a tensord hash file"},
        {1, "sha256sum output", ST_ERR_STATE_FORMAT, "st:1: not a tensord hash file"},
        {2, "1 2 3 4 5", ST_ERR_STATE_FORMAT, "st:2: not an entry"},
        {2, "01 2 10 4 5 " "0000000000000000000000000000000000000000000000000000000000000000 -",
         ST_ERR_STATE_FORMAT, "st:2: not an entry"},
        {2, "18446744073709551616 2 10 4 5 "
            "0000000000000000000000000000000000000000000000000000000000000000 -",
         ST_ERR_STATE_FORMAT, "st:2: not an entry"},
        {2, "1 2 10 -0 5 " "0000000000000000000000000000000000000000000000000000000000000000 -",
         ST_ERR_STATE_FORMAT, "st:2: not an entry"},
        {2, "1 2 10 9223372036854775808 5 "
            "0000000000000000000000000000000000000000000000000000000000000000 -",
         ST_ERR_STATE_FORMAT, "st:2: not an entry"},
        {2, "1 2 10 4 5 " "000000000000000000000000000000000000000000000000000000000000000A -",
         ST_ERR_STATE_FORMAT, "st:2: not an entry"},
        {2, "1 2 10 4 5  " "0000000000000000000000000000000000000000000000000000000000000000 -",
         ST_ERR_STATE_FORMAT, "st:2: not an entry"},
        {2, "1 2 10 4 5 " "0000000000000000000000000000000000000000000000000000000000000000 -\r",
         ST_ERR_STATE_FORMAT, "git blob id is neither"},
        {2, "1 2 10 4 5 " "0000000000000000000000000000000000000000000000000000000000000000 -",
         ST_ERR_STATE_FORMAT, "st:2: a git blob id missing for a file of 10 bytes"},
        {2, "1 2 10485761 4 5 " "0000000000000000000000000000000000000000000000000000000000000000 "
            "0000000000000000000000000000000000000000",
         ST_ERR_STATE_FORMAT, "st:2: a git blob id present"},
        {3, "1 18446744073709551614 10 -9223372036854775808 9223372036854775807 "
            "0000000000000000000000000000000000000000000000000000000000000000 "
            "0000000000000000000000000000000000000000",
         ST_ERR_STATE_FORMAT, "st:3: a second entry for the same file"},
        {5, "end 3 0000000000000000000000000000000000000000000000000000000000000000", ST_ERR_STATE_TORN,
         "st:5: checksum mismatch"},
        {5, "end 4 0000000000000000000000000000000000000000000000000000000000000000", ST_ERR_STATE_TORN,
         "st:5: the end line counts 4 entries"},
        {5, "end 3", ST_ERR_STATE_FORMAT, "st:5: not an end line"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char *text = with_line(cases[i].line, cases[i].text);
        struct st_error err;
        enum st_status rc = parse(text, &err);
        if (rc != cases[i].code || !strstr(err.message, cases[i].msg))
            fprintf(stderr, "  case %zu: %d \"%s\"\n", i, rc, err.message);
        CHECK(rc == cases[i].code);
        CHECK_CONTAINS(err.message, cases[i].msg);
        free(text);
    }
}

TEST(truncation_and_trailing_text)
{
    struct hash_entry e[2] = {entry(1, 1), entry(2, 2)};
    size_t len;
    char *text = hashfile_format(e, 2, &len);
    struct st_error err;
    struct sink s = {.n = 0};
    /* Every proper prefix is refused. */
    for (size_t cut = 0; cut < len; cut++) {
        s.n = 0;
        CHECK(ST_CODE(hashfile_parse(text, cut, "st", collect, &s, &err), &err) != ST_OK);
    }
    s.n = 0;
    CHECK(ST_CODE(hashfile_parse(text, len - 1, "st", collect, &s, &err), &err) == ST_ERR_STATE_TORN);
    CHECK_CONTAINS(err.message, "no newline");
    char *more = xasprintf("%sx\n", text);
    s.n = 0;
    CHECK(ST_CODE(hashfile_parse(more, strlen(more), "st", collect, &s, &err), &err) == ST_ERR_STATE_FORMAT);
    CHECK_CONTAINS(err.message, "st:5: text after the end line");
    free(more);
    /* A NUL or a flipped bit anywhere in an entry is caught. */
    size_t end_line = (size_t)(strstr(text, "\nend ") - text);
    for (size_t i = 17; i < end_line; i++) {
        char saved = text[i];
        text[i] = text[i] == '\n' ? '\0' : (char)(text[i] ^ 1);
        s.n = 0;
        CHECK(ST_CODE(hashfile_parse(text, len, "st", collect, &s, &err), &err) != ST_OK);
        text[i] = saved;
    }
    free(text);
    char line[400];
    memset(line, '7', sizeof(line));
    memcpy(line, "tensord-hashes 1\n", 17);
    line[sizeof(line) - 1] = '\n';
    CHECK(ST_CODE(hashfile_parse(line, sizeof(line), "st", collect, &s, &err), &err) == ST_ERR_STATE_FORMAT);
    CHECK_CONTAINS(err.message, "st:2: a line longer than 256 bytes");
}

TEST(a_full_consumer_is_a_limit)
{
    struct hash_entry e[17];
    for (int i = 0; i < 17; i++)
        e[i] = entry((uint64_t)i, 1);
    size_t len;
    char *text = hashfile_format(e, 17, &len);
    struct sink s = {.n = 0};
    struct st_error err;
    CHECK(ST_CODE(hashfile_parse(text, len, "st", collect, &s, &err), &err) == ST_ERR_LIMIT);
    free(text);
}

TEST(replace_and_read_back)
{
    struct hash_entry e[2] = {entry(5, 5), entry(6, 6)};
    CHECK(hashfile_replace(dfd, "hashes", e, 2) == 0);
    struct stat sb;
    CHECK(fstatat(dfd, "hashes", &sb, 0) == 0 && (sb.st_mode & 0777) == 0640);
    CHECK(fstatat(dfd, "hashes.tmp", &sb, 0) != 0); /* renamed, not copied */
    struct sink s = {.n = 0};
    struct st_error err;
    int found = 0;
    CHECK(ST_CODE(hashfile_read(dfd, "hashes", "st", collect, &s, &found, &err), &err) == ST_OK);
    CHECK(found && s.n == 2 && memcmp(s.e, e, sizeof(e)) == 0);
    s.n = 0;
    CHECK(ST_CODE(hashfile_read(dfd, "missing", "st", collect, &s, &found, &err), &err) == ST_OK);
    CHECK(!found && s.n == 0);
}

TEST(hostile_paths)
{
    struct sink s = {.n = 0};
    struct st_error err;
    int found;
    CHECK(mkfifoat(dfd, "fifo", 0600) == 0);
    uint64_t t0 = time_mono_ns();
    CHECK(ST_CODE(hashfile_read(dfd, "fifo", "st", collect, &s, &found, &err), &err) == ST_ERR_IO);
    CHECK(time_mono_ns() - t0 < 1000000000ull);
    CHECK(symlinkat("hashes", dfd, "link") == 0);
    CHECK(ST_CODE(hashfile_read(dfd, "link", "st", collect, &s, &found, &err), &err) == ST_ERR_IO);
    CHECK(s.n == 0);
    /* A symlink planted at the temporary name is replaced, not followed. */
    CHECK(symlinkat("/etc/passwd-should-not-be-written", dfd, "victim.tmp") == 0);
    struct hash_entry e = entry(1, 1);
    CHECK(hashfile_replace(dfd, "victim", &e, 1) == -ELOOP);
}

TEST(load_store_is_all_or_nothing)
{
    struct hash_entry e[2] = {entry(8, 8), entry(9, 9)};
    CHECK(hashfile_replace(dfd, "good", e, 2) == 0);
    struct hashstore *st = hashstore_new();
    struct st_error err;
    CHECK(ST_CODE(hashfile_load_store(st, dfd, "good", "good", &err), &err) == ST_OK);
    CHECK_EQ_U64(hashstore_count(st), 2);
    const struct hash_entry *kept;
    size_t n;
    CHECK(hashstore_plan_save(st, 0, &kept, &n) == NULL); /* what was loaded is saved */
    hashstore_free(st);
    /* The second entry damaged: the first is not kept either. */
    size_t len;
    char *text = hashfile_format(e, 2, &len);
    strstr(text, "\n9 ")[1] = 'x';
    int fd = openat(dfd, "bad", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(write(fd, text, len) == (ssize_t)len);
    close(fd);
    free(text);
    st = hashstore_new();
    CHECK(ST_CODE(hashfile_load_store(st, dfd, "bad", "bad", &err), &err) != ST_OK);
    CHECK_CONTAINS(err.message, "bad:");
    CHECK_EQ_U64(hashstore_count(st), 0);
    hashstore_free(st);
}

TEST(save_store_writes_what_is_used)
{
    struct hashstore *st = hashstore_new();
    struct hash_entry a = entry(1, 1), b = entry(2, 2);
    hashstore_put(st, &a, 7);
    hashstore_put(st, &b, 7);
    CHECK(hashfile_save_store(st, 7, dfd, "saved") == 0);
    struct hashstore *again = hashstore_new();
    struct st_error err;
    CHECK(ST_CODE(hashfile_load_store(again, dfd, "saved", "saved", &err), &err) == ST_OK);
    CHECK(hashstore_lookup(again, &a.id, NULL) && hashstore_lookup(again, &b.id, NULL));
    hashstore_free(again);
    hashstore_free(st);
}

int main(void)
{
    CHECK(mkdtemp(dir) != NULL);
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    RUN(round_trip);
    RUN(damage_is_refused_with_its_line);
    RUN(truncation_and_trailing_text);
    RUN(a_full_consumer_is_a_limit);
    RUN(replace_and_read_back);
    RUN(hostile_paths);
    RUN(load_store_is_all_or_nothing);
    RUN(save_store_writes_what_is_used);
    close(dfd);
    char *cmd = xasprintf("rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    free(cmd);
    return TEST_SUMMARY();
}
