/* mirror_health: what the mirror knows of its upstream's health, from the
 * outcome of every request it makes (questions, documents, blocks): when
 * it last answered, how many requests in a row failed, how many answers
 * were served stale meanwhile. Published as metrics (the upstream is up,
 * its last success, the failures in a row) and logged when the upstream
 * goes away and comes back, so an outage shows on a dashboard.
 *
 * It also decides when not to ask: after a failure, the mirror's questions
 * are not sent to the upstream again for a while (1 s, doubling with each
 * failure in a row, at most 30 s): what the cache holds is answered at
 * once instead of after a connection timeout each, and the first question
 * after the pause probes the upstream, so it is used again within 30 s of
 * coming back, without a restart. Its lock is a leaf. */
#ifndef TENSORD_MIRROR_HEALTH_H
#define TENSORD_MIRROR_HEALTH_H

#include <errno.h>
#include <stdint.h>

#include "st_error.h"

struct mirror;
struct mirror_health;

struct mirror_health *mirror_health_new(void);
void mirror_health_free(struct mirror_health *h);

/* The upstream answered (any HTTP status but a gateway's 502, 503, 504). */
void mirror_health_ok(struct mirror *m);
/* It did not: no answer (connection, timeout) or a gateway's error (502,
 * 503, 504: what a proxy in front of a down upstream says); why is logged
 * when the upstream goes down. */
void mirror_health_failed(struct mirror *m, const char *why);
/* Whether a question should not be asked now (the upstream failed and its
 * next try is not due): answer from what the mirror keeps. */
int mirror_health_paused(struct mirror *m);
/* An answer was served stale (from what the mirror kept, the upstream
 * failing). */
void mirror_health_served_stale(struct mirror *m);

/* Whether an HTTP status says the upstream is down (502, 503, 504), not
 * that one request failed there (a 500 is the upstream's own answer). */
static inline int mirror_health_status_down(long status)
{
    return status == 502 || status == 503 || status == 504;
}

/* Whether a request that failed with rc (upstream.h's errors) got an
 * answer that only it cannot use (over the mirror's bound, redirects in a
 * circle): that request's failure, and the upstream up. Counted as an
 * outage, any client could pause the upstream for everyone by asking. */
static inline int mirror_health_answered_unusable(int rc)
{
    return rc == -EFBIG || rc == -ELOOP;
}

struct mirror_health_state {
    int up;                        /* its last request got an answer */
    int64_t last_success;          /* unix seconds, 0 = never since start */
    int64_t last_failure;
    uint64_t failures;             /* in a row */
    uint64_t stale_answers;        /* since start */
    char last_error[256];          /* why its last request failed, "" when it did not */
};
void mirror_health_get(struct mirror *m, struct mirror_health_state *out);

#endif
