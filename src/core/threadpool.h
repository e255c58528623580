/*
 * threadpool.h — the worker pool of a context (af_ctx owns one; kernels/ctx.h): threads created once,
 * per-operation dispatch to workers that stay hot between operations.
 *
 * Design: every parallel loop of the compute path is one af_threadpool_run call. The calling thread
 * takes part (it is thread 0 of the team) and the size - 1 workers wait for the next job by
 * spinning on a generation counter (the CPU's pause hint, then sched_yield between checks so that
 * a descheduled partner can run) for `poll_us` microseconds after their last job, and only then
 * sleep on a condition variable. A dispatch to hot workers is one atomic increment of the
 * counter and, at the end, a spin on an atomic count of unfinished workers: no system call and no
 * kernel wake-up per operation boundary, only cache-line transfers between running threads, for
 * each of the hundreds of operations of a decode step (with OpenMP's default waiting
 * policy, each ended with a futex sleep and wake-up, and two threads decoded slower than one).
 * The price: while spinning, a worker holds its core; on a machine with more runnable threads
 * than cores a descheduled spinner delays every dispatch by a scheduler time slice, where a
 * sleeping worker is woken promptly. So a spinning worker that finds it was descheduled (a gap
 * of more than 200 µs between two of its checks) goes to sleep at once; poll_us = 0 (`--poll 0`)
 * always sleeps. We chose per-operation
 * dispatch over one parallel region per forward pass with our own barriers between operations:
 * the cost of an operation boundary is the same (one atomic handshake between hot threads), and
 * every kernel keeps its own work split, thresholds and single-thread fallback, so the kernels
 * can still be called alone (tests, the engine's row blocks) and the layer walk stays serial code.
 * The idea of spinning for a bounded time, then sleeping, is that of ggml's CPU threadpool
 * (ggml-cpu.c, `poll` parameter) and of OpenMP's OMP_WAIT_POLICY/GOMP_SPINCOUNT; the code is ours.
 *
 * Rules:
 *  - A call made from inside a job (any pool's), or while another thread dispatches on the same
 *    pool, never deadlocks: nested calls run serially on the calling thread (team of 1);
 *    concurrent callers of one pool take turns (a mutex).
 *  - The team of a call is af_threadpool_team(pool, nth): 1 when nth <= 1, pool is NULL, the call is
 *    nested or the pool has no workers; else min(nth, size). Kernels whose arithmetic depends on
 *    the number of threads (private partial sums) ask for the team first and split by it.
 *  - Workers are created at the first dispatch that needs them (a process that never runs a
 *    parallel loop starts no thread) and joined by af_threadpool_free.
 *  - An idle pool uses no CPU: after poll_us without a job every worker sleeps.
 *  - fork(): in the child, a pool whose workers were started in the parent starts new workers at
 *    its first dispatch (pthread_atfork), so a forked child can keep computing.
 *  - Work-conserving dispatch: the units of a job (the static split's shares, or the dynamic
 *    schedule's chunks) are claimed one by one from a shared counter by whichever thread of the
 *    team asks first, the caller included, and the caller waits only for units that others have
 *    claimed and not finished. A worker that is descheduled or still waking up when a job starts
 *    holds up nothing: its share is run by the caller (with the share's own tid, so the same bits).
 *  - Oversubscription: the team (the static split, and so the arithmetic) never changes, but the
 *    threads that run it may. When the caller waits for its workers longer than doing their shares
 *    itself would have taken (workers descheduled: more runnable threads than cores), summed over
 *    a window of 32 dispatches, the pool runs the next 64 dispatches on half the threads (a thread
 *    then runs several shares, each with its own tid), then probes the doubled count for another
 *    window; while probes keep failing the wait doubles (up to 8192 dispatches). So two threads are not slower than one on
 *    a core shared with another process, and results are the same bits either way.
 *    AFINAR_POOL_ADAPT=0 (at pool creation) turns it off.
 */
#ifndef AF_CORE_THREADPOOL_H
#define AF_CORE_THREADPOOL_H

#include "core/core.h"

#include <pthread.h>
#include <stdint.h>

typedef struct af_threadpool af_threadpool;

/* A job over indices [i0, i1) of a loop, run by thread `tid` of the team (0 = the caller). */
typedef void (*af_threadpool_fn)(void *arg, int64_t i0, int64_t i1, int tid);

/* New pool of `size` threads in all (the caller + size - 1 workers, started at the first dispatch;
 * size < 1 is taken as 1). poll_us: microseconds a worker (and a caller waiting for its team)
 * spins after a job before sleeping; 0 = sleep at once, < 0 = AF_THREADPOOL_POLL_US.
 * thread_exit: called by each worker just before it ends (frees thread-local buffers of the
 * kernels), may be NULL. *out: free with af_threadpool_free. Errors: AF_ERR_NOMEM. */
#define AF_THREADPOOL_POLL_US 1000
af_status af_threadpool_new(int size, int poll_us, void (*thread_exit)(void), af_threadpool **out);

/* Stops and joins the workers, frees the pool. NULL is ignored. No dispatch may be running. */
void af_threadpool_free(af_threadpool *pool);

/* Threads of the pool (caller included), >= 1; 1 for NULL. */
int af_threadpool_size(const af_threadpool *pool);
/* The spin window in microseconds (>= 0); 0 for NULL. */
int af_threadpool_poll_us(const af_threadpool *pool);

/* Team size a call with `nth` requested threads gets now (see the rules above), >= 1. */
int af_threadpool_team(const af_threadpool *pool, int nth);

/* Runs fn over the indices [0, n) with a team of af_threadpool_team(pool, nth) threads and returns when
 * every index is done. chunk == 0: static split, thread t gets one contiguous range
 * [n*t/T, n*(t+1)/T) (T the team; with n == T every thread gets exactly its own index, which is
 * how a kernel runs one job per thread); a thread whose range is empty is not called.
 * chunk > 0: dynamic, threads take the next `chunk` indices from a shared counter until none is
 * left (uneven iterations; tid is then the running thread's own index, < the team, for per-thread
 * scratch). A team of 1 calls fn(arg, 0, n, 0) once on the caller. n <= 0: no
 * call. fn must not depend on which thread runs which range unless it splits by tid itself. */
void af_threadpool_run(af_threadpool *pool, int nth, int64_t n, int64_t chunk, af_threadpool_fn fn, void *arg);

/* Threads a dispatch may use now (1 .. size; size unless oversubscription lowered it; see the
 * rules above); 1 for NULL. For tests and diagnostics. */
int af_threadpool_cap(af_threadpool *pool);

/* Dispatches since the pool was made (counters only grow; a reader subtracts two readings):
 * regions: af_threadpool_run calls with a team > 1 (a parallel region of the compute path: the
 *   calls that stay on the caller, team 1, are not counted);
 * forks: those of them that ran on more than one thread (workers woken, then the caller waits for
 *   them at the region's end: the per-region cost of a few µs; fewer than regions when the
 *   oversubscription rule lowered the threads to 1, or no worker could be started). */
typedef struct af_threadpool_counts {
    uint64_t regions, forks;
} af_threadpool_counts;
/* *out = the counts of `pool` (zeros for NULL). Safe while another thread dispatches (relaxed reads). */
void af_threadpool_stats(const af_threadpool *pool, af_threadpool_counts *out);

/* Tests: 1 when the calling thread is inside a job of some pool (a nested call runs serially). */
int af_threadpool_in_job(void);

/* pthread_create(th, NULL, fn, arg) with every blockable signal blocked in the new thread (the
 * caller's own mask is put back before returning). The library's threads never run the program's
 * signal handlers, so a SIGINT / SIGTERM reaches the thread that waits for it (afinar chat's ppoll
 * at the prompt) instead of a worker that happened not to block it. Returns pthread_create's code. */
int af_thread_start(pthread_t *th, void *(*fn)(void *), void *arg);

/* The number of CPUs this process may run on (sched_getaffinity; sysconf as fallback), >= 1. */
int af_cpu_count(void);

#endif /* AF_CORE_THREADPOOL_H */
