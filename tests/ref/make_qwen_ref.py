#!/usr/bin/env python3
"""Tiny randomly initialised Qwen2 and Qwen3 models (transformers, fixed seeds, awkward dimensions),
written as GGUF files with llama.cpp's tensor names and metadata, plus the reference outputs
tests/test_qwen.c compares afinar against.

Models (both f32, 2-3 layers, vocabulary of a small byte-level BPE trained here with Hugging Face
`tokenizers` and Qwen2's pre-tokenizer):
  qwen2: hidden 48, 6 query heads of 8, ONE key/value head, ffn 72, 2 layers, biases on q/k/v
         (random, not zero), rope_theta 1e6, tied LM head (no output.weight), a Qwen2.5-style
         chat template with a default system prompt.
  qwen3: hidden 40, 4 query heads of head_dim 16 (!= 40/4), 2 key/value heads, ffn 56, 3 layers,
         per-head q/k RMSNorm (random weights), rope_theta 1e6, separate LM head (output.weight),
         a chat template with <think> blocks (afinar refuses to render it).
Weights: embeddings N(0, 0.15^2); projections N(0, (s/sqrt(in))^2) with s = 1.5 (qwen2; with 0.8 its
greedy continuation was one token repeated) or 0.8 (qwen3); biases N(0, 0.3^2); every norm
weight 1 + U(-0.3, 0.3). GGUF metadata as llama.cpp's convert_hf_to_gguf.py writes it for these
architectures ({arch}.context_length, embedding_length, block_count, feed_forward_length,
attention.head_count, attention.head_count_kv, rope.freq_base, attention.layer_norm_rms_epsilon;
attention.key_length / value_length when the HF config has head_dim (qwen3)); q/k rows are NOT
permuted (llama.cpp runs qwen2/qwen3 with LLAMA_ROPE_TYPE_NEOX). Tokenizer keys: tokenizer.ggml.model
"gpt2", .pre "qwen2", tokens, token_type (special tokens 3 = control), merges, bos/eos/padding ids,
add_bos_token false, chat_template.

References (float32, eager attention):
  logits of every position, every vocabulary entry, for 2 token sequences;
  a greedy continuation (argmax, 10 tokens) of a prompt, re-running the full forward each step;
  PEFT LoRA (r 4, alpha 8, dropout 0, q/k/v/o/gate/up/down of every layer; A and B from the
  closed-form formulas of tests/peft_fixture.h) gradients of
    (a) classification: mean pooling of the final normed hidden states + Linear(H, 3) with bias
        (head from formulas as make_peft_ref.py), mean cross-entropy over 3 samples;
    (b) causal LM: Σ token cross-entropies / number of target tokens over 3 samples with masked
        targets (as make_peft_lm_ref.py);
  tokenizer ids (HF tokenizers) of a few strings; the chat rendering of one user message with
  transformers' apply_chat_template (add_generation_prompt=True).
Also writes a PEFT adapter directory (the qwen3 LoRA weights from the formulas, saved by PEFT's
save_pretrained) so the C test checks afinar's import for a NeoX-RoPE architecture (no q/k row map).

Run:  .venv-ref/bin/python tests/ref/make_qwen_ref.py
Output: tests/fixtures/tiny_{qwen2,qwen3}.gguf, tests/fixtures/qwen_{qwen2,qwen3}_ref.bin,
        tests/fixtures/peft_adapter_qwen3/ (adapter_config.json, adapter_model.safetensors)
Reference file (little-endian), magic b"AFQW", u32 version=1, u32 vocab, u32 n_layers, u32 hidden:
  u32 n_seq; per sequence: u32 n, i32 ids[n], f32 logits[n, vocab]
  u32 n_prompt, i32 prompt[n_prompt], u32 n_gen, i32 gen[n_gen]
  classification: u32 B, u32 C, u32 r, f32 alpha, i32 seq_start[B+1], i32 tokens[N], i32 labels[B],
    f64 loss, f32 logits[B, C], per layer l, projection p (q,k,v,o,gate,up,down): u32 in, u32 out,
    f32 dA[r, in], f32 dB[out, r]; then f32 dW[C, hidden], f32 db[C]
  causal LM: u32 B, u32 r, f32 alpha, i32 seq_start[B+1], i32 tokens[N], i32 targets[N], f64 loss,
    u32 n_targets, per (l, p): u32 in, u32 out, f32 dA[r, in], f32 dB[out, r]
  u32 n_str; per string: u32 len, bytes, u32 n_ids, i32 ids[n_ids]
  u32 len, bytes: the rendered chat prompt (len 0: the template is one afinar refuses)
"""
import json
import os
import shutil
import struct
import unicodedata

import numpy as np
import torch
import gguf
from peft import LoraConfig, get_peft_model
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures")

PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
R, ALPHA = 4, 8.0
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenizer regex (tokenizer.json of the Qwen2/2.5/3 models; afinar's bpe.c kQwen2)
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
            r"\s*[\r\n]+|\s+(?!\S)|\s+")

# Written for this test in the style of Qwen2.5's template: the default system prompt sits inside a
# Jinja string literal whose newlines are the two characters backslash-n.
QWEN2_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.role != 'system' or not loop.first %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n")
# Qwen3-style: reasoning blocks.
QWEN3_TEMPLATE = (
    "{%- for message in messages %}\n"
    "    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # 5\n",
    "It's 2024 and we're testing tokenizers: don't, won't, they'll, I'd, you've.",
    "Qwen models use byte-level BPE with a regex that splits digits 1 2 3 one by one.",
    "Les chats sont des animaux domestiques. Über Straßen und Flüsse.",
] * 20
TOK_STRINGS = [
    "Hello world! The quick brown fox.",
    "numbers 12345 and 3.14159, it's they'll",
    "  leading spaces\n\n\ttabs and\r\nnew lines   ",
    "Über Straßen: naïve café 東京 😀",
    "<|im_start|>user\nhi<|im_end|>",
]


def build_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=330, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False, special_tokens=[])
    tok.train_from_iterator(CORPUS, trainer=tr)
    tok.add_special_tokens(SPECIALS)
    return tok


def vocab_and_merges(tok):
    js = json.loads(tok.to_str())
    vocab = {**js["model"]["vocab"]}
    for a in js["added_tokens"]:
        vocab[a["content"]] = a["id"]
    n = len(vocab)
    toks = [None] * n
    for s, i in vocab.items():
        toks[i] = s
    assert all(t is not None for t in toks)
    merges = [m if isinstance(m, str) else " ".join(m) for m in js["model"]["merges"]]
    return toks, merges


def lora_a(l, p, rows, cols):
    j = np.arange(rows, dtype=np.float64)[:, None]
    i = np.arange(cols, dtype=np.float64)[None, :]
    return (0.02 * np.sin(0.37 * l + 1.1 * p + 0.71 * j + 0.0173 * i + 0.0029 * (i * j) + 0.3)).astype(np.float32)


def lora_b(l, p, rows, cols):
    o = np.arange(rows, dtype=np.float64)[:, None]
    j = np.arange(cols, dtype=np.float64)[None, :]
    return (0.01 * np.cos(0.29 * l + 0.83 * p + 1.3 * j + 0.017 * o + 0.1)).astype(np.float32)


def head_w(c, h):
    cc = np.arange(c, dtype=np.float64)[:, None]
    k = np.arange(h, dtype=np.float64)[None, :]
    return (0.05 * np.sin(0.9 * cc + 0.031 * k + 0.2)).astype(np.float32)


def head_b(c):
    return (0.1 * np.arange(c, dtype=np.float64) - 0.1).astype(np.float32)


def randomize(model, seed, pscale):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + (torch.rand(p.shape, generator=g) - 0.5) * 0.6)
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (pscale / np.sqrt(p.shape[1])))


def write_gguf(path, arch, model, cfg, toks, merges, template):
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(path + ".tmp", arch)
    w.add_name("tiny-" + arch)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    theta = cfg.rope_parameters["rope_theta"] if getattr(cfg, "rope_parameters", None) else cfg.rope_theta
    w.add_rope_freq_base(float(theta))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    if arch == "qwen3":
        w.add_key_length(cfg.head_dim)
        w.add_value_length(cfg.head_dim)
    w.add_file_type(0)  # all f32
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(toks)
    w.add_token_types([3 if t in SPECIALS else 1 for t in toks])
    w.add_token_merges(merges)
    w.add_bos_token_id(toks.index("<|endoftext|>"))
    w.add_eos_token_id(toks.index("<|im_end|>"))
    w.add_pad_token_id(toks.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(template)
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        w.add_tensor("output.weight", sd["lm_head.weight"])
    for l in range(cfg.num_hidden_layers):
        for hf, gg in names.items():
            for kind in ("weight", "bias"):
                key = "model.layers.%d.%s.%s" % (l, hf, kind)
                if key in sd:
                    w.add_tensor("blk.%d.%s.%s" % (l, gg, kind), sd[key])
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
            m = getattr(layer.self_attn if p < 4 else layer.mlp, name)
            A, B = m.lora_A["default"].weight, m.lora_B["default"].weight
            with torch.no_grad():
                A.copy_(torch.from_numpy(lora_a(l, p, A.shape[0], A.shape[1])))
                B.copy_(torch.from_numpy(lora_b(l, p, B.shape[0], B.shape[1])))
            mods.append((A, B))
    return pm, mods


def put_grads(f, mods):
    for A, B in mods:
        f.write(struct.pack("<2I", A.shape[1], B.shape[0]))
        f.write(A.grad.numpy().astype("<f4").tobytes())
        f.write(B.grad.numpy().astype("<f4").tobytes())
        A.grad = None
        B.grad = None


def write_lora_refs(out, base, mods, rng, V, H, put_grads, tag):
    """The LoRA references of a PEFT-wrapped causal LM `base` (module list `mods` for put_grads):
    (a) classification (mean pooling + Linear(H, 3), 3 samples, mean CE) and (b) causal LM (3 samples,
    masked targets, summed CE / targets), tokens drawn from `rng`; layout in the module docstring."""
    # (a) classification
    lengths, labels, C = [5, 11, 8], [2, 0, 1], 3
    ss = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    tokens = rng.integers(0, V, int(ss[-1])).astype(np.int32)
    head = torch.nn.Linear(H, C)
    with torch.no_grad():
        head.weight.copy_(torch.from_numpy(head_w(C, H)))
        head.bias.copy_(torch.from_numpy(head_b(C)))
    logits = []
    for b in range(3):
        hs = base.model(input_ids=torch.from_numpy(tokens[ss[b]:ss[b + 1]].astype(np.int64))[None]).last_hidden_state[0]
        logits.append(head(hs.mean(0)))
    logits = torch.stack(logits)
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(labels))
    loss.backward()
    print(tag, "classification loss", float(loss))
    out.write(struct.pack("<3If", 3, C, R, ALPHA))
    out.write(ss.astype("<i4").tobytes())
    out.write(tokens.astype("<i4").tobytes())
    out.write(np.asarray(labels, dtype="<i4").tobytes())
    out.write(struct.pack("<d", float(loss)))
    out.write(logits.detach().numpy().astype("<f4").tobytes())
    put_grads(out, mods)
    out.write(head.weight.grad.numpy().astype("<f4").tobytes())
    out.write(head.bias.grad.numpy().astype("<f4").tobytes())
    # (b) causal LM
    lengths, first = [9, 17, 12], [0, 6, 3]
    ss = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    tokens = rng.integers(0, V, int(ss[-1])).astype(np.int32)
    targets = np.full(len(tokens), -1, dtype=np.int32)
    for s, n in enumerate(lengths):
        for t in range(first[s], n - 1):
            targets[ss[s] + t] = tokens[ss[s] + t + 1]
    nt = int((targets >= 0).sum())
    total = 0
    for b in range(3):
        lg = base(input_ids=torch.from_numpy(tokens[ss[b]:ss[b + 1]].astype(np.int64))[None]).logits[0].float()
        total = total + torch.nn.functional.cross_entropy(lg, torch.from_numpy(targets[ss[b]:ss[b + 1]].astype(np.int64)),
                                                          ignore_index=-1, reduction="sum")
    loss = total / nt
    loss.backward()
    print(tag, "causal-LM loss", float(loss), "targets", nt)
    out.write(struct.pack("<2If", 3, R, ALPHA))
    out.write(ss.astype("<i4").tobytes())
    out.write(tokens.astype("<i4").tobytes())
    out.write(targets.astype("<i4").tobytes())
    out.write(struct.pack("<dI", float(loss), nt))
    put_grads(out, mods)


def make(arch, seed, pscale, cfg, cls, template, tok, hf_tok):
    toks, merges = vocab_and_merges(tok)
    torch.manual_seed(seed)
    model = cls(cfg).float().eval()
    randomize(model, seed, pscale)
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    gpath = os.path.join(FIX, "tiny_%s.gguf" % arch)
    write_gguf(gpath, arch, model, cfg, toks, merges, template)
    V, H, L = cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers
    rng = np.random.default_rng(seed)
    out = open(os.path.join(FIX, "qwen_%s_ref.bin" % arch) + ".tmp", "wb")
    out.write(b"AFQW")
    out.write(struct.pack("<4I", 1, V, L, H))
    # logits
    seqs = [rng.integers(0, V, 7), rng.integers(0, V, 19)]
    out.write(struct.pack("<I", len(seqs)))
    with torch.no_grad():
        for s in seqs:
            lg = model(input_ids=torch.from_numpy(s.astype(np.int64))[None]).logits[0].float().numpy()
            out.write(struct.pack("<I", len(s)))
            out.write(s.astype("<i4").tobytes())
            out.write(lg.astype("<f4").tobytes())
        # greedy continuation (full forward each step)
        prompt = hf_tok("The quick brown fox")["input_ids"]
        ids = list(prompt)
        gaps = []
        for _ in range(10):
            lg = model(input_ids=torch.tensor([ids])).logits[0, -1]
            top = torch.topk(lg, 2).values
            gaps.append(float(top[0] - top[1]))
            ids.append(int(torch.argmax(lg)))
        gen = ids[len(prompt):]
        print(arch, "greedy", gen, "smallest top-1 margin %.4f" % min(gaps))
    out.write(struct.pack("<I", len(prompt)))
    out.write(np.asarray(prompt, dtype="<i4").tobytes())
    out.write(struct.pack("<I", len(gen)))
    out.write(np.asarray(gen, dtype="<i4").tobytes())

    pm, mods = peft_model(model)
    base = pm.base_model.model
    write_lora_refs(out, base, mods, rng, V, H, put_grads, arch)
    # tokenizer
    out.write(struct.pack("<I", len(TOK_STRINGS)))
    for s in TOK_STRINGS:
        assert unicodedata.normalize("NFC", s) == s
        b = s.encode("utf-8")
        ids = hf_tok(s)["input_ids"]
        out.write(struct.pack("<I", len(b)) + b)
        out.write(struct.pack("<I", len(ids)))
        out.write(np.asarray(ids, dtype="<i4").tobytes())
    # chat
    if "<think>" in template:
        out.write(struct.pack("<I", 0))
    else:
        text = hf_tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}], tokenize=False,
                                          add_generation_prompt=True)
        b = text.encode("utf-8")
        out.write(struct.pack("<I", len(b)) + b)
    out.close()
    os.replace(out.name, out.name[:-4])
    print("wrote", gpath, os.path.getsize(gpath), "bytes;", out.name[:-4], os.path.getsize(out.name[:-4]), "bytes")
    return pm


def main():
    torch.set_num_threads(2)
    tok = build_tokenizer()
    V = tok.get_vocab_size()
    common = dict(vocab_size=V, max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1e6,
                  attn_implementation="eager", bos_token_id=tok.token_to_id("<|endoftext|>"),
                  eos_token_id=tok.token_to_id("<|im_end|>"))
    c2 = Qwen2Config(hidden_size=48, intermediate_size=72, num_hidden_layers=2, num_attention_heads=6,
                     num_key_value_heads=1, tie_word_embeddings=True, use_sliding_window=False, **common)
    c3 = Qwen3Config(hidden_size=40, intermediate_size=56, num_hidden_layers=3, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, tie_word_embeddings=False, attention_bias=False, **common)
    for arch, seed, pscale, cfg, cls, tmpl in (("qwen2", 1234, 1.5, c2, Qwen2ForCausalLM, QWEN2_TEMPLATE),
                                               ("qwen3", 4321, 0.8, c3, Qwen3ForCausalLM, QWEN3_TEMPLATE)):
        hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=tmpl, eos_token="<|im_end|>",
                                         pad_token="<|endoftext|>")
        pm = make(arch, seed, pscale, cfg, cls, tmpl, tok, hf_tok)
        if arch == "qwen3":
            d = os.path.join(FIX, "peft_adapter_qwen3")
            shutil.rmtree(d, ignore_errors=True)
            pm.save_pretrained(d)
            cj = os.path.join(d, "adapter_config.json")  # PEFT writes target_modules in set order
            conf = json.load(open(cj))
            conf["target_modules"] = sorted(conf["target_modules"])
            with open(cj, "w") as f:
                json.dump(conf, f, indent=2, sort_keys=True)
                f.write("\n")
            for extra in os.listdir(d):
                if extra not in ("adapter_config.json", "adapter_model.safetensors"):
                    p = os.path.join(d, extra)
                    shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)


if __name__ == "__main__":
    main()
