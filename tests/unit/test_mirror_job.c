/* Unit tests for mirror/mirror_job.c, the queue of a mirror's questions to
 * its upstream, with questions of the test's own that wait on a gate
 * instead of asking anything: a question identical to one in flight is
 * asked once and both submitters are called back; the job threads take
 * the clients in turn; a client's share and the whole queue are bounded,
 * and a question past them is refused at once; a question whose submitter
 * released it before it ran is never run (its data freed), and one
 * released while it runs is not called back and is stopped (its thread's
 * connection's abort flag), its key forgotten; builds take at most
 * MIRROR_JOB_BUILDS threads. ThreadSanitizer runs it (make tsan). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "log.h"
#include "mirror.h"
#include "mirror_job.h"
#include "test.h"
#include "upstream.h"
#include "util.h"

static char dir[] = "/tmp/test_mirror_job.XXXXXX";

/* The gate every question's run waits on, and what ran, in order. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int open_gate, running;
static int hold_rest; /* the gate stays shut for questions 1001 and on (held[1..]) */
static int ran[2048], n_ran;
static atomic_int freed, called;

static int run(struct mirror *m, struct upstream_conn *c, void *data, struct st_error *err)
{
    (void)m, (void)c, (void)err;
    pthread_mutex_lock(&lock);
    ran[n_ran++] = *(int *)data;
    running++;
    pthread_cond_broadcast(&changed);
    int id = *(int *)data;
    while (!open_gate || (hold_rest && id > 1000))
        pthread_cond_wait(&changed, &lock);
    running--;
    pthread_mutex_unlock(&lock);
    return 0;
}

/* A question that waits as a build does (mirror_wait_range): for the
 * gate, or until its connection's abort flag stops it (once it heeds it). */
static atomic_int stopped, heed = 1;
static int run_stoppable(struct mirror *m, struct upstream_conn *c, void *data,
                         struct st_error *err)
{
    (void)m, (void)err;
    const atomic_int *abort = upstream_conn_abort(c);
    int rc = 0;
    pthread_mutex_lock(&lock);
    ran[n_ran++] = *(int *)data;
    running++;
    pthread_cond_broadcast(&changed);
    while (!open_gate && !(rc = atomic_load(&heed) && atomic_load(abort) ? -ECANCELED : 0)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&changed, &lock, &ts);
    }
    running--;
    pthread_mutex_unlock(&lock);
    if (rc)
        atomic_fetch_add(&stopped, 1);
    return rc;
}

static void free_data(void *data)
{
    atomic_fetch_add(&freed, 1);
    free(data);
}

static void done(void *arg)
{
    (void)arg;
    atomic_fetch_add(&called, 1);
}

static void reset(void)
{
    pthread_mutex_lock(&lock);
    open_gate = running = n_ran = hold_rest = 0;
    pthread_mutex_unlock(&lock);
    atomic_store(&freed, 0);
    atomic_store(&called, 0);
    atomic_store(&stopped, 0);
}

/* Submits question id for client (shared under key when not NULL), a
 * build or not, running fn. */
static struct mirror_job *ask_as(struct mirror *m, uint64_t client, int id, const char *key,
                                 int build, mirror_job_fn fn, int *why)
{
    int *d = xmalloc(sizeof(*d));
    *d = id;
    struct mirror_job_spec s = {.client = client, .key = key, .build = build, .run = fn,
                                .data = d, .free_data = free_data};
    return mirror_job_submit(m, &s, done, NULL, why);
}

static struct mirror_job *ask(struct mirror *m, uint64_t client, int id, const char *key,
                              int *why)
{
    return ask_as(m, client, id, key, 0, run, why);
}

static int running_now(void)
{
    pthread_mutex_lock(&lock);
    int n = running;
    pthread_mutex_unlock(&lock);
    return n;
}

/* Waits until n questions run at once (the job threads all stuck). */
static void wait_running(int n)
{
    WAIT_UNTIL(running_now() >= n, TEST_WAIT_MS);
}

static void open_the_gate(void)
{
    pthread_mutex_lock(&lock);
    open_gate = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

/* Waits until n submitters have been called back. */
static void wait_called(int n)
{
    WAIT_UNTIL(atomic_load(&called) >= n, TEST_WAIT_MS);
}

static struct mirror *start(void)
{
    char *cache = xasprintf("%s/cache", dir);
    struct mirror_options o = {.upstream = "http://127.0.0.1:9", .cache_dir = cache,
                               .max_bytes = 1 << 30, .block_bytes = 65536, .fetch_threads = 1};
    struct st_error err;
    struct mirror *m = mirror_new(&o, &err);
    CHECK(m != NULL);
    free(cache);
    reset();
    return m;
}

/* Fills the job threads with questions of client 1000 that wait on the gate. */
static struct mirror_job *held[MIRROR_JOB_THREADS];
static void fill_threads(struct mirror *m)
{
    int why;
    for (int i = 0; i < MIRROR_JOB_THREADS; i++)
        held[i] = ask(m, 1000, 1000 + i, NULL, &why);
    wait_running(MIRROR_JOB_THREADS);
}

static void release_held(void)
{
    for (int i = 0; i < MIRROR_JOB_THREADS; i++)
        mirror_job_release(held[i]);
}

TEST(identical_questions_are_asked_once)
{
    struct mirror *m = start();
    int why;
    struct mirror_job *a = ask(m, 1, 1, "same", &why), *b = ask(m, 2, 2, "same", &why);
    struct mirror_job *c = ask(m, 3, 3, "other", &why);
    CHECK(a && b && c);
    CHECK(atomic_load(&freed) == 1); /* the second's data: the first answers it */
    CHECK(mirror_job_data(a) == mirror_job_data(b) && mirror_job_data(a) != mirror_job_data(c));
    open_the_gate();
    wait_called(3);
    CHECK(atomic_load(&called) == 3 && n_ran == 2);
    CHECK(mirror_job_status(a, NULL) == 0 && mirror_job_status(b, NULL) == 0);
    mirror_job_release(a);
    CHECK(atomic_load(&freed) == 1); /* b still reads it */
    mirror_job_release(b);
    mirror_job_release(c);
    CHECK(atomic_load(&freed) == 3);
    /* Answered: the next identical question is asked again. */
    struct mirror_job *d = ask(m, 1, 4, "same", &why);
    wait_called(4);
    CHECK(n_ran == 3 && ran[2] == 4);
    mirror_job_release(d);
    mirror_free(m);
}

TEST(clients_take_turns)
{
    struct mirror *m = start();
    fill_threads(m);
    struct mirror_job *j[12];
    int why;
    for (int i = 0; i < 10; i++)
        j[i] = ask(m, 1, i, NULL, &why);   /* client 1's ten */
    j[10] = ask(m, 2, 100, NULL, &why);    /* then client 2's one */
    j[11] = ask(m, 3, 200, NULL, &why);    /* and client 3's */
    /* One thread freed, the others held: it runs the queue in the order
     * the queue gives, one question after another. */
    pthread_mutex_lock(&lock);
    hold_rest = 1;
    pthread_mutex_unlock(&lock);
    open_the_gate();
    wait_called(1 + 12);
    /* After the threads' first questions: 1, 2, 3, then client 1's rest. */
    int want[] = {0, 100, 200, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int i = 0; i < 12; i++)
        CHECK(ran[MIRROR_JOB_THREADS + i] == want[i]);
    pthread_mutex_lock(&lock);
    hold_rest = 0;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    wait_called(MIRROR_JOB_THREADS + 12);
    for (int i = 0; i < 12; i++)
        mirror_job_release(j[i]);
    release_held();
    mirror_free(m);
}

TEST(queue_is_bounded_and_refuses_at_once)
{
    struct mirror *m = start();
    fill_threads(m);
    static struct mirror_job *j[MIRROR_JOBS_QUEUED + 8];
    int why, n = 0;
    for (int i = 0; i < MIRROR_JOBS_PER_CLIENT; i++)
        CHECK((j[n++] = ask(m, 1, i, NULL, &why)) != NULL);
    CHECK(ask(m, 1, 999, NULL, &why) == NULL && why == -EAGAIN); /* its share */
    CHECK(atomic_load(&freed) == 1);
    /* Another client still gets in, until the whole queue is full. */
    for (uint64_t c = 2; n < MIRROR_JOBS_QUEUED; c++)
        for (int i = 0; i < MIRROR_JOBS_PER_CLIENT && n < MIRROR_JOBS_QUEUED; i++)
            CHECK((j[n++] = ask(m, c, i, NULL, &why)) != NULL);
    CHECK(ask(m, 9999, 999, NULL, &why) == NULL && why == -EAGAIN);
    /* A question shared with one in flight adds nothing to wait: taken. */
    struct mirror_job *k1 = ask(m, 4242, 7, "k", &why);
    CHECK(k1 == NULL); /* the queue is full: a new question is not */
    open_the_gate();
    wait_called(MIRROR_JOB_THREADS + MIRROR_JOBS_QUEUED);
    for (int i = 0; i < n; i++)
        mirror_job_release(j[i]);
    release_held();
    mirror_free(m);
}

TEST(released_before_it_ran_is_never_asked)
{
    struct mirror *m = start();
    fill_threads(m);
    int why;
    struct mirror_job *gone = ask(m, 1, 1, "k", &why), *stays = ask(m, 2, 2, NULL, &why);
    struct mirror_job *shared_a = ask(m, 3, 3, "s", &why), *shared_b = ask(m, 4, 3, "s", &why);
    mirror_job_release(gone);
    CHECK(atomic_load(&freed) == 2); /* gone's data, and shared_b's duplicate */
    mirror_job_release(shared_a); /* shared_b still waits for it */
    open_the_gate();
    wait_called(MIRROR_JOB_THREADS + 2);
    CHECK(n_ran == MIRROR_JOB_THREADS + 2);
    for (int i = MIRROR_JOB_THREADS; i < n_ran; i++)
        CHECK(ran[i] == 2 || ran[i] == 3);
    mirror_job_release(stays);
    mirror_job_release(shared_b);
    release_held();
    mirror_free(m);
}

TEST(released_while_it_runs_is_not_called_back)
{
    struct mirror *m = start();
    fill_threads(m);
    mirror_job_release(held[0]); /* its client left while the upstream thought */
    open_the_gate();
    wait_called(MIRROR_JOB_THREADS - 1);
    /* held[0]'s data is freed when its thread lets go of its question,
     * after the callbacks: once it is, no callback of its can come. */
    WAIT_UNTIL(atomic_load(&freed) == 1, TEST_WAIT_MS);
    CHECK(atomic_load(&called) == MIRROR_JOB_THREADS - 1);
    for (int i = 1; i < MIRROR_JOB_THREADS; i++)
        mirror_job_release(held[i]);
    CHECK(atomic_load(&freed) == MIRROR_JOB_THREADS);
    mirror_free(m);
}

TEST(builds_never_take_every_thread)
{
    struct mirror *m = start();
    struct mirror_job *b[MIRROR_JOB_THREADS], *q;
    int why;
    for (int i = 0; i < MIRROR_JOB_THREADS; i++) /* one client's builds, all stuck */
        b[i] = ask_as(m, 1, i, NULL, 1, run, &why);
    wait_running(MIRROR_JOB_BUILDS);
    q = ask(m, 1, 100, NULL, &why); /* the same client's question behind them: runs */
    wait_running(MIRROR_JOB_BUILDS + 1);
    pthread_mutex_lock(&lock);
    CHECK(running == MIRROR_JOB_BUILDS + 1 && ran[MIRROR_JOB_BUILDS] == 100);
    pthread_mutex_unlock(&lock);
    open_the_gate();
    wait_called(MIRROR_JOB_THREADS + 1);
    CHECK(n_ran == MIRROR_JOB_THREADS + 1);
    for (int i = 0; i < MIRROR_JOB_THREADS; i++)
        mirror_job_release(b[i]);
    mirror_job_release(q);
    mirror_free(m);
}

TEST(released_while_it_runs_is_stopped_and_forgotten)
{
    struct mirror *m = start();
    int why;
    struct mirror_job *a = ask_as(m, 1, 1, "k", 1, run_stoppable, &why);
    struct mirror_job *b = ask_as(m, 2, 1, "k", 1, run_stoppable, &why);
    wait_running(1);
    mirror_job_release(a); /* b still waits: it runs on */
    pthread_mutex_lock(&lock);
    CHECK(running == 1);
    pthread_mutex_unlock(&lock);
    atomic_store(&heed, 0); /* it has not seen the flag yet when ... */
    mirror_job_release(b); /* nobody waits: stopped where it waits */
    /* ... the same question comes again: asked anew, never handed the
     * stopped one's end. */
    struct mirror_job *c = ask_as(m, 3, 2, "k", 1, run_stoppable, &why);
    CHECK(c && *(int *)mirror_job_data(c) == 2);
    wait_running(2);
    pthread_mutex_lock(&lock);
    atomic_store(&heed, 1);
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    WAIT_UNTIL(atomic_load(&stopped) == 1 && atomic_load(&freed) == 2, TEST_WAIT_MS);
    CHECK(atomic_load(&called) == 0);
    /* The new one runs on, and its thread's connection was not aborted. */
    open_the_gate();
    wait_called(1);
    CHECK(mirror_job_status(c, NULL) == 0 && atomic_load(&stopped) == 1);
    mirror_job_release(c);
    mirror_free(m);
}

int main(void)
{
    log_init("warn", "off");
    if (!mkdtemp(dir))
        return 2;
    RUN(identical_questions_are_asked_once);
    RUN(clients_take_turns);
    RUN(queue_is_bounded_and_refuses_at_once);
    RUN(released_before_it_ran_is_never_asked);
    RUN(released_while_it_runs_is_not_called_back);
    RUN(builds_never_take_every_thread);
    RUN(released_while_it_runs_is_stopped_and_forgotten);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return TEST_SUMMARY();
}
