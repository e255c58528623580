#!/usr/bin/env python3
"""Hugging Face checkpoint directories for afinar's HF loader (config.json + SafeTensors +
tokenizer.json), all written by transformers itself.

Run:  .venv-ref/bin/python tests/ref/make_hf_dirs.py [real] [tiny] [qwen]   (default: real, tiny)
  real  models/SmolLM2-135M-Instruct-hf/   from_pretrained(gguf_file=SmolLM2 Q4_1) -> float32 weights
                                           (transformers dequantizes Q4_1 to f32 and un-permutes q/k),
                                           save_pretrained(max_shard_size="200MB") -> 3 shards + index
        models/SmolLM2-135M-Instruct-hf/ref_logits.bin   transformers' logits/greedy (format below)
        models/gemma-3-270m-hf-tok/        tokenizer files only (tokenizer.json is 30+ MB)
        (models/ is ignored by git: nothing here is committed)
  tiny  tests/fixtures/hf_tiny_llama/      LlamaForCausalLM, random (seed 0), f32, 2 shards + index
        tests/fixtures/hf_tiny_gemma3/     Gemma3ForCausalLM, random (seed 0), bf16, one file
        each with ref_logits.bin; committed (< 500 KB each).
  qwen  tests/fixtures/hf_tiny_qwen2/      Qwen2ForCausalLM, random, f32, q/k/v biases, 1 KV head, tied
        tests/fixtures/hf_tiny_qwen3/      Qwen3ForCausalLM, random, f32, q/k norms, head_dim 24, untied

SmolLM2 tokenizer: transformers' GGUF converter (5.x) builds the SmolLM2 tokenizer with a plain
ByteLevel pre-tokenizer and drops the Digits(individual_digits=True) step of the published SmolLM2
tokenizer.json (and of llama.cpp's "smollm" pre-tokenizer); this script puts it back
(Sequence[Digits, ByteLevel], as published) and then checks that `tokenizers` on the saved
tokenizer.json gives exactly the ids of tests/fixtures/tokenizer_smollm2.txt (likewise Gemma 3 with
tokenizer_gemma3.txt), so tests/test_hf.c compares afinar against the committed fixtures.

ref_logits.bin (little-endian): b"AFHR", u32 n_prompts, u32 vocab; per prompt: u32 n, i32 ids[n],
f32 logits[n, vocab] (the real model: only the last position, [1, vocab]), u32 n_gen, i32 gen[n_gen]
(greedy continuation, no KV-cache differences: generate(do_sample=False)).
"""
import json
import os
import struct
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.environ.get("AF_MODEL_DIR", os.path.join(ROOT, "models"))
FIX = os.path.join(ROOT, "tests", "fixtures")
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = "gemma-3-270m-Q4_K_M.gguf"


def read_fixture(path):
    """Strings and parse_special=1 ids of a tokenizer fixture (make_tokenizer_fixture.py format)."""
    out, text = [], None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("T "):
            text = bytes.fromhex(line[2:]).decode("utf-8", errors="surrogateescape")
        elif line.startswith("P"):
            out.append((text, [int(x) for x in line[1:].split()]))
    return out


def check_tokenizer(tok_json, fixture, add_special):
    from tokenizers import Tokenizer

    t = Tokenizer.from_file(tok_json)
    bad = 0
    for s, ids in read_fixture(fixture):
        try:
            got = t.encode(s, add_special_tokens=add_special).ids
        except Exception:
            continue
        if got != ids:
            bad += 1
    print(f"{tok_json}: {bad} strings differ from {os.path.basename(fixture)}")
    return bad


def write_ref(path, model, prompts, vocab, all_positions, n_gen):
    with open(path + ".tmp", "wb") as f:
        f.write(b"AFHR" + struct.pack("<II", len(prompts), vocab))
        for ids in prompts:
            x = torch.tensor([ids])
            with torch.no_grad():
                lg = model(x).logits[0].float().numpy()
                gen = model.generate(x, max_new_tokens=n_gen, do_sample=False, min_new_tokens=n_gen,
                                     pad_token_id=0, eos_token_id=None)[0, len(ids):].tolist()
            if not all_positions:
                lg = lg[-1:]
            f.write(struct.pack("<I", len(ids)) + np.asarray(ids, "<i4").tobytes())
            f.write(np.ascontiguousarray(lg, "<f4").tobytes())
            f.write(struct.pack("<I", len(gen)) + np.asarray(gen, "<i4").tobytes())
    os.replace(path + ".tmp", path)


def real():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = os.path.join(MODELS, "SmolLM2-135M-Instruct-hf")
    tok = AutoTokenizer.from_pretrained(MODELS, gguf_file=SMOL)
    model = AutoModelForCausalLM.from_pretrained(MODELS, gguf_file=SMOL, torch_dtype=torch.float32)
    # The weights are already plain float32 tensors (dequantized at load); transformers only keeps a
    # "gguf" quantizer marker that makes save_pretrained refuse. Drop the marker, keep the weights.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, max_shard_size="200MB")
    tok.save_pretrained(out)
    tj = os.path.join(out, "tokenizer.json")
    j = json.load(open(tj, encoding="utf-8"))
    pre = j.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel":  # put back the published Digits step (see the docstring)
        j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, pre]}
        with open(tj + ".tmp", "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, indent=2)
        os.replace(tj + ".tmp", tj)
    assert check_tokenizer(tj, os.path.join(FIX, "tokenizer_smollm2.txt"), False) == 0
    model = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
    prompts = [tok.encode(p) for p in [
        "The capital of France is",
        "<|im_start|>user\nWhat is gravity? Answer in one sentence.<|im_end|>\n<|im_start|>assistant\n",
        "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"]]
    write_ref(os.path.join(out, "ref_logits.bin"), model, prompts, model.config.vocab_size, False, 24)

    gout = os.path.join(MODELS, "gemma-3-270m-hf-tok")
    gtok = AutoTokenizer.from_pretrained(MODELS, gguf_file=GEMMA)
    gtok.save_pretrained(gout)
    assert check_tokenizer(os.path.join(gout, "tokenizer.json"), os.path.join(FIX, "tokenizer_gemma3.txt"),
                           False) == 0
    print("wrote", out, gout)


def tiny():
    from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM)

    prompts = [[1, 5, 77, 200, 3, 9, 150, 42, 8, 250], [17, 4, 4, 199]]
    # awkward shapes: head_dim (24) != hidden / heads (16), one KV head, odd widths
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=1, head_dim=24, rms_norm_eps=1e-5,
                      rope_theta=10000.0, max_position_embeddings=128, tie_word_embeddings=False,
                      bos_token_id=1, eos_token_id=2)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # non-trivial norm weights
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
    d = os.path.join(FIX, "hf_tiny_llama")
    m.save_pretrained(d, max_shard_size="100KB")
    write_ref(os.path.join(d, "ref_logits.bin"), m, prompts, 256, True, 8)

    torch.manual_seed(0)
    gcfg = Gemma3TextConfig(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                            num_attention_heads=4, num_key_value_heads=1, head_dim=24, rms_norm_eps=1e-6,
                            rope_theta=1e6, rope_local_base_freq=1e4, query_pre_attn_scalar=20,
                            sliding_window=4, max_position_embeddings=128, final_logit_softcapping=5.0,
                            layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                         "sliding_attention"], tie_word_embeddings=True,
                            bos_token_id=2, eos_token_id=1, pad_token_id=0)
    g = Gemma3ForCausalLM(gcfg).eval()
    with torch.no_grad():
        for n, p in g.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(0.3 * torch.randn_like(p))
    g = g.to(torch.bfloat16)
    d = os.path.join(FIX, "hf_tiny_gemma3")
    g.save_pretrained(d)
    g = Gemma3ForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()  # bf16 weights, f32 math
    write_ref(os.path.join(d, "ref_logits.bin"), g, prompts, 256, True, 8)
    print("wrote tiny fixtures")


def qwen():
    """Tiny Qwen2 (q/k/v biases, 1 KV head, tied) and Qwen3 (q/k norms, head_dim 24 != 64/4,
    untied) HF directories, random (seed 0), f32, with ref_logits.bin."""
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    prompts = [[1, 5, 77, 200, 3, 9, 150, 42, 8, 250], [17, 4, 4, 199]]
    for name, cls, cfg in [
        ("hf_tiny_qwen2", Qwen2ForCausalLM,
         Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=1, rms_norm_eps=1e-6, rope_theta=1e6,
                     max_position_embeddings=128, tie_word_embeddings=True, use_sliding_window=False)),
        ("hf_tiny_qwen3", Qwen3ForCausalLM,
         Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=24, rms_norm_eps=1e-6,
                     rope_theta=1e6, max_position_embeddings=128, tie_word_embeddings=False,
                     attention_bias=False))]:
        torch.manual_seed(0)
        m = cls(cfg).eval()
        with torch.no_grad():
            for n, p in m.named_parameters():
                if n.endswith("norm.weight"):
                    p.copy_(1 + 0.2 * torch.randn_like(p))
                elif n.endswith(".bias"):
                    p.copy_(0.3 * torch.randn_like(p))
        d = os.path.join(FIX, name)
        m.save_pretrained(d)
        write_ref(os.path.join(d, "ref_logits.bin"), m, prompts, 256, True, 8)
    print("wrote tiny qwen fixtures")


if __name__ == "__main__":
    what = sys.argv[1:] or ["tiny", "real"]
    if "qwen" in what:
        qwen()
    if "tiny" in what:
        tiny()
    if "real" in what:
        real()
