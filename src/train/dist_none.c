/* dist_none.c — dist.h for a build without MPI: one process of one (see dist.h). */
#include "train/dist.h"

#include <string.h>

const char *af_dist_library(void) { return NULL; }

af_status af_dist_init(af_dist_info *info) {
    if (info) *info = (af_dist_info){0, 1, 0};
    return AF_OK;
}

void af_dist_abort(int exit_code) { (void)exit_code; }
void af_dist_finalize(void) {}
int af_dist_on(void) { return 0; }
int32_t af_dist_rank(void) { return 0; }
int32_t af_dist_size(void) { return 1; }
void af_dist_set_status(const char *line) { (void)line; }

af_status af_dist_agree(int failed, int32_t *first_failed, af_dist_counters *c) {
    (void)c;
    *first_failed = failed ? 0 : -1;
    return AF_OK;
}

af_status af_dist_allgather_rows(const void *mine, void *all, const int32_t *counts, size_t row_bytes,
                                 af_dist_counters *c) {
    (void)c;
    if (counts[0] > 0 && all != mine) memmove(all, mine, (size_t)counts[0] * row_bytes);
    return AF_OK;
}

af_status af_dist_bcast_i64(int64_t *v, int32_t n, af_dist_counters *c) {
    (void)v, (void)n, (void)c;
    return AF_OK;
}
