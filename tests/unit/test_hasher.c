/* hasher: real model trees in a temp directory, scanned with
 * reg_snapshot_scan and hashed in the background. Every hash equals the
 * SHA-256 of the bytes written; a restart from the state directory hashes
 * nothing; a changed file gets a new hash and a file changed while it is
 * read gets none; a fresh file waits out the racy window; waiters are
 * answered exactly once (done, timeout, gone, stopped); the hasher lets go
 * of snapshots it no longer needs. */
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hashfile.h"
#include "hasher_int.h" /* one test looks at a job's waiter list */
#include "metrics.h"
#include "metrics_int.h"
#include "reg_repo.h"
#include "test.h"
#include "util.h"

#define MiB (1u << 20)

static char base[] = "/tmp/test_hasher.XXXXXX";
static char root[600], state[600];
static int n_roots;

static void new_root(void)
{
    snprintf(root, sizeof(root), "%s/r%d", base, n_roots);
    snprintf(state, sizeof(state), "%s/state%d", base, n_roots++);
    CHECK(mkdir(root, 0755) == 0);
}

/* root/model/model.safetensors: one U8 tensor of n bytes (seeded), and
 * root/model/config.json. Returns the SHA-256 of the safetensors file. */
static void write_model(const char *model, size_t n, unsigned seed, uint8_t sha[32])
{
    char *dir = xasprintf("%s/%s", root, model);
    char *path = xasprintf("%s/model.safetensors", dir);
    char *json = xasprintf("{\"w\":{\"dtype\":\"U8\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}", n, n);
    size_t hl = strlen(json), total = 8 + hl + n;
    unsigned char *buf = xmalloc(total);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, json, hl);
    for (size_t i = 0; i < n; i++)
        buf[8 + hl + i] = (unsigned char)(i * seed + (i >> 12));
    for (char *q = dir + strlen(root) + 1;; q++) { /* mkdir -p */
        if (*q != '/' && *q != '\0')
            continue;
        char c = *q;
        *q = '\0';
        mkdir(dir, 0755);
        *q = c;
        if (!c)
            break;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0 && write(fd, buf, total) == (ssize_t)total);
    close(fd);
    unsigned len = 0;
    if (sha)
        EVP_Digest(buf, total, sha, &len, EVP_sha256(), NULL);
    free(path);
    path = xasprintf("%s/config.json", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0 && write(fd, "{}\n", 3) == 3);
    close(fd);
    free(path);
    free(json);
    free(buf);
    free(dir);
}

static struct reg_snapshot *scan(void)
{
    struct st_error e;
    struct reg_snapshot *r = reg_snapshot_scan(root, 1, NULL, &e);
    CHECK(r != NULL);
    return r;
}

static struct hasher *start(uint64_t racy_ns, uint64_t rate, int with_state)
{
    struct hasher_opts o = {.threads = 2, .max_bytes_per_second = rate,
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

/* Polls until nothing is pending; returns 0, or -1 after timeout_ms. */
static int wait_idle(struct hasher *h, unsigned timeout_ms)
{
    uint64_t end = time_mono_ns() + (uint64_t)timeout_ms * 1000000;
    struct hasher_progress p;
    do {
        hasher_progress(h, &p);
        if (p.files_pending == 0)
            return 0;
        usleep(5000);
    } while (time_mono_ns() < end);
    return -1;
}

/* Bytes read into SHA-256 so far (tensord_hash_bytes_total). */
static uint64_t hashed_bytes(void)
{
    struct metrics_snapshot sn;
    metrics_snapshot_take(&sn, 0);
    return sn.gauge[MG_HASH_BYTES];
}

static unsigned refs(struct reg_snapshot *r)
{
    return atomic_load(&r->refs);
}

/* The worker that finishes the last job lets go of the snapshot just after
 * it publishes "nothing pending": give it a moment. */
static unsigned refs_settled(struct reg_snapshot *r, unsigned want)
{
    for (int i = 0; i < 200 && refs(r) != want; i++)
        usleep(5000);
    return refs(r);
}

TEST(hashes_equal_the_bytes_written)
{
    new_root();
    uint8_t a[32], b[32];
    write_model("a", 100000, 3, a);
    write_model("org/b", 3 * MiB + 17, 5, b);
    struct reg_snapshot *r = scan();
    struct hasher *h = start(1, 0, 0);
    hasher_submit(h, r);
    CHECK(wait_idle(h, 10000) == 0);
    struct hash_entry e;
    CHECK(hasher_lookup(h, file_of(r, "a", "model.safetensors"), &e));
    CHECK(memcmp(e.sha256, a, 32) == 0 && e.has_git_sha1);
    CHECK(hasher_lookup(h, file_of(r, "org/b", "model.safetensors"), &e));
    CHECK(memcmp(e.sha256, b, 32) == 0);
    CHECK(hasher_lookup(h, file_of(r, "a", "config.json"), &e));
    struct hasher_progress p;
    hasher_progress(h, &p);
    CHECK_EQ_U64(p.files, 4);
    CHECK_EQ_U64(p.files_known, 4);
    CHECK_EQ_U64(p.bytes_known, p.bytes);
    CHECK(refs_settled(r, 1) == 1); /* done: the hasher holds no snapshot */
    hasher_free(h);
    reg_snapshot_unref(r);
}

TEST(fresh_files_wait_out_the_racy_window)
{
    new_root();
    write_model("m", 1000, 1, NULL);
    struct reg_snapshot *r = scan();
    struct hasher *h = start(3600ull * 1000000000, 0, 0);
    hasher_submit(h, r);
    const struct reg_file *f = file_of(r, "m", "model.safetensors");
    CHECK(hasher_wait(h, &f, 1, 200) == HASHER_TIMEOUT);
    CHECK(!hasher_lookup(h, f, NULL));
    struct hasher_progress p;
    hasher_progress(h, &p);
    CHECK_EQ_U64(p.files_pending, 2);
    CHECK(refs(r) == 2); /* still needed */
    unsigned ra = hasher_retry_after(h, &f, 1);
    CHECK(ra >= 1 && ra <= 3600);
    hasher_free(h);
    CHECK(refs(r) == 1);
    reg_snapshot_unref(r);
}

TEST(a_restart_hashes_nothing)
{
    new_root();
    write_model("m", 200000, 7, NULL);
    write_model("n", 300, 9, NULL);
    struct reg_snapshot *r = scan();
    struct hasher *h = start(1, 0, 1);
    hasher_submit(h, r);
    CHECK(wait_idle(h, 10000) == 0);
    hasher_free(h); /* saves */
    struct stat sb;
    char *path = xasprintf("%s/%s", state, HASHFILE_NAME);
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0640);
    free(path);
    h = start(1, 0, 1);
    hasher_submit(h, r);
    struct hasher_progress p;
    hasher_progress(h, &p); /* at once: nothing was queued */
    CHECK_EQ_U64(p.files_pending, 0);
    CHECK_EQ_U64(p.files_known, 4);
    CHECK(refs(r) == 1);
    hasher_free(h);
    reg_snapshot_unref(r);
}

TEST(a_corrupt_state_file_costs_a_rehash)
{
    new_root();
    write_model("m", 5000, 7, NULL);
    CHECK(mkdir(state, 0700) == 0);
    char *path = xasprintf("%s/%s", state, HASHFILE_NAME);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(write(fd, "tensord-hashes 1\ngarbage\n", 25) == 25);
    close(fd);
    struct reg_snapshot *r = scan();
    struct hasher *h = start(1, 0, 1);
    hasher_submit(h, r);
    CHECK(wait_idle(h, 10000) == 0);
    hasher_free(h);
    struct hashstore *s = hashstore_new();
    struct st_error err;
    int dfd = open(state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(hashfile_load_store(s, dfd, HASHFILE_NAME, path, &err) == 0);
    CHECK_EQ_U64(hashstore_count(s), 2);
    close(dfd);
    hashstore_free(s);
    free(path);
    reg_snapshot_unref(r);
}

TEST(a_changed_file_gets_a_new_hash)
{
    new_root();
    uint8_t before[32], after[32];
    write_model("m", 4000, 1, before);
    struct reg_snapshot *r1 = scan();
    struct hasher *h = start(1, 0, 0);
    hasher_submit(h, r1);
    CHECK(wait_idle(h, 10000) == 0);
    write_model("m", 4000, 2, after); /* same size, rewritten in place */
    struct reg_snapshot *r2 = scan();
    hasher_submit(h, r2);
    CHECK(wait_idle(h, 10000) == 0);
    struct hash_entry e;
    CHECK(hasher_lookup(h, file_of(r2, "m", "model.safetensors"), &e));
    CHECK(memcmp(e.sha256, after, 32) == 0);
    /* The old snapshot's identity is gone from disk; its record says what
     * it was and is never mistaken for the new one. */
    CHECK(hasher_lookup(h, file_of(r1, "m", "model.safetensors"), &e));
    CHECK(memcmp(e.sha256, before, 32) == 0);
    hasher_free(h);
    reg_snapshot_unref(r1);
    reg_snapshot_unref(r2);
}

TEST(a_file_changed_while_read_gets_no_hash)
{
    new_root();
    write_model("m", 3 * MiB, 1, NULL);
    struct reg_snapshot *r = scan();
    /* 1 MiB/s: three seconds of reading, changed after the first block. */
    struct hasher *h = start(1, MiB, 0);
    uint64_t before = hashed_bytes();
    hasher_submit(h, r);
    /* its first block is being read (config.json has 3 bytes): a write
     * now comes after the hasher took the file's identity */
    WAIT_UNTIL(hashed_bytes() - before >= HASHER_BLOCK, TEST_WAIT_MS);
    char *path = xasprintf("%s/m/model.safetensors", root);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    CHECK(pwrite(fd, "XXXX", 4, 2 * MiB + 100) == 4);
    close(fd);
    free(path);
    CHECK(wait_idle(h, 15000) == 0);
    struct hasher_progress p;
    hasher_progress(h, &p);
    CHECK_EQ_U64(p.files_failed, 1);
    CHECK(!hasher_lookup(h, file_of(r, "m", "model.safetensors"), NULL));
    CHECK(hasher_lookup(h, file_of(r, "m", "config.json"), NULL));
    hasher_free(h);
    reg_snapshot_unref(r);
}

TEST(a_wanted_file_jumps_the_queue)
{
    new_root();
    write_model("a", 2 * MiB, 1, NULL);
    write_model("b", 2 * MiB, 2, NULL);
    write_model("c", 2 * MiB, 3, NULL);
    write_model("z", 2 * MiB, 4, NULL);
    struct reg_snapshot *r = scan();
    struct hasher *h = start(1, 256 * 1024, 0); /* background: half a minute */
    hasher_submit(h, r);
    const struct reg_file *f = file_of(r, "z", "model.safetensors");
    uint64_t t0 = time_mono_ns();
    CHECK(hasher_wait(h, &f, 1, 10000) == HASHER_DONE);
    CHECK(time_mono_ns() - t0 < 5000000000ull);
    CHECK(hasher_lookup(h, f, NULL));
    CHECK(!hasher_lookup(h, file_of(r, "c", "model.safetensors"), NULL));
    CHECK(hasher_want(h, &f, 1, 0, NULL, NULL) == HASHER_KNOWN);
    hasher_free(h);
    reg_snapshot_unref(r);
}

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

TEST(waiters_hear_gone_and_stopped_once)
{
    new_root();
    write_model("keep", 100, 1, NULL);
    write_model("drop", 100, 2, NULL);
    struct reg_snapshot *r1 = scan();
    struct hasher *h = start(3600ull * 1000000000, 0, 0); /* nothing gets hashed */
    hasher_submit(h, r1);
    const struct reg_file *files[2] = {file_of(r1, "drop", "model.safetensors"),
                                       file_of(r1, "keep", "model.safetensors")};
    struct seen gone = {0, -1}, stopped = {0, -1};
    CHECK(hasher_want(h, &files[0], 1, 60000, note, &gone) == HASHER_PENDING);
    CHECK(hasher_want(h, files, 2, 60000, note, &stopped) == HASHER_PENDING);
    /* Moved out of the root, not removed: unlinking would change the file's
     * ctime, and a worker that tried it before the reload would fail it. */
    char *from = xasprintf("%s/drop", root), *to = xasprintf("%s.drop", root);
    CHECK(rename(from, to) == 0);
    free(from);
    free(to);
    struct reg_snapshot *r2 = scan();
    hasher_submit(h, r2);
    /* The old snapshot is let go: at once by the set, and by a worker that
     * was opening one of its files (a reference for the open's length:
     * milliseconds at most, whatever the machine's load). */
    for (int ms = 0; refs(r1) != 1 && ms < 5000; ms++)
        usleep(1000);
    CHECK(refs(r1) == 1);
    CHECK(atomic_load(&gone.calls) == 1 && atomic_load(&gone.result) == HASHER_GONE);
    /* The second waiter also waited for "drop": a reload that drops a file
     * ends the wait for all of them. */
    CHECK(atomic_load(&stopped.calls) == 1 && atomic_load(&stopped.result) == HASHER_GONE);
    const struct reg_file *k = file_of(r2, "keep", "model.safetensors");
    struct seen last = {0, -1};
    CHECK(hasher_want(h, &k, 1, 60000, note, &last) == HASHER_PENDING);
    hasher_stop(h);
    CHECK(atomic_load(&last.calls) == 1 && atomic_load(&last.result) == HASHER_STOPPED);
    CHECK(hasher_want(h, &k, 1, 60000, note, &last) == HASHER_UNAVAILABLE);
    hasher_free(h);
    CHECK(atomic_load(&last.calls) == 1);
    CHECK(atomic_load(&gone.calls) == 1 && atomic_load(&stopped.calls) == 1);
    reg_snapshot_unref(r1);
    reg_snapshot_unref(r2);
}

TEST(unopened_files_are_unavailable)
{
    new_root();
    write_model("m", 10, 1, NULL);
    struct reg_snapshot *r = scan();
    struct hasher *h = start(1, 0, 0);
    hasher_submit(h, r);
    struct reg_file bad = {.fd = -1};
    const struct reg_file *f = &bad;
    CHECK(hasher_want(h, &f, 1, 100, note, NULL) == HASHER_UNAVAILABLE);
    CHECK(hasher_wait(h, &f, 1, 100) == HASHER_FAILED);
    CHECK(!hasher_lookup(h, f, NULL));
    hasher_free(h);
    reg_snapshot_unref(r);
}

TEST(hard_links_are_hashed_once)
{
    new_root();
    write_model("m", 5000, 1, NULL);
    char *dir = xasprintf("%s/n", root), *from = xasprintf("%s/m/model.safetensors", root),
         *to = xasprintf("%s/n/model.safetensors", root);
    CHECK(mkdir(dir, 0755) == 0 && link(from, to) == 0);
    struct reg_snapshot *r = scan();
    struct hasher *h = start(1, 0, 0);
    hasher_submit(h, r);
    CHECK(wait_idle(h, 10000) == 0);
    struct hasher_progress p;
    hasher_progress(h, &p);
    CHECK_EQ_U64(p.files, 2); /* config.json and the linked model file */
    CHECK(hasher_lookup(h, file_of(r, "n", "model.safetensors"), NULL));
    hasher_free(h);
    reg_snapshot_unref(r);
    free(dir);
    free(from);
    free(to);
}

/* A repo's files are hashed too, those no model has included (opened below
 * the root, as they are not kept open), and published to the repo's own
 * reg_files as well as to the model's for the files they share. */
TEST(repo_files_are_hashed)
{
    new_root();
    write_model("m", 70000, 7, NULL);
    char *p = xasprintf("%s/m/sub", root);
    CHECK(mkdir(p, 0755) == 0);
    free(p);
    p = xasprintf("%s/m/sub/notes.txt", root);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0 && write(fd, "notes\n", 6) == 6);
    close(fd);
    free(p);
    struct reg_snapshot *r = scan();
    const struct reg_repo *repo = reg_snapshot_find_repo(r, "m", 1);
    CHECK(repo && repo->n_files == 3);
    struct hasher *h = start(1, 0, 0);
    hasher_submit(h, r);
    if (repo) {
        const struct reg_file *notes = reg_repo_find_file(repo, "sub/notes.txt", 13);
        CHECK(notes && hasher_wait(h, &notes, 1, 10000) == HASHER_DONE);
    }
    CHECK(wait_idle(h, 10000) == 0);
    struct hasher_progress pr;
    hasher_progress(h, &pr);
    CHECK_EQ_U64(pr.files, 3); /* the model's two files, and the repo's one more */
    for (size_t i = 0; repo && i < repo->n_files; i++)
        CHECK(reg_file_hashed(&repo->files[i]));
    CHECK(repo && reg_repo_revision(repo) != NULL);
    const struct reg_file *mf = file_of(r, "m", "model.safetensors");
    const struct reg_file *rf = repo ? reg_repo_find_file(repo, "model.safetensors", 17) : NULL;
    CHECK(mf && rf && mf != rf && reg_file_hashed(mf) && reg_file_hashed(rf) &&
          memcmp(mf->sha256, rf->sha256, 32) == 0);
    hasher_free(h);
    reg_snapshot_unref(r);
}

/* A client asking again and again for a file that takes long (here: never
 * hashed) must not grow the job's waiter list with every timed-out wait. */
TEST(timed_out_waiters_do_not_pile_up)
{
    new_root();
    write_model("m", 100, 1, NULL);
    struct reg_snapshot *r = scan();
    struct hasher *h = start(3600ull * 1000000000, 0, 0);
    hasher_submit(h, r);
    const struct reg_file *f = file_of(r, "m", "model.safetensors");
    for (int i = 0; i < 200; i++)
        CHECK(hasher_wait(h, &f, 1, 1) == HASHER_TIMEOUT);
    struct hash_id id;
    hash_id_from_stat(&f->st, &id);
    pthread_mutex_lock(&h->lock);
    struct job *j = hasher_find_job(h, h->set, &id);
    CHECK(j != NULL && j->n_waits <= 2);
    pthread_mutex_unlock(&h->lock);
    hasher_free(h);
    reg_snapshot_unref(r);
}

struct churn {
    struct hasher *h;
    struct reg_snapshot *_Atomic cur;
    pthread_mutex_t lock; /* guards taking a reference to cur */
    atomic_int stop;
    atomic_size_t waits;
};

static void *churn_reader(void *arg)
{
    struct churn *c = arg;
    while (!atomic_load(&c->stop)) {
        pthread_mutex_lock(&c->lock);
        struct reg_snapshot *r = reg_snapshot_ref(atomic_load(&c->cur));
        pthread_mutex_unlock(&c->lock);
        const struct reg_model *m = r->models[atomic_load(&c->waits) % r->n_models];
        const struct reg_file *f = &m->files[0];
        enum hasher_result res = hasher_wait(c->h, &f, 1, 50);
        CHECK(res == HASHER_DONE || res == HASHER_TIMEOUT || res == HASHER_GONE ||
              res == HASHER_FAILED);
        hasher_lookup(c->h, &m->files[m->n_files - 1], NULL);
        atomic_fetch_add(&c->waits, 1);
        reg_snapshot_unref(r);
    }
    return NULL;
}

/* Reloads while waiters come and go and workers hash: every snapshot is
 * freed (ASan), nothing races (TSan), and the last one ends fully hashed. */
TEST(reloads_under_waiters)
{
    new_root();
    for (int i = 0; i < 12; i++) {
        char name[16];
        snprintf(name, sizeof(name), "m%02d", i);
        write_model(name, 70000 + (size_t)i * 1000, (unsigned)i + 1, NULL);
    }
    struct churn c = {.h = start(1, 0, 1)};
    pthread_mutex_init(&c.lock, NULL);
    atomic_store(&c.cur, scan());
    hasher_submit(c.h, atomic_load(&c.cur));
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, churn_reader, &c);
    for (int round = 0; round < 15; round++) {
        if (round % 3 == 0)
            write_model("m05", 70000, (unsigned)round + 100, NULL); /* a changed file */
        struct reg_snapshot *next = scan(), *old;
        hasher_submit(c.h, next);
        pthread_mutex_lock(&c.lock);
        old = atomic_exchange(&c.cur, next);
        pthread_mutex_unlock(&c.lock);
        reg_snapshot_unref(old);
        usleep(20000);
    }
    atomic_store(&c.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    CHECK(wait_idle(c.h, 20000) == 0);
    struct hasher_progress p;
    hasher_progress(c.h, &p);
    CHECK_EQ_U64(p.files_known, 24);
    CHECK(atomic_load(&c.waits) > 0);
    hasher_free(c.h);
    CHECK(refs(atomic_load(&c.cur)) == 1);
    reg_snapshot_unref(atomic_load(&c.cur));
    pthread_mutex_destroy(&c.lock);
}

int main(void)
{
    metrics_init();
    CHECK(mkdtemp(base) != NULL);
    RUN(hashes_equal_the_bytes_written);
    RUN(fresh_files_wait_out_the_racy_window);
    RUN(a_restart_hashes_nothing);
    RUN(a_corrupt_state_file_costs_a_rehash);
    RUN(a_changed_file_gets_a_new_hash);
    RUN(a_file_changed_while_read_gets_no_hash);
    RUN(a_wanted_file_jumps_the_queue);
    RUN(waiters_hear_gone_and_stopped_once);
    RUN(unopened_files_are_unavailable);
    RUN(hard_links_are_hashed_once);
    RUN(repo_files_are_hashed);
    RUN(timed_out_waiters_do_not_pile_up);
    RUN(reloads_under_waiters);
    char *cmd = xasprintf("rm -rf %s", base);
    CHECK(system(cmd) == 0);
    free(cmd);
    return TEST_SUMMARY();
}
