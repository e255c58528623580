/* threadpool.c — the worker pool (core/threadpool.h): hot workers for per-operation dispatch, spin then sleep. */
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define CPU_RELAX() ((void)0)
#endif

/* One cache line per field written by different threads (no false sharing between the counter
 * the workers poll and the one they decrement). */
#define LINE 64

struct af_threadpool {
    /* read-mostly settings */
    int size;                 /* threads in all, caller included */
    int poll_us;
    void (*thread_exit)(void);
    pthread_t *tid;           /* size - 1 workers once started */
    int started;              /* workers running (0 before the first dispatch; -1: could not start) */
    unsigned epoch;           /* g_fork_epoch when the workers were started */
    pthread_mutex_t run_mu;   /* one dispatcher at a time */
    /* the job, written by the dispatcher before it publishes `gen` */
    af_threadpool_fn fn;
    void *arg;
    int64_t n, chunk;
    int64_t per_unit;         /* dynamic schedule: chunks per claimed unit (1 unless > UNITS_MAX chunks) */
    int team;                 /* the logical team: the static split is by it (the arithmetic's) */
    int phys;                 /* threads that may run it now (<= team): workers with id < phys; an
                               * atomic (relaxed): a late worker reads it before it claims (do_units) */
    /* oversubscription (under run_mu): when over a window of dispatches the caller waited for its
     * workers longer than running their shares itself would have taken, the pool runs the next
     * `cap_left` dispatches on at most `cap` threads, then probes a doubled cap (adapt_after) */
    int adapt, cap, cap_left, hold, win_n, probing;
    double win_own, win_wait;
    /* af_threadpool_stats: dispatches with a team > 1, and those of them run on > 1 thread (each
     * a fork-join: workers woken, the caller waits for them); atomics, read without run_mu */
    uint64_t n_regions, n_forks;
    _Alignas(LINE) unsigned gen;   /* job generation: workers wait for it to change */
    int stop;                      /* set with a new generation: workers leave */
    /* the job's units (the static shares, or the dynamic schedule's chunks) are claimed by whichever
     * thread of the team gets there first: tag (the job's generation) << 32 | units << 16 | next */
    _Alignas(LINE) uint64_t claim;
    _Alignas(LINE) int64_t done;   /* units of the current job finished */
    _Alignas(LINE) int sleepers;   /* workers asleep (or about to sleep) on `cv` */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

struct worker_arg {
    af_threadpool *pool;
    int id; /* 1 .. size - 1 */
};

static _Thread_local int tl_in_job;

/* Incremented in the child of every fork(): a pool started before the fork has no workers in the
 * child (fork copies only the calling thread), so its first dispatch there starts new ones. */
static unsigned g_fork_epoch;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
static void on_fork_child(void) { g_fork_epoch++; }
static void register_atfork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

int af_threadpool_in_job(void) { return tl_in_job; }

int af_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int c = CPU_COUNT(&set);
        if (c > 0) return c;
    }
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c > 0 ? (int)(c > 1024 ? 1024 : c) : 1;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* Units of a job: the static split's shares (0 .. team - 1, each run with its own index as tid, so
 * a kernel that splits its arithmetic by the team gets the same bits whichever thread runs a share),
 * or the dynamic schedule's chunks (run with the physical thread's id as tid, < phys, for per-thread
 * scratch). Each unit is claimed from p->claim by the first thread that asks, the caller included:
 * a worker that is descheduled or slow to wake never holds up a unit it has not begun, the caller
 * (or another worker) runs it (work-conserving, as a work-sharing loop with a shared counter).
 * The claim word carries the job's tag and unit count, so a late worker of an earlier job, whose
 * tag no longer matches, claims nothing and reads no field of the new job. */
#define UNITS_MAX 0xffff

static void run_unit(af_threadpool *p, int64_t u, int t) {
    const int64_t n = p->n, chunk = p->chunk;
    if (chunk > 0) {
        const int64_t per = p->per_unit;
        for (int64_t c = u * per; c < (u + 1) * per && c * chunk < n; c++) {
            const int64_t i0 = c * chunk;
            p->fn(p->arg, i0, i0 + chunk < n ? i0 + chunk : n, t);
        }
    } else {
        const int T = p->team;
        const int64_t i0 = n * u / T, i1 = n * (u + 1) / T;
        if (i1 > i0) p->fn(p->arg, i0, i1, (int)u);
    }
}

/* Thread `t` claims and runs units of the job tagged `tag` until none is left (or the job is another
 * one, or t is not among the threads that may run it). The ordering: a successful claim reads from
 * the dispatcher's release store of the claim word, after the job's fields were written; the job
 * cannot end (nor its fields change) before every claimed unit is counted in p->done. */
static void do_units(af_threadpool *p, unsigned tag, int t) {
    tl_in_job = 1;
    uint64_t c = __atomic_load_n(&p->claim, __ATOMIC_ACQUIRE);
    for (;;) {
        const unsigned units = (unsigned)(c >> 16) & UNITS_MAX, u = (unsigned)c & UNITS_MAX;
        if ((unsigned)(c >> 32) != tag || u >= units) break;
        /* phys after the claim word: a value of this job while the CAS below can succeed */
        if (t >= __atomic_load_n(&p->phys, __ATOMIC_RELAXED)) break;
        if (!__atomic_compare_exchange_n(&p->claim, &c, c + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
        run_unit(p, u, t);
        __atomic_fetch_add(&p->done, 1, __ATOMIC_RELEASE);
        c = __atomic_load_n(&p->claim, __ATOMIC_ACQUIRE);
    }
    tl_in_job = 0;
}

/* Oversubscription (af_threadpool_run): dispatches judged together, and those run at a lowered
 * cap before the next probe (doubling while probes fail) */
#define ADAPT_WINDOW 32
#define ADAPT_HOLD_MIN 64
#define ADAPT_HOLD_MAX 8192
/* A probe whose first ADAPT_PROBE_EARLY dispatches waited ADAPT_PROBE_FAIL times longer than the
 * caller alone would have taken ends there: on a machine that stays oversubscribed each of its
 * dispatches costs a time slice, so a whole window per probe was most of what two threads lost to
 * one beside a competing process. A quiet machine's waits are far below that bound. */
#define ADAPT_PROBE_EARLY 8
#define ADAPT_PROBE_FAIL 4.0

/* Pause hints before a spinning thread starts to yield the CPU between checks (~20-80 µs): on a
 * machine with more runnable threads than cores, the thread a spinner waits for may need its core. */
#define SPIN_PAUSES 2048
/* A gap this long between two checks of a spinning worker means it was descheduled (other
 * runnable threads want the cores): it then sleeps at once, since a spinner that is not running
 * delays each dispatch by a time slice while a sleeping one is woken promptly. */
#define PREEMPTED_US 200.0

/* Waits until `gen` differs from `seen`: spins poll_us (pause hints, then sched_yield between
 * checks) unless it finds itself descheduled (PREEMPTED_US), then sleeps. Returns the new
 * generation. */
static unsigned wait_job(af_threadpool *p, unsigned seen) {
    unsigned g = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
    if (g != seen) return g;
    if (p->poll_us > 0) {
        double last = now_us();
        const double until = last + (double)p->poll_us;
        for (unsigned it = 1;; it++) {
            if (it < SPIN_PAUSES) CPU_RELAX();
            else sched_yield();
            g = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
            if (g != seen) return g;
            if (it < SPIN_PAUSES && (it & 63) != 0) continue;
            const double t = now_us();
            if (t >= until || t - last > PREEMPTED_US) break;
            last = t;
        }
    }
    pthread_mutex_lock(&p->mu);
    /* seq_cst pair with af_threadpool_run: it stores gen then reads sleepers; we add to sleepers then
     * read gen, so one of the two sees the other's write (no lost wake-up). */
    __atomic_fetch_add(&p->sleepers, 1, __ATOMIC_SEQ_CST);
    while ((g = __atomic_load_n(&p->gen, __ATOMIC_SEQ_CST)) == seen) pthread_cond_wait(&p->cv, &p->mu);
    __atomic_fetch_sub(&p->sleepers, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *va) {
    struct worker_arg wa = *(struct worker_arg *)va;
    free(va);
    af_threadpool *p = wa.pool;
    unsigned seen = 0;
    for (;;) {
        seen = wait_job(p, seen);
        if (p->stop) break;
        do_units(p, seen, wa.id);
    }
    if (p->thread_exit) p->thread_exit();
    return NULL;
}

af_status af_threadpool_new(int size, int poll_us, void (*thread_exit)(void), af_threadpool **out) {
    if (!out) return af_fail(AF_ERR_INVALID_ARG, "af_threadpool_new: NULL argument");
    *out = NULL;
    af_threadpool *p = af_calloc(1, sizeof *p);
    if (!p) return af_fail(AF_ERR_NOMEM, "out of memory for a worker pool");
    p->size = size < 1 ? 1 : size;
    p->poll_us = poll_us < 0 ? AF_THREADPOOL_POLL_US : poll_us;
    p->thread_exit = thread_exit;
    const char *ad = getenv("AFINAR_POOL_ADAPT");
    p->adapt = !(ad && !strcmp(ad, "0"));
    p->cap = p->size;
    p->hold = ADAPT_HOLD_MIN;
    pthread_mutex_init(&p->run_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_once(&g_atfork_once, register_atfork);
    *out = p;
    return AF_OK;
}

/* Publishes the job already written into p (team, fn, claim word, ...) to the workers: its tag is
 * the new generation, gen + 1 (only the dispatcher, under run_mu, writes gen). */
static void publish(af_threadpool *p) {
    __atomic_fetch_add(&p->gen, 1u, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Waits until the `units` units of the current job are finished (the caller has claimed what it
 * could: the wait is for units other threads are running): spins, then yields the CPU. Workers
 * that claimed nothing are not waited for. */
static void wait_done(af_threadpool *p, int64_t units) {
    for (unsigned it = 0; __atomic_load_n(&p->done, __ATOMIC_ACQUIRE) < units; it++) {
        if (it < SPIN_PAUSES) CPU_RELAX();
        else sched_yield();
    }
}

/* In the child of a fork: the pool's workers do not exist here; forget them (their synchronization
 * objects are re-made: another thread of the parent may have held them at the fork) so that the
 * next dispatch starts new ones. The parent's pthread_t values are not joined. */
static void forget_workers(af_threadpool *p) {
    free(p->tid);
    p->tid = NULL;
    p->gen = 0;
    p->stop = 0;
    p->claim = 0;
    p->done = 0;
    p->sleepers = 0;
    pthread_mutex_init(&p->run_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    __atomic_store_n(&p->started, 0, __ATOMIC_RELEASE);
}

int af_thread_start(pthread_t *th, void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    const int rc = pthread_create(th, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Starts the workers (under run_mu). On failure the pool runs everything on the caller. */
static void start_workers(af_threadpool *p) {
    __atomic_store_n(&p->started, -1, __ATOMIC_RELEASE);
    p->tid = malloc((size_t)(p->size - 1) * sizeof *p->tid);
    if (!p->tid) return;
    int made = 0;
    for (; made < p->size - 1; made++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (!wa) break;
        wa->pool = p;
        wa->id = made + 1;
        if (af_thread_start(&p->tid[made], worker_main, wa) != 0) {
            free(wa);
            break;
        }
    }
    if (made == p->size - 1) {
        p->epoch = __atomic_load_n(&g_fork_epoch, __ATOMIC_RELAXED);
        __atomic_store_n(&p->started, 1, __ATOMIC_RELEASE);
        return;
    }
    /* partial start: stop the ones made (they wait for generation 1) */
    p->stop = 1;
    p->team = 0;
    __atomic_store_n(&p->phys, 0, __ATOMIC_RELAXED);
    int want = p->size - 1;
    p->size = made + 1;
    publish(p);
    for (int i = 0; i < made; i++) pthread_join(p->tid[i], NULL);
    p->size = want + 1;
    p->stop = 0;
    free(p->tid);
    p->tid = NULL;
}

void af_threadpool_free(af_threadpool *p) {
    if (!p) return;
    if (p->started == 1 && p->epoch != __atomic_load_n(&g_fork_epoch, __ATOMIC_RELAXED)) forget_workers(p);
    if (p->started == 1) {
        p->stop = 1;
        p->team = 0;
        __atomic_store_n(&p->phys, 0, __ATOMIC_RELAXED);
        publish(p);
        for (int i = 0; i < p->size - 1; i++) pthread_join(p->tid[i], NULL);
    }
    free(p->tid);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->run_mu);
    free(p);
}

int af_threadpool_size(const af_threadpool *p) { return p ? p->size : 1; }
int af_threadpool_poll_us(const af_threadpool *p) { return p ? p->poll_us : 0; }

int af_threadpool_team(const af_threadpool *p, int nth) {
    if (!p || nth <= 1 || tl_in_job || p->size < 2 || __atomic_load_n(&p->started, __ATOMIC_ACQUIRE) < 0) return 1;
    return nth < p->size ? nth : p->size;
}

void af_threadpool_stats(const af_threadpool *p, af_threadpool_counts *out) {
    out->regions = p ? __atomic_load_n(&p->n_regions, __ATOMIC_RELAXED) : 0;
    out->forks = p ? __atomic_load_n(&p->n_forks, __ATOMIC_RELAXED) : 0;
}

int af_threadpool_cap(af_threadpool *p) {
    if (!p) return 1;
    pthread_mutex_lock(&p->run_mu);
    const int c = p->cap;
    pthread_mutex_unlock(&p->run_mu);
    return c;
}

/* After a dispatch of the logical team on `phys` threads (under run_mu): `own` µs of the caller's
 * share, `wait` µs waiting for the workers. With everyone running, wait is the imbalance, well
 * under own·(phys − 1): the team beats the caller alone. A worker that was descheduled (more
 * runnable threads than cores) makes the caller wait a time slice. Over a window of ADAPT_WINDOW
 * dispatches, when the waits add up to more than running the other shares itself would have taken
 * (Σ wait > (phys − 1)·Σ own), the cap halves for `hold` dispatches (doubling, up to
 * ADAPT_HOLD_MAX, while the probes keep failing; back to ADAPT_HOLD_MIN after a good window at
 * the full size). */
static void adapt_after(af_threadpool *p, int phys, double own, double wait) {
    p->win_own += own;
    p->win_wait += wait;
    const double alone = p->win_own * (double)(phys - 1); /* the other shares on the caller */
    const int early = p->probing && p->win_n + 1 == ADAPT_PROBE_EARLY && p->win_wait > ADAPT_PROBE_FAIL * alone;
    if (++p->win_n < ADAPT_WINDOW && !early) return;
    const int slow = p->win_wait > alone;
    p->probing = 0;
    p->win_n = 0;
    p->win_own = p->win_wait = 0;
    if (!slow) {
        if (phys == p->size) p->hold = ADAPT_HOLD_MIN;
        return;
    }
    p->cap = phys / 2 > 1 ? phys / 2 : 1;
    p->cap_left = p->hold;
    p->hold = p->hold * 2 < ADAPT_HOLD_MAX ? p->hold * 2 : ADAPT_HOLD_MAX;
}

/* One dispatch at the lowered cap has passed: after cap_left of them, probe a doubled cap (a
 * fresh window, which may end early: ADAPT_PROBE_EARLY). */
static void adapt_tick(af_threadpool *p) {
    if (p->cap < p->size && --p->cap_left <= 0) {
        p->cap = p->cap * 2 < p->size ? p->cap * 2 : p->size;
        p->cap_left = p->hold;
        p->probing = 1;
        p->win_n = 0;
        p->win_own = p->win_wait = 0;
    }
}

void af_threadpool_run(af_threadpool *p, int nth, int64_t n, int64_t chunk, af_threadpool_fn fn, void *arg) {
    if (n <= 0) return;
    int team = af_threadpool_team(p, nth);
    int phys = team;
    if (team > 1) {
        __atomic_fetch_add(&p->n_regions, 1, __ATOMIC_RELAXED);
        if (__atomic_load_n(&p->started, __ATOMIC_ACQUIRE) == 1 &&
            p->epoch != __atomic_load_n(&g_fork_epoch, __ATOMIC_RELAXED))
            forget_workers(p); /* first dispatch in a forked child (single-threaded there) */
        pthread_mutex_lock(&p->run_mu);
        if (!p->started) start_workers(p);
        if (p->started < 0) { /* no workers could be started: the caller alone */
            pthread_mutex_unlock(&p->run_mu);
            team = phys = 1;
        } else if (p->adapt && p->cap < team) {
            phys = p->cap;
            adapt_tick(p);
            if (phys == 1) { /* the caller runs every share of the logical team */
                pthread_mutex_unlock(&p->run_mu);
                p = NULL;
            }
        }
    }
    if (phys == 1) {
        int outer = tl_in_job;
        tl_in_job = 1;
        if (team == 1) fn(arg, 0, n, 0);
        else if (chunk > 0) /* the team's chunks, in order, on the caller */
            for (int64_t i0 = 0; i0 < n; i0 += chunk) fn(arg, i0, i0 + chunk < n ? i0 + chunk : n, 0);
        else
            for (int s = 0; s < team; s++) {
                int64_t i0 = n * s / team, i1 = n * (s + 1) / team;
                if (i1 > i0) fn(arg, i0, i1, s);
            }
        tl_in_job = outer;
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->chunk = chunk;
    p->team = team;
    __atomic_store_n(&p->phys, phys, __ATOMIC_RELAXED);
    int64_t units = team;
    p->per_unit = 1;
    if (chunk > 0) {
        const int64_t nchunk = (n + chunk - 1) / chunk;
        p->per_unit = (nchunk + UNITS_MAX - 1) / UNITS_MAX;
        units = (nchunk + p->per_unit - 1) / p->per_unit;
    }
    const unsigned tag = __atomic_load_n(&p->gen, __ATOMIC_RELAXED) + 1u;
    __atomic_store_n(&p->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->claim, (uint64_t)tag << 32 | (uint64_t)units << 16, __ATOMIC_RELEASE);
    __atomic_fetch_add(&p->n_forks, 1, __ATOMIC_RELAXED);
    const double t0 = p->adapt ? now_us() : 0;
    publish(p);
    do_units(p, tag, 0);
    const double t1 = p->adapt ? now_us() : 0;
    wait_done(p, units);
    if (p->adapt) adapt_after(p, phys, t1 - t0, now_us() - t1);
    pthread_mutex_unlock(&p->run_mu);
}
