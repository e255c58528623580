#!/usr/bin/env python3
"""Reference logits and greedy continuations for a GGUF model computed by Hugging Face
transformers (which dequantizes the GGUF to float32 on load).

Run:  .venv-ref/bin/python tests/ref/make_logits_ref.py            # SmolLM2-135M-Instruct Q4_1
      .venv-ref/bin/python tests/ref/make_logits_ref.py gemma      # Gemma 3 270M Q4_K_M
Output: tests/fixtures/{smollm2,gemma3}_logits_ref.bin (little-endian), format:
  magic  b"AFLR", u32 version=2, u32 n_prompts, u32 n_vocab, u32 n_sub
  i32[n_sub]   vocab ids at which all-position logits are stored (fixed subset, sorted)
  per prompt:
    u32 n_tok, i32[n_tok] prompt token ids (transformers' tokenizer; special tokens added only
                          for Gemma, whose tokenizer prepends <bos>)
    f32[n_tok, n_sub]  logits at every position, subset columns
    u32 n_last, i32[n_last] ids, f32[n_last] logits of the last position at those ids
                       (the 2048 largest + 2048 random ids)
    u32 n_gen, i32[n_gen] greedy continuation (argmax decoding with KV cache, 32 tokens)
The C test (tests/test_model.c) feeds the same token ids, so tokenizer and model are tested separately.
"""
import os
import struct
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "models")
GEMMA = len(sys.argv) > 1 and sys.argv[1] == "gemma"
GGUF = "gemma-3-270m-Q4_K_M.gguf" if GEMMA else "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = os.path.join(ROOT, "tests", "fixtures", ("gemma3" if GEMMA else "smollm2") + "_logits_ref.bin")

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is gravity? Answer in one sentence.<|im_end|>\n<|im_start|>assistant\n",
    "In 1969, Neil Armstrong and Buzz Aldrin became the first people to walk on the Moon. "
    "The mission, Apollo 11, launched from Kennedy Space Center on July 16 and",
    "Les chats sont des animaux domestiques qui",
]
N_GEN = 32
N_SUB = 256


def main():
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    tok = AutoTokenizer.from_pretrained(MODELS, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(MODELS, gguf_file=GGUF, torch_dtype=torch.float32)
    model.eval()
    n_vocab = model.config.vocab_size
    rng = np.random.default_rng(1234)
    sub = np.sort(rng.choice(n_vocab, size=N_SUB, replace=False)).astype(np.int32)
    with open(OUT + ".tmp", "wb") as f:
        f.write(b"AFLR")
        f.write(struct.pack("<IIII", 2, len(PROMPTS), n_vocab, N_SUB))
        f.write(sub.tobytes())
        for p in PROMPTS:
            if GEMMA and "<|im_start|>" in p:
                p = "<start_of_turn>user\nWhat is gravity? Answer in one sentence.<end_of_turn>\n<start_of_turn>model\n"
            ids = tok(p, add_special_tokens=GEMMA)["input_ids"]
            x = torch.tensor([ids])
            with torch.no_grad():
                logits = model(x).logits[0].float().numpy()  # [n_tok, vocab]
                gen = model.generate(x, max_new_tokens=N_GEN, do_sample=False, num_beams=1,
                                     eos_token_id=None, pad_token_id=0, min_new_tokens=N_GEN)
            cont = gen[0, len(ids):].numpy().astype(np.int32)
            f.write(struct.pack("<I", len(ids)))
            f.write(np.asarray(ids, dtype=np.int32).tobytes())
            f.write(np.ascontiguousarray(logits[:, sub]).astype("<f4").tobytes())
            last = logits[-1]
            if False:  # full rows would make the fixture large; top + random ids suffice
                lid = np.arange(n_vocab, dtype=np.int32)
            else:
                top = np.argsort(-last)[:2048]
                rnd = rng.choice(n_vocab, size=2048, replace=False)
                lid = np.unique(np.concatenate([top, rnd])).astype(np.int32)
            f.write(struct.pack("<I", len(lid)))
            f.write(lid.tobytes())
            f.write(last[lid].astype("<f4").tobytes())
            f.write(struct.pack("<I", len(cont)))
            f.write(cont.tobytes())
            print(f"prompt {p[:40]!r}: {len(ids)} tokens; continuation: {tok.decode(cont)!r}", file=sys.stderr)
    os.replace(OUT + ".tmp", OUT)
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
