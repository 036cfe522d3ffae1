/* http_metrics: what the daemon's metrics know about HTTP. Requests are
 * counted in core/runtime/metrics by kind x outcome; here the kinds are the
 * endpoints (label endpoint="...") and the outcomes the status classes
 * (label code="1xx".."5xx", or "other" when no status was sent). */
#ifndef TENSORD_HTTP_METRICS_H
#define TENSORD_HTTP_METRICS_H

#include <stdint.h>

#include "metrics.h"

/* The endpoint a request was routed to. */
enum metrics_ep {
    MEP_MODELS,
    MEP_MODEL,
    MEP_HEADER,
    MEP_FILE,
    MEP_FILE_HEADER,
    MEP_TENSOR,
    MEP_SLICE,
    MEP_GPU,
    MEP_FETCH,
    MEP_HUB_FILE,   /* /{repo}/resolve|raw/... */
    MEP_HUB_API,    /* /api/models... */
    MEP_METRICS,
    MEP_HEALTH,
    MEP_UI,         /* /ui/... */
    MEP_BLOB,       /* /v1/blobs/{digest} */
    MEP_S3,         /* /s3/... */
    MEP_OTHER,      /* also every value out of range */
    MEP_COUNT
};

/* metrics_init, then the endpoint and status-class labels. */
void http_metrics_init(void);

/* A request ended: counted under its endpoint and the class of `status`
 * (outside 100..599, e.g. 0 for "client left before an answer", it counts
 * under code="other"). Durations in nanoseconds. */
void http_metrics_request_done(enum metrics_ep ep, unsigned status, uint64_t bytes_sent,
                               uint64_t duration_ns, uint64_t ttfb_ns);

#endif
