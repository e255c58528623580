/*
 * test_pool.c — the worker pool of a context (src/core/threadpool.c).
 *
 * 1. Coverage: af_threadpool_run calls fn on every index of [0, n) exactly once, static and
 *    dynamic (chunk 1, 3, 64), for n in {0, 1, 2, 3, 7, 64, 1000, 4097} and pools of 1, 2, 3 and 4
 *    threads, with nth below, equal to and above the pool size; tid < team; static ranges are
 *    contiguous and match [n·t/T, n·(t+1)/T).
 * 2. One job per thread (n == team): every thread gets exactly its own index.
 * 3. Nested calls: a call from inside a job runs serially on the calling thread (team 1, tid 0,
 *    one call with the whole range) and does not deadlock, also on another pool.
 * 4. Repeated dispatch: 10000 small jobs in a row (hot workers), each summed correctly; the same
 *    with poll 0 (workers sleep after every job) for 2000 jobs. Pools of min(4, CPUs) threads.
 * 5. Two application threads dispatching on one pool at once take turns (results still correct).
 * 6. Creation and free: pools created and freed without a dispatch, after one, 50 times in a row
 *    (ASan/LSan check the rest); the thread_exit hook runs once per worker.
 * 7. Idle: after the spin window, a pool whose workers are started uses no CPU: the process's CPU
 *    time (getrusage, user + system) over a 300 ms sleep stays below 30 ms. CPU time, not wall time.
 * 8. af_cpu_count() >= 1; the context's pool: af_ctx_params.poll_us round-trips.
 * 9. fork: a child of a process whose pool has started workers dispatches on that pool (new
 *    workers) and gets correct sums; the parent's pool still works.
 * 10. Oversubscription: a pool of 2 whose worker's share takes 1 ms while the caller's takes
 *    nothing (what a descheduled worker looks like) runs, after a window of 32 such dispatches, on
 *    the caller alone (both shares, tids 0 and 1, on the calling thread, every index once), and
 *    probes the worker again after 64 dispatches; a job whose worker share is the shorter (5 vs
 *    20 ms) keeps both threads; AFINAR_POOL_ADAPT=0 never lowers the cap.
 * 11. Counters (af_threadpool_stats): dispatches with a team > 1 are regions, those run on more
 *    than one thread forks; nested calls, nth 1 and a NULL pool count nothing; dispatches run on the
 *    caller alone under oversubscription are regions but not forks.
 * 12. Signals: the workers run with SIGINT and SIGTERM blocked (af_thread_start), the caller's
 *    mask is what it was, so a Ctrl-C reaches the thread that waits for it (afinar chat's ppoll
 *    at the prompt; tests/test_chat.c), never a worker.
 */
#include "afinar.h"
#include "core/threadpool.h"
#include "testlib.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct cover {
    int *hits;        /* per index: calls that covered it */
    int64_t n;
    int team;
    int bad_tid;      /* a tid >= team was seen */
    int bad_range;    /* a static range differs from [n·t/T, n·(t+1)/T) */
    int chunk;
    int64_t max_len;  /* dynamic: longest range (must be <= chunk) */
} cover;

static void cover_fn(void *va, int64_t i0, int64_t i1, int tid) {
    cover *c = va;
    if (tid < 0 || tid >= c->team) __atomic_store_n(&c->bad_tid, 1, __ATOMIC_RELAXED);
    if (c->chunk == 0 && c->team > 1) {
        if (i0 != c->n * tid / c->team || i1 != c->n * (tid + 1) / c->team)
            __atomic_store_n(&c->bad_range, 1, __ATOMIC_RELAXED);
    }
    int64_t len = i1 - i0, cur = __atomic_load_n(&c->max_len, __ATOMIC_RELAXED);
    while (len > cur && !__atomic_compare_exchange_n(&c->max_len, &cur, len, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    for (int64_t i = i0; i < i1; i++) __atomic_fetch_add(&c->hits[i], 1, __ATOMIC_RELAXED);
}

static void test_coverage(void) {
    const int sizes[] = {1, 2, 3, 4};
    const int64_t ns[] = {0, 1, 2, 3, 7, 64, 1000, 4097};
    const int chunks[] = {0, 1, 3, 64};
    int bad = 0, combos = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        af_threadpool *p = NULL;
        if (!CHECK(af_threadpool_new(sizes[si], 200, NULL, &p) == AF_OK, "pool of %d", sizes[si])) continue;
        CHECK(af_threadpool_size(p) == sizes[si], "size %d", af_threadpool_size(p));
        for (int nth = 1; nth <= sizes[si] + 1; nth++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ci++) {
                    int64_t n = ns[ni];
                    cover c = {calloc((size_t)(n ? n : 1), sizeof(int)), n, af_threadpool_team(p, nth), 0, 0,
                               chunks[ci], 0};
                    int want_team = nth < sizes[si] ? nth : sizes[si];
                    if (c.team != want_team) bad++;
                    af_threadpool_run(p, nth, n, chunks[ci], cover_fn, &c);
                    for (int64_t i = 0; i < n; i++)
                        if (c.hits[i] != 1) {
                            bad++;
                            break;
                        }
                    if (c.bad_tid || c.bad_range || (chunks[ci] > 0 && c.team > 1 && c.max_len > chunks[ci])) bad++;
                    free(c.hits);
                    combos++;
                }
        af_threadpool_free(p);
    }
    CHECK(bad == 0, "coverage: %d of %d (threads, nth, n, chunk) combinations wrong", bad, combos);
}

typedef struct per_thread {
    int64_t got[16];
    int calls;
} per_thread;

static void own_index_fn(void *va, int64_t i0, int64_t i1, int tid) {
    per_thread *pt = va;
    pt->got[tid] = i1 - i0 == 1 ? i0 : -1;
    __atomic_fetch_add(&pt->calls, 1, __ATOMIC_RELAXED);
}

static void test_one_per_thread(void) {
    af_threadpool *p = NULL;
    af_threadpool_new(4, 200, NULL, &p);
    int team = af_threadpool_team(p, 4);
    per_thread pt;
    memset(&pt, 0xff, sizeof pt.got);
    pt.calls = 0;
    af_threadpool_run(p, team, team, 0, own_index_fn, &pt);
    int ok = pt.calls == team;
    for (int t = 0; t < team; t++) ok &= pt.got[t] == t;
    CHECK(team == 4 && ok, "one job per thread: team %d, %d calls", team, pt.calls);
    af_threadpool_free(p);
}

typedef struct nest {
    af_threadpool *outer, *other;
    int inner_bad;    /* an inner call was split or ran with tid != 0 */
    int inner_calls;
    int in_job_bad;
} nest;

typedef struct inner_arg {
    nest *ns;
    int64_t n;
} inner_arg;

static void inner_fn(void *va, int64_t i0, int64_t i1, int tid) {
    inner_arg *a = va;
    if (i0 != 0 || i1 != a->n || tid != 0) __atomic_store_n(&a->ns->inner_bad, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&a->ns->inner_calls, 1, __ATOMIC_RELAXED);
}

static void outer_fn(void *va, int64_t i0, int64_t i1, int tid) {
    nest *ns = va;
    if (!af_threadpool_in_job()) __atomic_store_n(&ns->in_job_bad, 1, __ATOMIC_RELAXED);
    for (int64_t i = i0; i < i1; i++) {
        inner_arg a = {ns, 100 + i};
        if (af_threadpool_team(ns->outer, 8) != 1) __atomic_store_n(&ns->inner_bad, 1, __ATOMIC_RELAXED);
        af_threadpool_run(ns->outer, 8, a.n, 0, inner_fn, &a);  /* same pool */
        af_threadpool_run(ns->other, 8, a.n, 5, inner_fn, &a);  /* another pool */
    }
}

static void noop_range(void *va, int64_t i0, int64_t i1, int tid) {}

static void test_nested(void) {
    nest ns = {0};
    af_threadpool_new(3, 200, NULL, &ns.outer);
    af_threadpool_new(2, 200, NULL, &ns.other);
    af_threadpool_run(ns.outer, 3, 30, 0, outer_fn, &ns);
    af_threadpool_run(ns.outer, 3, 30, 2, outer_fn, &ns);
    CHECK(!ns.inner_bad && ns.inner_calls == 4 * 30, "nested calls run serially on the caller (%d calls)",
          ns.inner_calls);
    CHECK(!ns.in_job_bad && !af_threadpool_in_job(), "af_threadpool_in_job inside and outside jobs");
    af_threadpool_counts co, cn;
    af_threadpool_stats(ns.outer, &co);
    af_threadpool_stats(ns.other, &cn);
    CHECK(co.regions == 2 && co.forks == 2 && cn.regions == 0 && cn.forks == 0,
          "counters: the 2 outer calls are regions that woke the workers, the nested ones are not regions "
          "(outer %llu/%llu, other %llu/%llu)", (unsigned long long)co.regions, (unsigned long long)co.forks,
          (unsigned long long)cn.regions, (unsigned long long)cn.forks);
    af_threadpool_run(ns.outer, 1, 30, 0, noop_range, NULL); /* one thread asked for: not a region */
    af_threadpool_stats(ns.outer, &co);
    af_threadpool_stats(NULL, &cn);
    CHECK(co.regions == 2 && cn.regions == 0 && cn.forks == 0, "counters: nth 1 is no region; NULL pool zeros");
    af_threadpool_free(ns.other);
    af_threadpool_free(ns.outer);
}

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct sum_arg {
    const int32_t *v;
    int64_t part[8];
} sum_arg;

static void sum_fn(void *va, int64_t i0, int64_t i1, int tid) {
    sum_arg *s = va;
    int64_t acc = 0;
    for (int64_t i = i0; i < i1; i++) acc += s->v[i];
    s->part[tid] += acc;
}

/* `reps` dispatches of a 257-element sum on p; returns the number of wrong sums. */
static int repeat_sums(af_threadpool *p, int reps) {
    int32_t v[257];
    int64_t want = 0;
    for (int i = 0; i < 257; i++) want += (v[i] = i * 7 - 300);
    int wrong = 0;
    for (int r = 0; r < reps; r++) {
        sum_arg s = {v, {0}};
        af_threadpool_run(p, af_threadpool_size(p), 257, r % 3 == 2 ? 16 : 0, sum_fn, &s);
        int64_t got = 0;
        for (int t = 0; t < 8; t++) got += s.part[t];
        wrong += got != want;
    }
    return wrong;
}

static void test_repeat(void) {
    af_threadpool *p = NULL;
    af_threadpool_new(af_cpu_count() < 4 ? af_cpu_count() : 4, -1, NULL, &p);
    CHECK(af_threadpool_poll_us(p) == AF_THREADPOOL_POLL_US, "poll < 0 -> default %d", af_threadpool_poll_us(p));
    int reps = tl_sanitized() ? 3000 : 10000;
    double t0 = wall();
    int wrong = repeat_sums(p, reps);
    printf("%d hot dispatches: %.1f us each (information)\n", reps, (wall() - t0) / reps * 1e6);
    CHECK(wrong == 0, "%d hot dispatches: %d wrong sums", reps, wrong);
    af_threadpool_free(p);
    af_threadpool_new(2, 0, NULL, &p); /* poll 0: every worker sleeps after each job */
    t0 = wall();
    wrong = repeat_sums(p, 2000);
    printf("2000 dispatches to sleeping workers: %.1f us each (information)\n", (wall() - t0) / 2000 * 1e6);
    CHECK(wrong == 0 && af_threadpool_poll_us(p) == 0, "2000 dispatches to sleeping workers: %d wrong", wrong);
    af_threadpool_free(p);
}

typedef struct racer {
    af_threadpool *p;
    int wrong;
} racer;

static void *racer_main(void *va) {
    racer *r = va;
    r->wrong = repeat_sums(r->p, 2000);
    return NULL;
}

static void test_two_callers(void) {
    af_threadpool *p = NULL;
    af_threadpool_new(2, 200, NULL, &p);
    racer a = {p, 0}, b = {p, 0};
    pthread_t ta, tb;
    int ok = pthread_create(&ta, NULL, racer_main, &a) == 0;
    ok &= pthread_create(&tb, NULL, racer_main, &b) == 0;
    if (ok) {
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
    }
    CHECK(ok && a.wrong == 0 && b.wrong == 0, "two threads dispatching on one pool: %d + %d wrong", a.wrong, b.wrong);
    af_threadpool_free(p);
}

static int g_exits;
static void on_exit_hook(void) { __atomic_fetch_add(&g_exits, 1, __ATOMIC_RELAXED); }

static void noop_fn(void *va, int64_t i0, int64_t i1, int tid) {}

static void test_create_free(void) {
    int ok = 1;
    for (int i = 0; i < 50; i++) {
        af_threadpool *p = NULL;
        ok &= af_threadpool_new(1 + i % 4, 100, on_exit_hook, &p) == AF_OK;
        if (i % 2) af_threadpool_run(p, 4, 10, 0, noop_fn, NULL); /* starts the workers */
        af_threadpool_free(p);
    }
    /* workers exist only for the odd i: sizes 2, 4, 2, 4, ... -> 1 or 3 workers each */
    int want = 0;
    for (int i = 1; i < 50; i += 2) want += i % 4;
    CHECK(ok && g_exits == want, "50 pools created and freed; exit hook ran %d times (want %d)", g_exits, want);
    af_threadpool_free(NULL);
    CHECK(af_threadpool_size(NULL) == 1 && af_threadpool_team(NULL, 4) == 1, "NULL pool: size 1, team 1");
    af_threadpool *one = NULL;
    af_threadpool_new(1, 100, NULL, &one);
    cover c = {calloc(10, sizeof(int)), 10, 1, 0, 0, 0, 0};
    af_threadpool_run(one, 8, 10, 0, cover_fn, &c);
    int all = 1;
    for (int i = 0; i < 10; i++) all &= c.hits[i] == 1;
    CHECK(all && af_threadpool_team(one, 8) == 1 && c.max_len == 10, "pool of 1 thread: the caller alone, one call");
    free(c.hits);
    af_threadpool_free(one);
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static void test_idle(void) {
    af_threadpool *p = NULL;
    af_threadpool_new(4, 2000, NULL, &p); /* 2 ms spin window */
    CHECK(repeat_sums(p, 100) == 0, "warm-up sums");
    struct timespec ts = {0, 50 * 1000 * 1000}; /* past the spin window: workers asleep */
    nanosleep(&ts, NULL);
    double c0 = cpu_seconds();
    ts.tv_nsec = 300 * 1000 * 1000;
    nanosleep(&ts, NULL);
    double used = cpu_seconds() - c0;
    CHECK(used < 0.030, "idle pool of 4: %.1f ms of CPU time over a 300 ms sleep (want < 30)", used * 1e3);
    CHECK(repeat_sums(p, 100) == 0, "sums after waking the workers");
    af_threadpool_free(p);
}

static void test_ctx(void) {
    CHECK(af_cpu_count() >= 1, "af_cpu_count %d", af_cpu_count());
    af_ctx_params prm;
    af_ctx_params_default(&prm);
    CHECK(prm.poll_us == AF_THREADPOOL_POLL_US, "default poll_us %d", prm.poll_us);
    prm.poll_us = 0;
    prm.n_threads = 3;
    af_ctx *ctx = NULL;
    if (CHECK(af_ctx_new(&prm, &ctx) == AF_OK, "af_ctx_new")) {
        af_ctx_params got;
        af_ctx_get_params(ctx, &got);
        CHECK(got.poll_us == 0 && af_ctx_poll_us(ctx) == 0 && got.n_threads == 3, "poll_us 0 / 3 threads round-trip");
        af_ctx_free(ctx);
    }
    prm.poll_us = -5;
    if (CHECK(af_ctx_new(&prm, &ctx) == AF_OK, "af_ctx_new poll -5")) {
        CHECK(af_ctx_poll_us(ctx) == AF_THREADPOOL_POLL_US, "poll < 0 -> default (%d)", af_ctx_poll_us(ctx));
        double f32 = -1, bf16 = -1;
        CHECK(af_ctx_measure_precision(ctx, &f32, &bf16) == AF_OK && f32 > 0 && bf16 >= 0,
              "af_ctx_measure_precision: f32 %.1f GFLOP/s, bf16 %.1f GFLOP/s", f32, bf16);
        CHECK(af_ctx_measure_precision(ctx, NULL, &bf16) == AF_ERR_INVALID_ARG, "measure: NULL argument");
        af_ctx_free(ctx);
    }
}

/* Runs one part and prints its wall time (information only, never asserted). */
static void part(const char *name, void (*fn)(void)) {
    double t0 = wall();
    fn();
    printf("%-16s %.2f s\n", name, wall() - t0);
}

static void test_fork(void) {
    af_threadpool *p = NULL;
    af_threadpool_new(2, 200, NULL, &p);
    CHECK(repeat_sums(p, 50) == 0, "sums before fork");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(repeat_sums(p, 200) == 0 && af_threadpool_team(p, 2) == 2 ? 0 : 3);
    int status = -1;
    if (pid > 0) waitpid(pid, &status, 0);
    CHECK(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "forked child dispatches on the pool (status %d)",
          status);
    CHECK(repeat_sums(p, 50) == 0, "parent's pool after the fork");
    af_threadpool_free(p);
}

typedef struct adapt_job {
    pthread_t caller;
    int us_caller, us_worker; /* sleep of a share run by the caller / by the worker */
    int hits[2];
    int tid1_on_caller;       /* share 1 ran on the calling thread */
    int on_worker;            /* a share ran on the worker */
} adapt_job;

/* A share's time depends on the thread that runs it (shares go to whichever thread claims them
 * first): a late worker is one whose shares take longer. */
static void adapt_fn(void *va, int64_t i0, int64_t i1, int tid) {
    adapt_job *J = va;
    for (int64_t i = i0; i < i1; i++) __atomic_fetch_add(&J->hits[i], 1, __ATOMIC_RELAXED);
    const int on_caller = pthread_equal(pthread_self(), J->caller) != 0;
    if (tid == 1 && on_caller) J->tid1_on_caller = 1;
    if (!on_caller) J->on_worker = 1;
    const int us = on_caller ? J->us_caller : J->us_worker;
    if (us > 0) usleep((useconds_t)us);
}

/* one dispatch of 2 indices over a team of 2; returns 1 when share 1 ran on the caller, and sets
 * *worker (when not NULL) to whether a share ran on the worker */
static int adapt_run(af_threadpool *p, int us_caller, int us_worker, int *ok, int *worker) {
    adapt_job J = {pthread_self(), us_caller, us_worker, {0, 0}, 0, 0};
    af_threadpool_run(p, 2, 2, 0, adapt_fn, &J);
    if (J.hits[0] != 1 || J.hits[1] != 1) *ok = 0;
    if (worker) *worker = J.on_worker;
    return J.tid1_on_caller;
}

static int adapt_once(af_threadpool *p, int us_caller, int us_worker, int *ok) {
    return adapt_run(p, us_caller, us_worker, ok, NULL);
}

/* adapt_run; 1 when a share ran on the worker (a lagging dispatch lags only then) */
static int lag_once(af_threadpool *p, int us_caller, int us_worker, int *ok) {
    int w = 0;
    adapt_run(p, us_caller, us_worker, ok, &w);
    return w;
}

static void test_adapt(void) {
    af_threadpool *p = NULL;
    unsetenv("AFINAR_POOL_ADAPT");
    if (!CHECK(af_threadpool_new(2, 1000, NULL, &p) == AF_OK, "pool of 2")) return;
    int ok = 1;
    CHECK(af_threadpool_cap(p) == 2, "a new pool may use its 2 threads");
    adapt_once(p, 0, 0, &ok); /* start the workers */
    /* a window of lagging dispatches lowers the cap (the window may have begun with the start): a
     * share takes 1 ms on the caller (time for the worker to claim the other one) and 2.3 ms on
     * the worker, so the caller waits 1.3 ms for a share it would have run in 1 (a dispatch whose
     * worker was too slow to claim a share, all run by the caller, adds no wait) */
    int lagged = 0, missed = 0;
    while (af_threadpool_cap(p) == 2 && lagged < 40) missed += !lag_once(p, 1000, 2300, &ok), lagged++;
    if (missed) { /* the adaptation's figures need the worker in every lagging dispatch */
        tl_skip("the cap after lagging dispatches: the worker ran no share in %d of %d (a loaded machine: the "
                "caller ran them alone, without waiting)", missed, lagged);
        CHECK(ok, "every index once in every dispatch");
        af_threadpool_free(p);
    } else {
        CHECK(af_threadpool_cap(p) == 1 && lagged >= 31 && lagged <= 32,
              "dispatches whose worker lagged 1 ms: cap 1 after %d (got %d)", lagged, af_threadpool_cap(p));
        int on_caller = 0;
        af_threadpool_counts c0, c1;
        af_threadpool_stats(p, &c0);
        for (int i = 0; i < 64; i++) on_caller += adapt_once(p, 0, 0, &ok);
        af_threadpool_stats(p, &c1);
        CHECK(on_caller == 64, "the 64 dispatches at cap 1 run share 1 on the caller (%d of 64)", on_caller);
        CHECK(c1.regions - c0.regions == 64 && c1.forks == c0.forks,
              "counters: the 64 dispatches at cap 1 are regions that woke no worker (%llu regions, %llu forks)",
              (unsigned long long)(c1.regions - c0.regions), (unsigned long long)(c1.forks - c0.forks));
        CHECK(af_threadpool_cap(p) == 2, "then the pool probes 2 threads again (cap %d)", af_threadpool_cap(p));
        int probe_worker = 0;
        for (int i = 0; i < 200 && !probe_worker; i++) adapt_run(p, 2000, 0, &ok, &probe_worker);
        CHECK(probe_worker, "the probe runs a share on the worker");
        CHECK(ok, "every index once in every dispatch");
        for (int i = 0; i < 40; i++) adapt_once(p, 20000, 5000, &ok); /* the worker done first: no wait unless it lags 15+ ms */
        CHECK(af_threadpool_cap(p) == 2 && ok, "a job the worker finishes first keeps both threads (cap %d)",
              af_threadpool_cap(p));
        af_threadpool_free(p);
    }
    /* a probe that plainly loses ends after its first 8 dispatches, not a whole window. The verdict
     * rests on measured waits (a lagging worker against the caller's own share), which another
     * process on the cores can blur (make test runs two programs at a time): up to 3 attempts, each
     * with a fresh pool; a broken rule fails all three */
    int probe_ok = 0, probe_skip = 0, probe_n = -1, probe_idx = 1;
    for (int attempt = 0; attempt < 3 && !probe_ok; attempt++) {
        p = NULL;
        if (!CHECK(af_threadpool_new(2, 1000, NULL, &p) == AF_OK, "pool of 2 (probe)")) break;
        lagged = missed = 0;
        while (af_threadpool_cap(p) == 2 && lagged < 40) missed += !lag_once(p, 1000, 2300, &ok), lagged++;
        for (int i = 0; i < 64; i++) adapt_once(p, 0, 0, &ok); /* the hold at cap 1 */
        int probe = 0, with_worker = 0;
        const int probed = af_threadpool_cap(p) == 2;
        while (af_threadpool_cap(p) == 2 && probe < 40) {
            int w = 0;
            adapt_run(p, 500, 3000, &ok, &w);
            with_worker += probe < 8 && w;
            probe++;
        }
        /* a dispatch whose worker was not scheduled within the caller's 500 µs share is run by the
         * caller alone and costs no wait (work-conserving): the count of 8 holds when the worker
         * ran a share in each of them (and the cap fell before), which a machine with more
         * runnable threads than cores may not give */
        probe_skip = (!probed && missed) || (probed && with_worker < (probe < 8 ? probe : 8));
        probe_ok = !probe_skip && probed && probe == 8 && af_threadpool_cap(p) == 1 && ok;
        probe_n = probe;
        probe_idx &= ok;
        af_threadpool_free(p);
    }
    if (!probe_ok && probe_skip)
        tl_skip("a failing probe ends after 8 dispatches: the worker ran no share in some of the lagging "
                "dispatches or of the probe's first (a loaded machine)");
    else
        CHECK(probe_ok, "a failing probe (worker 2.5 ms late each time) ends after 8 dispatches (%d; up to 3 attempts)",
              probe_n);
    CHECK(probe_idx, "every index once in every dispatch of the probes");
    /* work-conserving: with workers that sleep at once (poll 0), a dispatch whose share 0 is
     * instant finds its worker still waking up; the caller then runs share 1 itself (with tid 1)
     * instead of waiting for it, in some of 200 dispatches at least (a wake-up takes microseconds) */
    setenv("AFINAR_POOL_ADAPT", "0", 1);
    p = NULL;
    if (CHECK(af_threadpool_new(2, 0, NULL, &p) == AF_OK, "pool of 2, poll 0")) {
        int taken = 0;
        for (int i = 0; i < 200; i++) taken += adapt_once(p, 0, 0, &ok);
        CHECK(taken > 0 && ok, "a share its sleeping worker has not begun runs on the caller (%d of 200 dispatches)",
              taken);
        af_threadpool_free(p);
    }
    p = NULL;
    if (CHECK(af_threadpool_new(2, 1000, NULL, &p) == AF_OK, "pool of 2, AFINAR_POOL_ADAPT=0")) {
        for (int i = 0; i < 40; i++) adapt_once(p, 0, 1000, &ok);
        CHECK(af_threadpool_cap(p) == 2 && ok, "AFINAR_POOL_ADAPT=0: the cap stays 2 (%d)", af_threadpool_cap(p));
        af_threadpool_free(p);
    }
    unsetenv("AFINAR_POOL_ADAPT");
}

typedef struct masks {
    pthread_t caller;
    int worker_calls, worker_unblocked; /* calls on another thread than the caller; of them with SIGINT or SIGTERM open */
    int caller_calls, caller_blocked;   /* calls on the caller; of them with SIGINT blocked */
} masks;

static void mask_fn(void *va, int64_t i0, int64_t i1, int tid) {
    masks *m = va;
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    const int blocked = sigismember(&cur, SIGINT) == 1 && sigismember(&cur, SIGTERM) == 1;
    if (pthread_equal(pthread_self(), m->caller)) {
        __atomic_fetch_add(&m->caller_calls, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&m->caller_blocked, sigismember(&cur, SIGINT) == 1, __ATOMIC_RELAXED);
    } else {
        __atomic_fetch_add(&m->worker_calls, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&m->worker_unblocked, !blocked, __ATOMIC_RELAXED);
    }
    nanosleep(&(struct timespec){0, 2000000}, NULL); /* 2 ms: long enough for the workers to take a share */
}

static void test_signals(void) {
    sigset_t before, after;
    pthread_sigmask(SIG_BLOCK, NULL, &before);
    af_threadpool *p = NULL;
    af_threadpool_new(4, 0, NULL, &p);
    const int team = af_threadpool_team(p, 4);
    masks m;
    memset(&m, 0, sizeof m);
    m.caller = pthread_self();
    for (int rep = 0; rep < 20 && m.worker_calls == 0; rep++) af_threadpool_run(p, team, 4 * team, 1, mask_fn, &m);
    if (m.worker_calls == 0)
        tl_skip("signals: no worker took a share of 20 dispatches (a loaded machine)");
    else
        CHECK(m.worker_unblocked == 0, "the workers block SIGINT and SIGTERM: %d of %d worker calls had them open",
              m.worker_unblocked, m.worker_calls);
    pthread_sigmask(SIG_BLOCK, NULL, &after);
    CHECK(m.caller_blocked == 0 && sigismember(&after, SIGINT) == 0 && sigismember(&before, SIGINT) == 0,
          "the caller's mask is unchanged: SIGINT blocked in %d of %d calls on the caller", m.caller_blocked,
          m.caller_calls);
    af_threadpool_free(p);
}

int main(void) {
    part("coverage", test_coverage);
    part("one per thread", test_one_per_thread);
    part("nested", test_nested);
    part("repeat", test_repeat);
    part("two callers", test_two_callers);
    part("create/free", test_create_free);
    part("idle", test_idle);
    part("ctx", test_ctx);
    part("fork", test_fork);
    part("oversubscription", test_adapt);
    part("signals", test_signals);
    return tl_finish("test_pool");
}
