"""afinar.Model on SmolLM2 and the tiny fixtures: info, tokenizer, chat template, generate (equal to
the CLI), logits."""
import os
import subprocess

import numpy as np
import pytest

import afinar
from conftest import FIX, THREADS


def test_info(smol):
    i = smol.info
    assert i["architecture"] == "llama"
    assert (i["hidden_size"], i["num_hidden_layers"], i["num_attention_heads"], i["num_key_value_heads"]) == \
        (576, 30, 9, 3)
    assert i["vocab_size"] == 49152 and i["context_length"] == 8192
    assert i["device"] == "cpu" and i["threads"] == THREADS
    assert "SmolLM2" in repr(smol)


def test_tokenize_roundtrip(smol):
    text = "Hello, wörld! 日本語 <|im_start|>"
    ids = smol.tokenize(text)
    assert all(isinstance(t, int) for t in ids)
    assert 1 in ids  # <|im_start|> is one special token
    assert smol.detokenize(ids, skip_special_tokens=False) == text
    assert smol.detokenize(ids) == "Hello, wörld! 日本語 "
    assert smol.tokenize("<|im_start|>", parse_special=False) != [1]
    assert smol.detokenize(np.array(ids, dtype=np.int64), skip_special_tokens=False) == text
    assert smol.tokenize("") == []


def test_chat_template(smol):
    one = smol.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert one.startswith("<|im_start|>system\n") and one.endswith("<|im_start|>user\nHi<|im_end|>\n"
                                                                    "<|im_start|>assistant\n")
    conv = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
            {"role": "assistant", "content": "A"}]
    assert smol.apply_chat_template(conv, add_generation_prompt=False) == \
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
    ids = smol.apply_chat_template(conv, tokenize=True)
    assert ids[0] == 1 and isinstance(ids, list)
    g = smol.apply_chat_template([{"role": "user", "content": "Hi"}], chat_template="gemma")
    assert "<start_of_turn>user\nHi" in g


def _cli_generate(cli, model, *args):
    r = subprocess.run([cli, "generate", "-m", model, "-t", str(THREADS)] + list(args), capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.endswith(b"\n")
    return r.stdout[:-1].decode("utf-8")


def test_generate_equals_cli(smol, smol_path, cli):
    for seed, temp in ((7, "0.8"), (123, "1.3"), (0, "0")):
        want = _cli_generate(cli, smol_path, "-p", "Once upon a time", "-n", "24", "--seed", str(seed),
                             "--temp", temp)
        got = smol.generate("Once upon a time", max_new_tokens=24, seed=seed, temperature=float(temp))
        assert got == want, (seed, temp)
    want = _cli_generate(cli, smol_path, "-p", "Name a color.", "--chat", "-n", "16", "--seed", "5")
    got = smol.generate([{"role": "user", "content": "Name a color."}], max_new_tokens=16, seed=5)
    assert got == want


def test_generate_stream_and_stop(smol):
    kw = dict(max_new_tokens=20, temperature=0)
    full = smol.generate("1, 2, 3, 4,", **kw)
    pieces = list(smol.generate("1, 2, 3, 4,", stream=True, **kw))
    assert len(pieces) > 3 and "".join(pieces) == full
    assert " 7" in full
    cut = smol.generate("1, 2, 3, 4,", stop=[" 7", "zzz"], **kw)
    assert full.startswith(cut) and " 7" not in cut and cut.endswith("6,")
    assert "".join(smol.generate("1, 2, 3, 4,", stop=" 7", stream=True, **kw)) == cut
    # top_k 1 is greedy whatever the temperature
    assert smol.generate("1, 2, 3, 4,", max_new_tokens=20, top_k=1, temperature=1.5, seed=3) == full


def test_logits(smol):
    ids = smol.tokenize("The capital of France is")
    L = smol.logits(ids)
    assert L.shape == (len(ids), 49152) and L.dtype == np.float32 and np.isfinite(L).all()
    nxt = int(L[-1].argmax())
    assert smol.generate("The capital of France is", max_new_tokens=1, temperature=0) == smol.detokenize([nxt])
    # a prefix's logits are the same rows (causal attention), up to f32 summation order
    L2 = smol.logits(ids[:3])
    assert np.abs(L2 - L[:3]).max() < 1e-3


def test_tiny_fixtures():
    # a Hugging Face directory without tokenizer: logits work, text functions say why not
    d = os.path.join(FIX, "hf_tiny_llama")
    with afinar.Model(d, threads=1) as m:
        assert m.info["architecture"] == "llama"
        L = m.logits([1, 2, 3])
        assert L.shape == (3, m.info["vocab_size"]) and np.isfinite(L).all()
        with pytest.raises(afinar.NotFound, match="tokenizer"):
            m.tokenize("hi")
    for name in ("tiny_qwen2.gguf", "tiny_qwen3.gguf"):
        with afinar.Model(os.path.join(FIX, name), threads=1) as m:
            L = m.logits([0, 1])
            assert L.shape == (2, m.info["vocab_size"])
    # after close, calls fail cleanly
    with pytest.raises(afinar.InvalidInput, match="closed"):
        m.logits([0])


def test_ctrl_c_during_prompt(smol):
    # Ctrl-C while the library evaluates a long prompt: the session's cancel flag stops it at a layer
    # boundary, KeyboardInterrupt is raised, and the model works afterwards
    import signal
    import threading
    long_prompt = "the cat sat on the mat and " * 150  # ~1100 tokens
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            smol.generate(long_prompt, max_new_tokens=4, temperature=0)
    finally:
        timer.cancel()
    assert smol.generate("1, 2, 3,", max_new_tokens=4, temperature=0)
