/*
 * trainer_lmdata.c — the causal-LM data of a training run: the files read with af_lm_dataset_read
 * (preference runs: af_pref_dataset_read, the same reader keeping pairs whole),
 * max_seq_len from the data when the user gave none (af_recipe_lm_max_seq_len, recipe.h). The
 * counts of dropped and truncated examples (and the warning above 1% dropped) are in the reader's
 * report (af_lm_data_report_print). See trainer_internal.h.
 */
#include "train/trainer_internal.h"

#include <stdlib.h>
#include <string.h>

/* Tokens read when max_seq_len is to be chosen and the model does not state its context. */
#define LM_READ_MAX (1 << 20)

/* The one call into the causal-LM reader (af_lm_dataset_read) at truncation length L. */
static af_status read_lm_file(af_trainer *t, const char *path, int32_t L, af_lm_data_report *rep, af_dataset **out) {
    const int val = rep == &t->lm_rep_val;
    const af_trainer_opts *o = t->o;
    af_lm_data_opts lo;
    af_lm_data_opts_init(&lo);
    lo.max_seq_len = L;
    lo.loss_on = o->loss_on;
    lo.chat_template = o->chat_template;
    lo.report = rep;
    if (t->pref) return af_pref_dataset_read(t->ctx, path, t->model, &lo, val ? &t->pref_rep_val : &t->pref_rep_train, out);
    return af_lm_dataset_read(t->ctx, path, t->model, &lo, out);
}

af_status af_tr_lm_read(af_trainer *t, af_trainer_opts *plan) {
    af_trainer_opts *o = plan;
    const int choose = o->recipe == AF_RECIPE_AUTO && !(o->given & AF_GIVEN_MAX_SEQ_LEN);
    if (!choose) {
        AF_TRY(read_lm_file(t, o->train_path, o->max_seq_len, &t->lm_rep_train, &t->train_owned));
    } else {
        const int32_t ctxlen = t->model->cfg.max_position_embeddings;
        const int32_t Lread = ctxlen > 0 && ctxlen < LM_READ_MAX ? ctxlen : LM_READ_MAX;
        AF_TRY(read_lm_file(t, o->train_path, Lread, &t->lm_rep_train, &t->train_owned));
        af_data_stats s;
        AF_TRY(af_data_stats_compute(t->train_owned, &s));
        char *why = t->lm_len_why;
        int64_t longer = 0;
        const int32_t L = af_recipe_lm_max_seq_len(s.sorted_len, s.n, ctxlen, af_tr_mem_tokens(t), o->batch, &longer,
                                                   why, sizeof t->lm_len_why);
        af_data_stats_free(&s);
        if (L < 1) return af_fail(AF_ERR_INVALID_ARG, "%s: no example to choose max_seq_len from", o->train_path);
        if (L < Lread) { /* tokenized again at L: the reader drops and counts what L cuts off */
            af_dataset_free(t->train_owned);
            t->train_owned = NULL;
            AF_TRY(read_lm_file(t, o->train_path, L, &t->lm_rep_train, &t->train_owned));
        }
        o->max_seq_len = L;
        t->budget = (int64_t)o->batch * L;
        t->lm_len_chosen = 1;
        if (o->log) fprintf(o->log, "causal LM: %s (--max-seq-len N to set it)\n", why);
    }
    t->have_lm_rep = 1;
    if (o->val_path) {
        AF_TRY(read_lm_file(t, o->val_path, o->max_seq_len, &t->lm_rep_val, &t->val_owned));
        t->have_lm_rep = 2;
    }
    return AF_OK;
}
