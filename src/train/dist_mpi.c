/* dist_mpi.c — dist.h over MPI (Open MPI from Debian; built when the Makefile finds it). The only
 * file that includes <mpi.h>. Errors of MPI calls are returned (MPI_ERRORS_RETURN on
 * MPI_COMM_WORLD) so the trainer can name the rank and step before af_dist_abort. */
#include "train/dist.h"

#include "core/core.h"

#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_on, g_inited, g_finalized;
static int32_t g_rank, g_size = 1;
static char g_lib[160];
static char g_status[256] = "before the first step";
static char g_term_msg[512];

const char *af_dist_library(void) {
    if (!g_lib[0]) {
        char v[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) return "MPI";
        v[len < (int)sizeof v ? len : (int)sizeof v - 1] = 0;
        size_t k = strcspn(v, "\n,");
        snprintf(g_lib, sizeof g_lib, "%.*s", (int)k, v);
    }
    return g_lib;
}

static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

/* SIGTERM from the launcher (another rank died or the job was cancelled): one line, then exit. */
static void on_term(int sig) {
    size_t n = strlen(g_term_msg);
    ssize_t w = write(STDERR_FILENO, g_term_msg, n);
    (void)w;
    (void)sig;
    _exit(143);
}

static void update_term_msg(void) {
    snprintf(g_term_msg, sizeof g_term_msg,
             "afinar train: rank %d of %d: stopped by the MPI launcher (another rank failed or died, or the job was "
             "cancelled) at %s\n",
             (int)g_rank, (int)g_size, g_status);
}

void af_dist_set_status(const char *line) {
    if (!g_on) return;
    snprintf(g_status, sizeof g_status, "%s", line);
    update_term_msg(); /* a handler running meanwhile prints a half-updated line at worst */
}

af_status af_dist_init(af_dist_info *info) {
    if (!g_inited && launched_by_mpi()) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return af_fail(AF_ERR_IO, "MPI_Init failed (launched by mpirun/srun, but MPI could not start)");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int r = 0, s = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        MPI_Comm_size(MPI_COMM_WORLD, &s);
        g_rank = r, g_size = s, g_on = 1;
        update_term_msg();
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_term;
        sigaction(SIGTERM, &sa, NULL);
    }
    g_inited = 1;
    if (info) *info = (af_dist_info){g_rank, g_size, g_on};
    return AF_OK;
}

void af_dist_abort(int exit_code) {
    if (!g_on || g_finalized || g_size < 2) return;
    fflush(NULL);
    signal(SIGTERM, SIG_DFL);
    MPI_Abort(MPI_COMM_WORLD, exit_code ? exit_code : 1);
}

void af_dist_finalize(void) {
    if (!g_on || g_finalized) return;
    g_finalized = 1;
    signal(SIGTERM, SIG_DFL);
    MPI_Finalize();
}

int af_dist_on(void) { return g_on && !g_finalized; }
int32_t af_dist_rank(void) { return g_rank; }
int32_t af_dist_size(void) { return g_size; }

static af_status mpi_fail(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = 0;
    return af_fail(AF_ERR_IO, "rank %d of %d: %s failed: %s", (int)g_rank, (int)g_size, what, len ? msg : "MPI error");
}

af_status af_dist_agree(int failed, int32_t *first_failed, af_dist_counters *c) {
    *first_failed = failed ? g_rank : -1;
    if (!af_dist_on() || g_size < 2) return AF_OK;
    const double t0 = af_time_sec();
    int in = failed ? (int)g_rank : (int)g_size, out = 0; /* the lowest failing rank, g_size: none */
    int rc = MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Allreduce (agreeing on errors)");
    *first_failed = out < g_size ? out : -1;
    if (c) c->seconds += af_time_sec() - t0, c->bytes += (int64_t)sizeof(int) * (g_size - 1);
    return AF_OK;
}

af_status af_dist_allgather_rows(const void *mine, void *all, const int32_t *counts, size_t row_bytes,
                                 af_dist_counters *c) {
    if (!af_dist_on() || g_size < 2) {
        if (counts[0] > 0 && all != mine) memmove(all, mine, (size_t)counts[0] * row_bytes);
        return AF_OK;
    }
    if (row_bytes == 0 || row_bytes > (size_t)INT32_MAX)
        return af_fail(AF_ERR_INVALID_ARG, "rank %d: gradient row of %zu bytes: MPI counts are int", (int)g_rank, row_bytes);
    int *cnt = af_malloc(sizeof(int) * (size_t)g_size), *dsp = af_malloc(sizeof(int) * (size_t)g_size);
    if (!cnt || !dsp) {
        free(cnt), free(dsp);
        return af_fail(AF_ERR_NOMEM, "out of memory");
    }
    int64_t off = 0;
    for (int32_t k = 0; k < g_size; k++) cnt[k] = counts[k], dsp[k] = (int)off, off += counts[k];
    const double t0 = af_time_sec();
    MPI_Datatype row;
    int rc = MPI_Type_contiguous((int)row_bytes, MPI_BYTE, &row);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&row);
    if (rc == MPI_SUCCESS) {
        char *at = (char *)all + (size_t)dsp[g_rank] * row_bytes; /* in place: this rank's rows first */
        if (counts[g_rank] > 0 && at != (const char *)mine) memmove(at, mine, (size_t)counts[g_rank] * row_bytes);
        rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, cnt, dsp, row, MPI_COMM_WORLD);
        MPI_Type_free(&row);
    }
    free(cnt), free(dsp);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Allgatherv (gradients)");
    if (c) c->seconds += af_time_sec() - t0, c->bytes += (off - counts[g_rank]) * (int64_t)row_bytes;
    return AF_OK;
}

af_status af_dist_bcast_i64(int64_t *v, int32_t n, af_dist_counters *c) {
    if (!af_dist_on() || g_size < 2) return AF_OK;
    const double t0 = af_time_sec();
    int rc = MPI_Bcast(v, n, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Bcast");
    if (c) c->seconds += af_time_sec() - t0, c->bytes += g_rank ? (int64_t)sizeof(int64_t) * n : 0;
    return AF_OK;
}
