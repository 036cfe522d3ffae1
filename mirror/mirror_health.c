/* mirror_health: see mirror_health.h. */
#include "mirror_health.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metrics.h"
#include "mirror_int.h"
#include "util.h"

#define PAUSE_MAX_NS (30ull * 1000000000ull) /* the longest pause between tries */
#define DOWN_LOG_EVERY_S 60                   /* while down, a line this often */

struct mirror_health {
    pthread_mutex_t lock;
    struct mirror_health_state s;
    uint64_t down_since_ns;        /* monotonic: the first failure in a row */
    uint64_t next_try_ns;          /* monotonic: no question before this, when failing */
    int64_t logged;                /* unix seconds of the last "still down" line */
};

struct mirror_health *mirror_health_new(void)
{
    struct mirror_health *h = xcalloc(1, sizeof(*h));
    pthread_mutex_init(&h->lock, NULL);
    h->s.up = 1; /* until it fails: a mirror starts serving, not alarming */
    metrics_set_mirror_upstream(1, 0, 0);
    return h;
}

void mirror_health_free(struct mirror_health *h)
{
    if (!h)
        return;
    pthread_mutex_destroy(&h->lock);
    free(h);
}

void mirror_health_ok(struct mirror *m)
{
    struct mirror_health *h = m->health;
    int64_t now = (int64_t)time(NULL);
    pthread_mutex_lock(&h->lock);
    uint64_t failures = h->s.failures;
    double down_s = failures ? (double)(time_mono_ns() - h->down_since_ns) / 1e9 : 0;
    h->s.up = 1;
    h->s.failures = 0;
    h->s.last_error[0] = '\0';
    int changed = h->s.last_success != now || failures;
    h->s.last_success = now;
    pthread_mutex_unlock(&h->lock);
    if (changed)
        metrics_set_mirror_upstream(1, now, 0);
    if (failures)
        log_msg(LOG_INFO, "mirror: upstream %s answers again, after %" PRIu64 " failed "
                "request(s) over %.0f s", m->opt.upstream, failures, down_s);
}

void mirror_health_failed(struct mirror *m, const char *why)
{
    struct mirror_health *h = m->health;
    int64_t now = (int64_t)time(NULL);
    uint64_t mono = time_mono_ns();
    pthread_mutex_lock(&h->lock);
    int went_down = h->s.failures == 0;
    if (went_down)
        h->down_since_ns = mono;
    h->s.up = 0;
    h->s.failures++;
    h->s.last_failure = now;
    snprintf(h->s.last_error, sizeof(h->s.last_error), "%s", why ? why : "no answer");
    unsigned shift = h->s.failures > 6 ? 5 : (unsigned)h->s.failures - 1;
    uint64_t pause = 1000000000ull << shift;
    h->next_try_ns = mono + (pause < PAUSE_MAX_NS ? pause : PAUSE_MAX_NS);
    int say = went_down || now - h->logged >= DOWN_LOG_EVERY_S;
    if (say)
        h->logged = now;
    uint64_t failures = h->s.failures;
    int64_t last_success = h->s.last_success;
    pthread_mutex_unlock(&h->lock);
    metrics_add(MC_MIRROR_UPSTREAM_FAILURES, 1);
    metrics_set_mirror_upstream(0, last_success, failures);
    if (say)
        log_msg(LOG_WARN, "mirror: upstream %s %s: %s (%" PRIu64 " failed request(s) in a row%s)",
                m->opt.upstream, went_down ? "cannot be reached" : "still cannot be reached",
                why ? why : "no answer", failures,
                m->opt.serve_stale ? "; serving what the cache holds" : "; mirror_offline is "
                                                                        "strict");
}

int mirror_health_paused(struct mirror *m)
{
    struct mirror_health *h = m->health;
    pthread_mutex_lock(&h->lock);
    int paused = h->s.failures > 0 && time_mono_ns() < h->next_try_ns;
    pthread_mutex_unlock(&h->lock);
    return paused;
}

void mirror_health_served_stale(struct mirror *m)
{
    struct mirror_health *h = m->health;
    pthread_mutex_lock(&h->lock);
    h->s.stale_answers++;
    pthread_mutex_unlock(&h->lock);
    metrics_add(MC_MIRROR_STALE_ANSWERS, 1);
}

void mirror_health_get(struct mirror *m, struct mirror_health_state *out)
{
    struct mirror_health *h = m->health;
    pthread_mutex_lock(&h->lock);
    *out = h->s;
    pthread_mutex_unlock(&h->lock);
}
