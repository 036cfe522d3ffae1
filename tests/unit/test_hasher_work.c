/* hasher_work: the workers, the housekeeper and the saver in the conditions
 * that used to stall them (issue 23). A job that yields to a wanted file
 * resumes where it stopped: every byte is read once and the hash is the
 * SHA-256 of the file (OpenSSL's one-shot digest of the bytes read back
 * here); one that another reader holds (a preload, hasher_hold) makes way
 * likewise and waits, unread, until released. A worker opening a file on a file system that does not answer
 * holds no lock that hasher_progress or hasher_want (HTTP threads) wait on.
 * A state directory locked by another holder neither delays the deadline of
 * a waiter nor keeps hasher_stop from returning, and the save goes through
 * once the lock is free.
 *
 * Opens below the root take the component walk (TENSORD_BENEATH_WALK=1),
 * whose openat this file replaces, so an open can be held for as long as a
 * test wants. */
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hasher_int.h" /* the resume test sets the rate estimate */
#include "metrics.h"
#include "metrics_int.h"
#include "registry.h"
#include "test.h"
#include "util.h"

#define MiB (1u << 20)

static char base[] = "/tmp/test_hasher_work.XXXXXX";
static char root[600], state[600];
static int n_roots;

/* ---- a file system that stops answering opens ---------------------------- */

static atomic_int hold_opens; /* opens of "config.json" wait while set (5 s at most) */
static atomic_int holding;    /* such an open is waiting now */

int openat(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    if (atomic_load(&hold_opens) && strcmp(path, "config.json") == 0) {
        atomic_store(&holding, 1);
        for (int i = 0; i < 500 && atomic_load(&hold_opens); i++)
            usleep(10000);
        atomic_store(&holding, 0);
    }
    return (int)syscall(SYS_openat, dirfd, path, flags, mode);
}

/* ---- models -------------------------------------------------------------- */

static void new_root(void)
{
    snprintf(root, sizeof(root), "%s/r%d", base, n_roots);
    snprintf(state, sizeof(state), "%s/state%d", base, n_roots++);
    CHECK(mkdir(root, 0755) == 0);
}

/* root/model/model.safetensors holding one U8 tensor of n seeded bytes, and
 * root/model/config.json. Returns the size of the safetensors file. */
static uint64_t write_model(const char *model, size_t n, unsigned seed)
{
    char *json = xasprintf("{\"w\":{\"dtype\":\"U8\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}", n, n);
    size_t hl = strlen(json), total = 8 + hl + n;
    unsigned char *buf = xmalloc(total);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, json, hl);
    for (size_t i = 0; i < n; i++)
        buf[8 + hl + i] = (unsigned char)(i * seed + (i >> 12));
    char *path = xasprintf("%s/%s/model.safetensors", root, model);
    test_write_file(path, buf, total);
    free(path);
    path = xasprintf("%s/%s/config.json", root, model);
    test_write_file(path, "{}\n", 3);
    free(path);
    free(json);
    free(buf);
    return total;
}

/* The SHA-256 of a file's bytes as read back now, by OpenSSL in one call. */
static void sha256_of(const char *model, const char *name, uint8_t out[32])
{
    char *path = xasprintf("%s/%s/%s", root, model, name);
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    unsigned char *buf = xmalloc((size_t)sb.st_size + 1);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0 && read(fd, buf, (size_t)sb.st_size) == sb.st_size);
    close(fd);
    unsigned len = 0;
    EVP_Digest(buf, (size_t)sb.st_size, out, &len, EVP_sha256(), NULL);
    free(buf);
    free(path);
}

static struct reg_snapshot *scan(void)
{
    struct st_error e;
    struct reg_snapshot *r = reg_snapshot_scan(root, 1, NULL, &e);
    CHECK(r != NULL);
    return r;
}

static struct hasher *start(unsigned threads, uint64_t racy_ns, uint64_t rate, int with_state)
{
    struct hasher_opts o = {.threads = threads, .max_bytes_per_second = rate,
                            .state_dir = with_state ? state : NULL, .racy_ns = racy_ns};
    struct st_error err;
    struct hasher *h = hasher_new(&o, &err);
    CHECK(h != NULL);
    return h;
}

static const struct reg_file *file_of(struct reg_snapshot *r, const char *model, const char *name)
{
    return reg_model_find_file(reg_snapshot_find_model(r, model, strlen(model)), name,
                               strlen(name));
}

static int idle(void *arg)
{
    struct hasher_progress p;
    hasher_progress(arg, &p);
    return p.files_pending == 0;
}

static int is_holding(void *arg)
{
    (void)arg;
    return atomic_load(&holding);
}

static uint64_t hashed_bytes(void)
{
    struct metrics_snapshot sn;
    metrics_snapshot_take(&sn, 0);
    return sn.gauge[MG_HASH_BYTES];
}

/* ---- a yielded job resumes ------------------------------------------------ */

struct progress_arg {
    uint64_t from, at_least;
};

static int read_past(void *arg)
{
    struct progress_arg *p = arg;
    return hashed_bytes() - p->from >= p->at_least;
}

TEST(a_yielded_job_resumes_at_its_offset)
{
    new_root();
    uint64_t big = write_model("a", 6 * MiB, 3);
    uint64_t small = write_model("z", 4096, 5);
    struct reg_snapshot *r = scan();
    /* One worker, paced to 2 MiB/s; the rate estimate says 1 MiB/s, so "a"
     * has more than a second left when "z" is wanted, and yields. */
    struct hasher *h = start(1, 1, 2 * MiB, 0);
    atomic_store(&h->rate_bps, MiB);
    struct progress_arg pa = {.from = hashed_bytes(), .at_least = MiB};
    hasher_submit(h, r);
    CHECK(test_wait_until(read_past, &pa, 5000));
    const struct reg_file *z = file_of(r, "z", "model.safetensors");
    const struct reg_file *a = file_of(r, "a", "model.safetensors");
    CHECK(!hasher_lookup(h, a, NULL));
    CHECK(hasher_wait(h, &z, 1, 10000) == HASHER_DONE);
    CHECK(!hasher_lookup(h, a, NULL)); /* it made way */
    CHECK(hasher_wait(h, &a, 1, 20000) == HASHER_DONE);
    CHECK(test_wait_until(idle, h, 10000));
    /* Every byte of every file read once: the yield cost nothing. */
    CHECK_EQ_U64(hashed_bytes() - pa.from, big + small + 2 * 3);
    struct hash_entry e;
    uint8_t want[32];
    CHECK(hasher_lookup(h, a, &e));
    sha256_of("a", "model.safetensors", want);
    CHECK(memcmp(e.sha256, want, 32) == 0);
    CHECK(hasher_lookup(h, z, &e));
    sha256_of("z", "model.safetensors", want);
    CHECK(memcmp(e.sha256, want, 32) == 0);
    hasher_free(h);
    reg_snapshot_unref(r);
}

/* ---- another reader holds a file ------------------------------------------ */

static int one_left(void *arg)
{
    struct hasher_progress p;
    hasher_progress(arg, &p);
    return p.files_pending == 1;
}

TEST(a_held_file_waits_for_its_reader)
{
    new_root();
    uint64_t big = write_model("a", 6 * MiB, 19);
    uint64_t small = write_model("b", 4096, 23);
    struct reg_snapshot *r = scan();
    struct hasher *h = start(1, 1, 2 * MiB, 0); /* paced: "a" takes seconds */
    struct progress_arg pa = {.from = hashed_bytes(), .at_least = MiB};
    hasher_submit(h, r);
    CHECK(test_wait_until(read_past, &pa, 5000));
    const struct reg_file *a = file_of(r, "a", "model.safetensors");
    const struct reg_file *b = file_of(r, "b", "model.safetensors");
    int needed[2] = {-1, -1};
    const struct reg_file *both[2] = {a, b};
    struct hasher_hold *hold = hasher_hold(h, both, 1, needed);
    CHECK(hold != NULL && needed[0] == 1);
    /* The worker made way for the reader: the other files are hashed... */
    CHECK(hasher_wait(h, &b, 1, 20000) == HASHER_DONE);
    CHECK(test_wait_until(one_left, h, 20000));
    CHECK(!hasher_lookup(h, a, NULL));
    /* ... and "a" is not read while it is held, even wanted. */
    uint64_t during = hashed_bytes();
    CHECK(hasher_wait(h, &a, 1, 300) == HASHER_TIMEOUT);
    CHECK_EQ_U64(hashed_bytes(), during);
    struct hasher_hold *known_hold = hasher_hold(h, both + 1, 1, needed + 1);
    CHECK(known_hold && needed[1] == 0); /* known: nobody needs its bytes */
    hasher_release(h, known_hold);
    hasher_release(h, hold);
    CHECK(hasher_wait(h, &a, 1, 20000) == HASHER_DONE);
    CHECK(test_wait_until(idle, h, 10000));
    /* It resumed where it stopped: every byte read once. */
    CHECK_EQ_U64(hashed_bytes() - pa.from, big + small + 2 * 3);
    struct hash_entry e;
    uint8_t want[32];
    CHECK(hasher_lookup(h, a, &e));
    sha256_of("a", "model.safetensors", want);
    CHECK(memcmp(e.sha256, want, 32) == 0);
    hasher_release(h, NULL);
    hasher_free(h);
    reg_snapshot_unref(r);
}

/* ---- no open under the lock HTTP threads take ----------------------------- */

TEST(a_hung_open_holds_no_lock_requests_take)
{
    new_root();
    write_model("m", 1000, 7);
    struct reg_snapshot *r = scan();
    struct hasher *h = start(1, 1, 0, 0);
    atomic_store(&hold_opens, 1); /* config.json's open will hang */
    hasher_submit(h, r);
    CHECK(test_wait_until(is_holding, NULL, 5000));
    /* What a request thread calls returns while the worker is still inside
     * the open: it never waited on the worker. */
    struct hasher_progress p;
    hasher_progress(h, &p);
    CHECK(atomic_load(&holding));
    const struct reg_file *cfg = file_of(r, "m", "config.json");
    CHECK(hasher_want(h, &cfg, 1, 0, NULL, NULL) == HASHER_PENDING);
    CHECK(atomic_load(&holding));
    atomic_store(&hold_opens, 0);
    CHECK(hasher_wait(h, &cfg, 1, 10000) == HASHER_DONE);
    struct hash_entry e;
    uint8_t want[32];
    CHECK(hasher_lookup(h, cfg, &e));
    sha256_of("m", "config.json", want);
    CHECK(memcmp(e.sha256, want, 32) == 0);
    hasher_free(h);
    reg_snapshot_unref(r);
}

/* ---- a locked state directory ---------------------------------------------- */

struct seen {
    _Atomic int calls;
    _Atomic int result;
};

static void note(void *arg, enum hasher_result res)
{
    struct seen *s = arg;
    atomic_store(&s->result, (int)res);
    atomic_fetch_add(&s->calls, 1);
}

static int called(void *arg)
{
    return atomic_load(&((struct seen *)arg)->calls) > 0;
}

static int known(void *arg)
{
    void **hf = arg;
    return hasher_lookup(hf[0], hf[1], NULL);
}

/* Another holder of the state directory's lock (flock locks belong to an
 * open file description: this one conflicts with the hasher's). */
static int lock_state_dir(void)
{
    int fd = open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0);
    return fd;
}

static int state_file_has(const struct hash_entry *e)
{
    char *path = xasprintf("%s/hashes", state), hex[65];
    size_t len = 0;
    char *text = NULL;
    int found = fileio_read_small(path, 1 << 20, &text, &len) == 0;
    digest_hex(e->sha256, 32, hex);
    found = found && strstr(text, hex) != NULL;
    free(text);
    free(path);
    return found;
}

static int saved(void *arg)
{
    return state_file_has(arg);
}

/* Whether a save has been asked of the saver and is not done. */
static int save_asked(void *arg)
{
    struct hasher *h = arg;
    pthread_mutex_lock(&h->lock);
    int asked = h->save_asked != h->save_done;
    pthread_mutex_unlock(&h->lock);
    return asked;
}

TEST(deadlines_fire_while_the_state_directory_is_locked)
{
    new_root();
    write_model("a", 1000, 11);
    /* "b" is written a racy window after "a": "a" is hashed at once, "b"
     * waits about a second (and the hasher is idle meanwhile, so a save is
     * due; only the housekeeper can time out a wait on "b"). */
    sleep(1);
    usleep(100000);
    write_model("b", 1000, 13);
    struct reg_snapshot *r = scan();
    struct hasher *h = start(1, 1000000000ull, 0, 1);
    int lfd = lock_state_dir();
    hasher_submit(h, r);
    const struct reg_file *a = file_of(r, "a", "model.safetensors");
    const struct reg_file *b = file_of(r, "b", "model.safetensors");
    const void *ha[2] = {h, a};
    CHECK(test_wait_until(known, (void *)ha, 5000));
    CHECK(test_wait_until(save_asked, h, TEST_WAIT_MS)); /* and it cannot take the lock */
    struct seen s = {0};
    CHECK(hasher_want(h, &b, 1, 100, note, &s) == HASHER_PENDING);
    CHECK(test_wait_until(called, &s, 3000)); /* while the lock is still held */
    CHECK(atomic_load(&s.calls) == 1);
    struct hash_entry e;
    CHECK(hasher_lookup(h, a, &e));
    CHECK(!state_file_has(&e));
    /* Once the lock is free the save goes through. */
    flock(lfd, LOCK_UN);
    close(lfd);
    CHECK(test_wait_until(saved, &e, 10000));
    hasher_free(h);
    reg_snapshot_unref(r);
}

struct stopper {
    struct hasher *h;
    _Atomic int done;
};

static void *stop_main(void *arg)
{
    struct stopper *s = arg;
    hasher_stop(s->h);
    atomic_store(&s->done, 1);
    return NULL;
}

static int stopped(void *arg)
{
    return atomic_load(&((struct stopper *)arg)->done);
}

TEST(stop_returns_while_the_state_directory_is_locked)
{
    new_root();
    write_model("a", 1000, 17);
    struct reg_snapshot *r = scan();
    struct hasher *h = start(1, 1, 0, 1);
    int lfd = lock_state_dir();
    hasher_submit(h, r);
    CHECK(test_wait_until(idle, h, 5000)); /* hashed, not saved: the lock is held */
    struct stopper st = {.h = h};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, stop_main, &st) == 0);
    CHECK(test_wait_until(stopped, &st, HASHER_STOP_MS + HASHER_SAVE_WAIT_MS + HASHER_STUCK_MS));
    flock(lfd, LOCK_UN); /* lets a stop that did wait for it return */
    close(lfd);
    pthread_join(t, NULL);
    struct hash_entry e;
    CHECK(hasher_lookup(h, file_of(r, "a", "model.safetensors"), &e));
    CHECK(!state_file_has(&e)); /* given up, not written behind the lock's back */
    hasher_free(h);
    reg_snapshot_unref(r);
}

int main(void)
{
    /* Before the first open below a root: every open takes the walk. */
    setenv("TENSORD_BENEATH_WALK", "1", 1);
    metrics_init();
    CHECK(mkdtemp(base) != NULL);
    RUN(a_yielded_job_resumes_at_its_offset);
    RUN(a_held_file_waits_for_its_reader);
    RUN(a_hung_open_holds_no_lock_requests_take);
    RUN(deadlines_fire_while_the_state_directory_is_locked);
    RUN(stop_returns_while_the_state_directory_is_locked);
    char *cmd = xasprintf("rm -rf %s", base);
    CHECK(system(cmd) == 0);
    free(cmd);
    return TEST_SUMMARY();
}
