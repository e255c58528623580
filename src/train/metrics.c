/*
 * metrics.c — accuracy, precision/recall/F1, confusion, calibration (metrics.h).
 */
#include "train/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void af_metrics_free(af_metrics *m) {
    if (!m) return;
    free(m->precision), free(m->recall), free(m->f1), free(m->support), free(m->predicted), free(m->confusion);
    free(m);
}

static af_metrics *alloc_metrics(int32_t n, int32_t C, int multi) {
    af_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->n = n;
    m->num_classes = C;
    m->multi_label = multi;
    m->precision = calloc((size_t)C, sizeof(double));
    m->recall = calloc((size_t)C, sizeof(double));
    m->f1 = calloc((size_t)C, sizeof(double));
    m->support = calloc((size_t)C, sizeof(int64_t));
    m->predicted = calloc((size_t)C, sizeof(int64_t));
    if (!multi) m->confusion = calloc((size_t)C * (size_t)C, sizeof(int64_t));
    if (!m->precision || !m->recall || !m->f1 || !m->support || !m->predicted || (!multi && !m->confusion)) {
        af_metrics_free(m);
        return NULL;
    }
    return m;
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

/* Per-class P/R/F1 from tp[c], support (tp+fn) and predicted (tp+fp); macro/weighted averages over
   the classes present in gold or predictions (sklearn default label set). */
static void per_class(af_metrics *m, const int64_t *tp) {
    int32_t C = m->num_classes, present = 0;
    int64_t total = 0;
    double sf = 0, sp = 0, sr = 0, wf = 0;
    for (int32_t c = 0; c < C; c++) {
        double p = ratio((double)tp[c], (double)m->predicted[c]);
        double r = ratio((double)tp[c], (double)m->support[c]);
        m->precision[c] = p;
        m->recall[c] = r;
        m->f1[c] = p + r > 0 ? 2 * p * r / (p + r) : 0.0;
        if (m->support[c] > 0 || m->predicted[c] > 0) {
            present++;
            sf += m->f1[c], sp += p, sr += r;
        }
        wf += m->f1[c] * (double)m->support[c];
        total += m->support[c];
    }
    m->macro_f1 = ratio(sf, present);
    m->macro_precision = ratio(sp, present);
    m->macro_recall = ratio(sr, present);
    m->weighted_f1 = ratio(wf, (double)total);
}

af_status af_metrics_compute(const float *probs, const int32_t *labels, int32_t n, int32_t C, af_metrics **out) {
    *out = NULL;
    if (n < 1 || C < 2 || !probs || !labels)
        return af_fail(AF_ERR_INVALID_ARG, "metrics: need n >= 1 samples and C >= 2 classes (n %d, C %d)", (int)n,
                       (int)C);
    for (int32_t i = 0; i < n; i++) {
        if (labels[i] < 0 || labels[i] >= C)
            return af_fail(AF_ERR_INVALID_ARG, "metrics: sample %d: label %d out of range [0, %d)", (int)i,
                           (int)labels[i], (int)C);
        for (int32_t c = 0; c < C; c++)
            if (!isfinite(probs[(size_t)i * (size_t)C + (size_t)c]))
                return af_fail(AF_ERR_INVALID_ARG, "metrics: sample %d: non-finite probability for class %d", (int)i,
                               (int)c);
    }
    af_metrics *m = alloc_metrics(n, C, 0);
    int64_t *tp = calloc((size_t)C, sizeof *tp);
    if (!m || !tp) {
        af_metrics_free(m), free(tp);
        return af_fail(AF_ERR_NOMEM, "metrics: out of memory");
    }
    int64_t correct = 0;
    double nll = 0, conf_sum[AF_ECE_BINS] = {0};
    int64_t acc_cnt[AF_ECE_BINS] = {0};
    for (int32_t i = 0; i < n; i++) {
        const float *p = probs + (size_t)i * (size_t)C;
        int32_t best = 0;
        for (int32_t c = 1; c < C; c++)
            if (p[c] > p[best]) best = c;
        int32_t y = labels[i];
        m->confusion[(size_t)y * (size_t)C + (size_t)best]++;
        m->support[y]++;
        m->predicted[best]++;
        if (best == y) tp[y]++, correct++;
        double conf = p[best];
        /* bin m (0-based) holds confidences in (m/15, (m+1)/15]; conf <= 0 -> bin 0, conf >= 1 -> last */
        int b = (int)ceil(conf * AF_ECE_BINS) - 1;
        if (b < 0) b = 0;
        if (b >= AF_ECE_BINS) b = AF_ECE_BINS - 1;
        m->ece_count[b]++;
        conf_sum[b] += conf;
        acc_cnt[b] += best == y;
        double py = p[y] > 1e-12f ? p[y] : 1e-12;
        nll -= log(py);
    }
    m->accuracy = (double)correct / n;
    m->micro_f1 = m->accuracy;
    m->nll = nll / n;
    m->ece = 0;
    for (int b = 0; b < AF_ECE_BINS; b++) {
        if (!m->ece_count[b]) continue;
        m->ece_acc[b] = (double)acc_cnt[b] / (double)m->ece_count[b];
        m->ece_conf[b] = conf_sum[b] / (double)m->ece_count[b];
        m->ece += (double)m->ece_count[b] / n * fabs(m->ece_acc[b] - m->ece_conf[b]);
    }
    per_class(m, tp);
    free(tp);
    *out = m;
    return AF_OK;
}

af_status af_metrics_compute_multi(const float *probs, const uint8_t *targets, int32_t n, int32_t C,
                                   float threshold, af_metrics **out) {
    *out = NULL;
    if (n < 1 || C < 1 || !probs || !targets || !(threshold > 0 && threshold < 1))
        return af_fail(AF_ERR_INVALID_ARG, "metrics: need n >= 1, C >= 1 and a threshold in (0, 1) (n %d, C %d, %g)",
                       (int)n, (int)C, (double)threshold);
    for (size_t k = 0; k < (size_t)n * (size_t)C; k++)
        if (!isfinite(probs[k]))
            return af_fail(AF_ERR_INVALID_ARG, "metrics: sample %zu: non-finite probability for class %zu",
                           k / (size_t)C, k % (size_t)C);
    af_metrics *m = alloc_metrics(n, C, 1);
    int64_t *tp = calloc((size_t)C, sizeof *tp);
    if (!m || !tp) {
        af_metrics_free(m), free(tp);
        return af_fail(AF_ERR_NOMEM, "metrics: out of memory");
    }
    m->threshold = threshold;
    int64_t exact = 0, TP = 0, FP = 0, FN = 0;
    for (int32_t i = 0; i < n; i++) {
        int same = 1;
        for (int32_t c = 0; c < C; c++) {
            size_t k = (size_t)i * (size_t)C + (size_t)c;
            int pr = probs[k] >= threshold, g = targets[k] != 0;
            m->support[c] += g;
            m->predicted[c] += pr;
            tp[c] += pr && g;
            TP += pr && g, FP += pr && !g, FN += !pr && g;
            same &= pr == g;
        }
        exact += same;
    }
    m->accuracy = (double)exact / n;
    m->micro_f1 = ratio(2.0 * (double)TP, 2.0 * (double)TP + (double)FP + (double)FN);
    m->ece = NAN;
    m->nll = NAN;
    per_class(m, tp);
    free(tp);
    *out = m;
    return AF_OK;
}

static const char *cname(const char *const *names, int32_t c, char *buf, size_t cap) {
    if (names && names[c]) return names[c];
    snprintf(buf, cap, "%d", (int)c);
    return buf;
}

void af_metrics_print(const af_metrics *m, const char *const *names, FILE *fp) {
    char b[32];
    int32_t C = m->num_classes;
    if (m->multi_label) {
        fprintf(fp, "samples %d, classes %d, multi-label (threshold %.2f)\n", m->n, C, (double)m->threshold);
        fprintf(fp, "subset accuracy %.4f   micro-F1 %.4f   macro-F1 %.4f\n", m->accuracy, m->micro_f1, m->macro_f1);
    } else {
        fprintf(fp, "samples %d, classes %d\n", m->n, C);
        fprintf(fp, "accuracy %.4f   macro-F1 %.4f   weighted-F1 %.4f   ECE %.4f (15 bins)   NLL %.4f\n",
                m->accuracy, m->macro_f1, m->weighted_f1, m->ece, m->nll);
    }
    fprintf(fp, "%-20s %9s %9s %9s %8s %9s\n", "class", "precision", "recall", "f1", "support", "predicted");
    for (int32_t c = 0; c < C; c++)
        fprintf(fp, "%-20.20s %9.4f %9.4f %9.4f %8lld %9lld\n", cname(names, c, b, sizeof b), m->precision[c],
                m->recall[c], m->f1[c], (long long)m->support[c], (long long)m->predicted[c]);
    if (!m->confusion) return;
    fprintf(fp, "confusion (rows = gold, columns = predicted)\n%-12s", "");
    for (int32_t c = 0; c < C; c++) fprintf(fp, " %8.8s", cname(names, c, b, sizeof b));
    fprintf(fp, "\n");
    for (int32_t r = 0; r < C; r++) {
        fprintf(fp, "%-12.12s", cname(names, r, b, sizeof b));
        for (int32_t c = 0; c < C; c++) fprintf(fp, " %8lld", (long long)m->confusion[(size_t)r * (size_t)C + (size_t)c]);
        fprintf(fp, "\n");
    }
}

cJSON *af_metrics_to_json(const af_metrics *m, const char *const *names) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    int ok = 1;
    int32_t C = m->num_classes;
    ok &= cJSON_AddNumberToObject(o, "n", m->n) != NULL;
    ok &= cJSON_AddNumberToObject(o, "num_classes", C) != NULL;
    ok &= cJSON_AddBoolToObject(o, "multi_label", m->multi_label) != NULL;
    ok &= cJSON_AddNumberToObject(o, "accuracy", m->accuracy) != NULL;
    ok &= cJSON_AddNumberToObject(o, "macro_f1", m->macro_f1) != NULL;
    ok &= cJSON_AddNumberToObject(o, "weighted_f1", m->weighted_f1) != NULL;
    ok &= cJSON_AddNumberToObject(o, "micro_f1", m->micro_f1) != NULL;
    ok &= cJSON_AddNumberToObject(o, "macro_precision", m->macro_precision) != NULL;
    ok &= cJSON_AddNumberToObject(o, "macro_recall", m->macro_recall) != NULL;
    if (m->multi_label) {
        ok &= cJSON_AddNumberToObject(o, "threshold", m->threshold) != NULL;
    } else {
        ok &= cJSON_AddNumberToObject(o, "ece", m->ece) != NULL;
        ok &= cJSON_AddNumberToObject(o, "nll", m->nll) != NULL;
    }
    cJSON *pc = cJSON_AddArrayToObject(o, "per_class");
    ok &= pc != NULL;
    char b[32];
    for (int32_t c = 0; ok && c < C; c++) {
        cJSON *e = cJSON_CreateObject();
        ok &= e != NULL && cJSON_AddItemToArray(pc, e);
        if (!ok) {
            cJSON_Delete(e);
            break;
        }
        ok &= cJSON_AddStringToObject(e, "label", cname(names, c, b, sizeof b)) != NULL;
        ok &= cJSON_AddNumberToObject(e, "id", c) != NULL;
        ok &= cJSON_AddNumberToObject(e, "precision", m->precision[c]) != NULL;
        ok &= cJSON_AddNumberToObject(e, "recall", m->recall[c]) != NULL;
        ok &= cJSON_AddNumberToObject(e, "f1", m->f1[c]) != NULL;
        ok &= cJSON_AddNumberToObject(e, "support", (double)m->support[c]) != NULL;
        ok &= cJSON_AddNumberToObject(e, "predicted", (double)m->predicted[c]) != NULL;
    }
    if (ok && m->confusion) {
        cJSON *cm = cJSON_AddArrayToObject(o, "confusion");
        ok &= cm != NULL;
        for (int32_t r = 0; ok && r < C; r++) {
            cJSON *row = cJSON_CreateArray();
            ok &= row != NULL && cJSON_AddItemToArray(cm, row);
            if (!ok) {
                cJSON_Delete(row);
                break;
            }
            for (int32_t c = 0; ok && c < C; c++) {
                cJSON *v = cJSON_CreateNumber((double)m->confusion[(size_t)r * (size_t)C + (size_t)c]);
                ok &= v != NULL && cJSON_AddItemToArray(row, v);
                if (!ok) cJSON_Delete(v);
            }
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

af_status af_metrics_json(const af_metrics *m, const char *const *names, const char *const *extra, char **out) {
    if (!m || !out) return af_fail(AF_ERR_INVALID_ARG, "af_metrics_json: NULL argument");
    *out = NULL;
    cJSON *o = af_metrics_to_json(m, names);
    int ok = o != NULL;
    for (size_t i = 0; ok && extra && extra[i]; i += 2)
        ok = cJSON_AddStringToObject(o, extra[i], extra[i + 1] ? extra[i + 1] : "") != NULL;
    if (ok) *out = cJSON_Print(o);
    cJSON_Delete(o);
    return *out ? AF_OK : af_fail(AF_ERR_NOMEM, "out of memory");
}
