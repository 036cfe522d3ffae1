/* Unit tests for server/lease/lease_access.c: the socket file (bound, a stale
 * one replaced, one a live daemon serves or a file that is not a socket
 * refused), the allow-list by uid and gid against a real peer's
 * credentials, and the refusal a peer gets. */
#include <grp.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "ipc_proto.h"
#include "lease_access.h"
#include "log.h"
#include "test.h"
#include "util.h"

static char dir[] = "/tmp/test_lease_access.XXXXXX";

TEST(socket_file)
{
    char err[256], *path = xasprintf("%s/l.sock", dir);
    int fd = lease_access_listen(path, err, sizeof(err));
    CHECK(fd >= 0);
    CHECK(lease_access_listen(path, err, sizeof(err)) == -1); /* a live daemon serves it */
    char *want = xasprintf("ipc socket %s is in use by another process", path);
    CHECK_STR(err, want);
    free(want);
    close(fd); /* the file stays behind, stale */
    fd = lease_access_listen(path, err, sizeof(err));
    CHECK(fd >= 0);
    close(fd);
    unlink(path);
    test_write_file(path, "x", 1);
    CHECK(lease_access_listen(path, err, sizeof(err)) == -1);
    want = xasprintf("ipc socket %s exists and is not a socket", path);
    CHECK_STR(err, want);
    free(want);
    unlink(path);
    char *longer = xmalloc(200);
    memset(longer, 'a', 199);
    longer[0] = '/';
    longer[199] = '\0';
    CHECK(lease_access_listen(longer, err, sizeof(err)) == -1);
    CHECK_CONTAINS(err, "is longer than");
    free(longer);
    free(path);
}

TEST(allow_list)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    struct config cfg;
    config_defaults(&cfg);
    struct lease_allow a;
    lease_access_init(&a, &cfg);
    struct ucred cr;
    CHECK(lease_access_allowed(&a, sv[0], &cr) == 1); /* the daemon's own uid */
    CHECK(cr.uid == getuid() && cr.pid == getpid());
    struct lease_allow other = {.uids = {getuid() + 1}, .n_uids = 1};
    CHECK(lease_access_allowed(&other, sv[0], &cr) == 1); /* still its own uid */
    int not_socket = open("/dev/null", O_RDONLY);
    CHECK(lease_access_allowed(&a, not_socket, &cr) == 0); /* credentials unreadable */
    close(not_socket);
    config_free(&cfg);
    close(sv[0]);
    close(sv[1]);
}

TEST(refusal)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    struct lease_refusals rs;
    memset(&rs, 0, sizeof(rs));
    struct ucred cr = {.pid = 1, .uid = 4242, .gid = 4343};
    lease_access_refuse(&rs, sv[0], &cr); /* answers and closes */
    unsigned char buf[512];
    ssize_t n = recv(sv[1], buf, sizeof(buf), MSG_WAITALL);
    const char *want = "{\"ok\":false,\"error\":{\"code\":\"forbidden\",\"message\":\"uid 4242 gid "
                       "4343 may not use this socket (allow_uids / allow_gids)\"}}";
    CHECK(n == (ssize_t)(IPC_HEADER_BYTES + strlen(want)));
    CHECK(ipc_get_header(buf) == strlen(want));
    CHECK(n > 4 && memcmp(buf + 4, want, strlen(want)) == 0);
    CHECK(recv(sv[1], buf, sizeof(buf), 0) == 0); /* closed */
    lease_access_flush(&rs);
    close(sv[1]);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    log_init("error", "off");
    RUN(socket_file);
    RUN(allow_list);
    RUN(refusal);
    rmdir(dir);
    return TEST_SUMMARY();
}
