/*
 * metrics.h — classification metrics from predicted probabilities and gold labels.
 *
 * Single-label (probs [N, C], labels [N]):
 *   prediction     argmax_c probs[i, c] (ties -> lowest class id)
 *   accuracy       mean(pred == gold)
 *   per class c    precision = TP / (TP + FP), recall = TP / (TP + FN), F1 = 2PR / (P + R),
 *                  support = number of gold samples of c. A ratio with a zero denominator is 0,
 *                  and F1 = 0 when P + R = 0 (scikit-learn zero_division=0).
 *   macro-F1       mean of per-class F1 over the classes that occur in gold OR predictions
 *                  (scikit-learn f1_score(average="macro") default labels = union of both);
 *                  weighted-F1 weights per-class F1 by support.
 *   confusion      [C, C] counts, row = gold class, column = predicted class (sklearn layout)
 *   ECE            expected calibration error, Guo et al. 2017 ("On Calibration of Modern Neural
 *                  Networks", eq. 3): confidence = max_c probs[i, c]; 15 equal-width bins
 *                  B_m = ((m-1)/15, m/15] (confidence 0 goes to the first bin);
 *                  ECE = Σ_m |B_m|/N · |acc(B_m) − conf(B_m)|
 *   NLL            mean −log(max(probs[i, gold], 1e-12))
 * Multi-label (probs [N, C] of independent sigmoids, targets multi-hot [N, C]):
 *   predicted set  {c : probs[i, c] >= threshold} (threshold 0.5 by default)
 *   micro-F1       2·ΣTP / (2·ΣTP + ΣFP + ΣFN) over all (sample, class) pairs (0 if the denominator is 0)
 *   macro-F1       mean per-class F1 over classes occurring in gold or predictions (as above)
 *   subset acc.    fraction of samples whose predicted set equals the gold set exactly
 *   accuracy       = subset accuracy; no confusion matrix, no ECE.
 * Counts are int64; ratios are double.
 */
#ifndef AF_METRICS_H
#define AF_METRICS_H

#include "core/core.h"

#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>

#define AF_ECE_BINS 15

struct af_metrics {
    int32_t n, num_classes;
    int multi_label;
    float threshold;          /* multi-label decision threshold */
    double accuracy;          /* single: accuracy; multi: subset accuracy */
    double macro_f1, weighted_f1, micro_f1; /* micro_f1 single-label = accuracy */
    double macro_precision, macro_recall;
    double *precision, *recall, *f1; /* [C] each */
    int64_t *support;         /* [C] gold count (multi: positives) */
    int64_t *predicted;       /* [C] predicted count */
    int64_t *confusion;       /* [C, C] row = gold, col = predicted; NULL for multi-label */
    double ece;               /* single-label only (NaN for multi-label) */
    int64_t ece_count[AF_ECE_BINS];
    double ece_acc[AF_ECE_BINS], ece_conf[AF_ECE_BINS]; /* per-bin accuracy and mean confidence */
    double nll;               /* single-label only (NaN for multi-label) */
};

/* Single-label metrics. probs [n, C] (rows need not be exactly normalised; NaN rows are an error),
 * labels [n] in [0, C). `*out`: free with af_metrics_free. Errors: AF_ERR_INVALID_ARG (n < 1, C < 2,
 * label out of range, non-finite probability — naming the row), AF_ERR_NOMEM. */
af_status af_metrics_compute(const float *probs, const int32_t *labels, int32_t n, int32_t C, af_metrics **out);

/* Multi-label metrics. probs [n, C] in [0, 1], targets [n, C] with 0 = negative, non-zero = positive,
 * threshold in (0, 1) (pass 0.5). Errors as above. */
af_status af_metrics_compute_multi(const float *probs, const uint8_t *targets, int32_t n, int32_t C,
                                   float threshold, af_metrics **out);

/* af_metrics_free, af_metrics_print, af_metrics_json: include/afinar.h ("Evaluation metrics"). */

/* JSON object: {"n", "num_classes", "multi_label", "accuracy", "macro_f1", "weighted_f1",
 * "micro_f1", "macro_precision", "macro_recall", "ece" & "nll" (single-label), "threshold"
 * (multi-label), "per_class": [{"label", "id", "precision", "recall", "f1", "support",
 * "predicted"}], "confusion": [[...]] (single-label; rows = gold)}. Caller frees with cJSON_Delete.
 * NULL on allocation failure. */
cJSON *af_metrics_to_json(const af_metrics *m, const char *const *names);

#endif /* AF_METRICS_H */
