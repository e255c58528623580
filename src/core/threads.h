/*
 * threads.h — the one OpenMP shim of the project: compiles with or without -fopenmp.
 *
 * Every parallel loop writes its directive through AF_OMP, with the thread count taken from the
 * af_ctx the call runs under (kernels/ctx.h: ctx->n_threads), e.g.
 *     AF_OMP(parallel for schedule(static) num_threads(nth) if (par))
 * Without OpenMP the directive vanishes (no unknown-pragma warning) and loops run on one thread;
 * variables named only inside a directive must then be marked used ((void)nth).
 * A later worker pool (issue 20) replaces what these macros expand to, not their call sites.
 */
#ifndef AF_THREADS_H
#define AF_THREADS_H

#define AF_PRAGMA_(x) _Pragma(#x)
#ifdef _OPENMP
#include <omp.h>
/* `#pragma omp <directive>`; directive is the text after "omp" (clauses included). */
#define AF_OMP(directive) AF_PRAGMA_(omp directive)
#define AF_OMP_MAX_THREADS() omp_get_max_threads()
#define AF_OMP_THREAD_NUM() omp_get_thread_num()
#define AF_OMP_NUM_THREADS() omp_get_num_threads()
#define AF_OMP_IN_PARALLEL() omp_in_parallel()
#define AF_OMP_MAX_ACTIVE_LEVELS() omp_get_max_active_levels()
#else
#define AF_OMP(directive)
#define AF_OMP_MAX_THREADS() 1
#define AF_OMP_THREAD_NUM() 0
#define AF_OMP_NUM_THREADS() 1
#define AF_OMP_IN_PARALLEL() 0
#define AF_OMP_MAX_ACTIVE_LEVELS() 1
#endif
#endif
