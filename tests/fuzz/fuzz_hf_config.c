/*
 * fuzz_hf_config.c — libFuzzer target for the Hugging Face config.json reader
 * (src/formats/hf_config.c af_hf_config_parse). The input is the whole config.json text.
 * Oracles after a successful parse: every integer field inside the range the reader promises,
 * positive eps / RoPE bases, layer_types only when its length is num_hidden_layers (the array is
 * read in full here, so ASan sees any short allocation); gemma4's per-layer arrays likewise. Returns af_hf_config_parse's status.
 */
#include "fuzz/fuzz_common.h"
#include "formats/hf_config.h"

af_status fz_hf_config_one(const uint8_t *data, size_t size) {
    af_hf_config c;
    af_status st = af_hf_config_parse((const char *)data, size, "fuzz/config.json", &c);
    if (st != AF_OK) {
        af_clear_error();
        return st;
    }
    FZ_ASSERT(c.hidden_size >= 1 && c.hidden_size <= 65536);
    FZ_ASSERT(c.num_hidden_layers >= 1 && c.num_hidden_layers <= AF_HF_MAX_LAYERS);
    FZ_ASSERT(c.num_attention_heads >= 1 && c.num_key_value_heads >= 1 && c.head_dim >= 1);
    FZ_ASSERT(c.vocab_size >= 1 && c.intermediate_size >= 1 && c.max_position_embeddings >= 1);
    FZ_ASSERT(c.rms_norm_eps > 0 && c.rope_theta > 0 && c.rope_theta_swa > 0);
    FZ_ASSERT(c.architecture[0] && c.model_type[0]);
    int sliding = 0;
    for (int i = 0; c.layer_sliding && i < c.num_hidden_layers; i++) sliding += c.layer_sliding[i];
    FZ_ASSERT(sliding <= c.num_hidden_layers);
    for (int i = 0; c.layer_head_dim && i < c.num_hidden_layers; i++) /* gemma4: the per-layer arrays in full */
        FZ_ASSERT(c.layer_head_dim[i] >= 1 && c.layer_kv_heads[i] >= 1 && c.layer_ff[i] >= 1 && c.layer_sliding);
    FZ_ASSERT(c.num_kv_shared_layers >= 0 && c.num_kv_shared_layers < c.num_hidden_layers);
    FZ_ASSERT(c.hidden_size_per_layer_input >= 0 && c.rope_partial_full >= 0 && c.rope_partial_full <= 1);
    af_hf_config_free(&c);
    return st;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_hf_config_one(data, size);
    return 0;
}
#endif
