/*
 * lora.c — LoRA adapters (lora.h): target parsing, the flat parameter layout, PEFT-like
 * initialisation with a counter-based RNG, the forward correction and its backward, merge/unmerge.
 * Conventions: peft/tuners/lora/layer.py (Linear.forward: result += lora_B(lora_A(dropout(x))) *
 * scaling; reset_lora_parameters: kaiming_uniform_(A, a=sqrt(5)), zeros_(B)).
 */
#include "lora/lora.h"

#include "core/core.h"
#include "kernels/ctx.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const proj_names[AF_PROJ_COUNT] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                      "gate_proj", "up_proj", "down_proj"};
static const char *const proj_short[AF_PROJ_COUNT] = {"q", "k", "v", "o", "gate", "up", "down"};

const char *af_proj_name(af_proj p) {
    return (p >= 0 && p < AF_PROJ_COUNT) ? proj_names[p] : "unknown";
}

/* ---------------------------------------------------------------- targets */

static int match_name(const char *s, size_t len, af_proj *out) {
    for (int p = 0; p < AF_PROJ_COUNT; p++) {
        if ((strlen(proj_short[p]) == len && !strncmp(s, proj_short[p], len)) ||
            (strlen(proj_names[p]) == len && !strncmp(s, proj_names[p], len))) {
            *out = (af_proj)p;
            return 1;
        }
    }
    return 0;
}

af_status af_lora_parse_targets(const char *spec, uint32_t *mask) {
    if (!mask) return af_fail(AF_ERR_INVALID_ARG, "lora targets: NULL mask");
    *mask = 0;
    if (spec && !*spec) /* "" is a mistake (an unset variable), not the default */
        return af_fail(AF_ERR_INVALID_ARG, "lora targets '': empty (use presets qv, qkv, all-linear or a comma list of "
                                           "q,k,v,o,gate,up,down)");
    if (!spec || !strcmp(spec, "qv")) {
        *mask = (1u << AF_PROJ_Q) | (1u << AF_PROJ_V);
        return AF_OK;
    }
    if (!strcmp(spec, "qkv")) {
        *mask = (1u << AF_PROJ_Q) | (1u << AF_PROJ_K) | (1u << AF_PROJ_V);
        return AF_OK;
    }
    if (!strcmp(spec, "all-linear") || !strcmp(spec, "all_linear") || !strcmp(spec, "all")) {
        *mask = (1u << AF_PROJ_COUNT) - 1;
        return AF_OK;
    }
    uint32_t m = 0;
    const char *s = spec;
    for (;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        const char *b = s;
        while (len && isspace((unsigned char)*b)) b++, len--;
        while (len && isspace((unsigned char)b[len - 1])) len--;
        af_proj p;
        if (!len)
            return af_fail(AF_ERR_INVALID_ARG, "lora targets '%s': empty entry (use presets qv, qkv, all-linear "
                                               "or a comma list of q,k,v,o,gate,up,down)",
                           spec);
        if (!match_name(b, len, &p))
            return af_fail(AF_ERR_INVALID_ARG,
                           "lora targets '%s': unknown target '%.*s' (known: q,k,v,o,gate,up,down, their "
                           "PEFT names q_proj..down_proj, presets qv, qkv, all-linear)",
                           spec, (int)(len > 64 ? 64 : len), b);
        m |= 1u << p;
        if (!e) break;
        s = e + 1;
    }
    *mask = m;
    return AF_OK;
}

/* ---------------------------------------------------------------- layers */

/* Parse a non-negative decimal integer at *s (advancing it); -1 when there is none or it overflows. */
static int64_t parse_uint(const char **s) {
    const char *p = *s;
    if (!isdigit((unsigned char)*p)) return -1;
    int64_t v = 0;
    while (isdigit((unsigned char)*p)) {
        v = v * 10 + (*p++ - '0');
        if (v > 1000000000) return -1;
    }
    *s = p;
    return v;
}

af_status af_lora_parse_layers(const char *spec, int32_t n_layers, int32_t *layer_min, int32_t *layer_end) {
    if (!layer_min || !layer_end || n_layers < 1) return af_fail(AF_ERR_INVALID_ARG, "lora layers: bad argument");
    *layer_min = 0;
    *layer_end = 0;
    if (!spec || !*spec || !strcmp(spec, "all")) return AF_OK;
    const char *s = spec;
    int64_t lo, hi;
    if (!strncmp(s, "top", 3) || !strncmp(s, "last:", 5)) {
        s += s[0] == 't' ? 3 : 5;
        int64_t k = parse_uint(&s);
        if (k < 1 || *s)
            return af_fail(AF_ERR_INVALID_ARG, "lora layers '%s': expected topN with N >= 1 (e.g. top10)", spec);
        if (k > n_layers)
            return af_fail(AF_ERR_INVALID_ARG, "lora layers '%s': the model has only %d layers", spec, n_layers);
        lo = n_layers - k;
        hi = n_layers - 1;
    } else {
        lo = parse_uint(&s);
        if (lo < 0)
            return af_fail(AF_ERR_INVALID_ARG, "lora layers '%s': expected all, A-B, A-, A or topN (0-based layer "
                                               "indices)", spec);
        hi = lo;
        if (*s == '-') {
            s++;
            hi = *s ? parse_uint(&s) : n_layers - 1;
        }
        if (hi < 0 || *s)
            return af_fail(AF_ERR_INVALID_ARG, "lora layers '%s': expected all, A-B, A-, A or topN (0-based layer "
                                               "indices)", spec);
        if (lo > hi) return af_fail(AF_ERR_INVALID_ARG, "lora layers '%s': first layer %lld > last layer %lld", spec,
                                    (long long)lo, (long long)hi);
        if (hi >= n_layers)
            return af_fail(AF_ERR_INVALID_ARG, "lora layers '%s': layer %lld does not exist (layers 0..%d)", spec,
                           (long long)hi, n_layers - 1);
    }
    *layer_min = (int32_t)lo;
    *layer_end = hi == n_layers - 1 ? 0 : (int32_t)(hi + 1);
    return AF_OK;
}

af_status af_lora_parse_layer_list(const char *spec, int32_t n_layers, int32_t **layers, int32_t *n) {
    if (!spec || !layers || !n || n_layers < 1) return af_fail(AF_ERR_INVALID_ARG, "layers to transform: bad argument");
    *layers = NULL;
    *n = 0;
    int32_t *v = af_malloc(sizeof(int32_t) * (size_t)n_layers);
    if (!v) return af_fail(AF_ERR_NOMEM, "layers to transform: out of memory");
    int32_t k = 0;
    for (const char *s = spec;;) {
        while (*s == ' ') s++;
        const int64_t x = parse_uint(&s);
        while (*s == ' ') s++;
        af_status st = AF_OK;
        if (x < 0 || (*s && *s != ','))
            st = af_fail(AF_ERR_INVALID_ARG, "layers to transform '%s': expected a comma list of 0-based layer "
                                             "indices (e.g. 0,2,5)", spec);
        else if (x >= n_layers)
            st = af_fail(AF_ERR_INVALID_ARG, "layers to transform '%s': layer %lld does not exist (layers 0..%d)", spec,
                         (long long)x, n_layers - 1);
        int32_t at = k; /* insertion keeps v ascending */
        while (st == AF_OK && at > 0 && v[at - 1] >= x) {
            if (v[at - 1] == x)
                st = af_fail(AF_ERR_INVALID_ARG, "layers to transform '%s': layer %lld is listed twice", spec, (long long)x);
            else v[at] = v[at - 1], at--;
        }
        if (st != AF_OK) {
            free(v);
            return st;
        }
        v[at] = (int32_t)x, k++; /* at most n_layers distinct indices: k stays <= n_layers */
        if (!*s) break;
        s++;
    }
    *layers = v;
    *n = k;
    return AF_OK;
}

int32_t af_lora_lowest_layer(const af_param_layout *lay) {
    for (int32_t l = 0; l < lay->n_layers; l++)
        for (int p = 0; p < AF_PROJ_COUNT; p++)
            if (af_lora_slot_at(lay, l, (af_proj)p)->a_off >= 0) return l;
    return lay->n_layers;
}

/* ---------------------------------------------------------------- layout */

af_status af_param_layout_build(af_param_layout *lay, const af_layout_shapes *sh, const af_lora_config *cfg,
                                int32_t num_classes, int32_t layer_min, int32_t layer_end) {
    if (!lay || !sh || !sh->proj_shape || !cfg) return af_fail(AF_ERR_INVALID_ARG, "lora layout: NULL argument");
    memset(lay, 0, sizeof *lay);
    if (cfg->targets == 0 || (cfg->targets >> AF_PROJ_COUNT) != 0)
        return af_fail(AF_ERR_INVALID_ARG, "lora: targets mask 0x%x selects no (or an unknown) projection",
                       cfg->targets);
    if (cfg->r <= 0) return af_fail(AF_ERR_INVALID_ARG, "lora: rank r = %d must be >= 1", cfg->r);
    if (!(cfg->alpha > 0) || !isfinite(cfg->alpha))
        return af_fail(AF_ERR_INVALID_ARG, "lora: alpha = %g must be > 0", (double)cfg->alpha);
    if (!(cfg->dropout >= 0 && cfg->dropout < 1))
        return af_fail(AF_ERR_INVALID_ARG, "lora: dropout = %g must be in [0, 1)", (double)cfg->dropout);
    if (num_classes < 0) return af_fail(AF_ERR_INVALID_ARG, "lora: num_classes = %d < 0", num_classes);
    const int32_t nl = sh->n_layers;
    const int32_t lend = layer_end == 0 ? nl : layer_end;
    if (layer_min < 0 || layer_end < 0 || lend > nl || layer_min >= lend)
        return af_fail(AF_ERR_INVALID_ARG, "lora: layer range [%d, %d) is empty or outside the model's %d layers",
                       layer_min, layer_end, nl);
    for (int p = 0; p < AF_PROJ_COUNT; p++) {
        if (!(cfg->targets & (1u << p))) continue;
        for (int32_t l = layer_min; l < lend; l++) {
            int64_t in, out;
            if (!sh->proj_shape(sh->user, l, (af_proj)p, &in, &out)) continue;
            int64_t mn = in < out ? in : out;
            if (cfg->r > mn)
                return af_fail(AF_ERR_INVALID_ARG, "lora: rank r = %d exceeds min(in, out) = %lld of %s (layer %d)",
                               cfg->r, (long long)mn, proj_names[p], l);
        }
    }
    lay->slots = af_calloc((size_t)nl * AF_PROJ_COUNT, sizeof(af_lora_slot));
    if (!lay->slots) return af_fail(AF_ERR_NOMEM, "lora: out of memory for the layout (%d layers)", nl);
    lay->lora = *cfg;
    lay->scale = cfg->use_rslora ? cfg->alpha / sqrtf((float)cfg->r) : cfg->alpha / (float)cfg->r;
    lay->n_layers = nl;
    lay->layer_min = layer_min;
    lay->layer_end = lend;
    lay->num_classes = num_classes;
    lay->hidden = sh->hidden;
    int64_t off = 0;
    for (int32_t l = 0; l < nl; l++) {
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            af_lora_slot *s = &lay->slots[(int64_t)l * AF_PROJ_COUNT + p];
            const int has = sh->proj_shape(sh->user, l, (af_proj)p, &s->in, &s->out);
            s->a_off = s->b_off = s->m_off = -1;
            if (!has || !(cfg->targets & (1u << p)) || l < layer_min || l >= lend) continue;
            s->a_off = off;
            off += (int64_t)cfg->r * s->in;
            s->b_off = off;
            off += s->out * cfg->r;
            if (cfg->use_dora) {
                s->m_off = off;
                off += s->out;
            }
        }
    }
    lay->n_lora = off;
    if (off == 0) {
        af_param_layout_free(lay);
        return af_fail(AF_ERR_INVALID_ARG, "lora: the targets exist in none of layers %d..%d (KV-sharing layers have "
                       "no k/v projections)", layer_min, lend - 1);
    }
    lay->head_w_off = lay->head_b_off = -1;
    if (num_classes > 0) {
        lay->head_w_off = off;
        off += (int64_t)num_classes * lay->hidden;
        lay->head_b_off = off;
        off += num_classes;
    }
    lay->n_total = off;
    return AF_OK;
}

af_status af_param_layout_copy(af_param_layout *dst, const af_param_layout *src) {
    *dst = *src;
    dst->init_P = NULL;
    const size_t n = (size_t)src->n_layers * AF_PROJ_COUNT;
    dst->slots = af_malloc(sizeof(af_lora_slot) * (n ? n : 1));
    if (!dst->slots) return af_fail(AF_ERR_NOMEM, "lora: out of memory for the layout (%d layers)", src->n_layers);
    if (n) memcpy(dst->slots, src->slots, sizeof(af_lora_slot) * n);
    if (src->init_P) {
        dst->init_P = af_malloc(sizeof(float) * (size_t)(src->n_lora > 0 ? src->n_lora : 1));
        if (!dst->init_P) {
            free(dst->slots);
            dst->slots = NULL;
            return af_fail(AF_ERR_NOMEM, "lora: out of memory for the initial adapter (%lld floats)",
                           (long long)src->n_lora);
        }
        memcpy(dst->init_P, src->init_P, sizeof(float) * (size_t)src->n_lora);
    }
    return AF_OK;
}

void af_param_layout_free(af_param_layout *lay) {
    if (!lay) return;
    free(lay->slots);
    lay->slots = NULL;
    free(lay->init_P);
    lay->init_P = NULL;
}

void af_lora_init_params(const af_param_layout *lay, float *P) {
    const int32_t r = lay->lora.r;
    for (int32_t l = 0; l < lay->n_layers; l++) {
        for (int p = 0; p < AF_PROJ_COUNT; p++) {
            const af_lora_slot *s = af_lora_slot_at(lay, l, (af_proj)p);
            if (s->a_off < 0) continue;
            const float bound = 1.0f / sqrtf((float)s->in);
            const uint64_t key = af_ctr_key(lay->lora.seed, (uint64_t)l, (uint64_t)p, 0);
            float *A = P + s->a_off;
            const int64_t na = (int64_t)r * s->in;
            if (lay->init_P) {
                memcpy(A, lay->init_P + s->a_off, sizeof(float) * (size_t)na);
                memcpy(P + s->b_off, lay->init_P + s->b_off, sizeof(float) * (size_t)(s->out * r));
                if (lay->lora.use_dora) memset(P + s->m_off, 0, sizeof(float) * (size_t)s->out);
                continue;
            }
            if (lay->init == AF_LORA_INIT_GAUSSIAN) {
                const double sd = 1.0 / (double)r;
                for (int64_t i = 0; i < na; i += 2) { /* Box-Muller: u1 in (0, 1], u2 in [0, 1) */
                    const double u1 = 1.0 - (double)af_ctr_u01(key, (uint64_t)i), u2 = af_ctr_u01(key, (uint64_t)i + 1);
                    const double rad = sqrt(-2.0 * log(u1)) * sd, th = 6.283185307179586 * u2;
                    A[i] = (float)(rad * cos(th));
                    if (i + 1 < na) A[i + 1] = (float)(rad * sin(th));
                }
            } else {
                for (int64_t i = 0; i < na; i++) A[i] = (2.0f * af_ctr_u01(key, (uint64_t)i) - 1.0f) * bound;
            }
            memset(P + s->b_off, 0, sizeof(float) * (size_t)(s->out * r));
            if (lay->lora.use_dora) memset(P + s->m_off, 0, sizeof(float) * (size_t)s->out);
        }
    }
    if (lay->head_w_off >= 0) {
        const float bound = 1.0f / sqrtf((float)lay->hidden);
        const uint64_t key = af_ctr_key(lay->lora.seed, (uint64_t)lay->n_layers, AF_PROJ_COUNT, 0);
        float *W = P + lay->head_w_off;
        for (int64_t i = 0; i < (int64_t)lay->num_classes * lay->hidden; i++)
            W[i] = (2.0f * af_ctr_u01(key, (uint64_t)i) - 1.0f) * bound;
        memset(P + lay->head_b_off, 0, sizeof(float) * (size_t)lay->num_classes);
    }
}

void af_lora_merge(float *Wd, const float *A, const float *B, int64_t in, int64_t out, int32_t r, float scale,
                   int sign) {
    const float s = sign < 0 ? -scale : scale;
    for (int64_t o = 0; o < out; o++) {
        float *w = Wd + o * in;
        for (int32_t j = 0; j < r; j++) {
            const float c = s * B[o * r + j];
            const float *a = A + (int64_t)j * in;
            for (int64_t i = 0; i < in; i++) w[i] += c * a[i];
        }
    }
}

af_status af_lora_residual_layout(const af_param_layout *lay, const float *P, af_param_layout *out, float **Pout) {
    if (!lay || !lay->init_P || !out) return af_fail(AF_ERR_INVALID_ARG, "lora: not a pissa / olora layout");
    if (Pout) *Pout = NULL;
    AF_TRY(af_param_layout_copy(out, lay));
    free(out->init_P);
    out->init_P = NULL;
    out->init = AF_LORA_INIT_DEFAULT;
    const int32_t r = lay->lora.r, r2 = 2 * r;
    out->lora.r = r2;
    out->lora.alpha = lay->lora.use_rslora ? lay->lora.alpha * sqrtf(2.0f) : 2.0f * lay->lora.alpha;
    out->scale = lay->scale; /* alpha'/r' = alpha/r (alpha'/sqrt(r') = alpha/sqrt(r) with rsLoRA) */
    int64_t off = 0;
    const int64_t nslot = (int64_t)lay->n_layers * AF_PROJ_COUNT;
    for (int64_t k = 0; k < nslot; k++) {
        af_lora_slot *s = &out->slots[k];
        if (s->a_off < 0) continue;
        s->a_off = off;
        off += (int64_t)r2 * s->in;
        s->b_off = off;
        off += s->out * r2;
        s->m_off = -1;
    }
    out->n_lora = off;
    const int64_t nh = lay->head_w_off >= 0 ? (int64_t)lay->num_classes * lay->hidden + lay->num_classes : 0;
    if (lay->head_w_off >= 0) {
        out->head_w_off = off;
        out->head_b_off = off + (int64_t)lay->num_classes * lay->hidden;
    }
    out->n_total = off + nh;
    if (!P || !Pout) return AF_OK;
    float *Q = af_calloc((size_t)(out->n_total > 0 ? out->n_total : 1), sizeof(float));
    if (!Q) {
        af_param_layout_free(out);
        return af_fail(AF_ERR_NOMEM, "lora: out of memory (%lld parameters)", (long long)out->n_total);
    }
    for (int64_t k = 0; k < nslot; k++) {
        const af_lora_slot *s = &lay->slots[k], *d = &out->slots[k];
        if (s->a_off < 0) continue;
        const int64_t na = (int64_t)r * s->in;
        memcpy(Q + d->a_off, P + s->a_off, sizeof(float) * (size_t)na);
        for (int64_t i = 0; i < na; i++) Q[d->a_off + na + i] = -lay->init_P[s->a_off + i];
        for (int64_t o = 0; o < s->out; o++) {
            memcpy(Q + d->b_off + o * r2, P + s->b_off + o * r, sizeof(float) * (size_t)r);
            memcpy(Q + d->b_off + o * r2 + r, lay->init_P + s->b_off + o * r, sizeof(float) * (size_t)r);
        }
    }
    if (nh) memcpy(Q + out->head_w_off, P + lay->head_w_off, sizeof(float) * (size_t)nh);
    *Pout = Q;
    return AF_OK;
}
