/*
 * adapter_merge.c — merge LoRA adapters on their ΔW = s·B·A (af_adapter_merge, include/afinar_app.h
 * "Adapter merging": the methods, their sources in PEFT and the RNG of DARE are documented there).
 *
 * Steps: each input directory is read against a layout built from its own tensor shapes (no model
 * needed) with af_adapter_load (every check of that loader applies) and the inputs are checked
 * against each other (adapter_merge_inputs.c); each adapted (layer, projection) is merged in double precision and written as a
 * rank-r pair (svd.h); the result is saved with af_adapter_save into a temporary directory that is
 * renamed into place.
 */
#include "afinar_app.h"
#include "lora/adapter_io.h"
#include "lora/lora.h"
#include "lora/svd.h"
#include "app/adapter_merge_inputs.h"

#include "core/fsutil.h"
#include "core/threadpool.h"
#include "formats/manifest.h"
#include "formats/safetensors.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const k_methods[AF_MERGE_METHOD_COUNT] = {"linear",      "svd",         "cat",
                                                             "ties",        "dare-ties",   "dare-linear",
                                                             "magnitude-prune", "slerp"};

const char *af_merge_method_name(af_merge_method m) {
    return (m >= 0 && m < AF_MERGE_METHOD_COUNT) ? k_methods[m] : "unknown";
}

af_status af_merge_method_parse(const char *name, af_merge_method *out) {
    if (!name || !out) return af_fail(AF_ERR_INVALID_ARG, "af_merge_method_parse: NULL argument");
    for (int m = 0; m < AF_MERGE_METHOD_COUNT; m++) {
        const char *k = k_methods[m];
        size_t i = 0;
        for (; k[i] && name[i]; i++)
            if (!(name[i] == k[i] || (k[i] == '-' && name[i] == '_'))) break;
        if (!k[i] && !name[i]) {
            *out = (af_merge_method)m;
            return AF_OK;
        }
    }
    return af_fail(AF_ERR_INVALID_ARG,
                   "unknown merge method '%s' (linear, svd, cat, ties, dare-ties, dare-linear, magnitude-prune, slerp)", name);
}

void af_adapter_merge_opts_default(af_adapter_merge_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->method = AF_MERGE_LINEAR;
}

static int uses_density(af_merge_method m) {
    return m == AF_MERGE_TIES || m == AF_MERGE_DARE_TIES || m == AF_MERGE_DARE_LINEAR || m == AF_MERGE_MAGNITUDE_PRUNE;
}
static int is_factored(af_merge_method m) {
    return m == AF_MERGE_LINEAR || m == AF_MERGE_SVD || m == AF_MERGE_CAT || m == AF_MERGE_SLERP;
}

/* ---------------------------------------------------------------- the methods on dense ΔW */

typedef struct absidx {
    double a;
    int64_t i;
} absidx;

static int cmp_absidx(const void *x, const void *y) {
    const absidx *p = x, *q = y;
    if (p->a != q->a) return p->a > q->a ? -1 : 1;
    return (p->i > q->i) - (p->i < q->i);
}

/* Keep the k = floor(density·N) largest |D| (ties: lowest index first), zero the rest. */
static af_status magnitude_prune(double *D, int64_t N, double density, absidx *scratch) {
    if (density >= 1) return AF_OK;
    const int64_t k = (int64_t)(density * (double)N);
    for (int64_t i = 0; i < N; i++) scratch[i] = (absidx){fabs(D[i]), i};
    qsort(scratch, (size_t)N, sizeof *scratch, cmp_absidx);
    for (int64_t t = k; t < N; t++) D[scratch[t].i] = 0;
    return AF_OK;
}

/* DARE: keep entry e when af_ctr_u01(key, e) < density, rescale kept entries by 1/density. */
static void random_prune(double *D, int64_t N, double density, uint64_t seed, int32_t layer, int proj, int32_t adapter) {
    if (density >= 1) return;
    const uint64_t key = af_ctr_key(seed, (uint64_t)layer, (uint64_t)proj, (uint64_t)adapter);
    for (int64_t e = 0; e < N; e++) D[e] = (double)af_ctr_u01(key, (uint64_t)e) < density ? D[e] / density : 0.0;
}

static double sgn(double x) { return (x > 0) - (x < 0); }

/* ---------------------------------------------------------------- output directory */

/* Remove the plain files of `dir`, then `dir` (our temporary or a replaced adapter directory). */
static void rm_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *p = af_path_join(dir, e->d_name);
        if (p) unlink(p);
        free(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* An existing output: allowed only with overwrite, and only an adapter directory (adapter_config.json,
 * no sub-directory), so --overwrite never deletes anything else. */
static af_status check_output(const char *out, int overwrite) {
    struct stat sb;
    if (lstat(out, &sb) != 0) return AF_OK;
    if (!overwrite) return af_fail(AF_ERR_IO, "%s: exists (--overwrite replaces an adapter directory)", out);
    if (!S_ISDIR(sb.st_mode)) return af_fail(AF_ERR_IO, "%s: exists and is not a directory; not replaced", out);
    char *cfg = af_path_join(out, AF_ADAPTER_CONFIG_FILE);
    int has_cfg = cfg && stat(cfg, &sb) == 0;
    free(cfg);
    int has_sub = 0;
    DIR *d = opendir(out);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *p = af_path_join(out, e->d_name);
        if (p && lstat(p, &sb) == 0 && !S_ISREG(sb.st_mode)) has_sub = 1;
        free(p);
    }
    if (d) closedir(d);
    if (!has_cfg || has_sub)
        return af_fail(AF_ERR_IO, "%s: exists and is not an adapter directory (%s); not replaced", out,
                       has_cfg ? "it holds sub-directories" : "no adapter_config.json");
    return AF_OK;
}

/* "<parent>/.<base>.<tag>-<pid>" */
static char *sibling(const char *out, const char *tag) {
    const char *slash = strrchr(out, '/');
    size_t plen = slash ? (size_t)(slash - out + 1) : 0;
    const char *base = slash ? slash + 1 : out;
    size_t n = strlen(out) + strlen(tag) + 40;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%.*s.%s.%s-%ld", (int)plen, out, base, tag, (long)getpid());
    return s;
}

/* ---------------------------------------------------------------- the merge */

typedef struct merge_job {
    const in_adapter *a;
    int32_t n;
    const double *w;
    const af_adapter_merge_opts *o;
    int32_t rank;
    const af_param_layout *lay; /* the output */
    float *P;
    int32_t *slots;             /* [n_proj] layer * AF_PROJ_COUNT + proj */
    double *rel;                /* [n_proj] truncation errors */
    af_status *st;              /* [n_proj] */
    char **msg;                 /* [n_proj] the message of a failed projection (malloc'ed) */
} merge_job;

/* <ΔW_x, ΔW_y>_F of slot (l, p) of adapters x and y from their factors: s_x s_y Σ_ab (B_xᵀB_y)_ab (A_x A_yᵀ)_ab
 * (0 when either lacks the slot). */
static double delta_dot(const in_adapter *x, const in_adapter *y, int32_t l, int p) {
    if (l >= x->lay.n_layers || l >= y->lay.n_layers) return 0;
    const af_lora_slot *sx = af_lora_slot_at(&x->lay, l, (af_proj)p), *sy = af_lora_slot_at(&y->lay, l, (af_proj)p);
    if (sx->a_off < 0 || sy->a_off < 0) return 0;
    const int32_t rx = x->lay.lora.r, ry = y->lay.lora.r;
    const float *Bx = x->P + sx->b_off, *By = y->P + sy->b_off, *Ax = x->P + sx->a_off, *Ay = y->P + sy->a_off;
    double sum = 0;
    for (int32_t a = 0; a < rx; a++)
        for (int32_t b = 0; b < ry; b++) {
            double g1 = 0, g2 = 0;
            for (int64_t i = 0; i < sx->out; i++) g1 += (double)Bx[i * rx + a] * By[i * ry + b];
            for (int64_t j = 0; j < sx->in; j++) g2 += (double)Ax[a * sx->in + j] * Ay[b * sy->in + j];
            sum += g1 * g2;
        }
    return sum * x->scale * y->scale;
}

/* The slerp weights (c0, c1) of slot (l, p) for the two adapters a[0], a[1] (af_adapter_merge, "slerp"). */
static void slerp_weights(const in_adapter *a, int32_t l, int p, double t, double c[2]) {
    const double eps = 1e-8, thr = 0.9995;
    const double n0 = sqrt(fmax(0.0, delta_dot(&a[0], &a[0], l, p))), n1 = sqrt(fmax(0.0, delta_dot(&a[1], &a[1], l, p)));
    double d = delta_dot(&a[0], &a[1], l, p);
    d /= (n0 > eps ? n0 : 1.0) * (n1 > eps ? n1 : 1.0);
    if (fabs(d) > thr) {
        c[0] = 1.0 - t, c[1] = t;
        return;
    }
    const double th = acos(d), st = sin(th);
    c[0] = sin((1.0 - t) * th) / st;
    c[1] = sin(t * th) / st;
}

/* One projection (l, p) being merged: its shape [out, in], the output rank k, the contributing
 * adapters idx[m] with R ranks in all, their weights (slerp: this projection's two coefficients). */
typedef struct slot_merge {
    const merge_job *J;
    int32_t l;
    int p;
    int64_t out, in, k, R;
    int32_t idx[256], m;
    const double *wts;
} slot_merge;

/* cat, exact: A rows w_i s_i A_i, B columns B_i, zero-padded to the rank. */
static void merge_cat(const slot_merge *S, float *Bo, float *Ao) {
    const int64_t in = S->in, out = S->out, k = S->k;
    memset(Bo, 0, (size_t)(out * k) * sizeof(float));
    memset(Ao, 0, (size_t)(k * in) * sizeof(float));
    int64_t c0 = 0;
    for (int32_t t = 0; t < S->m; t++) {
        const in_adapter *x = &S->J->a[S->idx[t]];
        const af_lora_slot *s = af_lora_slot_at(&x->lay, S->l, (af_proj)S->p);
        const int32_t r = x->lay.lora.r;
        const double f = S->J->w[S->idx[t]] * (double)x->scale;
        for (int32_t c = 0; c < r; c++) {
            for (int64_t j = 0; j < in; j++) Ao[(c0 + c) * in + j] = (float)(f * x->P[s->a_off + c * in + j]);
            for (int64_t i = 0; i < out; i++) Bo[i * k + c0 + c] = x->P[s->b_off + i * r + c];
        }
        c0 += r;
    }
}

/* linear / svd / slerp: the weighted factors stacked (Bf [out, R], Af [R, in]), |Bf·Af|_F² into
 * *norm2, the rank-k SVD of Bf·Af from the factors into Bd, Ad, S (*ns singular values). */
static af_status merge_factored(const slot_merge *S, double *Bd, double *Ad, double *Sv, double *norm2, int64_t *ns) {
    const int64_t in = S->in, out = S->out, R = S->R, k = S->k;
    double *Bf = af_malloc((size_t)(out * R) * sizeof(double)), *Af = af_malloc((size_t)(R * in) * sizeof(double));
    af_status st = Bf && Af ? AF_OK : af_fail(AF_ERR_NOMEM, "merge: out of memory");
    int64_t c0 = 0;
    for (int32_t t = 0; st == AF_OK && t < S->m; t++) {
        const in_adapter *x = &S->J->a[S->idx[t]];
        const af_lora_slot *s = af_lora_slot_at(&x->lay, S->l, (af_proj)S->p);
        const int32_t r = x->lay.lora.r;
        const double f = S->wts[S->idx[t]] * (double)x->scale;
        for (int32_t c = 0; c < r; c++) {
            for (int64_t j = 0; j < in; j++) Af[(c0 + c) * in + j] = f * x->P[s->a_off + c * in + j];
            for (int64_t i = 0; i < out; i++) Bf[i * R + c0 + c] = x->P[s->b_off + i * r + c];
        }
        c0 += r;
    }
    if (st == AF_OK) { /* |Bf·Af|_F² = Σ (BfᵀBf) ∘ (Af·Afᵀ) */
        for (int64_t a = 0; a < R; a++)
            for (int64_t b = 0; b < R; b++) {
                double g1 = 0, g2 = 0;
                for (int64_t i = 0; i < out; i++) g1 += Bf[i * R + a] * Bf[i * R + b];
                for (int64_t j = 0; j < in; j++) g2 += Af[a * in + j] * Af[b * in + j];
                *norm2 += g1 * g2;
            }
        st = af_svd_lowrank_factored(Bf, Af, out, in, R, k, Bd, Ad, Sv);
        *ns = k < R ? k : R;
        const int64_t mn = out < in ? out : in;
        if (*ns > mn) *ns = mn;
    }
    free(Bf), free(Af);
    return st;
}

/* ties / dare / magnitude-prune: each adapter's dense ΔW_t = s B A pruned (by magnitude or at
 * random), combined (ties: by the elected sign), |ΔW|_F² into *norm2, its rank-k SVD into Bd, Ad,
 * S (*ns singular values). */
static af_status merge_dense(const slot_merge *S, double *Bd, double *Ad, double *Sv, double *norm2, int64_t *ns) {
    const af_adapter_merge_opts *o = S->J->o;
    const int64_t in = S->in, out = S->out, k = S->k, N = out * in;
    const int32_t m = S->m;
    const int by_magnitude = o->method == AF_MERGE_TIES || o->method == AF_MERGE_MAGNITUDE_PRUNE;
    double *M = af_calloc((size_t)N, sizeof(double)), *D = af_malloc((size_t)m * (size_t)N * sizeof(double));
    absidx *scr = by_magnitude ? af_malloc((size_t)N * sizeof(absidx)) : NULL;
    af_status st = AF_OK;
    if (!M || !D || (!scr && by_magnitude))
        st = af_fail(AF_ERR_NOMEM, "merge: out of memory (%d dense [%lld, %lld] matrices)", m + 1, (long long)out,
                     (long long)in);
    for (int32_t t = 0; st == AF_OK && t < m; t++) { /* D_t = s B A, then pruned */
        const in_adapter *x = &S->J->a[S->idx[t]];
        const af_lora_slot *s = af_lora_slot_at(&x->lay, S->l, (af_proj)S->p);
        const int32_t r = x->lay.lora.r;
        double *Dt = D + (size_t)t * (size_t)N;
        memset(Dt, 0, (size_t)N * sizeof(double));
        for (int64_t i = 0; i < out; i++)
            for (int32_t c = 0; c < r; c++) {
                const double b = (double)x->scale * x->P[s->b_off + i * r + c];
                const float *ar = x->P + s->a_off + c * in;
                for (int64_t j = 0; j < in; j++) Dt[i * in + j] += b * ar[j];
            }
        if (by_magnitude) st = magnitude_prune(Dt, N, o->density, scr);
        else random_prune(Dt, N, o->density, o->seed, S->l, S->p, S->idx[t]);
    }
    if (st == AF_OK && (o->method == AF_MERGE_TIES || o->method == AF_MERGE_DARE_TIES)) {
        for (int64_t e = 0; e < N; e++) {
            double tot = 0;
            for (int32_t t = 0; t < m; t++) {
                const double v = D[(size_t)t * (size_t)N + (size_t)e];
                tot += o->majority_sign_frequency ? sgn(v) : v;
            }
            const double el = tot >= 0 ? 1.0 : -1.0;
            double num = 0, cnt = 0;
            for (int32_t t = 0; t < m; t++) {
                const double v = D[(size_t)t * (size_t)N + (size_t)e];
                if (sgn(v) == el) num += S->J->w[S->idx[t]] * v, cnt += 1;
            }
            M[e] = num / (cnt > 1 ? cnt : 1);
        }
    } else if (st == AF_OK) {
        for (int32_t t = 0; t < m; t++)
            for (int64_t e = 0; e < N; e++) M[e] += S->J->w[S->idx[t]] * D[(size_t)t * (size_t)N + (size_t)e];
    }
    if (st == AF_OK) {
        for (int64_t e = 0; e < N; e++) *norm2 += M[e] * M[e];
        st = af_svd_lowrank(M, out, in, k, Bd, Ad, Sv);
        *ns = k < (out < in ? out : in) ? k : (out < in ? out : in);
    }
    free(M), free(D), free(scr);
    return st;
}

/* Merge slot (l, p) of the inputs into Bo [out, rank], Ao [rank, in] (float, into the output P);
 * *rel receives |ΔW - Bo·Ao|_F / |ΔW|_F. */
static af_status merge_slot(const merge_job *J, int32_t l, int p, int64_t out, int64_t in, float *Bo, float *Ao,
                            double *rel) {
    const af_adapter_merge_opts *o = J->o;
    slot_merge S;
    S.J = J, S.l = l, S.p = p, S.out = out, S.in = in, S.k = J->rank, S.R = 0, S.m = 0; /* contributing adapters */
    double wsl[2];
    S.wts = J->w; /* per adapter; slerp: this projection's two coefficients */
    if (o->method == AF_MERGE_SLERP) {
        slerp_weights(J->a, l, p, o->t, wsl);
        S.wts = wsl;
    }
    for (int32_t i = 0; i < J->n; i++) {
        const af_param_layout *lay = &J->a[i].lay;
        if (l < lay->n_layers && af_lora_slot_at(lay, l, (af_proj)p)->a_off >= 0) {
            S.idx[S.m++] = i;
            S.R += lay->lora.r;
        }
    }
    *rel = 0;
    if (J->o->method == AF_MERGE_CAT) {
        merge_cat(&S, Bo, Ao);
        return AF_OK;
    }
    const int64_t k = S.k;
    double *Bd = af_malloc((size_t)(out * k) * sizeof(double)), *Ad = af_malloc((size_t)(k * in) * sizeof(double));
    double *Sv = af_malloc((size_t)k * sizeof(double));
    af_status st = Bd && Ad && Sv ? AF_OK : af_fail(AF_ERR_NOMEM, "merge: out of memory");
    double norm2 = 0, kept2 = 0;
    int64_t ns = 0; /* singular values computed */
    if (st == AF_OK) st = is_factored(o->method) ? merge_factored(&S, Bd, Ad, Sv, &norm2, &ns)
                                                 : merge_dense(&S, Bd, Ad, Sv, &norm2, &ns);
    if (st == AF_OK) {
        for (int64_t c = 0; c < ns; c++) kept2 += Sv[c] * Sv[c];
        *rel = norm2 > 0 ? sqrt(fmax(0.0, norm2 - kept2) / norm2) : 0.0;
        for (int64_t i = 0; i < out * k; i++) Bo[i] = (float)Bd[i];
        for (int64_t i = 0; i < k * in; i++) Ao[i] = (float)Ad[i];
    }
    free(Bd), free(Ad), free(Sv);
    return st;
}

static af_status merge_slot(const merge_job *J, int32_t l, int p, int64_t out, int64_t in, float *Bo, float *Ao,
                            double *rel);

/* Pool job: projections [i0, i1). Each writes only its own part of P; results do not depend on the
 * thread count. */
static void merge_jobs(void *arg, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    merge_job *J = arg;
    for (int64_t i = i0; i < i1; i++) {
        const int32_t l = J->slots[i] / AF_PROJ_COUNT, p = J->slots[i] % AF_PROJ_COUNT;
        const af_lora_slot *s = af_lora_slot_at(J->lay, l, (af_proj)p);
        J->st[i] = merge_slot(J, l, p, s->out, s->in, J->P + s->b_off, J->P + s->a_off, &J->rel[i]);
        if (J->st[i] != AF_OK) J->msg[i] = strdup(af_last_error()); /* this thread's message */
    }
}

static cJSON *merge_record(const char *const *dirs, int32_t n, const double *w, const af_adapter_merge_opts *o,
                           int32_t rank, int gguf_rows) {
    cJSON *extra = cJSON_CreateObject();
    cJSON *m = extra ? cJSON_AddObjectToObject(extra, "merge") : NULL;
    if (!m) {
        cJSON_Delete(extra);
        return NULL;
    }
    cJSON_AddStringToObject(m, "method", af_merge_method_name(o->method));
    cJSON *ad = cJSON_AddArrayToObject(m, "adapters"), *wa = cJSON_AddArrayToObject(m, "weights");
    for (int32_t i = 0; i < n; i++) {
        if (ad) cJSON_AddItemToArray(ad, cJSON_CreateString(dirs[i]));
        if (wa) cJSON_AddItemToArray(wa, cJSON_CreateNumber(w[i]));
    }
    cJSON_AddNumberToObject(m, "rank", rank);
    if (uses_density(o->method)) cJSON_AddNumberToObject(m, "density", o->density);
    if (o->method == AF_MERGE_DARE_TIES || o->method == AF_MERGE_DARE_LINEAR) cJSON_AddNumberToObject(m, "seed", (double)o->seed);
    if (o->method == AF_MERGE_SLERP) cJSON_AddNumberToObject(m, "t", o->t);
    if (o->method == AF_MERGE_TIES || o->method == AF_MERGE_DARE_TIES)
        cJSON_AddStringToObject(m, "majority_sign", o->majority_sign_frequency ? "frequency" : "total");
    if (gguf_rows) cJSON_AddStringToObject(extra, "qk_row_order", "gguf");
    return extra;
}

/* The arguments against the method: adapter count, weights, density, rank, slerp's t. */
static af_status check_merge_args(const char *const *dirs, int32_t n, const char *out_arg, const af_adapter_merge_opts *o) {
    if (!dirs || !out_arg || !*out_arg || n < 1) return af_fail(AF_ERR_INVALID_ARG, "af_adapter_merge: no adapters or no output");
    if (n > 256) return af_fail(AF_ERR_INVALID_ARG, "merge: %d adapters (at most 256)", n);
    for (int32_t i = 0; i < n; i++)
        if (!dirs[i]) return af_fail(AF_ERR_INVALID_ARG, "af_adapter_merge: adapter %d is NULL", i);
    if (o->method < 0 || o->method >= AF_MERGE_METHOD_COUNT)
        return af_fail(AF_ERR_INVALID_ARG, "merge: unknown method %d", (int)o->method);
    if (o->weights && o->n_weights != n)
        return af_fail(AF_ERR_INVALID_ARG, "merge: %d weights for %d adapters (one weight per adapter)", o->n_weights, n);
    const char *mname = af_merge_method_name(o->method);
    if (uses_density(o->method) && !(o->density > 0 && o->density <= 1))
        return af_fail(AF_ERR_INVALID_ARG, "merge: %s: density %g: the fraction of entries kept must be in (0, 1]%s", mname,
                       o->density, o->density == 0 ? " (--density is required for this method)" : "");
    if (!uses_density(o->method) && o->density != 0)
        return af_fail(AF_ERR_INVALID_ARG, "merge: %s: density does not apply (only ties, dare-ties, dare-linear, "
                                           "magnitude-prune prune)", mname);
    if (o->rank < 0) return af_fail(AF_ERR_INVALID_ARG, "merge: rank %d (>= 1, or 0 for the default)", o->rank);
    const int slerp = o->method == AF_MERGE_SLERP;
    if (slerp && n != 2)
        return af_fail(AF_ERR_INVALID_ARG, "merge: slerp interpolates between exactly 2 adapters (%d given)", n);
    if (slerp && o->weights)
        return af_fail(AF_ERR_INVALID_ARG, "merge: slerp takes no weights (t decides the mix: --t)");
    if (slerp && !(o->t >= 0 && o->t <= 1))
        return af_fail(AF_ERR_INVALID_ARG, "merge: slerp: t = %g must be in [0, 1]", o->t);
    if (!slerp && o->t != 0)
        return af_fail(AF_ERR_INVALID_ARG, "merge: %s: t applies to slerp only", mname);
    return AF_OK;
}

/* The weight of each adapter (*w, malloc'ed: the given ones, 1 each, or slerp's 1 - t, t), finite. */
static af_status merge_weights(const char *const *dirs, int32_t n, const af_adapter_merge_opts *o, double **w_out) {
    double *w = af_malloc((size_t)n * sizeof(double));
    if (!w) return af_fail(AF_ERR_NOMEM, "merge: out of memory");
    for (int32_t i = 0; i < n; i++) w[i] = o->weights ? o->weights[i] : 1.0;
    if (o->method == AF_MERGE_SLERP) w[0] = 1.0 - o->t, w[1] = o->t; /* the heads (and the record) */
    for (int32_t i = 0; i < n; i++)
        if (!isfinite(w[i])) {
            free(w);
            return af_fail(AF_ERR_INVALID_ARG, "merge: weight %d (%s) is not finite", i + 1, dirs[i]);
        }
    *w_out = w;
    return AF_OK;
}

/* What the inputs say about the output: its rank, layer count, the adapter whose head and labels
 * it takes (-1: none), whether a head bias or GGUF q/k rows are among them; n_proj: projections. */
typedef struct merge_out {
    int32_t rank, n_layers, head, any_bias, gguf_rows, n_proj;
} merge_out;

/* The output layout into *lay (slots: the union of the inputs' at the output rank; the head of
 * M->head) and M's fields. Errors: AF_ERR_INVALID_ARG (a rank above a projection's min(out, in),
 * cat with another rank), AF_ERR_NOMEM. */
static af_status out_layout(const in_adapter *a, int32_t n, const af_adapter_merge_opts *o, af_param_layout *lay,
                            merge_out *M) {
    int32_t max_r = 0, sum_r = 0;
    memset(M, 0, sizeof *M);
    M->head = -1;
    for (int32_t i = 0; i < n; i++) {
        const af_adapter_info *in = &a[i].info;
        max_r = in->r > max_r ? in->r : max_r;
        sum_r += in->r;
        int32_t nl = af_merge_afj_int(&a[i], "n_layers");
        if (nl < in->n_layers) nl = in->n_layers;
        M->n_layers = nl > M->n_layers ? nl : M->n_layers;
        if (in->num_classes > 0 && M->head < 0) M->head = i;
        M->any_bias |= in->has_head_bias;
        M->gguf_rows |= in->qk_rows_gguf;
    }
    const int32_t rank = M->rank = o->method == AF_MERGE_CAT ? sum_r : (o->rank > 0 ? o->rank : max_r);
    if (o->method == AF_MERGE_CAT && o->rank > 0 && o->rank != sum_r)
        return af_fail(AF_ERR_INVALID_ARG, "merge: cat: rank %d, but cat's rank is the sum of the ranks, %d (use svd or "
                                           "linear for another rank)", o->rank, sum_r);
    lay->lora = (af_lora_config){rank, (float)rank, a[0].info.dropout, 0, 0, 0, 0};
    lay->scale = 1.0f;
    lay->n_layers = M->n_layers;
    lay->head_w_off = lay->head_b_off = -1;
    lay->slots = af_calloc((size_t)(M->n_layers > 0 ? M->n_layers : 1) * AF_PROJ_COUNT, sizeof *lay->slots);
    if (!lay->slots) return af_fail(AF_ERR_NOMEM, "merge: out of memory");
    int64_t off = 0;
    for (int32_t l = 0; l < M->n_layers; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            af_lora_slot *s = &lay->slots[(size_t)l * AF_PROJ_COUNT + p];
            *s = (af_lora_slot){-1, -1, 0, 0, -1};
            for (int32_t i = 0; i < n && s->a_off < 0; i++)
                if (l < a[i].lay.n_layers && af_lora_slot_at(&a[i].lay, l, (af_proj)p)->a_off >= 0) {
                    const af_lora_slot *t = af_lora_slot_at(&a[i].lay, l, (af_proj)p);
                    s->in = t->in, s->out = t->out, s->a_off = 0;
                }
            if (s->a_off < 0) continue;
            const int64_t mn = s->in < s->out ? s->in : s->out;
            if (rank > mn)
                return af_fail(AF_ERR_INVALID_ARG,
                               o->method == AF_MERGE_CAT
                                   ? "merge: cat: rank %d (the sum of the ranks) is above min(out, in) = %lld of layer %d %s "
                                     "(use svd or linear with a smaller rank)"
                                   : "merge: rank %d is above min(out, in) = %lld of layer %d %s",
                               rank, (long long)mn, l, af_proj_name((af_proj)p));
            lay->lora.targets |= 1u << p;
            s->a_off = off;
            off += (int64_t)rank * s->in;
            s->b_off = off;
            off += s->out * (int64_t)rank;
            M->n_proj++;
        }
    lay->n_lora = off;
    if (M->head >= 0) {
        lay->num_classes = a[M->head].info.num_classes;
        lay->hidden = a[M->head].info.hidden;
        lay->head_w_off = off;
        off += (int64_t)lay->num_classes * lay->hidden;
        lay->head_b_off = off;
        off += lay->num_classes;
    } else {
        lay->hidden = af_merge_afj_int(&a[0], "hidden");
    }
    lay->n_total = off;
    return AF_OK;
}

/* Every projection merged into J->P, one job per projection on a pool of threads; the first
 * failure in slot order is the result; the worst truncation error into rep. */
static af_status merge_projections(merge_job *J, const merge_out *M, af_adapter_merge_report *rep) {
    const int32_t n_proj = M->n_proj;
    J->slots = af_calloc((size_t)n_proj, sizeof *J->slots);
    J->rel = af_calloc((size_t)n_proj, sizeof *J->rel);
    J->st = af_calloc((size_t)n_proj, sizeof *J->st);
    J->msg = af_calloc((size_t)n_proj, sizeof *J->msg);
    af_threadpool *pool = NULL;
    const int nth = J->o->n_threads > 0 ? J->o->n_threads : af_cpu_count();
    af_status st;
    if (!J->slots || !J->rel || !J->st || !J->msg) st = af_fail(AF_ERR_NOMEM, "merge: out of memory");
    else st = af_threadpool_new(nth < n_proj ? nth : n_proj, 0, NULL, &pool);
    int32_t k = 0;
    for (int32_t l = 0; st == AF_OK && l < M->n_layers; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++)
            if (af_lora_slot_at(J->lay, l, (af_proj)p)->a_off >= 0) J->slots[k++] = l * AF_PROJ_COUNT + p;
    if (st == AF_OK) af_threadpool_run(pool, af_threadpool_size(pool), n_proj, 1, merge_jobs, J);
    af_threadpool_free(pool);
    for (int32_t i = 0; st == AF_OK && i < n_proj; i++) { /* the first failure in slot order */
        const int32_t l = J->slots[i] / AF_PROJ_COUNT, p = J->slots[i] % AF_PROJ_COUNT;
        if (J->st[i] != AF_OK)
            st = af_fail(J->st[i], "merge: layer %d %s: %s", l, af_proj_name((af_proj)p), J->msg[i] ? J->msg[i] : "");
        else if (J->rel[i] > rep->max_rel_error || rep->worst_layer < 0) {
            rep->max_rel_error = J->rel[i];
            rep->worst_layer = l;
            snprintf(rep->worst_proj, sizeof rep->worst_proj, "%s", af_proj_name((af_proj)p));
        }
    }
    for (int32_t i = 0; J->msg && i < n_proj; i++) free(J->msg[i]);
    free(J->slots), free(J->rel), free(J->st), free(J->msg);
    J->slots = NULL, J->rel = NULL, J->st = NULL, J->msg = NULL;
    return st;
}

/* The labels of the head's adapter (*labels: borrowed strings of its afinar.json, array caller
 * frees), as many as the output's classes. */
static af_status merge_labels(const in_adapter *h, const af_param_layout *lay, const char ***labels) {
    const int32_t nl = cJSON_GetArraySize(h->labels);
    *labels = af_calloc((size_t)(nl > 0 ? nl : 1), sizeof **labels);
    if (!*labels) return af_fail(AF_ERR_NOMEM, "merge: out of memory");
    for (int32_t i = 0; i < nl; i++) {
        const cJSON *e = cJSON_GetArrayItem(h->labels, i);
        (*labels)[i] = cJSON_IsString(e) ? e->valuestring : "";
    }
    if (nl != lay->num_classes)
        return af_fail(AF_ERR_FORMAT, "%s/afinar.json: %d labels for %d classes", h->dir, nl, lay->num_classes);
    return AF_OK;
}

/* The merged adapter saved into the temporary tmp, then renamed into out_dir (an existing one moved
 * aside to old first, removed after); on a failure nothing is written and the message names
 * out_dir, not the temporary. */
static af_status save_merged(const in_adapter *f, const af_param_layout *lay, const float *P, int any_bias,
                             const char **labels, cJSON *extra, const char *tmp, const char *old, const char *out_dir) {
    af_adapter_save_opts so = {0};
    so.base_model_name_or_path = f->info.base_model;
    so.task_type = f->info.task_type;
    so.write_head_bias = any_bias;
    so.architecture = af_merge_afj_string(f, "architecture"); /* head counts 0: rows written as they are */
    so.pooling = af_merge_afj_string(f, "pooling");
    so.max_seq_len = af_merge_afj_int(f, "max_seq_len");
    so.labels = labels;
    so.n_labels = labels ? lay->num_classes : 0;
    so.extra = extra;
    rm_flat_dir(tmp); /* a stale one of a killed run with our pid */
    static const char *const files[] = {AF_ADAPTER_WEIGHTS_FILE, AF_ADAPTER_CONFIG_FILE, AF_ADAPTER_AFINAR_FILE,
                                        AF_MANIFEST_FILE};
    const int slot = af_temp_dir_register(tmp, files, 4); /* removed by a fatal signal (cli) */
    af_status st = af_adapter_save(tmp, lay, P, &so);
    if (st == AF_OK) {
        struct stat sb;
        const int exists = lstat(out_dir, &sb) == 0;
        if (exists && rename(out_dir, old) != 0)
            st = af_fail(AF_ERR_IO, "%s: cannot move the old adapter aside: %s", out_dir, strerror(errno));
        else if (rename(tmp, out_dir) != 0) {
            st = af_fail(AF_ERR_IO, "%s: cannot rename %s into place: %s", out_dir, tmp, strerror(errno));
            if (exists) (void)rename(old, out_dir);
        } else if (exists) {
            rm_flat_dir(old);
        }
    }
    if (st != AF_OK) rm_flat_dir(tmp);
    af_temp_dir_unregister(slot);
    if (st != AF_OK) {
        char msg[1024]; /* name the output, not the temporary the user never sees */
        const char *e = af_last_error();
        const size_t lt = strlen(tmp);
        if (!strncmp(e, tmp, lt)) {
            snprintf(msg, sizeof msg, "%s%s (nothing written)", out_dir, e + lt);
            af_fail(st, "%s", msg);
        }
    }
    return st;
}

af_status af_adapter_merge(const char *const *dirs, int32_t n, const char *out_arg, const af_adapter_merge_opts *opts,
                           af_adapter_merge_report *report) {
    af_adapter_merge_opts def;
    af_adapter_merge_opts_default(&def);
    const af_adapter_merge_opts *o = opts ? opts : &def;
    AF_TRY(check_merge_args(dirs, n, out_arg, o));
    double *w = NULL;
    AF_TRY(merge_weights(dirs, n, o, &w));
    char *out_dir = strdup(out_arg); /* without trailing '/': the temporary is its sibling */
    if (!out_dir) {
        free(w);
        return af_fail(AF_ERR_NOMEM, "merge: out of memory");
    }
    for (size_t l = strlen(out_dir); l > 1 && out_dir[l - 1] == '/'; l--) out_dir[l - 1] = 0;
    af_status st = check_output(out_dir, o->overwrite);
    in_adapter *a = st == AF_OK ? af_calloc((size_t)n, sizeof *a) : NULL;
    if (st == AF_OK && !a) st = af_fail(AF_ERR_NOMEM, "merge: out of memory");
    int32_t nread = 0;
    for (; st == AF_OK && nread < n; nread++) {
        st = af_merge_in_read(dirs[nread], &a[nread]);
        if (st != AF_OK) af_merge_in_free(&a[nread]);
    }
    if (st == AF_OK) st = af_merge_check_inputs(a, n);

    /* output layout: union of the slots; rank */
    af_param_layout lay = {0};
    merge_out M = {0, 0, -1, 0, 0, 0};
    if (st == AF_OK) st = out_layout(a, n, o, &lay, &M);
    float *P = st == AF_OK ? af_calloc((size_t)(lay.n_total > 0 ? lay.n_total : 1), sizeof(float)) : NULL;
    if (st == AF_OK && !P) st = af_fail(AF_ERR_NOMEM, "merge: out of memory (%lld parameters)", (long long)lay.n_total);

    af_adapter_merge_report rep = {M.rank, M.n_proj, M.head >= 0, 0.0, -1, ""};
    merge_job J = {a, n, w, o, M.rank, &lay, P, NULL, NULL, NULL, NULL};
    if (st == AF_OK && M.n_proj > 0) st = merge_projections(&J, &M, &rep);
    if (st == AF_OK && M.head >= 0) { /* W = Σ w_i W_i, b = Σ w_i b_i */
        const int64_t nw = (int64_t)lay.num_classes * lay.hidden;
        for (int32_t i = 0; i < n; i++) {
            const af_param_layout *x = &a[i].lay;
            for (int64_t e = 0; e < nw; e++) P[lay.head_w_off + e] += (float)(w[i] * a[i].P[x->head_w_off + e]);
            for (int64_t e = 0; e < lay.num_classes; e++)
                P[lay.head_b_off + e] += (float)(w[i] * a[i].P[x->head_b_off + e]);
        }
    }

    /* save into a temporary directory, then rename into place */
    char *tmp = NULL, *old = NULL;
    const char **labels = NULL;
    cJSON *extra = NULL;
    if (st == AF_OK) {
        tmp = sibling(out_dir, "merge-tmp");
        old = sibling(out_dir, "merge-old");
        extra = merge_record(dirs, n, w, o, M.rank, M.gguf_rows);
        if (!tmp || !old || !extra) st = af_fail(AF_ERR_NOMEM, "merge: out of memory");
    }
    if (st == AF_OK && M.head >= 0 && a[M.head].labels) st = merge_labels(&a[M.head], &lay, &labels);
    if (st == AF_OK)
        st = save_merged(&a[M.head >= 0 ? M.head : 0], &lay, P, M.any_bias, labels, extra, tmp, old, out_dir);
    if (st == AF_OK && report) *report = rep;
    cJSON_Delete(extra);
    free(labels), free(tmp), free(old), free(P), free(lay.slots), free(w), free(out_dir);
    for (int32_t i = 0; a && i < nread; i++) af_merge_in_free(&a[i]);
    free(a);
    return st;
}
