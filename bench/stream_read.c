/*
 * stream_read.c — STREAM-like read bandwidth of this machine: the denominator of the decode
 * "weight-bandwidth floor" of bench/cpu_suite.sh (a decode step streams every quantized weight
 * once, so tokens/s cannot exceed bandwidth / weight bytes per token).
 *
 * Method (in the spirit of McCalpin's STREAM, read-only like its "sum" variants): one buffer of
 * 64-bit integers much larger than the last-level cache, filled with p[i] = i (first touch by the
 * measuring threads, transparent huge pages requested), then summed in full `passes` times with
 * T threads, each thread summing one contiguous slice with four independent 256-bit vector
 * accumulators (GCC vector extensions: AVX2 or two SSE2 loads per vector). All threads start a pass
 * together (a barrier); its time runs from the first thread's start to the last thread's end, each
 * read by the summing thread itself with CLOCK_MONOTONIC; the best pass counts (a peak is wanted;
 * neighbours only slow passes down). Bandwidth = buffer bytes / best pass time, in GB/s of 10^9
 * bytes. Every pass's sum is checked against n(n-1)/2 (mod 2^64), so
 * each element is known to have been read exactly once and the loop cannot be optimised away.
 *
 * Usage: stream_read [--mib N] [--threads T1,T2,...] [--passes P]
 *   --mib     buffer size in MiB (default: max(512, 8 x the machine's L3: cpu0's L3 times the number
 *             of L3 instances), at most a quarter of RAM)
 *   --threads thread counts to measure, in order (default: 1 and the number of online CPUs)
 *   --passes  passes per thread count (default 5)
 * Prints one JSON object on stdout:
 *   {"l3_bytes": B (the machine's L3, as for --mib), "buffer_bytes": B, "passes": P,
 *    "runs": [{"threads": T, "best_s": s, "gbps": GB/s, "median_gbps": GB/s}, ...]}
 * Exit status: 0 done, 1 a run-time failure (allocation, threads, a wrong sum), 2 bad arguments;
 * every failure is named on stderr.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 1024
#define MAX_COUNTS 16
#define MAX_PASSES 1000

typedef uint64_t v4u64 __attribute__((vector_size(32)));

/* One slice: VECS 32-byte vectors, a multiple of 4. */
static uint64_t sum_slice(const v4u64 *v, size_t vecs) {
    v4u64 a0 = {0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < vecs; i += 4) {
        a0 += v[i];
        a1 += v[i + 1];
        a2 += v[i + 2];
        a3 += v[i + 3];
    }
    const v4u64 s = a0 + a1 + a2 + a3;
    return s[0] + s[1] + s[2] + s[3];
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The shared state of one measurement with T threads. */
typedef struct {
    v4u64 *buf;
    size_t vecs;            /* whole buffer, multiple of 4 * T */
    int nthreads, passes, fill;
    pthread_barrier_t start, done;
    uint64_t sums[MAX_THREADS];
    double t_start[MAX_THREADS], t_end[MAX_THREADS]; /* each thread's own clock readings of a pass */
} run_t;

typedef struct {
    run_t *r;
    int id;
} arg_t;

/* Thread ID's slice [lo, hi) of the vectors, in multiples of 4 vectors. */
static void slice(const run_t *r, int id, size_t *lo, size_t *hi) {
    const size_t groups = r->vecs / 4;
    *lo = 4 * (groups * (size_t)id / (size_t)r->nthreads);
    *hi = 4 * (groups * (size_t)(id + 1) / (size_t)r->nthreads);
}

static void *worker(void *p) {
    const arg_t *a = p;
    run_t *r = a->r;
    size_t lo, hi;
    slice(r, a->id, &lo, &hi);
    if (r->fill) { /* first touch: p[i] = i, i counted in 64-bit elements */
        uint64_t *e = (uint64_t *)r->buf;
        for (size_t i = 4 * lo; i < 4 * hi; i++) e[i] = i;
    }
    for (int k = 0; k < r->passes; k++) {
        pthread_barrier_wait(&r->start);
        r->t_start[a->id] = now();
        r->sums[a->id] = sum_slice(r->buf + lo, hi - lo);
        r->t_end[a->id] = now();
        pthread_barrier_wait(&r->done);
    }
    return NULL;
}

static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Runs FILL (passes = 0) or PASSES timed passes with T threads; times[k] = pass k's seconds.
 * Returns 0, or 1 after naming the failure on stderr. */
static int measure(v4u64 *buf, size_t vecs, int nthreads, int passes, int fill, double *times) {
    static run_t r;
    memset(&r, 0, sizeof r);
    r.buf = buf;
    r.vecs = vecs;
    r.nthreads = nthreads;
    r.passes = passes;
    r.fill = fill;
    if (pthread_barrier_init(&r.start, NULL, (unsigned)nthreads + 1) ||
        pthread_barrier_init(&r.done, NULL, (unsigned)nthreads + 1)) {
        fprintf(stderr, "stream_read: pthread_barrier_init failed\n");
        return 1;
    }
    static pthread_t th[MAX_THREADS];
    static arg_t args[MAX_THREADS];
    int started = 0, rc = 0;
    for (; started < nthreads; started++) {
        args[started] = (arg_t){&r, started};
        const int e = pthread_create(&th[started], NULL, worker, &args[started]);
        if (e) {
            fprintf(stderr, "stream_read: pthread_create (thread %d of %d): %s\n", started + 1, nthreads,
                    strerror(e));
            return 1; /* main exits: the threads already started end with the process */
        }
    }
    const size_t n = vecs * 4; /* 64-bit elements */
    /* sum of 0..n-1 mod 2^64: halve the even factor first (unsigned arithmetic wraps) */
    const uint64_t expect = (n % 2 == 0) ? (uint64_t)(n / 2) * (uint64_t)(n - 1) : (uint64_t)n * (uint64_t)((n - 1) / 2);
    for (int k = 0; k < passes; k++) {
        pthread_barrier_wait(&r.start);
        pthread_barrier_wait(&r.done);
        /* from the first thread's start to the last thread's end (the main thread only waits:
         * its own clock could be read late when it is descheduled on a busy machine) */
        double t0 = r.t_start[0], t1 = r.t_end[0];
        uint64_t s = 0;
        for (int i = 0; i < nthreads; i++) {
            s += r.sums[i];
            t0 = r.t_start[i] < t0 ? r.t_start[i] : t0;
            t1 = r.t_end[i] > t1 ? r.t_end[i] : t1;
        }
        times[k] = t1 - t0;
        if (s != expect && !rc) {
            fprintf(stderr, "stream_read: pass %d with %d threads summed %llu, expected %llu\n", k + 1, nthreads,
                    (unsigned long long)s, (unsigned long long)expect);
            rc = 1;
        }
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&r.start);
    pthread_barrier_destroy(&r.done);
    return rc;
}

/* Number of CPUs in a sysfs CPU list such as "0-7,64-71"; 0 when unreadable. */
static long cpu_list_count(const char *s) {
    long n = 0;
    while (*s && *s != '\n') {
        char *end;
        const long a = strtol(s, &end, 10);
        if (end == s) return 0;
        long b = a;
        if (*end == '-') {
            s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s || b < a) return 0;
        }
        n += b - a + 1;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* Bytes of level-3 cache on the machine: cpu0's L3 (sysfs) times the number of L3 instances
 * (online CPUs / CPUs sharing cpu0's L3: a multi-chiplet or multi-socket machine has several);
 * sysconf's figure where sysfs says nothing; 0 when unknown. */
static long long l3_bytes(long ncpu) {
    for (int i = 0; i < 8; i++) {
        char path[96], buf[4096];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        const int ok = fgets(buf, sizeof buf, f) != NULL && atoi(buf) == 3;
        fclose(f);
        if (!ok) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (!f) break;
        long long v = 0;
        char unit = 0;
        const int got = fscanf(f, "%lld%c", &v, &unit);
        fclose(f);
        if (got < 1 || v <= 0) break;
        v *= unit == 'K' ? 1024LL : unit == 'M' ? 1048576LL : 1LL;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/shared_cpu_list", i);
        f = fopen(path, "r");
        long shared = 0;
        if (f) {
            if (fgets(buf, sizeof buf, f)) shared = cpu_list_count(buf);
            fclose(f);
        }
        const long instances = shared > 0 ? (ncpu + shared - 1) / shared : 1;
        return v * (instances > 0 ? instances : 1);
    }
    const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return v > 0 ? v : 0;
}

/* Parses a decimal integer in [lo, hi]; 0 on success. */
static int parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 1;
    *out = v;
    return 0;
}

static int usage(const char *msg, const char *arg) {
    fprintf(stderr, "stream_read: %s%s%s\nusage: stream_read [--mib N] [--threads T1,T2,...] [--passes P]\n", msg,
            arg ? ": " : "", arg ? arg : "");
    return 2;
}

int main(int argc, char **argv) {
    long mib = 0, passes = 5;
    int counts[MAX_COUNTS], ncounts = 0;
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (i + 1 >= argc) return usage("missing value or unknown option", o);
        const char *v = argv[++i];
        if (!strcmp(o, "--mib")) {
            if (parse_int(v, 1, 1L << 20, &mib)) return usage("--mib expects an integer 1..1048576, got", v);
        } else if (!strcmp(o, "--passes")) {
            if (parse_int(v, 1, MAX_PASSES, &passes)) return usage("--passes expects an integer 1..1000, got", v);
        } else if (!strcmp(o, "--threads")) {
            char tmp[256];
            if (strlen(v) >= sizeof tmp) return usage("--threads: list too long", v);
            strcpy(tmp, v);
            ncounts = 0;
            for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                long n;
                if (ncounts == MAX_COUNTS) return usage("--threads: more than 16 counts", v);
                if (parse_int(t, 1, MAX_THREADS, &n)) return usage("--threads expects counts 1..1024, got", v);
                counts[ncounts++] = (int)n;
            }
            if (!ncounts) return usage("--threads: empty list", v);
        } else {
            return usage("unknown option", o);
        }
    }
    if (!ncounts) {
        counts[ncounts++] = 1;
        if (ncpu > 1) counts[ncounts++] = (int)(ncpu < MAX_THREADS ? ncpu : MAX_THREADS);
    }
    const long long l3 = l3_bytes(ncpu);
    if (!mib) {
        mib = 512;
        if (8 * l3 / 1048576 > mib) mib = (long)(8 * l3 / 1048576);
        const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        const long long quarter = pages > 0 && psz > 0 ? (long long)pages * psz / 4 / 1048576 : 0;
        if (quarter > 0 && mib > quarter) mib = (long)quarter;
    }
    int maxt = 1;
    for (int i = 0; i < ncounts; i++) maxt = counts[i] > maxt ? counts[i] : maxt;
    /* whole groups of 4 vectors for every thread */
    const size_t unit = 4 * sizeof(v4u64) * (size_t)maxt;
    size_t bytes = (size_t)mib * 1048576 / unit * unit;
    if (!bytes) bytes = unit;
    void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        fprintf(stderr, "stream_read: cannot map a %zu-byte buffer: %s\n", bytes, strerror(errno));
        return 1;
    }
#ifdef MADV_HUGEPAGE
    madvise(mem, bytes, MADV_HUGEPAGE); /* fewer TLB misses; ignored where unsupported */
#endif
    const size_t vecs = bytes / sizeof(v4u64);
    double times[MAX_PASSES];
    if (measure(mem, vecs, maxt, 0, 1, times)) return 1; /* parallel first touch, no pass */
    printf("{\"l3_bytes\": %lld, \"buffer_bytes\": %zu, \"passes\": %ld, \"runs\": [", l3, bytes, passes);
    for (int c = 0; c < ncounts; c++) {
        if (measure(mem, vecs, counts[c], (int)passes, 0, times)) return 1;
        qsort(times, (size_t)passes, sizeof times[0], cmp_double);
        const double med = passes % 2 ? times[passes / 2] : 0.5 * (times[passes / 2 - 1] + times[passes / 2]);
        printf("%s{\"threads\": %d, \"best_s\": %.6f, \"gbps\": %.2f, \"median_gbps\": %.2f}", c ? ", " : "",
               counts[c], times[0], (double)bytes / times[0] * 1e-9, (double)bytes / med * 1e-9);
    }
    printf("]}\n");
    munmap(mem, bytes);
    return 0;
}
