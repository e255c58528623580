"""afinar.train / check_settings / evaluate / export / merge on SmolLM2: the same adapter bytes as
the CLI, classification and causal-LM runs, Ctrl-C leaving a checkpoint that resumes exactly."""
import json
import os
import shutil
import signal
import subprocess
import threading

import pytest

import afinar
from conftest import FIX, THREADS, TINY_RUN, sentiment


def _write(path, recs):
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    return path


def _read(p):
    with open(p, "rb") as f:
        return f.read()


def test_same_adapter_bytes_as_cli(smol_path, cli, tmp_path):
    data = _write(str(tmp_path / "train.jsonl"), sentiment(16))
    out_cli, out_py = str(tmp_path / "cli"), str(tmp_path / "py")
    r = subprocess.run([cli, "train", "-m", smol_path, "--train", data, "-o", out_cli, "--recipe", "fixed",
                        "--max-steps", "2", "--batch", "2", "--grad-accum", "1", "--max-seq-len", "16",
                        "--lora-layers", "top2", "--lr", "0.0003", "--lora-dropout", "0.1", "--targets", "q,k,v",
                        "--text-field", "text", "-t", str(THREADS), "--no-plot"], capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    # TRL's names for the same settings
    res = afinar.train(smol_path, train=data, output_dir=out_py, recipe="fixed", max_steps=2,
                       per_device_train_batch_size=2, gradient_accumulation_steps=1, max_length=16,
                       lora_layers="top2", learning_rate=3e-4, lora_dropout=0.1,
                       target_modules=["q_proj", "k_proj", "v_proj"], text_field="text", threads=THREADS,
                       plot=False, progress=False)
    assert res["stop"] == "done" and res["steps_done"] == 2 and res["total_steps"] == 2
    assert len(res["log_history"]) >= 2 and res["train_loss"] > 0
    for f in ("adapter_model.safetensors", "adapter_config.json"):
        assert _read(os.path.join(out_cli, "final", f)) == _read(os.path.join(out_py, "final", f)), f


def test_classification_records_and_dataframe(smol_path, smol, tmp_path):
    seen = []
    recs = sentiment(16)
    res = afinar.train(smol, train=recs, eval=recs[:8], output_dir=str(tmp_path / "a"),
                       progress=lambda ph, c, t: seen.append((ph, c, t)), **TINY_RUN)
    assert [s for s in seen if s[0] == "train"] == [("train", 1, 2), ("train", 2, 2)]
    assert any(s[0] == "eval" for s in seen)
    assert res["eval_accuracy"] is not None and 0 <= res["eval_accuracy"] <= 1
    assert os.path.exists(str(tmp_path / "a" / "data" / "train.jsonl"))
    preds = smol.classify(["what a great film", "dull and bad"], adapter=str(tmp_path / "a" / "best"))
    assert len(preds) == 2
    for p in preds:
        assert p["label"] in ("pos", "neg") and set(p["probabilities"]) == {"pos", "neg"}
        assert abs(sum(p["probabilities"].values()) - 1) < 1e-5
    m = afinar.evaluate(smol, recs, adapter=str(tmp_path / "a" / "best"))
    assert m["n"] == 16 and 0 <= m["accuracy"] <= 1 and len(m["confusion"]) == 2
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(recs)
    res = afinar.train(smol_path, train=df, output_dir=str(tmp_path / "b"), progress=True, **TINY_RUN)
    assert res["steps_done"] == 2
    chk = afinar.check_settings(smol_path, train=str(tmp_path / "b" / "data" / "train.jsonl"), text_field="text",
                                max_steps=2, memory_limit=1)
    assert chk["ready"] is False and chk["n_errors"] >= 1


def test_causal_lm_evaluate_export_merge(smol, smol_path, tmp_path):
    data = os.path.join(FIX, "lm_data", "good_messages.jsonl")
    out = str(tmp_path / "lm")
    run = dict(TINY_RUN, max_seq_len=64)
    res = afinar.train(smol, train=data, eval=data, output_dir=out, task="causal-lm", progress=False, **run)
    assert res["steps_done"] == 2 and res["eval_loss"] is not None and res["eval_loss"] > 0
    ev = afinar.evaluate(smol, data, adapter=os.path.join(out, "final"), task="causal-lm", max_length=64)
    base = afinar.evaluate(smol, data, task="causal-lm", max_length=64)
    assert ev["n_targets"] > 0 and abs(ev["perplexity"] - 2.718281828 ** ev["eval_loss"]) < 1e-6 * ev["perplexity"]
    assert ev["eval_loss"] != base["eval_loss"]
    conv = [{"role": "user", "content": "Hi"}]
    a = smol.generate(conv, max_new_tokens=8, temperature=0, adapter=os.path.join(out, "final"))
    b = smol.generate(conv, max_new_tokens=8, temperature=0, adapter=os.path.join(out, "final"), lora_scale=0)
    assert b == smol.generate(conv, max_new_tokens=8, temperature=0)  # scale 0 is the base model
    assert isinstance(a, str)
    gg = afinar.export(smol_path, os.path.join(out, "final"), str(tmp_path / "lora.gguf"))
    assert os.path.getsize(gg) > 1000
    with pytest.raises(afinar.InvalidInput):
        afinar.export(smol_path, os.path.join(out, "final"), gg)  # exists, no overwrite
    st = afinar.merge(smol_path, os.path.join(out, "final"), str(tmp_path / "merged.gguf"), dtype="q8_0")
    assert st["merged"] > 0 and st["copied"] > 0
    with afinar.Model(str(tmp_path / "merged.gguf"), threads=THREADS) as mm:
        assert mm.info["num_hidden_layers"] == 30


def test_ctrl_c_leaves_checkpoint_that_resumes(smol_path, tmp_path):
    recs = sentiment(16)
    run = dict(TINY_RUN, max_steps=4, save_every=100)
    ref = afinar.train(smol_path, train=recs, output_dir=str(tmp_path / "ref"), progress=False, **run)
    assert ref["steps_done"] == 4
    out = str(tmp_path / "int")

    def on_progress(phase, cur, tot):
        if phase == "train" and cur == 1:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the library trains

    with pytest.raises(KeyboardInterrupt) as ki:
        afinar.train(smol_path, train=recs, output_dir=out, progress=on_progress, **run)
    res = ki.value.result
    assert res["stop"] == "interrupted" and 1 <= res["steps_done"] < 4
    assert os.path.isdir(res["last_checkpoint"]) and "checkpoint" in str(ki.value)
    # a copy of the run whose checkpoint lost a byte: refused, and the error says it is the checkpoint
    bad = str(tmp_path / "bad")
    shutil.copytree(out, bad)
    ck = os.path.join(res["last_checkpoint"].replace(out, bad), "trainer_state.safetensors")
    with open(ck, "r+b") as f:
        b = f.read(1)
        f.seek(0)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(afinar.Error) as be:
        afinar.train(resume=bad, progress=False)
    assert be.value.kind == "checkpoint" and "cannot resume from" in str(be.value)
    done = afinar.train(resume=out, progress=False)
    assert done["stop"] == "done" and done["steps_done"] == 4
    f = "final/adapter_model.safetensors"
    assert _read(os.path.join(out, f)) == _read(os.path.join(str(tmp_path / "ref"), f))


def test_cancel_event(smol_path, tmp_path):
    ev = threading.Event()

    def on_progress(phase, cur, tot):
        if cur == 1:
            ev.set()

    with pytest.raises(afinar.Cancelled) as e:
        afinar.train(smol_path, train=sentiment(16), output_dir=str(tmp_path / "c"), progress=on_progress,
                     cancel=ev, **dict(TINY_RUN, max_steps=50))
    assert e.value.status_name == "AF_ERR_CANCELLED"


def test_layers_to_transform_list(smol_path, tmp_path):
    # PEFT's layers_to_transform as a list with a gap: adapters on those layers only
    out = str(tmp_path / "ltt")
    run = dict(TINY_RUN)
    del run["lora_layers"]
    res = afinar.train(smol_path, train=sentiment(8), output_dir=out, progress=False, layers_to_transform=[27, 29],
                       **run)
    assert res["steps_done"] == 2
    with open(os.path.join(out, "final", "adapter_config.json")) as f:
        assert json.load(f)["layers_to_transform"] == [27, 29]
    with pytest.raises(afinar.InvalidInput):
        afinar.train(smol_path, train=sentiment(8), output_dir=str(tmp_path / "x"), progress=False,
                     layers_to_transform=[], **run)


def test_setting_names():
    keys = afinar.setting_keys()
    assert {"lr", "batch", "grad-accum", "max-seq-len", "lora-r", "targets", "output"} <= set(keys)
    assert keys["lr"]["kind"] == "number" and keys["batch"]["kind"] == "int" and keys["plot"]["kind"] == "bool"
    # every TRL / transformers / PEFT name maps to a key the library knows
    missing = {trl: k for trl, k in afinar.TRL_NAMES.items() if k not in keys}
    assert not missing, missing


def test_convert_and_merge_adapters(tmp_path):
    import numpy as np
    d = os.path.join(FIX, "hf_tiny_llama")
    out = str(tmp_path / "tiny.gguf")
    st = afinar.convert(d, out)
    assert st["tensors"] > 0 and st["bytes"] == os.path.getsize(out)
    with pytest.raises(afinar.InvalidInput):
        afinar.convert(d, out)  # exists
    with afinar.Model(d, threads=1) as a, afinar.Model(out, threads=1) as b:
        assert np.array_equal(a.logits([1, 2, 3]), b.logits([1, 2, 3]))  # "keep": bit for bit
    fx = os.path.join(FIX, "adapter_merge")
    rep = afinar.merge_adapters([os.path.join(fx, "a0"), os.path.join(fx, "a1")], str(tmp_path / "m"),
                                method="cat")
    assert rep["n_projections"] > 0 and rep["max_rel_error"] == 0
    assert os.path.exists(str(tmp_path / "m" / "adapter_model.safetensors"))
    with pytest.raises(afinar.InvalidInput, match="density"):
        afinar.merge_adapters([os.path.join(fx, "a0"), os.path.join(fx, "a1")], str(tmp_path / "t"), method="ties")
    with pytest.raises(afinar.InvalidInput):
        afinar.merge_adapters([os.path.join(fx, "a0")], str(tmp_path / "u"), method="nope")
    rep = afinar.merge_adapters([os.path.join(fx, "a0"), os.path.join(fx, "a1")], str(tmp_path / "s"),
                                method="slerp", t=0.3)  # the t field of the struct mirror reaches the library
    assert rep["n_projections"] == 6 and 0.39 < rep["max_rel_error"] < 0.41  # NumPy reference: 0.401
    with pytest.raises(afinar.InvalidInput, match="t = 1.5"):
        afinar.merge_adapters([os.path.join(fx, "a0"), os.path.join(fx, "a1")], str(tmp_path / "s2"),
                              method="slerp", t=1.5)
