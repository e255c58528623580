/* kernels.c — the CPU dispatch tables (kernels.h): one per ISA, assembled from the per-file parts. */
#include "kernels/cpu/kernels.h"

#include "kernels/cpu/attention_gemm.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/gemm_packed.h"

void af_kernels_thread_release(void) {
    af_gp_release();
    af_att_gemm_release();
    af_lora_ops_release();
}

static const af_kernels k_scalar = {"scalar", AF_KPATH_SCALAR, &af_mm_ops_scalar, NULL,
                                    &af_ops_rows_scalar, &af_att_rows_scalar, NULL, NULL};
#if defined(__x86_64__)
static const af_kernels k_avx2 = {"avx2", AF_KPATH_AVX2, &af_mm_ops_avx2, NULL,
                                  &af_ops_rows_avx2, &af_att_rows_avx2, &af_ag_rows_avx2, NULL};
static const af_kernels k_avx512 = {"avx512", AF_KPATH_AVX512, &af_mm_ops_avx512, &af_gp_bf16_ops_avx512,
                                    &af_ops_rows_avx512, &af_att_rows_avx512, &af_ag_rows_avx512,
                                    &af_gp_i8_ops_avx512};
static const af_kernels k_avx512_amx = {"avx512", AF_KPATH_AVX512, &af_mm_ops_avx512, &af_gp_bf16_ops_amx,
                                        &af_ops_rows_avx512, &af_att_rows_avx512, &af_ag_rows_avx512,
                                        &af_gp_i8_ops_amx};
static const af_kernels k_avx512_novnni = {"avx512", AF_KPATH_AVX512, &af_mm_ops_avx512_novnni,
                                           &af_gp_bf16_ops_avx512, &af_ops_rows_avx512, &af_att_rows_avx512,
                                           &af_ag_rows_avx512, NULL};
#endif

const af_kernels *af_kernels_for(af_kpath path) {
#if defined(__x86_64__)
    if (path == AF_KPATH_AVX512)
        return af_cpu()->amx_ready ? &k_avx512_amx : af_cpu()->avx512_vnni ? &k_avx512 : &k_avx512_novnni;
    if (path == AF_KPATH_AVX2) return &k_avx2;
#endif
    (void)path;
    return &k_scalar;
}
