/* hf_describe.c — af_model_describe(): `afinar info` for a GGUF file or a Hugging Face directory. */
#include "afinar.h"
#include "formats/hf_config.h"
#include "tokenizer/tokenizer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void print_config(FILE *fp, const af_hf_config *c) {
    fprintf(fp, "model_type:    %s (architecture %s)\n", c->model_type, c->architecture);
    fprintf(fp, "dtype:         %s\n", c->dtype[0] ? c->dtype : "(not given)");
    fprintf(fp, "\nhyper-parameters (config.json):\n");
    fprintf(fp, "  %-26s %d\n", "hidden_size", c->hidden_size);
    fprintf(fp, "  %-26s %d\n", "num_hidden_layers", c->num_hidden_layers);
    fprintf(fp, "  %-26s %d\n", "intermediate_size", c->intermediate_size);
    fprintf(fp, "  %-26s %d\n", "num_attention_heads", c->num_attention_heads);
    fprintf(fp, "  %-26s %d\n", "num_key_value_heads", c->num_key_value_heads);
    fprintf(fp, "  %-26s %d\n", "head_dim", c->head_dim);
    fprintf(fp, "  %-26s %g\n", "rms_norm_eps", (double)c->rms_norm_eps);
    fprintf(fp, "  %-26s %g\n", "rope_theta", (double)c->rope_theta);
    fprintf(fp, "  %-26s %d\n", "max_position_embeddings", c->max_position_embeddings);
    fprintf(fp, "  %-26s %d\n", "vocab_size", c->vocab_size);
    fprintf(fp, "  %-26s %s\n", "tie_word_embeddings", c->tie_word_embeddings ? "true" : "false");
    if (c->sliding_window) {
        fprintf(fp, "  %-26s %" PRId64 "\n", "sliding_window", c->sliding_window);
        fprintf(fp, "  %-26s %g\n", "rope_local_base_freq", (double)c->rope_theta_swa);
        if (c->layer_sliding) {
            fprintf(fp, "  %-26s ", "layer_types");
            for (int i = 0; i < c->num_hidden_layers; i++) fputc(c->layer_sliding[i] ? 'S' : 'G', fp);
            fprintf(fp, " (S sliding, G global)\n");
        } else if (c->sliding_window_pattern) {
            fprintf(fp, "  %-26s %d\n", "sliding_window_pattern", c->sliding_window_pattern);
        }
    }
    if (c->layer_head_dim) { /* gemma4: per-layer sizes, KV sharing, PLE */
        const int32_t *arr[3] = {c->layer_head_dim, c->layer_kv_heads, c->layer_ff};
        const char *nm[3] = {"head_dim per layer", "num_key_value_heads/layer", "intermediate_size/layer"};
        for (int k = 0; k < 3; k++) {
            fprintf(fp, "  %-26s", nm[k]);
            for (int i = 0; i < c->num_hidden_layers; i++) fprintf(fp, "%s%d", i ? "," : " ", arr[k][i]);
            fputc('\n', fp);
        }
        fprintf(fp, "  %-26s %d\n", "num_kv_shared_layers", c->num_kv_shared_layers);
        fprintf(fp, "  %-26s %d\n", "hidden_size_per_layer_input", c->hidden_size_per_layer_input);
        fprintf(fp, "  %-26s %s\n", "attention_k_eq_v", c->attention_k_eq_v ? "true" : "false");
        fprintf(fp, "  %-26s %g\n", "partial_rotary_factor (full)", (double)c->rope_partial_full);
    }
    if (c->query_pre_attn_scalar > 0) fprintf(fp, "  %-26s %g\n", "query_pre_attn_scalar", (double)c->query_pre_attn_scalar);
    if (c->final_logit_softcapping > 0)
        fprintf(fp, "  %-26s %g\n", "final_logit_softcapping", (double)c->final_logit_softcapping);
    fprintf(fp, "  %-26s %d / %d / %d\n", "bos / eos / pad token id", c->bos_token_id, c->eos_token_id, c->pad_token_id);
}

static af_status describe_dir(const char *dir, FILE *fp) {
    char *js = NULL;
    size_t jl = 0;
    char label[600];
    snprintf(label, sizeof label, "%s/config.json", dir);
    af_status cst = af_hf_read_json_file(dir, "config.json", (size_t)16 << 20, &js, &jl);
    if (cst == AF_ERR_NOT_FOUND)
        return af_fail(AF_ERR_NOT_FOUND, "%s: a directory without config.json (not a Hugging Face checkpoint)", dir);
    fprintf(fp, "directory:     %s (Hugging Face checkpoint)\n", dir);
    af_hf_config c;
    memset(&c, 0, sizeof c);
    if (cst == AF_OK) cst = af_hf_config_parse(js, jl, label, &c);
    free(js);
    char cerr[512] = "";
    if (cst == AF_OK) print_config(fp, &c);
    else {
        snprintf(cerr, sizeof cerr, "%s", af_last_error());
        fprintf(fp, "config.json:   not usable: %s\n", cerr);
    }
    af_hf_config_free(&c);

    af_tokenizer *tok = NULL;
    fprintf(fp, "\ntokenizer:\n");
    if (af_tokenizer_load_hf(dir, &tok) == AF_OK) {
        fprintf(fp, "  %s\n", af_tokenizer_describe(tok));
        fprintf(fp, "  bos %d, eos %d, chat template: %s\n", af_token_bos(tok), af_token_eos(tok),
                af_tokenizer_chat_template(tok) ? "yes" : "no");
        af_tokenizer_free(tok);
    } else {
        fprintf(fp, "  none: %s\n", af_last_error());
    }

    af_hf_weights *w = NULL;
    af_status st = af_hf_weights_open(dir, &w);
    if (st != AF_OK) return st;
    size_t nf = af_hf_weights_n_files(w);
    fprintf(fp, "\nweights: %zu SafeTensors file%s, %" PRIu64 " bytes\n", nf, nf == 1 ? "" : "s",
            af_hf_weights_bytes(w));
    fprintf(fp, "\ntensors (shape [out, in]):\n");
    fprintf(fp, "  %-52s %-5s %-18s %12s  %s\n", "name", "dtype", "shape", "bytes", "file");
    uint64_t params = 0, bytes = 0, nt = 0;
    for (size_t i = 0; i < nf; i++) {
        const af_st_file *f = af_hf_weights_file(w, i);
        const char *fn = strrchr(af_st_path(f), '/');
        fn = fn ? fn + 1 : af_st_path(f);
        for (size_t k = 0; k < af_st_count(f); k++) {
            const af_st_tensor *t = af_st_tensor_at(f, k);
            char shape[96];
            int o = snprintf(shape, sizeof shape, "[");
            for (int d = 0; d < t->n_dims && o < (int)sizeof shape; d++)
                o += snprintf(shape + o, sizeof shape - (size_t)o, "%" PRId64 "%s", t->shape[d],
                              d + 1 < t->n_dims ? ", " : "");
            if (o < (int)sizeof shape - 1) snprintf(shape + o, sizeof shape - (size_t)o, "]");
            params += t->n_elem;
            bytes += t->end - t->begin;
            nt++;
            fprintf(fp, "  %-52s %-5s %-18s %12" PRIu64 "  %s\n", t->name, af_st_dtype_name(t->dtype), shape,
                    t->end - t->begin, fn);
        }
    }
    fprintf(fp, "\ntotals: %" PRIu64 " tensors, %" PRIu64 " parameters (%.1f M), %" PRIu64 " bytes (%.1f MiB)\n", nt,
            params, (double)params / 1e6, bytes, (double)bytes / (1024.0 * 1024.0));
    af_hf_weights_close(w);
    if (ferror(fp)) return af_fail(AF_ERR_IO, "%s: describe: error writing the output", dir);
    if (cst != AF_OK) return af_fail(cst, "%s", cerr);
    return AF_OK;
}

af_status af_model_describe(const char *path, FILE *fp) {
    if (!path || !fp) return af_fail(AF_ERR_INVALID_ARG, "af_model_describe: NULL argument");
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return describe_dir(path, fp);
    return af_gguf_describe(path, fp);
}
