/*
 * test_metrics.c — train/metrics.h against hand-computed cases: accuracy, per-class P/R/F1 with a
 * class never predicted (zero_division = 0), macro/weighted F1 (sklearn label set), confusion matrix,
 * ECE with 15 bins on a known case, NLL, multi-label micro/macro F1 and subset accuracy, and the
 * JSON output parsed back with cJSON.
 */
#include "testlib.h"
#include "train/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int near(double a, double b, double tol) { return fabs(a - b) <= tol; }

static void test_single(void) {
    /* gold 0 0 1 1 2 2; predictions 0 1 1 1 0 1 (class 2 never predicted) */
    const float probs[6 * 3] = {0.7f, 0.2f, 0.1f, 0.4f, 0.5f, 0.1f, 0.1f, 0.8f, 0.1f,
                                0.2f, 0.7f, 0.1f, 0.6f, 0.3f, 0.1f, 0.3f, 0.6f, 0.1f};
    const int32_t gold[6] = {0, 0, 1, 1, 2, 2};
    af_metrics *m = NULL;
    CHECK(af_metrics_compute(probs, gold, 6, 3, &m) == AF_OK, "compute: %s", af_last_error());
    if (!m) return;
    CHECK(near(m->accuracy, 0.5, 1e-12), "accuracy %g want 0.5", m->accuracy);
    const double P[3] = {0.5, 0.5, 0}, R[3] = {0.5, 1, 0}, F[3] = {0.5, 2.0 / 3, 0};
    const int64_t S[3] = {2, 2, 2}, D[3] = {2, 4, 0};
    for (int c = 0; c < 3; c++)
        CHECK(near(m->precision[c], P[c], 1e-12) && near(m->recall[c], R[c], 1e-12) && near(m->f1[c], F[c], 1e-12) &&
                  m->support[c] == S[c] && m->predicted[c] == D[c],
              "class %d: P %g R %g F1 %g support %lld predicted %lld (want %g %g %g %lld %lld)", c, m->precision[c],
              m->recall[c], m->f1[c], (long long)m->support[c], (long long)m->predicted[c], P[c], R[c], F[c],
              (long long)S[c], (long long)D[c]);
    CHECK(near(m->macro_f1, (0.5 + 2.0 / 3) / 3, 1e-12), "macro-F1 %g want %g", m->macro_f1, (0.5 + 2.0 / 3) / 3);
    CHECK(near(m->weighted_f1, (0.5 + 2.0 / 3) / 3, 1e-12), "weighted-F1 %g", m->weighted_f1);
    const int64_t conf[9] = {1, 1, 0, 0, 2, 0, 1, 1, 0};
    CHECK(!memcmp(m->confusion, conf, sizeof conf), "confusion matrix (rows gold)");
    /* ECE bins: {0.7 ok, 0.7 ok} -> 0.3·2, {0.5 wrong} -> 0.5, {0.8 ok} -> 0.2, {0.6 wrong x2} -> 0.6·2 */
    CHECK(near(m->ece, 2.5 / 6, 1e-6), "ECE %.8f want %.8f", m->ece, 2.5 / 6);
    int64_t nb = 0, used = 0;
    for (int b = 0; b < AF_ECE_BINS; b++) nb += m->ece_count[b], used += m->ece_count[b] > 0;
    CHECK(nb == 6 && used == 4 && m->ece_count[10] == 2 && m->ece_count[7] == 1, "ECE bin counts (%lld bins used)",
          (long long)used);
    double nll = -(log(0.7) + log(0.4) + log(0.8) + log(0.7) + log(0.1) + log(0.1)) / 6;
    CHECK(near(m->nll, nll, 1e-6), "NLL %g want %g", m->nll, nll);

    /* JSON round trip */
    const char *names[3] = {"business", "sport", "tech"};
    cJSON *j = af_metrics_to_json(m, names);
    char *txt = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON *back = txt ? cJSON_Parse(txt) : NULL;
    CHECK(back != NULL, "JSON printed and parsed back");
    if (back) {
        cJSON *acc = cJSON_GetObjectItem(back, "accuracy"), *ece = cJSON_GetObjectItem(back, "ece");
        cJSON *pc = cJSON_GetObjectItem(back, "per_class"), *cm = cJSON_GetObjectItem(back, "confusion");
        cJSON *t = cJSON_GetArrayItem(pc, 2);
        CHECK(acc && near(acc->valuedouble, 0.5, 1e-12) && ece && near(ece->valuedouble, 2.5 / 6, 1e-6),
              "JSON accuracy/ece");
        CHECK(cJSON_GetArraySize(pc) == 3 && t && !strcmp(cJSON_GetObjectItem(t, "label")->valuestring, "tech") &&
                  cJSON_GetObjectItem(t, "f1")->valuedouble == 0 && cJSON_GetObjectItem(t, "support")->valueint == 2,
              "JSON per_class");
        CHECK(cJSON_GetArraySize(cm) == 3 && cJSON_GetArrayItem(cJSON_GetArrayItem(cm, 2), 0)->valueint == 1 &&
                  cJSON_GetArrayItem(cJSON_GetArrayItem(cm, 1), 1)->valueint == 2,
              "JSON confusion");
    }
    cJSON_Delete(back);
    free(txt);
    cJSON_Delete(j);
    /* text report */
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    if (fp) {
        af_metrics_print(m, names, fp);
        fclose(fp);
        CHECK(buf && strstr(buf, "accuracy 0.5000") && strstr(buf, "macro-F1 0.3889") && strstr(buf, "tech"),
              "printed report:\n%s", buf ? buf : "");
        free(buf);
    }
    af_metrics_free(m);

    /* a 4th class absent from gold and predictions is left out of the macro average (sklearn) */
    float p4[6 * 4];
    for (int i = 0; i < 6; i++) {
        for (int c = 0; c < 3; c++) p4[i * 4 + c] = probs[i * 3 + c];
        p4[i * 4 + 3] = 0;
    }
    CHECK(af_metrics_compute(p4, gold, 6, 4, &m) == AF_OK, "4 classes");
    if (m) {
        CHECK(near(m->macro_f1, (0.5 + 2.0 / 3) / 3, 1e-12) && m->f1[3] == 0, "macro-F1 over present classes %g",
              m->macro_f1);
        af_metrics_free(m);
    }
    /* perfect, confident predictions: ECE 0 */
    const float pp[4] = {1, 0, 0, 1};
    const int32_t gg[2] = {0, 1};
    CHECK(af_metrics_compute(pp, gg, 2, 2, &m) == AF_OK && near(m->ece, 0, 1e-12) && m->accuracy == 1 &&
              m->macro_f1 == 1,
          "perfect case");
    af_metrics_free(m);
    /* errors */
    const int32_t bad[2] = {0, 2};
    CHECK(af_metrics_compute(pp, bad, 2, 2, &m) == AF_ERR_INVALID_ARG && !m &&
              strstr(af_last_error(), "sample 1: label 2 out of range"),
          "label out of range: %s", af_last_error());
    const float pn[4] = {1, 0, NAN, 1};
    CHECK(af_metrics_compute(pn, gg, 2, 2, &m) == AF_ERR_INVALID_ARG && strstr(af_last_error(), "sample 1"),
          "NaN refused: %s", af_last_error());
}

static void test_multi(void) {
    const float probs[9] = {0.9f, 0.2f, 0.6f, 0.1f, 0.7f, 0.4f, 0.5f, 0.1f, 0.2f};
    const uint8_t gold[9] = {1, 0, 0, 0, 1, 1, 1, 0, 0};
    af_metrics *m = NULL;
    CHECK(af_metrics_compute_multi(probs, gold, 3, 3, 0.5f, &m) == AF_OK, "multi: %s", af_last_error());
    if (!m) return;
    CHECK(near(m->micro_f1, 0.75, 1e-12), "micro-F1 %g want 0.75", m->micro_f1);
    CHECK(near(m->accuracy, 1.0 / 3, 1e-12), "subset accuracy %g want 1/3", m->accuracy);
    CHECK(near(m->macro_f1, 2.0 / 3, 1e-12) && m->f1[2] == 0 && m->f1[0] == 1, "macro-F1 %g want 2/3", m->macro_f1);
    CHECK(!m->confusion && isnan(m->ece), "no confusion / ECE for multi-label");
    cJSON *j = af_metrics_to_json(m, NULL);
    char *txt = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON *back = txt ? cJSON_Parse(txt) : NULL;
    CHECK(back && cJSON_IsTrue(cJSON_GetObjectItem(back, "multi_label")) &&
              near(cJSON_GetObjectItem(back, "micro_f1")->valuedouble, 0.75, 1e-12) &&
              !cJSON_GetObjectItem(back, "ece") && !cJSON_GetObjectItem(back, "confusion"),
          "multi JSON");
    cJSON_Delete(back);
    free(txt);
    cJSON_Delete(j);
    FILE *fp = fopen("/dev/null", "w");
    if (fp) af_metrics_print(m, NULL, fp), fclose(fp);
    af_metrics_free(m);
    CHECK(af_metrics_compute_multi(probs, gold, 3, 3, 1.5f, &m) == AF_ERR_INVALID_ARG, "bad threshold");
}

int main(void) {
    test_single();
    test_multi();
    return tl_finish("test_metrics");
}
