/* Tests for the client library's connection and open path (client/client.c,
 * client/model.c) against a fake daemon on a Unix socket that answers what
 * each test scripts: hostile answers over the wire, the descriptors and
 * leases of answers that cannot be used, descriptors unfit to map (short,
 * unsealed, no memfd), tensors whose shape does not make their bytes, a
 * protocol-1 daemon, and every allocation failing in turn. tests/unit/test_gpu_manager.c runs the client
 * against the real lease socket. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cmem.h"
#include "ipc_proto.h"
#include "tensord_client.h"
#include "test.h"

/* An answer for req: its text and how many descriptors go with it;
 * BIG_FRAME sends a frame header announcing more than IPC_MAX_ANSWER. */
#define BIG_FRAME "!big-frame"
typedef const char *(*script_fn)(const char *req, int *n_fds);

struct fake {
    char dir[64];
    char path[108];
    int lfd;
    pthread_t th;
    script_fn script;
    volatile int stop;
    pthread_mutex_t lock;
    char log[16384];          /* the requests received, one a line */
    size_t log_len;
};

static struct fake fake;

static int read_full(int fd, void *p, size_t n)
{
    char *d = p;
    while (n) {
        ssize_t r = read(fd, d, n);
        if (r <= 0)
            return -1;
        d += r;
        n -= (size_t)r;
    }
    return 0;
}

/* What the fake hands as an allocation's descriptor: a memfd of 4096 bytes
 * sealed as the daemon seals its own (gpu/gpu_host.c), or one of the
 * ways a descriptor can be unfit to map. */
enum fd_kind {
    FD_SEALED,        /* what the daemon sends */
    FD_SHORT,         /* sealed, but 1024 bytes behind a 4096-byte allocation */
    FD_UNSEALED,      /* could be shrunk under the mapping */
    FD_WRITABLE,      /* sealed against resizing only: could be rewritten */
    FD_PIPE,          /* no file at all */
};
static enum fd_kind fd_kind;

/* A new descriptor of fd_kind (the fake closes it once sent). */
static int make_fd(void)
{
    int pipefd[2];
    if (fd_kind == FD_PIPE) {
        if (pipe2(pipefd, O_CLOEXEC) < 0)
            abort();
        close(pipefd[1]);
        return pipefd[0];
    }
    int fd = memfd_create("fake-alloc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL;
    if (fd_kind == FD_WRITABLE)
        seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    if (fd < 0 || ftruncate(fd, fd_kind == FD_SHORT ? 1024 : 4096) < 0 ||
        (fd_kind != FD_UNSEALED && fcntl(fd, F_ADD_SEALS, seals) < 0))
        abort();
    return fd;
}

/* Sends the framed answer with n_fds new descriptors of fd_kind (ours
 * closed once sent). */
static void send_answer(int fd, const char *text, int n_fds)
{
    size_t n = strlen(text);
    char *msg = malloc(n + IPC_HEADER_BYTES);
    ipc_put_header((unsigned char *)msg, (uint32_t)n);
    memcpy(msg + IPC_HEADER_BYTES, text, n);
    int fds[8];
    union {
        char buf[CMSG_SPACE(sizeof(fds))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = msg, .iov_len = n + IPC_HEADER_BYTES};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    for (int i = 0; i < n_fds; i++)
        fds[i] = make_fd();
    if (n_fds) {
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n_fds);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n_fds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)n_fds);
    }
    ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
    (void)w; /* a client that left does not read it */
    for (int i = 0; i < n_fds; i++)
        close(fds[i]);
    free(msg);
}

/* Answers one connection's requests until it closes. */
static void serve(int fd)
{
    unsigned char hdr[IPC_HEADER_BYTES];
    while (read_full(fd, hdr, sizeof(hdr)) == 0) {
        uint32_t n = ipc_get_header(hdr);
        char *req = n < (1u << 20) ? calloc(1, n + 1) : NULL;
        if (!req || read_full(fd, req, n) < 0) {
            free(req);
            break;
        }
        pthread_mutex_lock(&fake.lock);
        fake.log_len += (size_t)snprintf(fake.log + fake.log_len, sizeof(fake.log) - fake.log_len,
                                         "%s\n", req);
        if (fake.log_len >= sizeof(fake.log))
            fake.log_len = sizeof(fake.log) - 1;
        pthread_mutex_unlock(&fake.lock);
        int n_fds = 0;
        const char *text = fake.script(req, &n_fds);
        free(req);
        if (!text)
            break;
        if (strcmp(text, BIG_FRAME) == 0) {
            /* A frame longer than any answer a client reads. */
            unsigned char big[IPC_HEADER_BYTES + 8] = {0};
            ipc_put_header(big, IPC_MAX_ANSWER + 1);
            if (write(fd, big, sizeof(big)) < 0)
                break;
            continue;
        }
        send_answer(fd, text, n_fds);
    }
    close(fd);
}

static void *fake_main(void *arg)
{
    (void)arg;
    while (!fake.stop) {
        struct pollfd p = {.fd = fake.lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept4(fake.lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            serve(fd);
    }
    return NULL;
}

static void fake_start(script_fn script)
{
    fd_kind = FD_SEALED;
    memset(&fake, 0, sizeof(fake));
    pthread_mutex_init(&fake.lock, NULL);
    fake.script = script;
    /* A directory of its own: the client connects only where no other user
     * could have put the socket (a plain /tmp/NAME.sock is refused). */
    snprintf(fake.dir, sizeof(fake.dir), "/tmp/tensord-test-client-XXXXXX");
    if (!mkdtemp(fake.dir))
        abort();
    snprintf(fake.path, sizeof(fake.path), "%s/s.sock", fake.dir);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, fake.path, strlen(fake.path) + 1);
    fake.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fake.lfd < 0 || bind(fake.lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        listen(fake.lfd, 8) < 0 || pthread_create(&fake.th, NULL, fake_main, NULL) != 0)
        abort();
}

static void fake_stop(void)
{
    fake.stop = 1;
    pthread_join(fake.th, NULL);
    close(fake.lfd);
    unlink(fake.path);
    rmdir(fake.dir);
    pthread_mutex_destroy(&fake.lock);
}

static int log_has(const char *s)
{
    pthread_mutex_lock(&fake.lock);
    int found = strstr(fake.log, s) != NULL;
    pthread_mutex_unlock(&fake.lock);
    return found;
}

/* Descriptors of the fake's memfds (and pipes: FD_PIPE) open in this
 * process. */
static int count_memfds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;
    char path[300], target[256];
    while (d && (e = readdir(d))) {
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, target, sizeof(target) - 1);
        if (k > 0) {
            target[k] = '\0';
            n += strstr(target, "memfd:fake-alloc") != NULL || strncmp(target, "pipe:", 5) == 0;
        }
    }
    if (d)
        closedir(d);
    return n;
}

/* Waits up to 2 s for the count to come back to want (the fake closes its
 * own copies just after sending). */
static int memfds_back_to(int want)
{
    for (int i = 0; i < 200; i++) {
        if (count_memfds() == want)
            return 1;
        usleep(10000);
    }
    return 0;
}

#define HELLO_OK "{\"ok\":true,\"protocol\":2,\"protocols\":[1,2],\"server\":\"fake\"}"
#define TENSOR "{\"name\":\"x\",\"dtype\":\"U8\",\"shape\":[16],\"alloc\":0,\"offset\":0," \
               "\"nbytes\":16}"
#define OPEN_HEAD "{\"ok\":true,\"model\":\"m\",\"generation\":1,\"backend\":\"host\"," \
                  "\"device\":\"host\",\"device_index\":0,\"device_uuid\":\"\","

/* What the open request gets, per test. */
static const char *open_answer;
static int open_fds;

/* An open answer with `lease` (a member and its comma, or "") and one
 * allocation of 16 zero bytes (the fake's memfds hold zeros) holding
 * `tensors`. */
static const char *open_with(const char *lease, const char *tensors)
{
    static char text[2048];
    static const char zeros[16];
    uint64_t sum = ipc_tsum_final(ipc_tsum_add(0, zeros, sizeof(zeros), 0), sizeof(zeros));
    snprintf(text, sizeof(text),
             OPEN_HEAD "%s\"allocations\":[{\"id\":0,\"file\":\"a\",\"byte_size\":16,"
                       "\"alloc_size\":4096,\"handle_type\":\"memfd\",\"fd_index\":0,"
                       "\"checksum\":\"%016llx\"}],\"tensors\":[%s]}",
             lease, (unsigned long long)sum, tensors);
    return text;
}

static const char *scripted(const char *req, int *n_fds)
{
    if (strstr(req, "\"hello\""))
        return HELLO_OK;
    if (strstr(req, "\"open\"")) {
        *n_fds = open_fds;
        return open_answer;
    }
    if (strstr(req, "\"list\""))
        return "{\"ok\":true,\"models\":[]}";
    return "{\"ok\":true}";
}

TEST(open_and_release)
{
    char err[256] = "";
    open_answer = open_with("\"lease\":5,", TENSOR);
    open_fds = 1;
    fake_start(scripted);
    int before = count_memfds();
    struct tensord_client *c = tensord_connect(fake.path, err, sizeof(err));
    CHECK(c != NULL);
    struct tensord_model *m = c ? tensord_open(c, "m", NULL, err, sizeof(err)) : NULL;
    CHECK(m != NULL);
    if (m) {
        CHECK(tensord_model_tensor_count(m) == 1 && tensord_model_find(m, "x"));
        CHECK(tensord_model_verify(m, err, sizeof(err)) == 0); /* 16 zero bytes */
        tensord_model_close(m);
    }
    tensord_close(c);
    CHECK(memfds_back_to(before));
    CHECK(log_has("{\"op\":\"release\",\"lease\":5}"));
    fake_stop();
}

/* An ok answer that names no lease: refused, and the descriptors that came
 * with it are closed (they leaked before: fails without the fix in
 * take_lease). */
TEST(open_without_lease_closes_its_descriptors)
{
    char err[256] = "";
    open_answer = open_with("", TENSOR);
    open_fds = 1;
    fake_start(scripted);
    int before = count_memfds();
    struct tensord_client *c = tensord_connect(fake.path, err, sizeof(err));
    CHECK(c && tensord_open(c, "m", NULL, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "names no lease");
    CHECK(memfds_back_to(before));
    tensord_close(c);
    fake_stop();
}

/* A lease whose answer cannot be used is given back at once. */
TEST(malformed_open_gives_the_lease_back)
{
    char err[256] = "";
    open_answer = open_with("\"lease\":7,", "{\"name\":\"x\",\"dtype\":\"U8\",\"shape\":[16],"
                                            "\"alloc\":0,\"offset\":8,\"nbytes\":16}");
    open_fds = 1;
    fake_start(scripted);
    int before = count_memfds();
    struct tensord_client *c = tensord_connect(fake.path, err, sizeof(err));
    CHECK(c && tensord_open(c, "m", NULL, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "malformed tensor 0");
    CHECK(log_has("{\"op\":\"release\",\"lease\":7}"));
    CHECK(memfds_back_to(before));
    tensord_close(c);
    fake_stop();
}

/* Hostile answers over the wire: an error naming the problem, and the
 * connection stays in step (the whole answer was read). */
TEST(hostile_answers_over_the_wire)
{
    static const struct {
        const char *answer, *want;
    } cases[] = {
        {"{\"ok\":true,\"lease\":99999999999999999999}", "too big integer"},
        {"{\"ok\":true,\"lease\":1,\"lease\":2}", "duplicate object key"},
        {"{\"ok\":true,\"x\":\"\xff\"}", "not valid UTF-8"},
        {"{\"ok\":true,\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
         "maximum parsing depth"},
        {"{\"ok\":true} trailing", "end of file expected"},
        {"{\"ok\":false,\"error\":{\"code\":\"not_loaded\",\"message\":\"no\"}}", "not_loaded: no"},
    };
    char err[256];
    open_fds = 0;
    fake_start(scripted);
    struct tensord_client *c = tensord_connect(fake.path, err, sizeof(err));
    CHECK(c != NULL);
    for (size_t i = 0; c && i < sizeof(cases) / sizeof(cases[0]); i++) {
        open_answer = cases[i].answer;
        err[0] = '\0';
        CHECK(tensord_open(c, "m", NULL, err, sizeof(err)) == NULL);
        CHECK_CONTAINS(err, cases[i].want);
        char *list = tensord_list(c, err, sizeof(err));
        CHECK(list && strcmp(list, "{\"ok\":true,\"models\":[]}") == 0);
        free(list);
    }
    tensord_close(c);
    fake_stop();
}

/* Descriptors unfit to map (issue 22): each refused before mmap with an
 * error naming the allocation and why, its lease given back, every
 * descriptor closed, and the connection still in step. Mapping a short
 * memfd would kill this process with SIGBUS on the first read past its
 * end; an unsealed one could be shrunk or rewritten under it. */
TEST(unfit_descriptors_are_refused)
{
    static const struct {
        enum fd_kind kind;
        const char *want;
    } cases[] = {
        {FD_SHORT, "allocation 0: its memfd holds 1024 bytes, fewer than the 4096 to map"},
        {FD_UNSEALED, "allocation 0: its memfd is not sealed"},
        {FD_WRITABLE, "allocation 0: its memfd is not sealed"},
        {FD_PIPE, "allocation 0: its descriptor is no memfd"},
    };
    char err[256];
    fake_start(scripted);
    open_fds = 1;
    int before = count_memfds();
    struct tensord_client *c = tensord_connect(fake.path, err, sizeof(err));
    CHECK(c != NULL);
    for (size_t i = 0; c && i < sizeof(cases) / sizeof(cases[0]); i++) {
        char lease[64], release[64];
        snprintf(lease, sizeof(lease), "\"lease\":%zu,", 40 + i);
        snprintf(release, sizeof(release), "{\"op\":\"release\",\"lease\":%zu}", 40 + i);
        open_answer = open_with(lease, TENSOR);
        fd_kind = cases[i].kind;
        err[0] = '\0';
        CHECK(tensord_open(c, "m", NULL, err, sizeof(err)) == NULL);
        CHECK_CONTAINS(err, cases[i].want);
        CHECK(log_has(release));
        CHECK(memfds_back_to(before));
        char *list = tensord_list(c, err, sizeof(err));
        CHECK(list != NULL);
        free(list);
    }
    /* The same answer with the descriptor the daemon sends opens. */
    fd_kind = FD_SEALED;
    open_answer = open_with("\"lease\":50,", TENSOR);
    struct tensord_model *m = c ? tensord_open(c, "m", NULL, err, sizeof(err)) : NULL;
    CHECK(m != NULL);
    tensord_model_close(m);
    tensord_close(c);
    CHECK(memfds_back_to(before));
    fake_stop();
}

/* A tensor whose dtype and shape make more (or other) bytes than its
 * nbytes: a DLPack tensor built from that shape would reach past the bytes
 * checked against the allocation. Refused, the lease given back. */
TEST(tensor_shape_must_make_its_bytes)
{
    static const struct {
        const char *tensor, *want;
    } cases[] = {
        {"{\"name\":\"x\",\"dtype\":\"U8\",\"shape\":[4096],\"alloc\":0,\"offset\":0,"
         "\"nbytes\":16}", "a U8 tensor of its shape is 32768 bits, not its nbytes 16"},
        {"{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[2,2],\"alloc\":0,\"offset\":0,"
         "\"nbytes\":15}", "a F32 tensor of its shape is 128 bits, not its nbytes 15"},
        {"{\"name\":\"x\",\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"alloc\":0,"
         "\"offset\":0,\"nbytes\":0}", "its shape overflows"},
        {"{\"name\":\"x\",\"dtype\":\"Q7\",\"shape\":[16],\"alloc\":0,\"offset\":0,"
         "\"nbytes\":16}", "unknown dtype \"Q7\""},
    };
    char err[256];
    fake_start(scripted);
    open_fds = 1;
    int before = count_memfds();
    struct tensord_client *c = tensord_connect(fake.path, err, sizeof(err));
    CHECK(c != NULL);
    for (size_t i = 0; c && i < sizeof(cases) / sizeof(cases[0]); i++) {
        char lease[64], release[64];
        snprintf(lease, sizeof(lease), "\"lease\":%zu,", 60 + i);
        snprintf(release, sizeof(release), "{\"op\":\"release\",\"lease\":%zu}", 60 + i);
        open_answer = open_with(lease, cases[i].tensor);
        err[0] = '\0';
        CHECK(tensord_open(c, "m", NULL, err, sizeof(err)) == NULL);
        CHECK_CONTAINS(err, cases[i].want);
        CHECK(log_has(release));
        CHECK(memfds_back_to(before));
    }
    /* F4: 32 elements in 16 bytes agree; the same bytes read as F32 do too. */
    open_answer = open_with("\"lease\":70,",
                            "{\"name\":\"p\",\"dtype\":\"F4\",\"shape\":[4,8],\"alloc\":0,"
                            "\"offset\":0,\"nbytes\":16},{\"name\":\"f\",\"dtype\":\"F32\","
                            "\"shape\":[2,2],\"alloc\":0,\"offset\":0,\"nbytes\":16}");
    struct tensord_model *m = c ? tensord_open(c, "m", NULL, err, sizeof(err)) : NULL;
    CHECK(m != NULL && tensord_model_tensor_count(m) == 2);
    tensord_model_close(m);
    tensord_close(c);
    fake_stop();
}

static const char *protocol_1(const char *req, int *n_fds)
{
    (void)n_fds;
    if (strstr(req, "\"hello\""))
        return "{\"ok\":false,\"error\":{\"code\":\"bad_request\",\"message\":\"unknown op "
               "\\\"hello\\\"\"}}";
    return "{\"ok\":true}";
}

TEST(protocol_1_daemon)
{
    char err[256] = "";
    fake_start(protocol_1);
    CHECK(tensord_connect(fake.path, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "speaks lease protocol 1 only");
    fake_stop();
}

/* Every allocation of connect, open and close failing in turn: an error
 * each time, never a crash, a leaked descriptor or (under ASan) memory; a
 * lease taken is given back. */
TEST(out_of_memory_in_turn)
{
    char err[256];
    open_answer = open_with("\"lease\":9,", TENSOR);
    open_fds = 1;
    fake_start(scripted);
    int before = count_memfds(), opened = 0, failures = 0;
    for (long n = 0; n < 500 && !opened; n++) {
        err[0] = '\0';
        cmem_fail_after(n);
        struct tensord_client *c = tensord_connect(fake.path, err, sizeof(err));
        struct tensord_model *m = c ? tensord_open(c, "m", NULL, err, sizeof(err)) : NULL;
        cmem_fail_after(-1);
        if (m) {
            opened = 1;
            tensord_model_close(m);
        } else {
            failures++;
            CHECK_CONTAINS(err, "out of memory");
        }
        tensord_close(c);
    }
    CHECK(opened && failures > 10);
    CHECK(memfds_back_to(before));
    fake_stop();
}

/* The fake's answers for the lost-frame tests: opens get leases 5, 6, ...
 * until open number `bad_open` (1-based; 0 = never), which gets a frame
 * too long to read; a release gets one when bad_release is set. */
static int opens, bad_open, bad_release;

static const char *lossy(const char *req, int *n_fds)
{
    static char text[2048];
    if (strstr(req, "\"hello\""))
        return HELLO_OK;
    if (strstr(req, "\"open\"")) {
        if (++opens == bad_open)
            return BIG_FRAME;
        char lease[32];
        snprintf(lease, sizeof(lease), "\"lease\":%d,", 4 + opens);
        snprintf(text, sizeof(text), "%s", open_with(lease, TENSOR));
        *n_fds = 1;
        return text;
    }
    if (strstr(req, "\"release\"") && bad_release)
        return BIG_FRAME;
    if (strstr(req, "\"list\""))
        return "{\"ok\":true,\"models\":[]}";
    return "{\"ok\":true}";
}

/* A frame the client cannot read ends the connection, and the error says
 * that the connection's leases ended with it (it said nothing of them
 * before: fails on e868279). The models stay mapped; their leases are not
 * "released" on the new connection. */
TEST(unreadable_frame_reports_the_leases_lost)
{
    char err[512] = "";
    opens = 0, bad_open = 2, bad_release = 0;
    fake_start(lossy);
    struct tensord_client *c = tensord_connect(fake.path, err, sizeof(err));
    struct tensord_model *m = c ? tensord_open(c, "m", NULL, err, sizeof(err)) : NULL;
    CHECK(m != NULL);
    CHECK(c && tensord_open(c, "m", NULL, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "answered");
    CHECK_CONTAINS(err, "the connection to tensord is closed and the 1 lease it held ended");
    if (m)
        CHECK(tensord_model_verify(m, err, sizeof(err)) == 0); /* still mapped */
    char *list = c ? tensord_list(c, err, sizeof(err)) : NULL; /* reconnected, no leases */
    CHECK(list != NULL);
    free(list);
    tensord_model_close(m);
    tensord_close(c);
    CHECK(!log_has("{\"op\":\"release\",\"lease\":5}"));
    fake_stop();
}

/* A release's answer cannot be read: the release had no one to tell, so
 * the next call reports the loss of the other lease, once (on e868279 the
 * next call reconnected silently). */
TEST(unreadable_release_answer_is_reported_next)
{
    char err[512] = "";
    opens = 0, bad_open = 0, bad_release = 1;
    fake_start(lossy);
    struct tensord_client *c = tensord_connect(fake.path, err, sizeof(err));
    struct tensord_model *m1 = c ? tensord_open(c, "m", NULL, err, sizeof(err)) : NULL;
    struct tensord_model *m2 = c ? tensord_open(c, "m", NULL, err, sizeof(err)) : NULL;
    CHECK(m1 && m2);
    tensord_model_close(m1); /* its release's answer is the bad frame */
    err[0] = '\0';
    CHECK(c && tensord_list(c, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "the 1 lease it held ended");
    char *list = c ? tensord_list(c, err, sizeof(err)) : NULL;
    CHECK(list != NULL);
    free(list);
    tensord_model_close(m2);
    tensord_close(c);
    CHECK(!log_has("{\"op\":\"release\",\"lease\":6}"));
    fake_stop();
}

/* A socket another user could have put there is never dialled: the
 * client says where and why, and the fake hears nothing. */
TEST(socket_in_a_shared_directory_is_refused)
{
    char err[512];
    fake_start(scripted);
    CHECK(chmod(fake.dir, 0777) == 0);
    CHECK(tensord_connect(fake.path, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "is writable by every user (mode 0777)");
    CHECK(chmod(fake.dir, 01777) == 0); /* sticky: still anyone's to fill */
    CHECK(tensord_connect(fake.path, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "(mode 1777)");
    CHECK(chmod(fake.dir, 0770) == 0);
    CHECK(tensord_connect(fake.path, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "is writable by its group");
    CHECK(!log_has("hello"));
    CHECK(chmod(fake.dir, 0700) == 0);
    struct tensord_client *c = tensord_connect(fake.path, err, sizeof(err));
    CHECK(c != NULL);
    tensord_close(c);
    fake_stop();
}

/* A socket someone named ($TENSORD_SOCKET) that does not exist is an error
 * naming it: the client never goes on to another place's daemon (here a
 * live one at $XDG_RUNTIME_DIR/tensord.sock, which hears nothing). A
 * socket that is not there is said so, whatever its directory. */
TEST(named_socket_is_the_only_one)
{
    char err[512], xdg[96], link[128], missing[96];
    fake_start(scripted);
    snprintf(xdg, sizeof(xdg), "%s/xdg", fake.dir);
    snprintf(link, sizeof(link), "%s/tensord.sock", xdg);
    snprintf(missing, sizeof(missing), "%s/missing.sock", fake.dir);
    CHECK(mkdir(xdg, 0700) == 0 && symlink(fake.path, link) == 0);
    setenv("XDG_RUNTIME_DIR", xdg, 1);
    setenv("TENSORD_SOCKET", missing, 1);
    CHECK(tensord_connect(NULL, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "$TENSORD_SOCKET names the lease socket");
    CHECK_CONTAINS(err, missing);
    CHECK_CONTAINS(err, "no other socket is tried");
    CHECK(!log_has("hello"));
    CHECK(tensord_connect(missing, err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "No such file or directory");
    CHECK(tensord_connect("/tmp/tensord-test-no-such.sock", err, sizeof(err)) == NULL);
    CHECK_CONTAINS(err, "No such file or directory");
    CHECK(strstr(err, "writable") == NULL && strstr(err, "chmod") == NULL);
    /* Nothing named: the default places, the first that exists. */
    unsetenv("TENSORD_SOCKET");
    struct tensord_client *c = tensord_connect(NULL, err, sizeof(err));
    CHECK(c != NULL);
    tensord_close(c);
    CHECK(log_has("hello"));
    unsetenv("XDG_RUNTIME_DIR");
    unlink(link);
    rmdir(xdg);
    fake_stop();
}

int main(void)
{
    RUN(open_and_release);
    RUN(open_without_lease_closes_its_descriptors);
    RUN(malformed_open_gives_the_lease_back);
    RUN(hostile_answers_over_the_wire);
    RUN(unfit_descriptors_are_refused);
    RUN(tensor_shape_must_make_its_bytes);
    RUN(protocol_1_daemon);
    RUN(out_of_memory_in_turn);
    RUN(unreadable_frame_reports_the_leases_lost);
    RUN(unreadable_release_answer_is_reported_next);
    RUN(socket_in_a_shared_directory_is_refused);
    RUN(named_socket_is_the_only_one);
    return TEST_SUMMARY();
}
