/*
 * svd.h — a small, exact, deterministic singular value decomposition in double precision, used by
 * adapter merging (adapter_merge.c) to write a merged ΔW as a rank-r LoRA pair.
 *
 * Method (no external library; results are identical on every machine and thread count):
 *   1. Householder QR of M [m, n] (m >= n): M = Q·R, Q [m, n] with orthonormal columns, R [n, n]
 *      upper triangular (Golub & Van Loan, "Matrix Computations", 4th ed., §5.2.1).
 *   2. One-sided Jacobi SVD (Hestenes 1958; Demmel & Veselić 1992, "Jacobi's method is more
 *      accurate than QR", SIAM J. Matrix Anal. Appl. 13(4)) of Rᵀ: plane rotations applied to pairs
 *      of columns of W = Rᵀ (cyclic by rows) until every pair is orthogonal to working precision,
 *      |w_pᵀw_q| <= n·eps·|w_p|·|w_q|; then σ_j = |w_j| and v_j = w_j / σ_j are M's right singular
 *      vectors, and the accumulated rotations are R's left ones (Rᵀ rather than R: fewer sweeps,
 *      Drmač & Veselić 2008). At most 80 sweeps (11 for a random 576 x 576 matrix).
 *   3. U = Q·(the rotations), columns sorted by descending σ.
 * Cost: 2mn² (QR) + about 4·n³ per Jacobi sweep (7·n³ when U is accumulated), memory O(mn + n²)
 * doubles.
 */
#ifndef AF_SVD_H
#define AF_SVD_H

#include "core/core.h"

#include <stdint.h>

/* Thin SVD M = U·diag(S)·Vᵀ of M [m, n], row-major, m >= n >= 1 (transpose the problem otherwise).
 * Outputs (caller-allocated, row-major): U [m, n] with orthonormal columns, S [n] descending and
 * >= 0, V [n, n] with orthonormal columns (a column whose σ is exactly 0 is left 0). M is not modified.
 * Errors: AF_ERR_INVALID_ARG (NULL pointer, m < n, n < 1), AF_ERR_NOMEM, AF_ERR_RANGE (a
 * non-finite entry in M, or no convergence after 80 sweeps — never seen for finite input). */
af_status af_svd(const double *M, int64_t m, int64_t n, double *U, double *S, double *V);

/* Thin Householder QR M = Q·R of M [m, n] (m >= n >= 1; step 1 above): Q [m, n] with orthonormal columns,
 * R [n, n] upper triangular with R[j][j] = −sign(first entry of the column being reduced)·|that column|,
 * LAPACK dgeqrf's convention (so Q, R equal numpy / torch.linalg.qr's up to rounding). Errors:
 * AF_ERR_INVALID_ARG (NULL, m < n, n < 1), AF_ERR_NOMEM. */
af_status af_qr_thin(const double *M, int64_t m, int64_t n, double *Q, double *R);

/* Rank-k truncated SVD of M [m, n] of any shape, as the factors of a LoRA pair with scale 1:
 * Bout [m, k] = U_k·diag(S_k) and Aout [k, n] = V_kᵀ, so Bout·Aout is the best rank-k approximation
 * of M in Frobenius and spectral norm (Eckart–Young). Only one side's singular vectors are computed
 * (the rotations are not accumulated); the other side is the projection (M·v = σ·u). k may exceed min(m, n): the extra columns of
 * Bout and rows of Aout are 0. `S_out` (may be NULL) receives the first min(k, min(m, n)) singular
 * values (af_svd_lowrank_factored: the first min(k, R) when R < min(m, n)). Errors: those of af_svd; AF_ERR_INVALID_ARG for k < 1. */
af_status af_svd_lowrank(const double *M, int64_t m, int64_t n, int64_t k, double *Bout, double *Aout, double *S_out);

/* The same for a matrix given in factored form M = Bf·Af, Bf [m, R], Af [R, n] (as the merged ΔW of
 * LoRA adapters: R = the sum of their ranks): QR of Bf and of Afᵀ, then the SVD of the small R×R
 * core R_B·R_Aᵀ; exact (no m×n matrix is formed) and O((m + n)·R² + R³). When R >= min(m, n) the
 * product is formed and af_svd_lowrank is used. Outputs and errors as af_svd_lowrank. */
af_status af_svd_lowrank_factored(const double *Bf, const double *Af, int64_t m, int64_t n, int64_t R, int64_t k,
                                  double *Bout, double *Aout, double *S_out);

#endif /* AF_SVD_H */
