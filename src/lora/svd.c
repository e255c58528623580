/*
 * svd.c — Householder QR + one-sided Jacobi SVD in double precision (method and references:
 * svd.h). Plain loops, no threads: every result is a pure function of the input.
 */
#include "lora/svd.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SVD_MAX_SWEEPS 80

/* Thin Householder QR of M [m, n] (m >= n): Q [m, n], R [n, n] (upper triangular). */
static af_status qr(const double *M, int64_t m, int64_t n, double *Q, double *R) {
    double *A = af_malloc((size_t)m * (size_t)n * sizeof(double));
    double *vs = af_malloc((size_t)m * (size_t)n * sizeof(double)); /* reflector j in vs[j*m + (j..m)] */
    double *betas = af_calloc((size_t)n, sizeof(double));
    double *tmp = af_malloc((size_t)n * sizeof(double));
    if (!A || !vs || !betas || !tmp) {
        free(A), free(vs), free(betas), free(tmp);
        return af_fail(AF_ERR_NOMEM, "svd: out of memory (QR of a %lld x %lld matrix)", (long long)m, (long long)n);
    }
    memcpy(A, M, (size_t)m * (size_t)n * sizeof(double));
    for (int64_t j = 0; j < n; j++) {
        double *v = vs + j * m;
        double nx = 0;
        for (int64_t i = j; i < m; i++) nx += A[i * n + j] * A[i * n + j];
        nx = sqrt(nx);
        if (nx == 0) continue; /* beta 0: H_j = I */
        const double x0 = A[j * n + j], alpha = x0 >= 0 ? -nx : nx; /* H x = alpha e1, no cancellation */
        for (int64_t i = j; i < m; i++) v[i] = A[i * n + j];
        v[j] = x0 - alpha;
        double vv = 0;
        for (int64_t i = j; i < m; i++) vv += v[i] * v[i];
        betas[j] = 2.0 / vv;
        /* A[j:m, j:n] -= beta v (vᵀ A[j:m, j:n]) */
        for (int64_t c = j; c < n; c++) tmp[c] = 0;
        for (int64_t i = j; i < m; i++)
            for (int64_t c = j; c < n; c++) tmp[c] += v[i] * A[i * n + c];
        for (int64_t i = j; i < m; i++)
            for (int64_t c = j; c < n; c++) A[i * n + c] -= betas[j] * v[i] * tmp[c];
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < n; c++) R[i * n + c] = c >= i ? A[i * n + c] : 0.0;
    /* Q = H_0 H_1 ... H_{n-1} [I_n; 0] */
    memset(Q, 0, (size_t)m * (size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) Q[i * n + i] = 1.0;
    for (int64_t j = n - 1; j >= 0; j--) {
        if (betas[j] == 0) continue;
        const double *v = vs + j * m;
        for (int64_t c = 0; c < n; c++) tmp[c] = 0;
        for (int64_t i = j; i < m; i++)
            for (int64_t c = 0; c < n; c++) tmp[c] += v[i] * Q[i * n + c];
        for (int64_t i = j; i < m; i++)
            for (int64_t c = 0; c < n; c++) Q[i * n + c] -= betas[j] * v[i] * tmp[c];
    }
    free(A), free(vs), free(betas), free(tmp);
    return AF_OK;
}

af_status af_qr_thin(const double *M, int64_t m, int64_t n, double *Q, double *R) {
    if (!M || !Q || !R || n < 1 || m < n) return af_fail(AF_ERR_INVALID_ARG, "qr: bad arguments (%lld x %lld)",
                                                         (long long)m, (long long)n);
    return qr(M, m, n, Q, R);
}

typedef struct sv_idx {
    double s;
    int64_t j;
} sv_idx;

static int cmp_sv(const void *a, const void *b) {
    const sv_idx *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->j > y->j) - (x->j < y->j); /* stable: equal σ keep their order */
}

/* Two doubles (SSE2, the x86-64 baseline; GCC/clang vector extension), unaligned access allowed. */
typedef double v2d __attribute__((vector_size(16), aligned(8), may_alias));

/* Dot product with four partial sums s_j over i ≡ j (mod 4), summed as (s0 + s1) + (s2 + s3): a
 * fixed order, so results are deterministic; two of them per vector. */
static double dot(const double *x, const double *y, int64_t n) {
    v2d a0 = {0, 0}, a1 = {0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a0 += *(const v2d *)(x + i) * *(const v2d *)(y + i);
        a1 += *(const v2d *)(x + i + 2) * *(const v2d *)(y + i + 2);
    }
    double s0 = a0[0];
    for (; i < n; i++) s0 += x[i] * y[i];
    return (s0 + a0[1]) + (a1[0] + a1[1]);
}

/* x <- c·x - s·y, y <- s·x + c·y (a plane rotation of two columns). */
static void rotate(double *x, double *y, int64_t n, double c, double s) {
    const v2d cv = {c, c}, sv = {s, s};
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
        const v2d xv = *(const v2d *)(x + i), yv = *(const v2d *)(y + i);
        *(v2d *)(x + i) = cv * xv - sv * yv;
        *(v2d *)(y + i) = sv * xv + cv * yv;
    }
    for (; i < n; i++) {
        const double xs = x[i], ys = y[i];
        x[i] = c * xs - s * ys;
        y[i] = s * xs + c * ys;
    }
}

/* Σ x[i]·y[i·stride] (a column of a row-major matrix). */
static double dot_strided(const double *x, const double *y, int64_t n, int64_t stride) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += x[i] * y[i * stride];
    return acc;
}

/* One-sided Jacobi on the columns of W [n, n]: W·J = W_final with orthogonal columns (unsorted),
 * J the product of the rotations. Wc, Vc (J) column-major; Vc NULL: J not accumulated. Column norms are carried through each rotation
 * (|w_p|² -= t·g, |w_q|² += t·g) and recomputed exactly at the start of every sweep. */
static af_status jacobi(double *Wc, double *Vc, int64_t n, double *nrm) {
    const double tol = DBL_EPSILON * (double)(n > 8 ? n : 8);
    if (Vc) {
        for (int64_t i = 0; i < n * n; i++) Vc[i] = 0;
        for (int64_t i = 0; i < n; i++) Vc[i * n + i] = 1;
    }
    for (int sweep = 0; sweep < SVD_MAX_SWEEPS; sweep++) {
        int rotated = 0;
        for (int64_t j = 0; j < n; j++) nrm[j] = dot(Wc + j * n, Wc + j * n, n);
        for (int64_t p = 0; p < n - 1; p++)
            for (int64_t q = p + 1; q < n; q++) {
                double *wp = Wc + p * n, *wq = Wc + q * n;
                double a = nrm[p], b = nrm[q];
                if (!(a > 0)) a = nrm[p] = dot(wp, wp, n);
                if (!(b > 0)) b = nrm[q] = dot(wq, wq, n);
                if (a == 0 || b == 0) continue;
                const double g = dot(wp, wq, n);
                if (fabs(g) <= tol * sqrt(a) * sqrt(b)) continue;
                rotated = 1;
                const double zeta = (b - a) / (2 * g);
                const double t = (zeta >= 0 ? 1.0 : -1.0) / (fabs(zeta) + hypot(1.0, zeta));
                const double c = 1.0 / sqrt(1 + t * t), s = c * t;
                rotate(wp, wq, n, c, s);
                nrm[p] = a - t * g;
                nrm[q] = b + t * g;
                if (!Vc) continue;
                rotate(Vc + p * n, Vc + q * n, n, c, s);
            }
        if (!rotated) return AF_OK;
    }
    return af_fail(AF_ERR_RANGE, "svd: one-sided Jacobi did not converge in %d sweeps (n = %lld)", SVD_MAX_SWEEPS,
                   (long long)n);
}

/* af_svd; U NULL: U is not computed (the rotations are not accumulated: about half the work).
 * Jacobi runs on W = Rᵀ (M = QR): Rᵀ·V_J = W_final, so the normalised final columns are M's RIGHT
 * singular vectors and the accumulated rotations V_J are R's left ones, U = Q·V_J. On Rᵀ rather than
 * R the cyclic sweeps converge in fewer sweeps (Rᵀ's column norms are graded like R's diagonal;
 * Drmač & Veselić 2008, "New fast and accurate Jacobi SVD algorithm I", SIAM J. Matrix Anal. Appl.
 * 29(4), §3). */
static af_status svd_core(const double *M, int64_t m, int64_t n, double *U, double *S, double *V) {
    if (!M || !V || !S || n < 1 || m < n)
        return af_fail(AF_ERR_INVALID_ARG, "af_svd: NULL argument or shape [%lld, %lld] (need m >= n >= 1)",
                       (long long)m, (long long)n);
    for (int64_t i = 0; i < m * n; i++)
        if (!isfinite(M[i]))
            return af_fail(AF_ERR_RANGE, "af_svd: non-finite entry at (%lld, %lld)", (long long)(i / n),
                           (long long)(i % n));
    const size_t nn = (size_t)n * (size_t)n;
    double *Q = af_malloc((size_t)m * (size_t)n * sizeof(double));
    double *R = af_malloc(nn * sizeof(double)), *Wc = af_malloc(nn * sizeof(double));
    double *Vc = U ? af_malloc(nn * sizeof(double)) : NULL;
    sv_idx *ord = af_malloc((size_t)n * sizeof(sv_idx));
    double *nrm = af_malloc((size_t)n * sizeof(double));
    af_status st = Q && R && Wc && (!U || Vc) && ord && nrm
                       ? AF_OK
                       : af_fail(AF_ERR_NOMEM, "af_svd: out of memory (n = %lld)", (long long)n);
    if (st == AF_OK) st = qr(M, m, n, Q, R);
    if (st == AF_OK) {
        memcpy(Wc, R, nn * sizeof(double)); /* column j of Rᵀ = row j of R */
        st = jacobi(Wc, Vc, n, nrm);
    }
    if (st == AF_OK) {
        for (int64_t j = 0; j < n; j++) ord[j] = (sv_idx){sqrt(dot(Wc + j * n, Wc + j * n, n)), j};
        qsort(ord, (size_t)n, sizeof *ord, cmp_sv);
        /* V column k = w_{ord[k]} / σ; U_R column k = the accumulated rotation column (in R's storage) */
        for (int64_t k = 0; k < n; k++) {
            const int64_t j = ord[k].j;
            const double sg = ord[k].s, inv = sg > 0 ? 1.0 / sg : 0.0;
            S[k] = sg;
            for (int64_t i = 0; i < n; i++) {
                V[i * n + k] = Wc[j * n + i] * inv;
                if (U) R[i * n + k] = Vc[j * n + i];
            }
        }
        for (int64_t i = 0; U && i < m; i++) /* U = Q · U_R */
            for (int64_t k = 0; k < n; k++) {
                double acc = 0;
                for (int64_t j = 0; j < n; j++) acc += Q[i * n + j] * R[j * n + k];
                U[i * n + k] = acc;
            }
    }
    free(Q), free(R), free(Wc), free(Vc), free(ord), free(nrm);
    return st;
}

af_status af_svd(const double *M, int64_t m, int64_t n, double *U, double *S, double *V) {
    if (!U) return af_fail(AF_ERR_INVALID_ARG, "af_svd: NULL argument");
    return svd_core(M, m, n, U, S, V);
}

af_status af_svd_lowrank(const double *M, int64_t m, int64_t n, int64_t k, double *Bout, double *Aout, double *S_out) {
    if (!M || !Bout || !Aout || m < 1 || n < 1 || k < 1)
        return af_fail(AF_ERR_INVALID_ARG, "af_svd_lowrank: NULL argument or shape [%lld, %lld], rank %lld",
                       (long long)m, (long long)n, (long long)k);
    const int tr = m < n;
    const int64_t mm = tr ? n : m, nn = tr ? m : n; /* the problem solved: [mm, nn], mm >= nn */
    double *T = tr ? af_malloc((size_t)m * (size_t)n * sizeof(double)) : NULL;
    double *V = af_malloc((size_t)nn * (size_t)nn * sizeof(double));
    double *S = af_malloc((size_t)nn * sizeof(double));
    af_status st = (!tr || T) && V && S ? AF_OK : af_fail(AF_ERR_NOMEM, "af_svd_lowrank: out of memory");
    if (st == AF_OK && tr)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) T[j * m + i] = M[i * n + j];
    /* only the right vectors V of X = M (or Mᵀ) are computed; the other side is the projection
     * X·v_c = σ_c·u_c, so Bout·Aout = X V_k V_kᵀ (or its transpose): the best rank-k approximation */
    if (st == AF_OK) st = svd_core(tr ? T : M, mm, nn, NULL, S, V);
    if (st == AF_OK) {
        memset(Bout, 0, (size_t)m * (size_t)k * sizeof(double));
        memset(Aout, 0, (size_t)k * (size_t)n * sizeof(double));
        const int64_t kk = k < nn ? k : nn;
        for (int64_t c = 0; c < kk; c++) {
            if (S_out) S_out[c] = S[c];
            if (!(S[c] > 0)) continue; /* σ = 0: a zero component */
            if (!tr) {                 /* V: M's right vectors: Aout[c, :] = vᵀ, Bout[:, c] = M v */
                for (int64_t j = 0; j < n; j++) Aout[c * n + j] = V[j * nn + c];
                for (int64_t i = 0; i < m; i++) Bout[i * k + c] = dot_strided(M + i * n, V + c, n, nn);
            } else { /* V: M's left vectors u: Bout[:, c] = σ u, Aout[c, :] = uᵀM / σ */
                for (int64_t i = 0; i < m; i++) Bout[i * k + c] = V[i * nn + c] * S[c];
                for (int64_t i = 0; i < m; i++) {
                    const double u = V[i * nn + c] / S[c];
                    for (int64_t j = 0; j < n; j++) Aout[c * n + j] += u * M[i * n + j];
                }
            }
        }
    }
    free(T), free(V), free(S);
    return st;
}

af_status af_svd_lowrank_factored(const double *Bf, const double *Af, int64_t m, int64_t n, int64_t R, int64_t k,
                                  double *Bout, double *Aout, double *S_out) {
    if (!Bf || !Af || !Bout || !Aout || m < 1 || n < 1 || R < 1 || k < 1)
        return af_fail(AF_ERR_INVALID_ARG, "af_svd_lowrank_factored: NULL argument or shape [%lld, %lld] rank %lld -> %lld",
                       (long long)m, (long long)n, (long long)R, (long long)k);
    if (R >= (m < n ? m : n)) { /* no saving: form the product */
        double *M = af_calloc((size_t)m * (size_t)n, sizeof(double));
        if (!M) return af_fail(AF_ERR_NOMEM, "af_svd_lowrank_factored: out of memory");
        for (int64_t i = 0; i < m; i++)
            for (int64_t t = 0; t < R; t++) {
                const double b = Bf[i * R + t];
                for (int64_t j = 0; j < n; j++) M[i * n + j] += b * Af[t * n + j];
            }
        af_status st = af_svd_lowrank(M, m, n, k, Bout, Aout, S_out);
        free(M);
        return st;
    }
    const size_t RR = (size_t)R * (size_t)R;
    double *QB = af_malloc((size_t)m * (size_t)R * sizeof(double)), *RB = af_malloc(RR * sizeof(double));
    double *At = af_malloc((size_t)n * (size_t)R * sizeof(double));
    double *QA = af_malloc((size_t)n * (size_t)R * sizeof(double)), *RA = af_malloc(RR * sizeof(double));
    double *C = af_malloc(RR * sizeof(double)), *Uc = af_malloc(RR * sizeof(double));
    double *Vc = af_malloc(RR * sizeof(double)), *S = af_malloc((size_t)R * sizeof(double));
    af_status st = QB && RB && At && QA && RA && C && Uc && Vc && S
                       ? AF_OK
                       : af_fail(AF_ERR_NOMEM, "af_svd_lowrank_factored: out of memory");
    if (st == AF_OK) {
        for (int64_t t = 0; t < R; t++)
            for (int64_t j = 0; j < n; j++) At[j * R + t] = Af[t * n + j];
        st = qr(Bf, m, R, QB, RB);
    }
    if (st == AF_OK) st = qr(At, n, R, QA, RA);
    if (st == AF_OK) { /* C = R_B · R_Aᵀ: Bf·Af = QB (R_B R_Aᵀ) QAᵀ */
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < R; j++) {
                double acc = 0;
                for (int64_t t = 0; t < R; t++) acc += RB[i * R + t] * RA[j * R + t];
                C[i * R + j] = acc;
            }
        st = af_svd(C, R, R, Uc, S, Vc);
    }
    if (st == AF_OK) {
        memset(Bout, 0, (size_t)m * (size_t)k * sizeof(double));
        memset(Aout, 0, (size_t)k * (size_t)n * sizeof(double));
        const int64_t kk = k < R ? k : R;
        for (int64_t c = 0; c < kk; c++) {
            for (int64_t i = 0; i < m; i++) { /* (QB Uc)[:, c] · S[c] */
                double acc = 0;
                for (int64_t t = 0; t < R; t++) acc += QB[i * R + t] * Uc[t * R + c];
                Bout[i * k + c] = acc * S[c];
            }
            for (int64_t j = 0; j < n; j++) { /* (QA Vc)[:, c]ᵀ */
                double acc = 0;
                for (int64_t t = 0; t < R; t++) acc += QA[j * R + t] * Vc[t * R + c];
                Aout[c * n + j] = acc;
            }
            if (S_out) S_out[c] = S[c];
        }
    }
    free(QB), free(RB), free(At), free(QA), free(RA), free(C), free(Uc), free(Vc), free(S);
    return st;
}
