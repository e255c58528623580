/*
 * data.h — tokenized classification data sets: tokenize once, statistics, class weights, seeded
 * shuffling, stratified splits and PACKED batches (engine.h's af_batch layout: concatenated tokens
 * + seq_start offsets, no padding).
 *
 * Tokenization: af_tokenize(tok, text, len, add_special = 1, parse_special = 0) — the text is user
 * data, so "<|im_start|>" inside it is plain text; BOS/EOS are added as the model's metadata asks.
 * Truncation keeps the FIRST max_seq_len tokens (with add_special the BOS, if any, survives; an
 * appended EOS is cut with the tail).
 * Empty sequences: a text that yields no token (an empty string with a model that adds no BOS)
 * becomes ONE token — BOS if the model has one, else EOS — so every sample can be pooled; such
 * samples are counted in af_data_stats.n_empty (the printer and hparams diagnostics report them).
 * If the model has neither BOS nor EOS this is an error (AF_ERR_FORMAT naming file:line).
 * Tokenization runs over samples in parallel on the context's pool (af_tokenize is thread-safe on a shared
 * tokenizer: tokenizer.h, no mutable state after load).
 */
#ifndef AF_DATA_H
#define AF_DATA_H

#include "formats/jsonl.h"

#include <stdint.h>
#include <stdio.h>

struct af_dataset {
    int32_t n;                /* samples */
    int32_t num_classes;
    int multi_label;
    int32_t max_seq_len;      /* truncation length used (> 0) */
    int64_t *tok_off;         /* [n + 1] offsets into tokens; sample i = tokens[tok_off[i] .. tok_off[i+1]) */
    int32_t *tokens;          /* [tok_off[n]] token ids after truncation (every sample has >= 1 token) */
    int32_t *orig_len;        /* [n] token count before truncation (0 for an empty text) */
    int32_t *labels;          /* single-label: [n] class ids, -1 = unlabelled; NULL for multi-label */
    uint8_t *multi_hot;       /* multi-label: [n, num_classes] 0/1 targets; NULL for single-label */
    int32_t *line_no;         /* [n] source line (1-based), or NULL when built from arrays */
    char *path;               /* source file name (owned) or NULL */
    char **label_names;       /* [num_classes] owned copies, or NULL */
    /* causal-LM (SFT) data sets (num_classes 0, labels and multi_hot NULL): */
    uint8_t *target_mask;     /* [tok_off[n]] 1 where the token is a loss target, i.e. predicted from the
                                 token before it in the same sample (the first token of a sample is
                                 never a target); NULL for classification */
    int pairs;                /* 1: preference pairs (a causal-LM set of 2m samples: 2i the chosen side of
                                 pair i, 2i + 1 its rejected side; read by af_pref_dataset_read) */
};

/* af_dataset_build, af_dataset_size, af_dataset_free: include/afinar.h ("Data sets"). */

/* A data set from token arrays already made (tests, tools): sample i = ids[off[i] .. off[i+1]),
 * off [n + 1]; labels [n] (single-label, -1 allowed) or multi_hot [n, num_classes] (exactly one of
 * them non-NULL); everything is copied and truncated to max_seq_len. A sample with 0 tokens is an
 * error here (AF_ERR_INVALID_ARG), as is a label >= num_classes. */
af_status af_dataset_from_tokens(const int32_t *ids, const int64_t *off, int32_t n, const int32_t *labels,
                                 const uint8_t *multi_hot, int32_t num_classes, int32_t max_seq_len,
                                 af_dataset **out);

/* New data set holding samples idx[0..m) of `ds` in that order (copies); a preference set stays one
 * (pairs 1) when idx lists whole pairs (2i, 2i + 1). Errors: AF_ERR_INVALID_ARG (index out of range,
 * m < 1), AF_ERR_NOMEM. */
af_status af_dataset_subset(const af_dataset *ds, const int32_t *idx, int32_t m, af_dataset **out);
/* Truncate every sample of a classification data set to its first L tokens in place (L <= the
 * truncation length it was built with; orig_len keeps the lengths before truncation); ds->max_seq_len
 * becomes L. A causal-LM set (target_mask) is refused. Errors: AF_ERR_INVALID_ARG. */
af_status af_dataset_truncate(af_dataset *ds, int32_t L);

/* Number of tokens of sample i after truncation. */
static inline int32_t af_dataset_len(const af_dataset *ds, int32_t i) {
    return (int32_t)(ds->tok_off[i + 1] - ds->tok_off[i]);
}

/* ---- statistics ---- */
typedef struct af_data_stats {
    int32_t n, num_classes, multi_label, max_seq_len;
    int32_t n_labelled;       /* samples with a label (single) / with >= 1 positive (multi) */
    int64_t *class_count;     /* [num_classes] samples per class (multi: positives per class); owned */
    int32_t n_empty_classes;  /* classes with count 0 */
    int32_t min_class, max_class; /* argmin over classes with count > 0 / argmax (-1 if none) */
    double imbalance;         /* max count / min count over classes with count > 0 (1 when one class) */
    /* token lengths BEFORE truncation, nearest-rank percentiles: pX = sorted[ceil(X/100 · n) - 1]
       (Hyndman & Fan 1996, definition 1) */
    int32_t len_p50, len_p95, len_p99, len_max, len_min;
    double len_mean;
    int32_t *sorted_len;      /* [n] lengths before truncation, ascending; owned */
    int32_t n_truncated;      /* samples with orig_len > max_seq_len */
    int32_t n_empty;          /* samples whose text gave no token (see the header comment) */
    int64_t n_tokens;         /* tokens after truncation, all samples */
} af_data_stats;

/* Compute the statistics of `ds` into `*s` (overwritten; free with af_data_stats_free).
 * Errors: AF_ERR_NOMEM. */
af_status af_data_stats_compute(const af_dataset *ds, af_data_stats *s);
void af_data_stats_free(af_data_stats *s);

/* Samples whose length before truncation exceeds L (from sorted_len; binary search). */
int32_t af_data_stats_count_longer(const af_data_stats *s, int32_t L);

/* Human-readable summary to fp: sizes, per-class counts (with names when given; `names` may be
 * NULL), imbalance, length percentiles, truncation. `title` (may be NULL) heads the block. */
void af_data_stats_print(const af_data_stats *s, const char *const *names, const char *title, FILE *fp);

/* ---- class weights ---- */
/* Weights w [num_classes] for the weighted cross-entropy (head.h) from a spec:
 *   "uniform"       w_c = 1
 *   "inverse-freq"  w_c = N / (K · n_c)            (sklearn compute_class_weight("balanced"))
 *   "sqrt-inverse"  w_c = N / (sqrt(n_c) · Σ_k sqrt(n_k))
 *   "w1,w2,...,wC"  exactly num_classes finite numbers > 0, used as given (no normalisation)
 * n_c = s->class_count[c], N = Σ_c n_c, K = number of classes with n_c > 0. Both automatic forms
 * are normalised so that the weight AVERAGED OVER SAMPLES is 1: Σ_c n_c · w_c / N = 1, keeping the
 * loss scale (and so the learning rate) comparable with uniform weights. A class with n_c = 0
 * gets w_c = 1 (it never appears in the training loss). For multi-label data n_c counts positives.
 * Errors: AF_ERR_INVALID_ARG naming the spec and the problem (unknown name, wrong count, value). */
af_status af_class_weights(const af_data_stats *s, const char *spec, float *w);

/* ---- seeded shuffling (identical on every platform) ---- */
/* splitmix64 (Steele, Lea & Flood 2014; the generator of Vigna's xoshiro seeding): advances *state
 * by 0x9E3779B97F4A7C15 and returns the mixed value. */
uint64_t af_splitmix64(uint64_t *state);
/* Uniform integer in [0, bound) from splitmix64 by rejection (no modulo bias); bound >= 1. */
uint64_t af_rand_below(uint64_t *state, uint64_t bound);
/* perm [n] = a permutation of 0..n-1: Fisher-Yates (Durstenfeld) driven by splitmix64 seeded with
 * `seed` mixed with `epoch`, so epoch e of seed s always gives the same order. */
void af_shuffle_perm(int32_t *perm, int32_t n, uint64_t seed, uint64_t epoch);
/* Shuffle an existing array of n int32 in place (same generator, state seeded by `seed`). */
void af_shuffle_i32(int32_t *a, int32_t n, uint64_t seed);

/* Stratified split into train/val index lists (ascending indices inside each list).
 * Strata: the label (single-label; unlabelled samples form one stratum) or the lowest positive class
 * (multi-label; none = one stratum). Per stratum of size m, round(val_frac · m) samples (half away
 * from zero) go to val, chosen by a seeded shuffle — but at least one stays in train. 0 < val_frac
 * < 1. `*train_idx`, `*val_idx`: malloc'ed, caller frees. Errors: AF_ERR_INVALID_ARG (val_frac out
 * of range, or val would be empty), AF_ERR_NOMEM. */
af_status af_dataset_split_stratified(const af_dataset *ds, double val_frac, uint64_t seed, int32_t **train_idx,
                                      int32_t *n_train, int32_t **val_idx, int32_t *n_val);

/* ---- packed batches ---- */
/* One packed batch; field for field what engine.h's af_batch wants:
 *   af_batch b = {pb.tokens, pb.seq_start, pb.n_samples, pb.n_tok, pb.labels, pb.multi_hot, pb.targets};
 * All pointers are borrowed from the batcher and valid until its next call. */
typedef struct af_packed_batch {
    const int32_t *tokens;    /* [n_tok] */
    const int32_t *seq_start; /* [n_samples + 1], seq_start[0] = 0 */
    int32_t n_samples;
    int64_t n_tok;
    const int32_t *labels;    /* [n_samples] (single-label) or NULL */
    const float *multi_hot;   /* [n_samples, num_classes] (multi-label) or NULL */
    const int32_t *index;     /* [n_samples] data-set index of each sample */
    const int32_t *targets;   /* causal-LM: [n_tok] target of each position: tokens[i + 1] when token
                                 i + 1 is in the same sample and has target_mask 1, else -1; NULL for
                                 classification */
} af_packed_batch;

typedef struct af_batcher af_batcher;

/* Iterate over `ds` (borrowed; must outlive the batcher) in batches of at most batch_size samples,
 * in the order order[0..n_order) (copied; NULL = 0..ds->n-1). The last batch may be smaller.
 * `*out`: free with af_batcher_free. Errors: AF_ERR_INVALID_ARG (batch_size < 1, index out of
 * range), AF_ERR_NOMEM. */
af_status af_batcher_new(const af_dataset *ds, const int32_t *order, int32_t n_order, int32_t batch_size,
                         af_batcher **out);
/* Restart from the beginning; a non-NULL `order` [n_order given at creation] replaces the order. */
af_status af_batcher_reset(af_batcher *b, const int32_t *order);
/* Next batch into *pb: returns 1; 0 when the pass is over (*pb untouched); -1 on failure
 * (AF_ERR_NOMEM / AF_ERR_RANGE, message via af_last_error()). */
int af_batcher_next(af_batcher *b, af_packed_batch *pb);
/* Pack an arbitrary list of samples idx [m] (m >= 1) into *pb (reuses the batcher's buffers).
 * Errors: AF_ERR_INVALID_ARG (index out of range), AF_ERR_NOMEM. */
af_status af_batcher_pack(af_batcher *b, const int32_t *idx, int32_t m, af_packed_batch *pb);
/* Batches per pass: ceil(n_order / batch_size). */
int64_t af_batcher_count(const af_batcher *b);
void af_batcher_free(af_batcher *b);

/* ---- causal-LM data sets from token arrays (tests, tools) ---- */
/* Sample i = ids[off[i] .. off[i+1]) (off [n + 1]) with its loss mask mask[off[i] .. off[i+1])
 * (1 = the token is a target, predicted from the token before it; so the first token of a sample
 * may not be 1). Everything is copied; truncation keeps the first max_seq_len tokens (and their
 * mask). num_classes 0, labels and multi_hot NULL, target_mask set (the struct's contract above).
 * Samples left without any target are kept (the JSONL reader drops them; af_lm_dataset_read).
 * Errors: AF_ERR_INVALID_ARG (n < 1, NULL array, max_seq_len < 1, an empty sample, a target on a
 * sample's first token: the message names the sample), AF_ERR_NOMEM. */
af_status af_dataset_from_tokens_lm(const int32_t *ids, const int64_t *off, int32_t n, const uint8_t *mask,
                                    int32_t max_seq_len, af_dataset **out);

/* Target tokens of sample i of a causal-LM set (target_mask 1 after its first token); 0 without a mask. */
int64_t af_dataset_n_targets(const af_dataset *ds, int32_t i);

/* Packing of causal-LM micro-batches by best-fit decreasing (Johnson 1973; the bin-packing used
 * for SFT packing, e.g. TRL's packing_strategy="bfd"): the samples order[0..n) (NULL: 0..n-1) are
 * sorted by length, longest first (ties keep the given order, e.g. an epoch's shuffle), and each
 * goes into the bin with the least room left that still holds it (a new bin when none does); a bin
 * holds at most `budget` tokens. Samples are never split (each is already truncated to
 * max_seq_len <= budget). The bins are then put in the order of af_shuffle_i32(shuffle_seed).
 * Output: idx [n] the sample indices bin after bin, off [n + 1] bin q = idx[off[q] .. off[q+1]),
 * *n_bins. The bin count depends only on the multiset of lengths, so it is the same for every
 * shuffle of the same samples. Errors: AF_ERR_INVALID_ARG (n < 1, budget < 1, index out of range,
 * a sample longer than budget), AF_ERR_NOMEM. */
af_status af_pack_bfd(const af_dataset *ds, const int32_t *order, int32_t n, int64_t budget, uint64_t shuffle_seed,
                      int32_t *idx, int32_t *off, int32_t *n_bins);

/* ---- preference pairs (causal-LM data of chosen / rejected sides; train/lm_data.c) ---- */
/* What af_pref_dataset_read found, per pair (the diagnostics of `afinar check --task dpo`). */
typedef struct af_pref_data_report {
    int32_t n_read, n_kept;        /* pairs in the file / in the data set */
    int32_t n_prompt_too_long;     /* dropped: the prompt alone fills max_seq_len (no completion token left) */
    int32_t n_dropped_other;       /* dropped: a side without any target token (empty completion) */
    int32_t first_dropped_line;    /* 0: none */
    int32_t n_truncated;           /* kept pairs with a side longer than max_seq_len (its completion cut) */
    int32_t n_identical;           /* pairs whose chosen and rejected sides are the same tokens (no signal) */
    int32_t first_identical_line;  /* 0: none */
    int32_t prompt_p50, prompt_max;/* prompt tokens (before the first target token), nearest-rank median, max */
    double chosen_tokens_mean, rejected_tokens_mean; /* completion (target) tokens before truncation */
    int32_t n_length_far;          /* pairs with one completion more than twice as long as the other */
} af_pref_data_report;

/* Read a preference file (formats/pref_jsonl.h: TRL's prompt/chosen/rejected, implicit prompt,
 * conversations; JSONL, CSV or TSV) and tokenize both sides of every pair as af_lm_dataset_read
 * tokenizes a prompt/completion example (o->report: the per-side report; o->loss_on must be auto).
 * A pair is kept or dropped whole. `*out`: pairs = 1, n = 2 × kept pairs; *pref (may be NULL) the
 * pair report. Errors: those of af_lm_dataset_read and af_pref_corpus_read, AF_ERR_INVALID_ARG
 * (loss_on all). */
af_status af_pref_dataset_read(const af_ctx *ctx, const char *path, const af_model *model, const af_lm_data_opts *o,
                               af_pref_data_report *pref, af_dataset **out);
/* A pair report as indented lines to fp (title may be NULL); "warning:" lines for identical pairs and
 * prompts that fill max_seq_len. */
void af_pref_data_report_print(const af_pref_data_report *r, int32_t max_seq_len, const char *title, FILE *fp);

#endif /* AF_DATA_H */
