/* path_trust: a socket's place is trusted when its directory is written by
 * its owner only and no ancestor can be renamed by another user; the
 * answer is the resolved path (symlinks followed) and the owner. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "path_trust.h"
#include "test.h"

static char base[64];

/* base/rel as a path, in a static buffer. */
static const char *at(const char *rel)
{
    static char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", base, rel);
    return p;
}

/* The outcome for socket path: its code, and *real freed. */
static enum st_status check(const char *path, uid_t *owner, char *msg, size_t msglen)
{
    struct st_error e = {0};
    char *real = NULL;
    uid_t o = (uid_t)-1;
    enum st_status s = ST_CODE(path_trust_socket(path, &real, &o, &e), &e);
    if (owner)
        *owner = o;
    snprintf(msg, msglen, "%s", s == ST_OK ? (real ? real : "") : e.message);
    free(real);
    return s;
}

TEST(private_directory_is_trusted_and_resolved)
{
    char msg[600], want[PATH_MAX];
    uid_t owner;
    CHECK(mkdir(at("own"), 0700) == 0);
    CHECK(check(at("own/s.sock"), &owner, msg, sizeof(msg)) == ST_OK);
    CHECK(owner == geteuid());
    CHECK_STR(msg, at("own/s.sock"));
    /* Through a symlink and "..": the answer is where the socket really is. */
    snprintf(want, sizeof(want), "%s", at("own/s.sock"));
    char target[PATH_MAX];
    snprintf(target, sizeof(target), "%s", at("own"));
    CHECK(symlink(target, at("link")) == 0);
    CHECK(check(at("link/../own/./s.sock"), NULL, msg, sizeof(msg)) == ST_OK);
    CHECK_STR(msg, want);
    CHECK(check(at("link/s.sock"), NULL, msg, sizeof(msg)) == ST_OK);
    CHECK_STR(msg, want);
    /* Another user's directory is trusted as theirs (the caller decides). */
    if (geteuid() == 0) {
        CHECK(mkdir(at("theirs"), 0755) == 0 && chown(at("theirs"), 4242, 4242) == 0);
        CHECK(check(at("theirs/s.sock"), &owner, msg, sizeof(msg)) == ST_OK);
        CHECK(owner == 4242);
    }
}

TEST(directory_others_can_write_is_refused)
{
    char msg[600];
    CHECK(mkdir(at("open"), 0700) == 0 && chmod(at("open"), 0777) == 0);
    CHECK(check(at("open/s.sock"), NULL, msg, sizeof(msg)) == ST_ERR_UNTRUSTED);
    CHECK_CONTAINS(msg, "writable by every user (mode 0777)");
    CHECK_CONTAINS(msg, "/run/tensord/tensord.sock");
    CHECK(strstr(msg, "chmod") == NULL);
    /* A socket right in /tmp: the advice is a private directory, never to
     * change the permissions of one every user shares. */
    CHECK(check("/tmp/s.sock", NULL, msg, sizeof(msg)) == ST_ERR_UNTRUSTED);
    CHECK_CONTAINS(msg, "the directory /tmp is writable by every user");
    CHECK(strstr(msg, "chmod") == NULL);
    if (geteuid() != 0) {
        setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
        CHECK(check("/tmp/s.sock", NULL, msg, sizeof(msg)) == ST_ERR_UNTRUSTED);
        CHECK_CONTAINS(msg, "/run/user/4242/tensord.sock ($XDG_RUNTIME_DIR");
    }
    CHECK(chmod(at("open"), 01777) == 0); /* sticky: a name can still be taken */
    CHECK(check(at("open/s.sock"), NULL, msg, sizeof(msg)) == ST_ERR_UNTRUSTED);
    CHECK(chmod(at("open"), 0730) == 0);
    CHECK(check(at("open/s.sock"), NULL, msg, sizeof(msg)) == ST_ERR_UNTRUSTED);
    CHECK_CONTAINS(msg, "writable by its group (mode 0730)");
    CHECK(chmod(at("open"), 0755) == 0);
    CHECK(check(at("open/s.sock"), NULL, msg, sizeof(msg)) == ST_OK);
}

TEST(ancestors_must_not_be_renamable_by_others)
{
    char msg[600];
    CHECK(mkdir(at("up"), 0700) == 0 && mkdir(at("up/in"), 0700) == 0);
    CHECK(chmod(at("up"), 0777) == 0); /* anyone could move "in" away */
    CHECK(check(at("up/in/s.sock"), NULL, msg, sizeof(msg)) == ST_ERR_UNTRUSTED);
    CHECK_CONTAINS(msg, at("up"));
    CHECK(chmod(at("up"), 01777) == 0); /* as /tmp: only its owner moves "in" */
    CHECK(check(at("up/in/s.sock"), NULL, msg, sizeof(msg)) == ST_OK);
    if (geteuid() == 0) {
        /* An ancestor of a third user, who could rename it. */
        CHECK(chmod(at("up"), 0755) == 0 && chown(at("up"), 4242, 4242) == 0);
        CHECK(check(at("up/in/s.sock"), NULL, msg, sizeof(msg)) == ST_ERR_UNTRUSTED);
        CHECK_CONTAINS(msg, "belongs to uid 4242, neither root nor");
        CHECK(chown(at("up"), 0, 0) == 0);
    }
}

TEST(paths_without_a_directory_or_a_name)
{
    char msg[600];
    CHECK(check(at("missing/s.sock"), NULL, msg, sizeof(msg)) == ST_ERR_IO);
    CHECK_CONTAINS(msg, "No such file or directory");
    CHECK(check(at("own/"), NULL, msg, sizeof(msg)) == ST_ERR_INVALID_ARGUMENT);
    CHECK(check("", NULL, msg, sizeof(msg)) == ST_ERR_INVALID_ARGUMENT);
    FILE *f = fopen(at("file"), "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    struct st_error e;
    char *real;
    uid_t owner;
    CHECK(path_trust_socket(at("file/s.sock"), &real, &owner, &e) == -ENOTDIR);
    /* A bare name is in the working directory; "/name" in the root. */
    char cwd[PATH_MAX];
    CHECK(getcwd(cwd, sizeof(cwd)) != NULL && chdir(at("own")) == 0);
    CHECK(check("s.sock", NULL, msg, sizeof(msg)) == ST_OK);
    CHECK_STR(msg, at("own/s.sock"));
    CHECK(chdir(cwd) == 0);
    CHECK(check("/s.sock", NULL, msg, sizeof(msg)) == ST_OK);
    CHECK_STR(msg, "/s.sock");
}

int main(void)
{
    snprintf(base, sizeof(base), "/tmp/tensord-test-trust-XXXXXX");
    if (!mkdtemp(base))
        return 2;
    RUN(private_directory_is_trusted_and_resolved);
    RUN(directory_others_can_write_is_refused);
    RUN(ancestors_must_not_be_renamable_by_others);
    RUN(paths_without_a_directory_or_a_name);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", base);
    return TEST_SUMMARY();
}
