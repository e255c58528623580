/*
 * dist.h — the processes of a data-parallel training run, for trainer_run.c. Two implementations
 * behind this one interface: dist_mpi.c (built when the build finds Open MPI; MPI calls live only
 * there) and dist_none.c (one process). The public part (af_dist_init, af_dist_abort,
 * af_dist_finalize, af_dist_library) is declared in afinar.h.
 *
 * Every collective below must be called by every rank, in the same order. Each one adds what it
 * moved and the seconds it took to *c (may be NULL): bytes = what this rank received from the
 * others (a lower bound of any algorithm's traffic, independent of the algorithm MPI picks).
 */
#ifndef AF_DIST_H
#define AF_DIST_H

#include "afinar.h"
#include "afinar_app.h"

#include <stddef.h>
#include <stdint.h>

typedef struct af_dist_counters {
    int64_t bytes;  /* received from other ranks */
    double seconds; /* wall time inside the collectives */
} af_dist_counters;

/* 1 when this process is one rank of an MPI job (af_dist_init found a launcher); rank and size
 * (0 and 1 otherwise). */
int af_dist_on(void);
int32_t af_dist_rank(void);
int32_t af_dist_size(void);

/* Agree on a failure: every rank passes `failed` (0: fine). *first_failed: the lowest rank that
 * failed, or -1. Errors: AF_ERR_IO (the transport failed). */
af_status af_dist_agree(int failed, int32_t *first_failed, af_dist_counters *c);

/* All-gather of rows: rank k contributes counts[k] rows of `row_bytes` bytes (`mine`, that many
 * rows; it may point into `all` at this rank's place); `all` [Σ counts, row_bytes] receives every rank's
 * rows in rank order (rank 0's first).
 * counts[] is the same on every rank. Errors: AF_ERR_IO, AF_ERR_INVALID_ARG (a count or size the
 * transport cannot express). */
af_status af_dist_allgather_rows(const void *mine, void *all, const int32_t *counts, size_t row_bytes,
                                 af_dist_counters *c);

/* v[0..n) of rank 0 copied to every rank. Errors: AF_ERR_IO. */
af_status af_dist_bcast_i64(int64_t *v, int32_t n, af_dist_counters *c);

/* The line printed when the launcher stops this rank (SIGTERM): e.g. "step 12 of 40; last
 * checkpoint out/checkpoint-10". Copied (truncated to 255 bytes); safe to call every step. */
void af_dist_set_status(const char *line);

#endif
