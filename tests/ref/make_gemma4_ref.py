#!/usr/bin/env python3
"""A tiny randomly initialised Gemma 4 text model (transformers Gemma4ForCausalLM, fixed seed,
awkward dimensions), written as a GGUF with llama.cpp's gemma4 names and metadata (the `gguf`
package, as convert_hf_to_gguf.py's Gemma4Model writes them) and as a Hugging Face directory
(save_pretrained + tokenizer.json), plus the reference outputs tests/test_gemma4.c compares afinar
against.

Model (f32): vocabulary of a small SentencePiece-style BPE trained here with HF `tokenizers`
(normalizer Replace(' ', U+2581), byte fallback, Gemma-style special tokens), hidden 32, 4 query heads,
6 layers of types S S S G S G (S sliding window 4, G global), sliding layers head_dim 12 (!= 32/4)
with ONE key/value head, global layers head_dim 16 with 2 key/value heads (per_layer_config) and
attention_k_eq_v (no v_proj: v = k projection), num_kv_shared_layers 2 (layer 4 reuses layer 2's K/V,
layer 5 layer 3's; llama.cpp's fixed rule picks the same layers), use_double_wide_mlp (FFN 24, 48 on
the shared layers), per-layer input embeddings of width 8 (PLE), proportional RoPE on global layers
(partial_rotary_factor 0.25: 2 of 8 frequency pairs rotate, theta 1e6), sliding theta 1e4, random
layer_scalar (the per-layer output scale), final_logit_softcapping 8, tied LM head.
Weights: embeddings N(0, 0.15^2) (PLE table N(0, 0.3^2)); projections N(0, (s/sqrt(in))^2), s = 1.2;
norm weights 1 + U(-0.3, 0.3) (Gemma 4 uses them as stored); layer_scalar U(0.6, 1.4).

GGUF metadata as convert_hf_to_gguf.py Gemma4Model writes it: gemma4.context_length,
embedding_length, block_count, feed_forward_length (per-layer array: the double-wide layers),
attention.head_count, attention.head_count_kv (per-layer array), attention.key_length /
value_length (global head_dim), key_length_swa / value_length_swa, rope.dimension_count (global
head_dim: the partial rotation is in rope_freqs), rope.dimension_count_swa, rope.freq_base,
rope.freq_base_swa, attention.sliding_window, attention.sliding_window_pattern (bool per layer),
attention.shared_kv_layers, embedding_length_per_layer_input, final_logit_softcapping,
attention.layer_norm_rms_epsilon; tensors token_embd, output_norm, rope_freqs ([1]*2 + [1e30]*6),
per_layer_token_embd, per_layer_model_proj, per_layer_proj_norm, blk.N.{attn_norm, attn_q, attn_k,
attn_v, attn_output, attn_q_norm, attn_k_norm, post_attention_norm, ffn_norm, ffn_gate, ffn_up,
ffn_down, post_ffw_norm, layer_output_scale, inp_gate, proj, post_norm} (k/v/k_norm absent on the
KV-sharing layers, v absent on the global layers). Tokenizer: tokenizer.ggml.model "gemma4" (tokens,
scores, token types, merges), bos/eos/unknown/padding ids, add_bos_token true.

References (float32, eager attention), file format as tests/ref/make_qwen_ref.py's (magic "AFG4")
except that the LoRA gradients are written only for the modules PEFT creates, each preceded by
u32 layer, u32 projection (0 q .. 6 down):
  logits of every position for 2 token sequences (7 and 19 tokens); a greedy continuation of 10
  tokens (full forward each step); PEFT LoRA (r 4, alpha 8, dropout 0, q/k/v/o/gate/up/down wherever
  the module exists; A and B from tests/peft_fixture.h's formulas) gradients for (a) classification
  (mean pooling of the final normed states + Linear(H, 3), 3 samples) and (b) causal LM (3 samples,
  masked targets, Σ CE / targets); tokenizer ids of a few strings (HF tokenizers); the text of
  apply_chat_template (generation prompt) for 3 conversations with the template GEMMA4_TEMPLATE below
  (u32 n; per conversation u32 n_msgs, per message u32 role (0 system, 1 user, 2 assistant), u32 len,
  bytes; then u32 len, bytes of the rendered text).

Run:  .venv-ref/bin/python tests/ref/make_gemma4_ref.py
Output: tests/fixtures/tiny_gemma4.gguf, tests/fixtures/gemma4_ref.bin, tests/fixtures/hf_tiny_gemma4/
"""
import json
import os
import shutil
import struct
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np
import torch
import gguf
from peft import LoraConfig, get_peft_model
from tokenizers import Tokenizer, decoders, models, normalizers, trainers
from transformers import Gemma4ForCausalLM, Gemma4TextConfig, PreTrainedTokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_qwen_ref import lora_a, lora_b, write_lora_refs  # noqa: E402  (tests/peft_fixture.h's formulas)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures")
PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
R, ALPHA = 4, 8.0
SEED = 2026
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<turn|>", "<|channel>", "<channel|>"]
# Written for this test: the plain-message layout of Gemma 4's chat template (a system turn, user/model
# turns with trimmed content, the generation prompt with an empty thought channel); afinar reproduces
# the layout, not the Jinja (src/tokenizer/chat.c render_gemma4).
GEMMA4_TEMPLATE = (
    "{{- bos_token -}}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {{- '<|turn>system\\n' + messages[0]['content'] | trim + '<turn|>\\n' -}}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}\n"
    "    {{- '<|turn>' + role + '\\n' + message['content'] | trim + '<turn|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{- '<|turn>model\\n<|channel>thought\\n<channel|>' -}}\n"
    "{%- endif -%}\n")
CHATS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "  You answer briefly. "}, {"role": "user", "content": "Name a colour.\n"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " Hello! "},
     {"role": "user", "content": "Tell me a fact about café culture."}],
]
LAYER_TYPES = ["sliding_attention"] * 3 + ["full_attention", "sliding_attention", "full_attention"]

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.",
    "Gemma models use a SentencePiece-style BPE with byte fallback for rare characters.",
    "It's 2026 and we're testing tokenizers: don't, won't, they'll, I'd, you've.",
    "Per-layer embeddings add a small learned vector to every layer of the model.",
    "Les chats sont des animaux domestiques. Über Straßen und Flüsse.",
] * 20
TOK_STRINGS = [
    "Hello world! The quick brown fox.",
    "numbers 12345 and 3.14159, it's they'll",
    "  leading spaces and\ttabs",
    "Über Straßen: naïve café 東京 😀",
    "<|turn>user\nhi<turn|>",
]


def build_tokenizer():
    """SentencePiece-style BPE as Gemma's tokenizer.json: Replace(' ', U+2581), no pre-tokenizer,
    byte fallback; vocabulary = specials, the 256 byte tokens, then the learned pieces."""
    t = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    t.normalizer = normalizers.Replace(" ", "\u2581")
    tr = trainers.BpeTrainer(vocab_size=200, show_progress=False, special_tokens=[])
    t.train_from_iterator(CORPUS, trainer=tr)
    js = json.loads(t.to_str())
    learned = sorted(js["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {}
    for s in SPECIALS + ["<0x%02X>" % b for b in range(256)]:
        vocab[s] = len(vocab)
    for s, _ in learned:
        if s not in vocab:
            vocab[s] = len(vocab)
    merges = [tuple(m) if not isinstance(m, str) else tuple(m.split(" ")) for m in js["model"]["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens(SPECIALS)
    return tok


def vocab_merges(tok):
    js = json.loads(tok.to_str())
    vocab = dict(js["model"]["vocab"])
    toks = [None] * len(vocab)
    for s, i in vocab.items():
        toks[i] = s
    merges = [m if isinstance(m, str) else " ".join(m) for m in js["model"]["merges"]]
    return toks, merges


def randomize(model, seed, pscale):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + (torch.rand(p.shape, generator=g) - 0.5) * 0.6)
            elif "embed_tokens_per_layer" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (pscale / np.sqrt(p.shape[1])))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(0.6 + 0.8 * torch.rand(b.shape, generator=g))


def write_gguf(path, model, cfg, toks, merges):
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    L = cfg.num_hidden_layers
    swa = [t == "sliding_attention" for t in cfg.layer_types]
    first_shared = L - cfg.num_kv_shared_layers
    lc = cfg.per_layer_config
    hd_full = lc[LAYER_TYPES.index("full_attention")].head_dim
    nkv_full = lc[LAYER_TYPES.index("full_attention")].num_key_value_heads
    hd_swa = lc[LAYER_TYPES.index("sliding_attention")].head_dim
    nkv_swa = lc[LAYER_TYPES.index("sliding_attention")].num_key_value_heads
    w = gguf.GGUFWriter(path + ".tmp", "gemma4")
    w.add_name("tiny-gemma4")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(L)
    w.add_feed_forward_length([cfg.intermediate_size * (2 if il >= first_shared else 1) for il in range(L)])
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv([nkv_swa if s else nkv_full for s in swa])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_key_length(hd_full)
    w.add_value_length(hd_full)
    w.add_key_length_swa(hd_swa)
    w.add_value_length_swa(hd_swa)
    w.add_rope_freq_base(cfg.rope_parameters["full_attention"]["rope_theta"])
    w.add_rope_freq_base_swa(cfg.rope_parameters["sliding_attention"]["rope_theta"])
    w.add_rope_dimension_count(hd_full)
    w.add_rope_dimension_count_swa(hd_swa)
    w.add_final_logit_softcapping(cfg.final_logit_softcapping)
    w.add_sliding_window(cfg.sliding_window)
    w.add_sliding_window_pattern(swa)
    w.add_shared_kv_layers(cfg.num_kv_shared_layers)
    w.add_embedding_length_per_layer_input(cfg.hidden_size_per_layer_input)
    w.add_file_type(0)  # all f32
    w.add_tokenizer_model("gemma4")
    w.add_token_list(toks)
    w.add_token_scores([-float(i) for i in range(len(toks))])
    w.add_token_types([3 if t in SPECIALS else 6 if t.startswith("<0x") else 1 for t in toks])
    w.add_token_merges(merges)
    w.add_bos_token_id(toks.index("<bos>"))
    w.add_eos_token_id(toks.index("<eos>"))
    w.add_unk_token_id(toks.index("<unk>"))
    w.add_pad_token_id(toks.index("<pad>"))
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)
    w.add_chat_template(GEMMA4_TEMPLATE)
    # convert_hf_to_gguf.py Gemma4Model.generate_extra_tensors: proportional RoPE as frequency factors
    part = cfg.rope_parameters["full_attention"]["partial_rotary_factor"]
    n_rot = int(hd_full * part / 2)
    w.add_tensor("rope_freqs.weight", np.array([1.0] * n_rot + [1e30] * (hd_full // 2 - n_rot), dtype=np.float32))
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("per_layer_token_embd.weight", sd["model.embed_tokens_per_layer.weight"])
    w.add_tensor("per_layer_model_proj.weight", sd["model.per_layer_model_projection.weight"])
    w.add_tensor("per_layer_proj_norm.weight", sd["model.per_layer_projection_norm.weight"])
    names = {"self_attn.q_proj.weight": "attn_q", "self_attn.k_proj.weight": "attn_k",
             "self_attn.v_proj.weight": "attn_v", "self_attn.o_proj.weight": "attn_output",
             "self_attn.q_norm.weight": "attn_q_norm", "self_attn.k_norm.weight": "attn_k_norm",
             "input_layernorm.weight": "attn_norm", "post_attention_layernorm.weight": "post_attention_norm",
             "pre_feedforward_layernorm.weight": "ffn_norm", "post_feedforward_layernorm.weight": "post_ffw_norm",
             "mlp.gate_proj.weight": "ffn_gate", "mlp.up_proj.weight": "ffn_up", "mlp.down_proj.weight": "ffn_down",
             "layer_scalar": "layer_output_scale", "per_layer_input_gate.weight": "inp_gate",
             "per_layer_projection.weight": "proj", "post_per_layer_input_norm.weight": "post_norm"}
    for l in range(L):
        for hf, gg in names.items():
            key = "model.layers.%d.%s" % (l, hf)
            if key in sd:
                w.add_tensor("blk.%d.%s.weight" % (l, gg), sd[key])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".tmp", path)


def peft_model(model):
    cfg = LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=PROJ, bias="none")
    pm = get_peft_model(model, cfg)
    mods = []
    for l, layer in enumerate(pm.base_model.model.model.layers):
        for p, name in enumerate(PROJ):
            parent = layer.self_attn if p < 4 else layer.mlp
            m = getattr(parent, name, None)
            if m is None:
                continue  # a KV-sharing layer's k/v, a k_eq_v layer's v: no module, no adapter
            A, B = m.lora_A["default"].weight, m.lora_B["default"].weight
            with torch.no_grad():
                A.copy_(torch.from_numpy(lora_a(l, p, A.shape[0], A.shape[1])))
                B.copy_(torch.from_numpy(lora_b(l, p, B.shape[0], B.shape[1])))
            mods.append((l, p, A, B))
    return pm, mods


def put_grads(f, mods):
    f.write(struct.pack("<I", len(mods)))
    for l, p, A, B in mods:
        f.write(struct.pack("<4I", l, p, A.shape[1], B.shape[0]))
        f.write(A.grad.numpy().astype("<f4").tobytes())
        f.write(B.grad.numpy().astype("<f4").tobytes())
        A.grad = None
        B.grad = None


def main():
    torch.set_num_threads(2)
    tok = build_tokenizer()
    toks, merges = vocab_merges(tok)
    V = len(toks)
    cfg = Gemma4TextConfig(
        vocab_size=V, hidden_size=32, intermediate_size=24, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=1, head_dim=12, global_head_dim=16, num_global_key_value_heads=2,
        layer_types=LAYER_TYPES, sliding_window=4, num_kv_shared_layers=2, hidden_size_per_layer_input=8,
        vocab_size_per_layer_input=V, attention_k_eq_v=True, use_double_wide_mlp=True, final_logit_softcapping=8.0,
        max_position_embeddings=256, rms_norm_eps=1e-6, attn_implementation="eager",
        pad_token_id=toks.index("<pad>"), eos_token_id=toks.index("<eos>"), bos_token_id=toks.index("<bos>"))
    assert cfg.kv_sharing_modes == [None, None, "store", "store", "reuse", "reuse"], cfg.kv_sharing_modes
    torch.manual_seed(SEED)
    model = Gemma4ForCausalLM(cfg).float().eval()
    randomize(model, SEED, 1.2)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                     unk_token="<unk>", add_bos_token=True, chat_template=GEMMA4_TEMPLATE)
    gpath = os.path.join(FIX, "tiny_gemma4.gguf")
    write_gguf(gpath, model, cfg, toks, merges)
    hdir = os.path.join(FIX, "hf_tiny_gemma4")
    shutil.rmtree(hdir, ignore_errors=True)
    model.save_pretrained(hdir)
    hf_tok.save_pretrained(hdir)
    for extra in os.listdir(hdir):
        if extra not in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                         "chat_template.jinja"):
            os.remove(os.path.join(hdir, extra))

    H, L = cfg.hidden_size, cfg.num_hidden_layers
    rng = np.random.default_rng(SEED)
    out = open(os.path.join(FIX, "gemma4_ref.bin") + ".tmp", "wb")
    out.write(b"AFG4")
    out.write(struct.pack("<4I", 1, V, L, H))
    seqs = [rng.integers(0, V, 7), rng.integers(0, V, 19)]
    out.write(struct.pack("<I", len(seqs)))
    with torch.no_grad():
        for s in seqs:
            lg = model(input_ids=torch.from_numpy(s.astype(np.int64))[None]).logits[0].float().numpy()
            out.write(struct.pack("<I", len(s)))
            out.write(s.astype("<i4").tobytes())
            out.write(lg.astype("<f4").tobytes())
        prompt = hf_tok("The quick brown fox")["input_ids"]
        ids = list(prompt)
        gaps = []
        for _ in range(10):
            lg = model(input_ids=torch.tensor([ids])).logits[0, -1]
            top = torch.topk(lg, 2).values
            gaps.append(float(top[0] - top[1]))
            ids.append(int(torch.argmax(lg)))
        gen = ids[len(prompt):]
        print("greedy", gen, "smallest top-1 margin %.4f" % min(gaps))
    out.write(struct.pack("<I", len(prompt)))
    out.write(np.asarray(prompt, dtype="<i4").tobytes())
    out.write(struct.pack("<I", len(gen)))
    out.write(np.asarray(gen, dtype="<i4").tobytes())

    pm, mods = peft_model(model)
    base = pm.base_model.model
    print("adapted modules", len(mods))
    write_lora_refs(out, base, mods, rng, V, H, put_grads, "gemma4")
    # tokenizer (add_special_tokens: <bos> first, as add_bos_token says)
    out.write(struct.pack("<I", len(TOK_STRINGS)))
    for s in TOK_STRINGS:
        b = s.encode("utf-8")
        ids = hf_tok(s)["input_ids"]
        out.write(struct.pack("<I", len(b)) + b)
        out.write(struct.pack("<I", len(ids)))
        out.write(np.asarray(ids, dtype="<i4").tobytes())
    # chat: transformers' apply_chat_template (text, with the generation prompt) of each conversation
    out.write(struct.pack("<I", len(CHATS)))
    roles = {"system": 0, "user": 1, "assistant": 2}
    for msgs in CHATS:
        out.write(struct.pack("<I", len(msgs)))
        for mm in msgs:
            b = mm["content"].encode("utf-8")
            out.write(struct.pack("<2I", roles[mm["role"]], len(b)) + b)
        text = hf_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        b = text.encode("utf-8")
        out.write(struct.pack("<I", len(b)) + b)
    out.close()
    os.replace(out.name, out.name[:-4])
    sizes = {p: os.path.getsize(p) for p in (gpath, out.name[:-4], os.path.join(hdir, "model.safetensors"),
                                             os.path.join(hdir, "tokenizer.json"))}
    print("wrote", ", ".join("%s %d bytes" % (os.path.relpath(p, ROOT), n) for p, n in sizes.items()))


if __name__ == "__main__":
    main()
