/* fileio: regular files only (a FIFO is refused at once, never blocks),
 * exact preads (truncation is -ENODATA), ETags that follow the file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"
#include "test.h"
#include "util.h"

/* Opens dirfd/name as the registry does a file it serves (never blocking on a
 * FIFO) and makes it a served descriptor with fileio_regular. */
static int open_regular(int dirfd, const char *name, struct fileio_stat *st)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    return fd < 0 ? -errno : fileio_regular(fd, st);
}


static char dir[] = "/tmp/test_fileio.XXXXXX";
static int dfd = -1;

static void write_file(const char *name, const void *data, size_t n)
{
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, data, n) == (ssize_t)n);
    close(fd);
}

TEST(open_regular)
{
    write_file("a.bin", "hello world", 11);
    struct fileio_stat st;
    int fd = open_regular(dfd, "a.bin", &st);
    CHECK(fd >= 0);
    CHECK_EQ_U64(st.size, 11);
    CHECK(st.ino != 0);
    struct stat sb;
    CHECK(fstat(fd, &sb) == 0);
    /* Content hashes are kept per identity, ctime included (hashstore.h). */
    CHECK(st.ctime_ns == (int64_t)sb.st_ctim.tv_sec * 1000000000 + sb.st_ctim.tv_nsec);
    CHECK(st.mtime_ns == (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec);
    CHECK(st.dev == (uint64_t)sb.st_dev);
    int fl = fcntl(fd, F_GETFL);
    CHECK(!(fl & O_NONBLOCK));
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    close(fd);
    CHECK(open_regular(dfd, "missing", &st) == -ENOENT);
}

TEST(fifo_refused_without_blocking)
{
    CHECK(mkfifoat(dfd, "fifo", 0644) == 0);
    struct fileio_stat st;
    uint64_t t0 = time_mono_ns();
    CHECK(open_regular(dfd, "fifo", &st) == -EINVAL);
    CHECK(time_mono_ns() - t0 < 1000000000ULL);
}

TEST(directory_and_socket_refused)
{
    CHECK(mkdirat(dfd, "sub", 0755) == 0);
    struct fileio_stat st;
    CHECK(open_regular(dfd, "sub", &st) == -EINVAL);
    /* A socket cannot be opened at all (ENXIO); either way it is refused. */
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/sock", dir);
    CHECK(bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    CHECK(open_regular(dfd, "sock", &st) < 0);
    close(s);
    /* /dev/null is a character device */
    int devfd = open("/dev", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(open_regular(devfd, "null", &st) == -EINVAL);
    close(devfd);
}

TEST(pread_full)
{
    write_file("p.bin", "0123456789", 10);
    struct fileio_stat st;
    int fd = open_regular(dfd, "p.bin", &st);
    char buf[16] = {0};
    CHECK(fileio_pread_full(fd, buf, 4, 3) == 0);
    CHECK(memcmp(buf, "3456", 4) == 0);
    CHECK(fileio_pread_full(fd, buf, 0, 10) == 0);
    CHECK(fileio_pread_full(fd, buf, 10, 0) == 0);
    CHECK(fileio_pread_full(fd, buf, 11, 0) == -ENODATA);
    CHECK(fileio_pread_full(fd, buf, 1, 10) == -ENODATA);
    /* truncated under an open descriptor */
    int w = openat(dfd, "p.bin", O_WRONLY | O_CLOEXEC);
    CHECK(ftruncate(w, 5) == 0);
    close(w);
    CHECK(fileio_pread_full(fd, buf, 4, 3) == -ENODATA);
    CHECK(fileio_pread_full(fd, buf, 2, 3) == 0);
    CHECK(fileio_pread_full(fd, buf, 1, UINT64_MAX) < 0);
    close(fd);
    CHECK(fileio_pread_full(-1, buf, 1, 0) == -EBADF);
}

TEST(etag)
{
    write_file("e.bin", "abc", 3);
    struct fileio_stat st1, st2, st3;
    int fd = open_regular(dfd, "e.bin", &st1);
    close(fd);
    char t1[FILEIO_ETAG_MAX], t2[FILEIO_ETAG_MAX], t3[FILEIO_ETAG_MAX];
    fileio_etag(&st1, t1);
    /* weak, and made of size and mtime only: replicas with other inodes agree */
    CHECK(strncmp(t1, "W/\"", 3) == 0 && t1[strlen(t1) - 1] == '"');
    char want[FILEIO_ETAG_MAX];
    snprintf(want, sizeof(want), "W/\"3-%llx\"", (unsigned long long)st1.mtime_ns);
    CHECK_STR(t1, want);
    struct fileio_stat other = st1;
    other.ino ^= 12345;
    other.dev ^= 7;
    fileio_etag(&other, t2);
    CHECK_STR(t2, t1);
    /* same file, new mtime: a new tag */
    struct timespec ts[2] = {{.tv_sec = 1000000000, .tv_nsec = 5}, {.tv_sec = 1000000000, .tv_nsec = 5}};
    CHECK(utimensat(dfd, "e.bin", ts, 0) == 0);
    fd = open_regular(dfd, "e.bin", &st2);
    close(fd);
    CHECK(st2.mtime_ns == 1000000000LL * 1000000000LL + 5);
    fileio_etag(&st2, t2);
    CHECK(strcmp(t1, t2) != 0);
    /* same mtime again, different size: new tag */
    write_file("e.bin", "abcd", 4);
    CHECK(utimensat(dfd, "e.bin", ts, 0) == 0);
    fd = open_regular(dfd, "e.bin", &st3);
    close(fd);
    fileio_etag(&st3, t3);
    CHECK(strcmp(t2, t3) != 0);
    /* the longest tag fits */
    struct fileio_stat big = {.size = UINT64_MAX, .mtime_ns = -1, .ino = UINT64_MAX};
    char tb[FILEIO_ETAG_MAX];
    fileio_etag(&big, tb);
    CHECK_STR(tb, "W/\"ffffffffffffffff-ffffffffffffffff\"");
}

TEST(read_small)
{
    char path[128], *text = NULL;
    size_t len = 0;
    write_file("small", "token\n", 6);
    snprintf(path, sizeof(path), "%s/small", dir);
    CHECK(fileio_read_small(path, 6, &text, &len) == 0);
    CHECK(len == 6 && text && strcmp(text, "token\n") == 0);
    free(text);
    CHECK(fileio_read_small(path, 5, &text, &len) == -EFBIG); /* one byte over */
    write_file("empty", "", 0);
    snprintf(path, sizeof(path), "%s/empty", dir);
    CHECK(fileio_read_small(path, 5, &text, &len) == 0);
    CHECK(len == 0 && text[0] == '\0');
    free(text);
    snprintf(path, sizeof(path), "%s/missing", dir);
    CHECK(fileio_read_small(path, 5, &text, &len) == -ENOENT);
    CHECK(fileio_read_small(dir, 5, &text, &len) == -EISDIR);
}

TEST(read_secret)
{
    char path[128];
    char *s = NULL;
    size_t len;
    struct st_error err;
    write_file("secret", "s3cr3t\r\nsecond line\n", 20);
    snprintf(path, sizeof(path), "%s/secret", dir);
    CHECK(ST_CODE(fileio_read_secret("key_file", path, &s, &len, &err), &err) == ST_OK);
    CHECK(s && len == 6 && strcmp(s, "s3cr3t") == 0);
    free(s);
    write_file("blank", "\nsecond\n", 8);
    snprintf(path, sizeof(path), "%s/blank", dir);
    s = NULL;
    CHECK(ST_CODE(fileio_read_secret("key_file", path, &s, &len, &err), &err) ==
          ST_ERR_INVALID_ARGUMENT);
    CHECK(s == NULL && strstr(err.message, "key_file ") == err.message &&
          strstr(err.message, "/blank: the first line is empty"));
    write_file("nul", "ab\0c\n", 5); /* a NUL ends the line */
    snprintf(path, sizeof(path), "%s/nul", dir);
    CHECK(ST_CODE(fileio_read_secret("key_file", path, &s, &len, &err), &err) == ST_OK);
    CHECK(s && len == 2 && strcmp(s, "ab") == 0);
    free(s);
    snprintf(path, sizeof(path), "%s/missing", dir);
    CHECK(fileio_read_secret("key_file", path, &s, &len, &err) == -ENOENT);
    CHECK(err.code == ST_ERR_IO && strstr(err.message, "/missing: No such file or directory"));
}

TEST(mkdirs)
{
    char path[160];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/m/n/o", dir);
    CHECK(fileio_mkdirs(path, 0700) == 0);
    CHECK(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 0777) == 0700);
    CHECK(fileio_mkdirs(path, 0700) == 0); /* there already */
    write_file("plain", "x", 1);
    snprintf(path, sizeof(path), "%s/plain/sub", dir);
    CHECK(fileio_mkdirs(path, 0700) == -ENOTDIR);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    RUN(open_regular);
    RUN(fifo_refused_without_blocking);
    RUN(directory_and_socket_refused);
    RUN(pread_full);
    RUN(etag);
    RUN(read_small);
    RUN(read_secret);
    RUN(mkdirs);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return TEST_SUMMARY();
}
