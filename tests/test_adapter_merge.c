/*
 * test_adapter_merge.c — adapter merging (af_adapter_merge, include/afinar.h) and its SVD
 * (src/lora/svd.h):
 *   - SVD: reconstruction, orthogonality of U and V, singular values against numpy's
 *     (tests/fixtures/adapter_merge/svd_ref.safetensors) and against matrices built with known ones;
 *     the factored form equals the dense one;
 *   - every case of tests/fixtures/adapter_merge/cases.json (made by tests/ref/make_merge_ref.py,
 *     NumPy; its svd / cat / ties_svd definitions checked there against PEFT's add_weighted_adapter):
 *     the written adapter's s·B·A per projection equals the reference's truncated merged ΔW, its
 *     head equals Σ w_i head_i (slerp: (1-t) W_0 + t W_1), its rank and lora_alpha are as documented, and the reported
 *     truncation error equals the reference's;
 *   - one adapter with weight 1 reproduces it; cat is exact (equals the untruncated ΔW); DARE is
 *     deterministic for a seed and changes with it;
 *   - bad inputs: one clear error each, nothing written (no output, no temporary left).
 * Tolerances (stated in the README): per projection max |ΔW_afinar - ΔW_ref| <= TOL_REL * max |ΔW_ref|
 * with TOL_REL = 1e-6 (f32 storage of B and A; the merge itself runs in double).
 */
#include "afinar.h"
#include "afinar_app.h"
#include "formats/safetensors.h"
#include "lora/svd.h"
#include "testlib.h"

#include <cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIX "tests/fixtures/adapter_merge"
#define TOL_REL 1e-6

static char g_dir[64];
static const char *const k_proj[7] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
static const char *const k_block[7] = {"self_attn", "self_attn", "self_attn", "self_attn", "mlp", "mlp", "mlp"};

static char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *s = buf[k++ % 8];
    snprintf(s, 512, "%s/%.300s", g_dir, name);
    return s;
}

static int exists(const char *p) {
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static int n_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* ---------------------------------------------------------------- SVD */

static double rnd(uint64_t *s) { return (double)tl_rand_normal(s); }

/* checks of U [m, n] S [n] V [n, n] against M [m, n]; returns the reconstruction error relative to |M|_F */
static double svd_checks(const char *what, const double *M, int64_t m, int64_t n, const double *U, const double *S,
                         const double *V, double tol) {
    double num = 0, den = 0, orth_u = 0, orth_v = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t c = 0; c < n; c++) acc += U[i * n + c] * S[c] * V[j * n + c];
            num += (acc - M[i * n + j]) * (acc - M[i * n + j]);
            den += M[i * n + j] * M[i * n + j];
        }
    for (int64_t a = 0; a < n; a++)
        for (int64_t b = 0; b < n; b++) {
            double u = 0, v = 0;
            for (int64_t i = 0; i < m; i++) u += U[i * n + a] * U[i * n + b];
            for (int64_t i = 0; i < n; i++) v += V[i * n + a] * V[i * n + b];
            const int nonzero = S[a] > 0 && S[b] > 0; /* V columns of σ = 0 are 0 */
            orth_u = fmax(orth_u, fabs(u - (a == b)));
            if (nonzero) orth_v = fmax(orth_v, fabs(v - (a == b)));
        }
    int sorted = 1;
    for (int64_t c = 1; c < n; c++) sorted &= S[c] <= S[c - 1] && S[c] >= 0;
    const double rel = sqrt(num / den);
    CHECK(rel < tol && orth_u < tol && orth_v < tol && sorted,
          "svd %s [%lld, %lld]: |M - USVᵀ|/|M| %.2e, |UᵀU - I| %.2e, |VᵀV - I| %.2e (tol %.0e), sorted %d", what,
          (long long)m, (long long)n, rel, orth_u, orth_v, tol, sorted);
    return rel;
}

static void test_svd_random(void) {
    static const int64_t shapes[][2] = {{1, 1}, {5, 1}, {6, 6}, {40, 12}, {64, 64}, {200, 30}};
    uint64_t seed = 11;
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        const int64_t m = shapes[t][0], n = shapes[t][1];
        double *M = malloc(sizeof(double) * (size_t)(m * n)), *U = malloc(sizeof(double) * (size_t)(m * n));
        double *S = malloc(sizeof(double) * (size_t)n), *V = malloc(sizeof(double) * (size_t)(n * n));
        for (int64_t i = 0; i < m * n; i++) M[i] = rnd(&seed);
        CHECK(af_svd(M, m, n, U, S, V) == AF_OK, "af_svd: %s", af_last_error());
        svd_checks("random", M, m, n, U, S, V, 1e-12);
        free(M), free(U), free(S), free(V);
    }
    /* known singular values: M = Q1 diag(s) Q2ᵀ with Q1, Q2 orthonormal (from af_svd of random matrices) */
    const int64_t m = 30, n = 10;
    double *G1 = malloc(sizeof(double) * m * n), *Q1 = malloc(sizeof(double) * m * n), *s1 = malloc(sizeof(double) * n);
    double *G2 = malloc(sizeof(double) * n * n), *Q2 = malloc(sizeof(double) * n * n), *s2 = malloc(sizeof(double) * n);
    double *V1 = malloc(sizeof(double) * n * n), *V2 = malloc(sizeof(double) * n * n);
    double *M = malloc(sizeof(double) * m * n), *U = malloc(sizeof(double) * m * n), *S = malloc(sizeof(double) * n);
    double *V = malloc(sizeof(double) * n * n);
    for (int64_t i = 0; i < m * n; i++) G1[i] = rnd(&seed);
    for (int64_t i = 0; i < n * n; i++) G2[i] = rnd(&seed);
    CHECK(af_svd(G1, m, n, Q1, s1, V1) == AF_OK && af_svd(G2, n, n, Q2, s2, V2) == AF_OK, "bases");
    double want[10];
    for (int64_t c = 0; c < n; c++) want[c] = pow(10.0, -(double)c); /* 1 .. 1e-9 */
    want[9] = 0;                                                       /* and an exact zero */
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t c = 0; c < n; c++) acc += Q1[i * n + c] * want[c] * Q2[j * n + c];
            M[i * n + j] = acc;
        }
    CHECK(af_svd(M, m, n, U, S, V) == AF_OK, "graded");
    double worst = 0;
    for (int64_t c = 0; c < n; c++) worst = fmax(worst, fabs(S[c] - want[c]));
    CHECK(worst < 1e-14, "known singular values 1 .. 1e-9, 0: max |σ - σ_true| = %.2e", worst);
    svd_checks("graded", M, m, n, U, S, V, 1e-12);
    free(G1), free(Q1), free(s1), free(G2), free(Q2), free(s2), free(V1), free(V2), free(M), free(U), free(S), free(V);

    /* bad input */
    double one = 1, nan_ = NAN, u = 0, s = 0, v = 0;
    CHECK(af_svd(&one, 1, 2, &u, &s, &v) == AF_ERR_INVALID_ARG, "m < n refused");
    CHECK(af_svd(&nan_, 1, 1, &u, &s, &v) == AF_ERR_RANGE && strstr(af_last_error(), "non-finite"), "NaN refused: %s",
          af_last_error());
}

/* numpy's singular values (svd_ref.safetensors, F64) */
static void test_svd_numpy(void) {
    af_st_file *f = NULL;
    if (!CHECK(af_st_open(FIX "/svd_ref.safetensors", &f) == AF_OK, "open svd_ref: %s", af_last_error())) return;
    static const char *const names[] = {"tall", "wide", "lowrank", "graded", "square"};
    for (size_t k = 0; k < 5; k++) {
        const af_st_tensor *t = af_st_find(f, names[k]);
        char sn[32];
        snprintf(sn, sizeof sn, "S.%s", names[k]);
        const af_st_tensor *ts = af_st_find(f, sn);
        if (!CHECK(t && ts && t->dtype == AF_ST_F64 && t->n_dims == 2, "svd_ref: %s", names[k])) continue;
        int64_t m = t->shape[0], n = t->shape[1];
        double *M = malloc(sizeof(double) * (size_t)(m * n)), *Sn = malloc(sizeof(double) * (size_t)ts->n_elem);
        memcpy(M, t->data, sizeof(double) * (size_t)(m * n));
        memcpy(Sn, ts->data, sizeof(double) * (size_t)ts->n_elem);
        const int tr = m < n;
        double *A = M;
        if (tr) { /* the SVD of Mᵀ has the same singular values */
            A = malloc(sizeof(double) * (size_t)(m * n));
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) A[j * m + i] = M[i * n + j];
            int64_t x = m;
            m = n, n = x;
        }
        double *U = malloc(sizeof(double) * (size_t)(m * n)), *S = malloc(sizeof(double) * (size_t)n);
        double *V = malloc(sizeof(double) * (size_t)(n * n));
        CHECK(af_svd(A, m, n, U, S, V) == AF_OK, "af_svd %s", names[k]);
        double worst = 0;
        for (int64_t c = 0; c < n; c++) worst = fmax(worst, fabs(S[c] - Sn[c]) / Sn[0]);
        CHECK(worst < 1e-13, "%s: singular values vs numpy: max |Δσ|/σ_1 = %.2e", names[k], worst);
        if (!strcmp(names[k], "lowrank")) svd_checks(names[k], A, m, n, U, S, V, 1e-10);
        else svd_checks(names[k], A, m, n, U, S, V, 1e-12);
        if (tr) free(A);
        free(M), free(Sn), free(U), free(S), free(V);
    }
    af_st_close(f);
}

/* the factored form B·A gives the same truncation as the dense product */
static void test_svd_factored(void) {
    uint64_t seed = 5;
    static const int64_t cases[][4] = {{24, 32, 9, 4}, {16, 24, 5, 5}, {8, 30, 12, 3}, {20, 20, 3, 6}};
    for (size_t t = 0; t < 4; t++) {
        const int64_t m = cases[t][0], n = cases[t][1], R = cases[t][2], k = cases[t][3];
        double *B = malloc(sizeof(double) * (size_t)(m * R)), *A = malloc(sizeof(double) * (size_t)(R * n));
        double *M = calloc((size_t)(m * n), sizeof(double));
        for (int64_t i = 0; i < m * R; i++) B[i] = rnd(&seed);
        for (int64_t i = 0; i < R * n; i++) A[i] = rnd(&seed);
        for (int64_t i = 0; i < m; i++)
            for (int64_t c = 0; c < R; c++)
                for (int64_t j = 0; j < n; j++) M[i * n + j] += B[i * R + c] * A[c * n + j];
        double *B1 = malloc(sizeof(double) * (size_t)(m * k)), *A1 = malloc(sizeof(double) * (size_t)(k * n));
        double *B2 = malloc(sizeof(double) * (size_t)(m * k)), *A2 = malloc(sizeof(double) * (size_t)(k * n));
        double S1[32] = {0}, S2[32] = {0};
        CHECK(af_svd_lowrank(M, m, n, k, B1, A1, S1) == AF_OK, "dense lowrank");
        CHECK(af_svd_lowrank_factored(B, A, m, n, R, k, B2, A2, S2) == AF_OK, "factored lowrank");
        double worst = 0, mx = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double x = 0, y = 0;
                for (int64_t c = 0; c < k; c++) x += B1[i * k + c] * A1[c * n + j], y += B2[i * k + c] * A2[c * n + j];
                worst = fmax(worst, fabs(x - y));
                mx = fmax(mx, fabs(M[i * n + j]));
            }
        CHECK(worst < 1e-12 * mx, "factored vs dense truncation [%lld, %lld] R %lld k %lld: max diff %.2e (max |M| %.2e)",
              (long long)m, (long long)n, (long long)R, (long long)k, worst, mx);
        if (k >= R) CHECK(worst < 1e-12 * mx, "k >= R: exact");
        free(B), free(A), free(M), free(B1), free(A1), free(B2), free(A2);
    }
}

/* ---------------------------------------------------------------- merged adapters */

typedef struct adapter_view {
    af_st_file *f;
    double scale;
    int32_t r;
    double alpha;
} adapter_view;

static int open_view(const char *dir, adapter_view *v) {
    memset(v, 0, sizeof *v);
    char p[512];
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    char *txt = tl_read_file(p, NULL);
    cJSON *c = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (!c) return 0;
    const cJSON *r = cJSON_GetObjectItem(c, "r"), *a = cJSON_GetObjectItem(c, "lora_alpha");
    const cJSON *rs = cJSON_GetObjectItem(c, "use_rslora");
    v->r = (int32_t)r->valuedouble;
    v->alpha = a->valuedouble;
    v->scale = cJSON_IsTrue(rs) ? v->alpha / sqrt(v->r) : v->alpha / v->r;
    cJSON_Delete(c);
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    return af_st_open(p, &v->f) == AF_OK;
}

/* ΔW [out, in] = s·B·A of (layer, proj) in double, or NULL when the adapter lacks it. */
static double *view_delta(const adapter_view *v, int l, int p, int64_t *out, int64_t *in) {
    char na[160], nb[160];
    snprintf(na, sizeof na, "base_model.model.model.layers.%d.%s.%s.lora_A.weight", l, k_block[p], k_proj[p]);
    snprintf(nb, sizeof nb, "base_model.model.model.layers.%d.%s.%s.lora_B.weight", l, k_block[p], k_proj[p]);
    const af_st_tensor *ta = af_st_find(v->f, na), *tb = af_st_find(v->f, nb);
    if (!ta || !tb) return NULL;
    const int64_t r = ta->shape[0];
    *in = ta->shape[1], *out = tb->shape[0];
    float *A = malloc(sizeof(float) * ta->n_elem), *B = malloc(sizeof(float) * tb->n_elem);
    af_st_read_f32(v->f, ta, A, ta->n_elem);
    af_st_read_f32(v->f, tb, B, tb->n_elem);
    double *D = calloc((size_t)(*out * *in), sizeof(double));
    for (int64_t i = 0; i < *out; i++)
        for (int64_t c = 0; c < r; c++)
            for (int64_t j = 0; j < *in; j++) D[i * *in + j] += v->scale * (double)B[i * r + c] * (double)A[c * *in + j];
    free(A), free(B);
    return D;
}

static float *read_tensor(af_st_file *f, const char *name, size_t *n) {
    const af_st_tensor *t = af_st_find(f, name);
    if (!t) return NULL;
    float *x = malloc(sizeof(float) * t->n_elem);
    af_st_read_f32(f, t, x, t->n_elem);
    if (n) *n = t->n_elem;
    return x;
}

/* Compare the merged adapter `dir` with reference tensors `ref` (prefix "layers." or "full.layers.").
 * Returns the worst error relative to each projection's max |ΔW_ref|; -1 when a projection is missing. */
static double compare_ref(const char *dir, af_st_file *ref, const char *prefix, int *n_cmp) {
    adapter_view v;
    if (!open_view(dir, &v)) return -1;
    double worst = 0;
    *n_cmp = 0;
    for (size_t i = 0; i < af_st_count(ref); i++) {
        const af_st_tensor *t = af_st_tensor_at(ref, i);
        if (strncmp(t->name, prefix, strlen(prefix)) != 0) continue;
        int l = -1;
        char pname[32] = "";
        if (sscanf(t->name + strlen(prefix), "%d.%31s", &l, pname) != 2) continue;
        int p = -1;
        for (int q = 0; q < 7; q++)
            if (!strcmp(pname, k_proj[q])) p = q;
        int64_t out = 0, in = 0;
        double *D = p >= 0 ? view_delta(&v, l, p, &out, &in) : NULL;
        if (!D || out != t->shape[0] || in != t->shape[1]) {
            free(D);
            worst = -1;
            break;
        }
        float *R = malloc(sizeof(float) * t->n_elem);
        af_st_read_f32(ref, t, R, t->n_elem);
        double mx = 0, d = 0;
        for (size_t e = 0; e < t->n_elem; e++) mx = fmax(mx, fabs(R[e]));
        for (size_t e = 0; e < t->n_elem; e++) d = fmax(d, fabs(D[e] - R[e]));
        worst = fmax(worst, d / mx);
        (*n_cmp)++;
        free(D), free(R);
    }
    af_st_close(v.f);
    return worst;
}

static void test_cases(void) {
    char *txt = tl_read_file(FIX "/cases.json", NULL);
    cJSON *root = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (!CHECK(root, "read " FIX "/cases.json (run tests/ref/make_merge_ref.py)")) return;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        af_adapter_merge_opts o;
        af_adapter_merge_opts_default(&o);
        CHECK(af_merge_method_parse(cJSON_GetObjectItem(c, "method")->valuestring, &o.method) == AF_OK, "method");
        double w[8];
        const char *dirs[8];
        int n = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "weights")) w[n++] = x->valuedouble;
        int na = 0;
        char dbuf[8][128];
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "adapters")) {
            snprintf(dbuf[na], sizeof dbuf[na], FIX "/%s", x->valuestring);
            dirs[na] = dbuf[na];
            na++;
        }
        o.weights = n ? w : NULL; /* slerp: none */
        o.n_weights = n;
        const cJSON *tj = cJSON_GetObjectItem(c, "t");
        o.t = cJSON_IsNumber(tj) ? tj->valuedouble : 0.0;
        const cJSON *pj = cJSON_GetObjectItem(c, "expect_projections");
        const int expect_proj = cJSON_IsNumber(pj) ? (int)pj->valuedouble : 6;
        o.density = cJSON_GetObjectItem(c, "density")->valuedouble;
        o.seed = (uint64_t)cJSON_GetObjectItem(c, "seed")->valuedouble;
        o.rank = (int32_t)cJSON_GetObjectItem(c, "rank")->valuedouble;
        o.majority_sign_frequency = !strcmp(cJSON_GetObjectItem(c, "majority_sign")->valuestring, "frequency");
        const int expect_rank = (int)cJSON_GetObjectItem(c, "expect_rank")->valuedouble;
        const char *out = tmp_path(name);
        af_adapter_merge_report rep;
        if (!CHECK(af_adapter_merge(dirs, na, out, &o, &rep) == AF_OK, "%s: %s", name, af_last_error())) continue;
        CHECK(rep.rank == expect_rank && rep.n_projections == expect_proj && rep.has_head,
              "%s: rank %d (want %d), %d projections (want %d)", name, rep.rank, expect_rank, rep.n_projections,
              expect_proj);
        const double want_trunc = cJSON_GetObjectItem(c, "max_truncation_rel_error")->valuedouble;
        CHECK(fabs(rep.max_rel_error - want_trunc) < 1e-5, "%s: reported truncation error %.6g, reference %.6g", name,
              rep.max_rel_error, want_trunc);
        adapter_view v;
        if (CHECK(open_view(out, &v), "%s: open output", name)) {
            CHECK(v.r == expect_rank && v.alpha == expect_rank && v.scale == 1.0, "%s: r %d lora_alpha %g", name, v.r,
                  v.alpha);
            af_st_close(v.f);
        }
        char rp[256];
        snprintf(rp, sizeof rp, FIX "/%s", cJSON_GetObjectItem(c, "ref")->valuestring);
        af_st_file *ref = NULL;
        if (!CHECK(af_st_open(rp, &ref) == AF_OK, "%s: %s", rp, af_last_error())) continue;
        int n_cmp = 0;
        const double err = compare_ref(out, ref, "layers.", &n_cmp);
        CHECK(err >= 0 && err <= TOL_REL && n_cmp == expect_proj,
              "%s: s·B·A vs the NumPy reference: max |Δ| / max |ΔW_ref| = %.2e over %d projections (tol %.0e)", name,
              err, n_cmp, TOL_REL);
        printf("  %-16s rank %d: max |ΔW_afinar - ΔW_ref| / max |ΔW_ref| = %.2e; truncation error %.3g\n", name,
               rep.rank, err, rep.max_rel_error);
        if (o.method == AF_MERGE_CAT) { /* exact: equals the untruncated merged ΔW */
            const double e2 = compare_ref(out, ref, "full.layers.", &n_cmp);
            CHECK(e2 >= 0 && e2 <= TOL_REL && rep.max_rel_error == 0, "cat is exact: vs the full ΔW %.2e", e2);
        }
        /* head: Σ w_i head_i */
        char hp[300];
        snprintf(hp, sizeof hp, "%s/adapter_model.safetensors", out);
        af_st_file *of = NULL;
        if (CHECK(af_st_open(hp, &of) == AF_OK, "open merged weights")) {
            size_t nw = 0, nr = 0, nb = 0, nrb = 0;
            float *hw = read_tensor(of, "base_model.model.score.weight", &nw), *rw = read_tensor(ref, "head.weight", &nr);
            float *hb = read_tensor(of, "base_model.model.score.bias", &nb), *rb = read_tensor(ref, "head.bias", &nrb);
            CHECK(hw && rw && nw == nr && hb && rb && nb == nrb, "%s: merged head weight and bias written", name);
            if (hw && rw && nw == nr) CHECK_CLOSE("head weight", hw, rw, nw, 1e-6, 1e-6);
            if (hb && rb && nb == nrb) CHECK_CLOSE("head bias", hb, rb, nb, 1e-6, 1e-6);
            free(hw), free(rw), free(hb), free(rb);
            af_st_close(of);
        }
        af_st_close(ref);
        /* afinar.json records the merge and keeps the labels */
        char jp[300];
        snprintf(jp, sizeof jp, "%s/afinar.json", out);
        char *aj = tl_read_file(jp, NULL);
        CHECK(aj && strstr(aj, "\"merge\"") && strstr(aj, "\"neg\"") && strstr(aj, "\"architecture\":\t\"llama\""),
              "%s: afinar.json with the merge record and labels", name);
        free(aj);
    }
    cJSON_Delete(root);
}

/* One adapter, weight 1: the same ΔW; DARE determinism. */
static void test_identity_and_seed(void) {
    const char *dirs[3] = {FIX "/a0", FIX "/a1", FIX "/a2"};
    static const af_merge_method ms[] = {AF_MERGE_LINEAR, AF_MERGE_CAT, AF_MERGE_TIES, AF_MERGE_DARE_LINEAR};
    for (int i = 0; i < 3; i++)
        for (size_t k = 0; k < 4; k++) {
            af_adapter_merge_opts o;
            af_adapter_merge_opts_default(&o);
            o.method = ms[k];
            if (k >= 2) o.density = 1.0; /* density 1 prunes nothing */
            char nm[32];
            snprintf(nm, sizeof nm, "id%d_%zu", i, k);
            const char *out = tmp_path(nm);
            if (!CHECK(af_adapter_merge(&dirs[i], 1, out, &o, NULL) == AF_OK, "identity %s: %s", nm, af_last_error()))
                continue;
            adapter_view a, b;
            if (!CHECK(open_view(dirs[i], &a) && open_view(out, &b), "open")) continue;
            double worst = 0;
            int n = 0;
            for (int l = 0; l < 2; l++)
                for (int p = 0; p < 7; p++) {
                    int64_t o1 = 0, i1 = 0, o2 = 0, i2 = 0;
                    double *D1 = view_delta(&a, l, p, &o1, &i1), *D2 = view_delta(&b, l, p, &o2, &i2);
                    CHECK(!D1 == !D2, "identity %s: layer %d %s present in both or neither", nm, l, k_proj[p]);
                    if (D1 && D2 && o1 == o2 && i1 == i2) {
                        double mx = 0, d = 0;
                        for (int64_t e = 0; e < o1 * i1; e++) mx = fmax(mx, fabs(D1[e])), d = fmax(d, fabs(D1[e] - D2[e]));
                        worst = fmax(worst, d / mx);
                        n++;
                    }
                    free(D1), free(D2);
                }
            CHECK(n > 0 && worst <= TOL_REL && b.r == a.r, "one adapter, weight 1 (%s of a%d): ΔW reproduced to %.2e, r %d",
                  af_merge_method_name(ms[k]), i, worst, b.r);
            af_st_close(a.f), af_st_close(b.f);
        }
    /* DARE: same seed -> identical files; another seed -> different */
    char *files[4] = {0};
    size_t sizes[4] = {0};
    for (int t = 0; t < 4; t++) { /* seeds 42, 42, 43, then 42 on 1 thread (others: one per projection) */
        af_adapter_merge_opts o;
        af_adapter_merge_opts_default(&o);
        o.method = AF_MERGE_DARE_TIES;
        o.density = 0.5;
        o.seed = t == 2 ? 43 : 42;
        o.n_threads = t == 3 ? 1 : 8;
        char nm[32];
        snprintf(nm, sizeof nm, "dare_seed%d", t);
        CHECK(af_adapter_merge(dirs, 3, tmp_path(nm), &o, NULL) == AF_OK, "dare: %s", af_last_error());
        char p[300];
        snprintf(p, sizeof p, "%s/adapter_model.safetensors", tmp_path(nm));
        files[t] = tl_read_file(p, &sizes[t]);
    }
    CHECK(files[0] && files[1] && sizes[0] == sizes[1] && memcmp(files[0], files[1], sizes[0]) == 0,
          "DARE: the same seed gives the same adapter");
    CHECK(files[0] && files[2] && sizes[0] == sizes[2] && memcmp(files[0], files[2], sizes[0]) != 0,
          "DARE: another seed, another adapter");
    CHECK(files[0] && files[3] && sizes[0] == sizes[3] && memcmp(files[0], files[3], sizes[0]) == 0,
          "the same adapter on 1 thread and on 8");
    for (int t = 0; t < 4; t++) free(files[t]);
}

/* Bad inputs: the message, and nothing written. */
static void expect_fail(const char *what, const char *const *dirs, int n, const char *out, const af_adapter_merge_opts *o,
                        af_status want, const char *needle) {
    const int had = exists(out);
    const int before = n_entries(g_dir);
    af_status st = af_adapter_merge(dirs, n, out, o, NULL);
    CHECK(st == want && strstr(af_last_error(), needle), "%s: %s (want %s) '%s', want a message with '%s'", what,
          af_status_name(st), af_status_name(want), af_last_error(), needle);
    CHECK(had || !exists(out), "%s: output %s written after a failure", what, out);
    CHECK(n_entries(g_dir) == before, "%s: %d entries in the work directory, %d before (a temporary left?)", what,
          n_entries(g_dir), before);
}

static void test_bad_inputs(void) {
    const char *good[3] = {FIX "/a0", FIX "/a1", FIX "/a2"};
    af_adapter_merge_opts o;
    af_adapter_merge_opts_default(&o);
    const char *out = tmp_path("bad_out");
    const char *d_shape[2] = {FIX "/a0", FIX "/bad_shape"}, *d_labels[2] = {FIX "/a0", FIX "/bad_labels"};
    const char *d_arch[2] = {FIX "/a0", FIX "/bad_arch"}, *d_nohead[2] = {FIX "/a0", FIX "/no_head"};
    const char *d_missing[2] = {FIX "/a0", FIX "/nope"};
    expect_fail("shape", d_shape, 2, out, &o, AF_ERR_INVALID_ARG, "layer 0 q_proj is [24, 20] (out, in), but [24, 24]");
    expect_fail("labels", d_labels, 2, out, &o, AF_ERR_INVALID_ARG, "same label set");
    expect_fail("architecture", d_arch, 2, out, &o, AF_ERR_INVALID_ARG, "architecture \"gemma3\"");
    expect_fail("head in one only", d_nohead, 2, out, &o, AF_ERR_INVALID_ARG, "no classification head");
    expect_fail("missing adapter", d_missing, 2, out, &o, AF_ERR_IO, FIX "/nope/adapter_config.json: cannot open");
    { /* adapter_config.json's r does not match the tensors: refused before sizes are derived from it */
        mkdir(tmp_path("bad_r"), 0777);
        static const char *const files[3] = {"adapter_config.json", "adapter_model.safetensors", "afinar.json"};
        for (int i = 0; i < 3; i++) {
            char src[256];
            snprintf(src, sizeof src, FIX "/a0/%s", files[i]);
            size_t len = 0;
            char *b = tl_read_file(src, &len), *r4 = b && i == 0 ? strstr(b, "\"r\": 4,") : NULL;
            char dst[600];
            snprintf(dst, sizeof dst, "%s/%s", tmp_path("bad_r"), files[i]);
            FILE *f = fopen(dst, "wb");
            if (f && b && r4) fprintf(f, "%.*s\"r\": 1000,%s", (int)(r4 - b), b, r4 + strlen("\"r\": 4,"));
            else if (f && b) fwrite(b, 1, len, f);
            if (f) fclose(f);
            CHECK(b && (i != 0 || r4), "bad_r: %s", files[i]);
            free(b);
        }
        const char *d_r[2] = {FIX "/a0", tmp_path("bad_r")};
        expect_fail("config r != tensor rank", d_r, 2, out, &o, AF_ERR_FORMAT, "shape [4, 24], expected [r, in] with r = 1000");
    }
    double w2[2] = {1, 1};
    o.weights = w2, o.n_weights = 2;
    expect_fail("weights count", good, 3, out, &o, AF_ERR_INVALID_ARG, "2 weights for 3 adapters");
    o.weights = NULL, o.n_weights = 0;
    o.method = AF_MERGE_TIES;
    expect_fail("density missing", good, 3, out, &o, AF_ERR_INVALID_ARG, "density is required");
    o.density = 1.5;
    expect_fail("density > 1", good, 3, out, &o, AF_ERR_INVALID_ARG, "in (0, 1]");
    o.method = AF_MERGE_LINEAR;
    o.density = 0.5;
    expect_fail("density for linear", good, 3, out, &o, AF_ERR_INVALID_ARG, "density does not apply");
    o.density = 0;
    o.rank = 17;
    expect_fail("rank too large", good, 3, out, &o, AF_ERR_INVALID_ARG, "rank 17 is above min(out, in) = 16 of layer 0 v_proj");
    o.method = AF_MERGE_CAT;
    o.rank = 4;
    expect_fail("cat rank", good, 3, out, &o, AF_ERR_INVALID_ARG, "cat's rank is the sum of the ranks, 9");
    o.method = (af_merge_method)99;
    o.rank = 0;
    expect_fail("method", good, 3, out, &o, AF_ERR_INVALID_ARG, "unknown method");
    af_merge_method m;
    CHECK(af_merge_method_parse("slurp", &m) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "'slurp'") &&
              strstr(af_last_error(), "slerp"),
          "unknown method named, slerp listed: %s", af_last_error());
    CHECK(af_merge_method_parse("slerp", &m) == AF_OK && m == AF_MERGE_SLERP, "slerp parsed");
    /* slerp: two adapters, no weights, t in [0, 1]; t only with slerp */
    o.method = AF_MERGE_SLERP;
    o.t = 0.5;
    expect_fail("slerp of 3", good, 3, out, &o, AF_ERR_INVALID_ARG, "exactly 2 adapters (3 given)");
    o.weights = w2, o.n_weights = 2;
    expect_fail("slerp weights", good, 2, out, &o, AF_ERR_INVALID_ARG, "slerp takes no weights");
    o.weights = NULL, o.n_weights = 0;
    o.t = 1.5;
    expect_fail("slerp t", good, 2, out, &o, AF_ERR_INVALID_ARG, "t = 1.5 must be in [0, 1]");
    o.method = AF_MERGE_LINEAR;
    expect_fail("t without slerp", good, 2, out, &o, AF_ERR_INVALID_ARG, "t applies to slerp only");
    o.t = 0;
    CHECK(af_merge_method_parse("dare_ties", &m) == AF_OK && m == AF_MERGE_DARE_TIES, "dare_ties spelling");
    { /* a trailing '/' on the output: the temporary is still a sibling, the result in place */
        af_adapter_merge_opts_default(&o);
        char slash[600];
        snprintf(slash, sizeof slash, "%s/", tmp_path("slash"));
        CHECK(af_adapter_merge(good, 3, slash, &o, NULL) == AF_OK && exists(tmp_path("slash/adapter_config.json")),
              "output with a trailing slash: %s", af_last_error());
    }
    /* output exists: refused without overwrite, replaced with it; a non-adapter directory never */
    af_adapter_merge_opts_default(&o);
    const char *dst = tmp_path("exists");
    CHECK(af_adapter_merge(good, 3, dst, &o, NULL) == AF_OK, "first merge: %s", af_last_error());
    char cfg[300];
    snprintf(cfg, sizeof cfg, "%s/adapter_config.json", dst);
    char *before = tl_read_file(cfg, NULL);
    expect_fail("output exists", good, 3, dst, &o, AF_ERR_IO, "exists (--overwrite replaces an adapter directory)");
    char *after = tl_read_file(cfg, NULL);
    CHECK(before && after && !strcmp(before, after), "refused merge left the existing output as it was");
    free(after);
    o.overwrite = 1;
    o.rank = 2;
    CHECK(af_adapter_merge(good, 3, dst, &o, NULL) == AF_OK, "overwrite: %s", af_last_error());
    after = tl_read_file(cfg, NULL);
    CHECK(after && strstr(after, "\"r\":\t2"), "overwrite replaced the adapter (r 2)");
    free(before), free(after);
    mkdir(tmp_path("notadapter"), 0777);
    FILE *f = fopen(tmp_path("notadapter/keep.txt"), "w");
    if (f) fputs("keep", f), fclose(f);
    expect_fail("overwrite a non-adapter", good, 3, tmp_path("notadapter"), &o, AF_ERR_IO, "is not an adapter directory");
    CHECK(exists(tmp_path("notadapter/keep.txt")), "non-adapter directory kept");
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/af_merge_XXXXXX");
    if (!mkdtemp(g_dir)) {
        CHECK(0, "mkdtemp");
        return tl_finish("adapter_merge");
    }
    test_svd_random();
    test_svd_numpy();
    test_svd_factored();
    test_cases();
    test_identity_and_seed();
    test_bad_inputs();
    DIR *d = opendir(g_dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        rm_dir(tmp_path(e->d_name));
    }
    if (d) closedir(d);
    rmdir(g_dir);
    return tl_finish("adapter_merge");
}
