/*
 * head.h — sequence-classification head on top of the final hidden states, and its losses.
 * Samples are packed: sample b owns tokens [seq_start[b], seq_start[b+1]) (seq_start [B+1],
 * seq_start[0] = 0, strictly increasing; the caller validates this — these functions do not).
 *   pooling MEAN: pooled[b] = mean of its tokens' hidden states (default)
 *   pooling LAST: pooled[b] = hidden state of its last token (transformers *ForSequenceClassification)
 *   logits[b, c] = pooled[b] · W[c]ᵀ + bias[c],  W [num_classes, hidden]
 * Losses, averaged over the batch (sum over samples / n_samples):
 *   weighted softmax cross-entropy  loss_b = -w[y_b] · log softmax(logits_b)[y_b]
 *       d logits_b = w[y_b] · (softmax(logits_b) - onehot(y_b)) / n_samples
 *     (PyTorch CrossEntropyLoss(weight=w, reduction='sum') / B — note: NOT PyTorch's default
 *      'mean' with weights, which divides by sum of w[y_b]; documented choice)
 *   multi-label BCE-with-logits (stable form) loss_b = mean_c [max(x,0) - x·t + log(1 + e^-|x|)]
 *       d x = (sigmoid(x) - t) / (C · n_samples)
 *     (PyTorch BCEWithLogitsLoss(reduction='mean') over the [B, C] matrix; no pos_weight)
 * All arrays are float32, row-major, caller-owned; nothing allocates, nothing fails. Sums are
 * accumulated in double (losses, softmax denominators, pooled means) or in float lanes reduced in
 * double (dot products), so results do not depend on the thread count.
 */
#ifndef AF_HEAD_H
#define AF_HEAD_H

#include "afinar.h"

#include <stdint.h>

/* The pooling of the public API (af_head_pooling, include/afinar.h) under its internal names. */
typedef af_head_pooling af_pooling;
#define AF_POOL_MEAN AF_POOLING_MEAN
#define AF_POOL_LAST AF_POOLING_LAST

/* pooled [B, H] (overwritten) from hidden [n_tok, H], n_tok = seq_start[B]. */
void af_pool_forward(float *pooled, const float *hidden, const int32_t *seq_start, int32_t B, int64_t H,
                     af_pooling pool);
/* d_hidden [n_tok, H] += scatter of d_pooled [B, H] (mean: d/len to each token; last: to the last).
 * Tokens that the pooling does not read (LAST: all but the last of each sample) are left as they are. */
void af_pool_backward(float *d_hidden, const float *d_pooled, const int32_t *seq_start, int32_t B, int64_t H,
                      af_pooling pool);

/* logits [B, C] (overwritten) = pooled [B, H] · W[C, H]ᵀ + bias [C] (bias may be NULL). */
void af_head_forward(const af_ctx *ctx, float *logits, const float *pooled, const float *W, const float *bias, int32_t B, int64_t H,
                     int32_t C);
/* dW [C, H] += d_logitsᵀ · pooled; dbias [C] += column sums of d_logits [B, C] (may be NULL);
 * d_pooled [B, H] += d_logits · W (may be NULL when the pooled gradient is not needed). */
void af_head_backward(const af_ctx *ctx, float *d_pooled, float *dW, float *dbias, const float *d_logits, const float *pooled,
                      const float *W, int32_t B, int64_t H, int32_t C);

/* Weighted softmax CE over B samples; labels [B] in [0, C); class_w [C] (NULL = all 1).
 * Writes d_logits [B, C] (overwrites) and returns the mean loss (sum over samples / B; 0 for B = 0).
 * probs [B, C] (may be NULL) receives the softmax. A label outside [0, C) makes the return value NaN
 * and that sample's d_logits row zero (the engine validates labels before calling). Stable for any
 * finite logits (log-softmax with the row maximum subtracted). */
double af_ce_loss(float *d_logits, float *probs, const float *logits, const int32_t *labels, const float *class_w,
                  int32_t B, int32_t C);
/* BCE-with-logits over B samples with multi-hot targets [B, C] in {0, 1} (any t in [0, 1] works).
 * Writes d_logits [B, C] (overwrites) and returns the mean loss over the B·C entries (0 for B·C = 0). */
double af_bce_loss(float *d_logits, const float *logits, const float *targets, int32_t B, int32_t C);

#endif /* AF_HEAD_H */
