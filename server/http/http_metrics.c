/* http_metrics: see http_metrics.h. */
#include "http_metrics.h"

#define NCLASS 6 /* 1xx..5xx, other */

static const char *const ep_names[MEP_COUNT] = {
    "models", "model", "header",   "file",    "file_header", "tensor", "slice",
    "gpu",    "fetch", "hub_file", "hub_api", "metrics",     "health", "ui",
    "blob",   "s3",    "other"};
static const char *const class_names[NCLASS] = {"1xx", "2xx", "3xx", "4xx", "5xx", "other"};

_Static_assert(MEP_COUNT <= METRICS_MAX_KINDS, "more endpoints than metrics can count");
_Static_assert(NCLASS <= METRICS_MAX_OUTCOMES, "more status classes than metrics can count");

void http_metrics_init(void)
{
    static const struct metrics_labels labels = {
        .kind_key = "endpoint",
        .outcome_key = "code",
        .kinds = ep_names,
        .n_kinds = MEP_COUNT,
        .outcomes = class_names,
        .n_outcomes = NCLASS,
    };
    metrics_init();
    metrics_set_labels(&labels);
}

void http_metrics_request_done(enum metrics_ep ep, unsigned status, uint64_t bytes_sent,
                               uint64_t duration_ns, uint64_t ttfb_ns)
{
    unsigned cls = status >= 100 && status <= 599 ? status / 100 - 1 : NCLASS - 1;
    metrics_request_done((unsigned)ep < MEP_COUNT ? (unsigned)ep : MEP_OTHER, cls, bytes_sent,
                         duration_ns, ttfb_ns);
}
