/* metrics.h — the counters of `afinar serve` shown by GET /metrics (metrics.c). Guarded by the
 * server's lock (srv.mu). */
#ifndef AF_SERVE_METRICS_H
#define AF_SERVE_METRICS_H

#include "serve/serve.h"

#include <stdint.h>

#define SRV_MET_KINDS 4   /* srv_kind: chat, completion, classify, embed */
#define SRV_MET_CODES 10  /* 200 400 401 404 405 413 429 500 503, other */
#define SRV_MET_RING 1024 /* latencies kept for the quantiles: the most recent requests */

typedef struct srv_ring {
    double v[SRV_MET_RING];
    int n, next;
} srv_ring;

typedef struct srv_metrics {
    uint64_t requests[SRV_MET_KINDS][SRV_MET_CODES];
    uint64_t prompt_tokens, cached_tokens, completion_tokens;
    uint64_t decode_steps, decode_rows; /* batched decode passes and the sequences they carried */
    uint64_t prompt_chunks;
    srv_ring latency, ttft;             /* seconds: request end to end; to the first token */
} srv_metrics;

/* Count one finished request of `kind` with HTTP status `status` (lock held). */
void srv_metrics_request(srv_metrics *m, srv_kind kind, int status);
/* Add one value to a ring of recent values (lock held). */
void srv_metrics_ring_add(srv_ring *r, double v);
/* The q-quantile (0..1) of the ring's values by the nearest-rank method (NaN when empty). */
double srv_metrics_quantile(const srv_ring *r, double q);

#endif
