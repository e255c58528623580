#!/usr/bin/env python3
"""afinar <-> Hugging Face transformers + PEFT interoperability check (docs/INTEROP.md).

Run with the reference venv from the repository root (NOT part of `make test`: it needs torch,
transformers 5.x, peft, a built afinar and the BBC data in data/bbc/):

  .venv-ref/bin/python tests/ref/peft_interop.py a2p RUN_DIR/final --key afinar_to_peft_last
      afinar -> PEFT. RUN_DIR/final is an adapter written by `afinar train` (for the faithful
      configuration: --pooling last, no --head-bias), e.g.
        build/afinar train -m models/SmolLM2-135M-Instruct.Q4_1.gguf --train data/bbc/train.jsonl \\
          --labels data/bbc/labels.txt --targets all-linear --max-seq-len 64 --max-steps 12 --batch 4 \\
          --grad-accum 2 --lr 2e-3 --warmup 0 --pooling last -o /tmp/run_last --overwrite
      Takes the first --n samples of data/bbc/test.jsonl, runs `afinar predict` on them, loads the
      adapter with PeftModel.from_pretrained onto the GGUF base in transformers, feeds it exactly
      afinar's token ids (one sample at a time, unpadded) and compares labels and probabilities.
      Also (a) compares afinar's token ids with the transformers tokenizer's, (b) a negative control:
      the same adapter with the q/k lora_B rows put back into GGUF order (what an export without
      the q/k row conversion would hold), (c) the adapter applied with afinar's pooling emulated by
      hand (mean of the final hidden states + score), which PEFT itself cannot express.
  .venv-ref/bin/python tests/ref/peft_interop.py p2a --key peft_to_afinar
      PEFT -> afinar. Trains a LoRA (r=8, alpha=16, q_proj+v_proj, SEQ_CLS, last-token pooling) for
      a few AdamW steps on the first 64 BBC training samples (max length 64) in PyTorch,
      save_pretrained()s it (no afinar.json: afinar's defaults apply: pooling last, no bias, integer
      labels, max_seq_len 512), then compares `afinar predict` with PEFT on the test subset.

Common options: --afinar build/afinar (its directory must hold libafinar.a: a tiny C program is
compiled against it to dump afinar's token ids), --model models/SmolLM2-135M-Instruct.Q4_1.gguf,
--n 100, --work /tmp/afinar_interop, --results tests/fixtures/peft_interop_results.json (the key's
entry is replaced, other entries kept).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import torch

TOKDUMP_C = r"""
#include "afinar.h"
#include <stdio.h>
#include <stdlib.h>
/* usage: tokdump MODEL.gguf MAX_LEN < records; record = u32 length + bytes; output: one line of
 * space-separated ids per record, truncated to MAX_LEN (as af_dataset_build: add_special = 1,
 * parse_special = 0, first MAX_LEN tokens kept). */
int main(int argc, char **argv) {
    af_model *m = NULL;
    if (argc != 3 || af_model_load(argv[1], &m) != AF_OK) { fprintf(stderr, "%s\n", af_last_error()); return 1; }
    long max = atol(argv[2]);
    unsigned int len;
    while (fread(&len, 4, 1, stdin) == 1) {
        char *t = malloc(len + 1);
        if (!t || fread(t, 1, len, stdin) != len) return 1;
        int32_t *ids = NULL; size_t n = 0;
        if (af_tokenize(af_model_tokenizer(m), t, len, 1, 0, &ids, &n) != AF_OK) return 1;
        for (size_t i = 0; i < n && (long)i < max; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        free(ids); free(t);
    }
    af_model_free(m);
    return 0;
}
"""


def log(*a):
    print(*a, flush=True)


def afinar_token_ids(args, texts, max_len):
    """afinar's token ids of each text, truncated to max_len, via a tiny C program."""
    bdir = os.path.dirname(os.path.abspath(args.afinar))
    os.makedirs(args.work, exist_ok=True)
    src, exe = os.path.join(args.work, "tokdump.c"), os.path.join(args.work, "tokdump")
    with open(src, "w") as f:
        f.write(TOKDUMP_C)
    subprocess.run(["cc", "-O1", "-I", "include", src, os.path.join(bdir, "libafinar.a"), "-o", exe, "-pthread",
                    *subprocess.run(["make", "-s", "print-ldlibs"], capture_output=True, text=True,
                                   check=True).stdout.split()], check=True)
    blob = b"".join(len(t.encode()).to_bytes(4, "little") + t.encode() for t in texts)
    out = subprocess.run([exe, args.model, str(max_len)], input=blob, capture_output=True, check=True).stdout
    return [[int(x) for x in line.split()] for line in out.decode().splitlines()]


def load_subset(path, n):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) == n:
                break
    return rows


def afinar_predict(args, adapter, rows):
    inp = os.path.join(args.work, "subset.jsonl")
    with open(inp, "w") as f:
        for r in rows:
            f.write(json.dumps({"input": r["input"]}) + "\n")
    t0 = time.time()
    out = subprocess.run([args.afinar, "predict", "-m", args.model, "-a", adapter, "--input", inp],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"afinar predict failed ({out.returncode}): {out.stderr}")
    preds = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
    log(f"afinar predict: {len(preds)} predictions in {time.time() - t0:.1f} s")
    return preds


def load_base(args, num_labels):
    from transformers import AutoModelForSequenceClassification
    d, f = os.path.dirname(args.model) or ".", os.path.basename(args.model)
    base = AutoModelForSequenceClassification.from_pretrained(d, gguf_file=f, num_labels=num_labels,
                                                              dtype=torch.float32)
    base.config.pad_token_id = 2  # SmolLM2: pad = eos = 2 (samples run one at a time, unpadded)
    base.eval()
    return base


def hf_tokenizer(args):
    from transformers import AutoTokenizer
    d, f = os.path.dirname(args.model) or ".", os.path.basename(args.model)
    return AutoTokenizer.from_pretrained(d, gguf_file=f)


@torch.no_grad()
def peft_probs(pm, ids_list, pooling="native"):
    """Softmax probabilities [n, C]. pooling "native": the PeftModelForSequenceClassification
    forward (last-token pooling); "mean": hidden states after the final norm averaged over the
    sample's tokens, then the score layer (afinar's --pooling mean, emulated by hand)."""
    out = []
    for ids in ids_list:
        x = torch.tensor([ids])
        if pooling == "native":
            logits = pm(input_ids=x).logits[0]
        else:
            inner = pm.base_model.model  # LlamaForSequenceClassification with LoRA layers
            h = inner.model(input_ids=x).last_hidden_state[0]  # [T, hidden]
            logits = inner.score(h.mean(0))
        out.append(torch.softmax(logits.double(), -1).numpy())
    return np.stack(out)


def compare(afinar_preds, probs_peft, labels_true):
    pa = np.array([p["probs"] for p in afinar_preds], dtype=np.float64)
    la, lp = pa.argmax(1), probs_peft.argmax(1)
    d = np.abs(pa - probs_peft)
    # centred log-probabilities = logits up to a per-sample constant
    ca = np.log(np.maximum(pa, 1e-30)); ca -= ca.mean(1, keepdims=True)
    cp = np.log(np.maximum(probs_peft, 1e-30)); cp -= cp.mean(1, keepdims=True)
    res = {"n": int(len(la)), "label_agreement": float((la == lp).mean()),
           "n_disagree": int((la != lp).sum()),
           "max_abs_prob_diff": float(d.max()), "mean_abs_prob_diff": float(d.mean()),
           "max_abs_logit_diff_centred": float(np.abs(ca - cp).max()),
           "max_prob_afinar": float(pa.max()),
           "mean_top_prob_afinar": float(pa.max(1).mean())}
    if labels_true is not None:
        res["accuracy_afinar"] = float((la == labels_true).mean())
        res["accuracy_peft"] = float((lp == labels_true).mean())
    if res["n_disagree"]:
        # margin of afinar's decision for the disagreeing samples (top-2 prob gap)
        s = np.sort(pa, 1)
        g = (s[:, -1] - s[:, -2])[la != lp]
        res["disagree_top2_gap_afinar"] = {"min": float(g.min()), "median": float(np.median(g)), "max": float(g.max())}
    return res


def qk_to_gguf_order(state, n_head, n_kv, hd):
    """Inverse of transformers' _reverse_permute_weights: HF rows -> GGUF rows of q/k lora_B."""
    out = {}
    for k, v in state.items():
        nh = n_head if ".q_proj.lora_B" in k else n_kv if ".k_proj.lora_B" in k else None
        if nh is None:
            out[k] = v
        else:
            out[k] = v.reshape(nh, 2, hd // 2, -1).transpose(1, 2).reshape(v.shape).contiguous()
    return out


def peft_load_check(pm, adir):
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import load_file
    file_t = load_file(os.path.join(adir, "adapter_model.safetensors"))
    sd = get_peft_model_state_dict(pm)
    missing = sorted(set(sd) - set(file_t))
    unexpected = sorted(set(file_t) - set(sd))
    bad = [k for k in set(sd) & set(file_t) if not torch.equal(sd[k].float(), file_t[k].float())]
    return {"tensors_in_file": len(file_t), "missing_keys": len(missing), "unexpected_keys": unexpected[:4],
            "value_mismatches": len(bad)}


def labels_of(rows, label_names):
    idx = {n: i for i, n in enumerate(label_names)}
    return np.array([idx[r["label"]] if isinstance(r["label"], str) else int(r["label"]) for r in rows])


def token_check(args, texts, ids_afinar, max_len):
    tok = hf_tokenizer(args)
    same = 0
    first_diff = None
    for t, ia in zip(texts, ids_afinar):
        ih = tok(t, add_special_tokens=True, truncation=True, max_length=max_len)["input_ids"]
        if ih == ia:
            same += 1
        elif first_diff is None:
            j = next((k for k in range(min(len(ih), len(ia))) if ih[k] != ia[k]), min(len(ih), len(ia)))
            first_diff = {"position": j, "afinar": ia[max(0, j - 2):j + 3], "transformers": ih[max(0, j - 2):j + 3]}
    return {"identical_token_ids": same, "n": len(texts), "max_len": max_len, "first_difference": first_diff}


def cmd_a2p(args):
    from peft import PeftModel
    with open(os.path.join(args.adapter, "afinar.json")) as f:
        meta = json.load(f)
    max_len, pooling = int(meta.get("max_seq_len", 512)), meta.get("pooling", "last")
    label_names = meta.get("labels")
    rows = load_subset(args.data, args.n)
    texts = [r["input"] for r in rows]
    ids = afinar_token_ids(args, texts, max_len)
    res = {"adapter": args.adapter, "pooling": pooling, "head_bias": bool(meta.get("head_bias")),
           "targets": meta["lora"]["targets"], "r": meta["lora"]["r"], "train_steps": meta.get("step"),
           "tokens": token_check(args, texts, ids, max_len)}
    log("tokens:", res["tokens"])
    preds = afinar_predict(args, args.adapter, rows)
    base = load_base(args, meta["num_classes"])
    cfg = base.config
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head
    pm = PeftModel.from_pretrained(base, args.adapter)
    pm.eval()
    res["peft_load"] = peft_load_check(pm, args.adapter)
    log("peft load:", res["peft_load"])
    y = labels_of(rows, label_names) if label_names else None
    t0 = time.time()
    res["peft_native"] = compare(preds, peft_probs(pm, ids, "native"), y)
    log(f"PEFT (last-token pooling) vs afinar [{time.time() - t0:.1f} s]:", res["peft_native"])
    if pooling == "mean":
        res["peft_mean_pooling_emulated"] = compare(preds, peft_probs(pm, ids, "mean"), y)
        log("PEFT + hand-made mean pooling vs afinar:", res["peft_mean_pooling_emulated"])
    else:
        # negative control: q/k lora_B rows left in GGUF order
        from peft.utils import set_peft_model_state_dict
        from safetensors.torch import load_file
        sd = load_file(os.path.join(args.adapter, "adapter_model.safetensors"))
        set_peft_model_state_dict(pm, qk_to_gguf_order(sd, n_head, n_kv, hd))
        res["negative_control_qk_rows_in_gguf_order"] = compare(preds, peft_probs(pm, ids, "native"), y)
        log("negative control (q/k rows NOT converted):", res["negative_control_qk_rows_in_gguf_order"])
    save_result(args, res)


def cmd_p2a(args):
    from peft import LoraConfig, TaskType, get_peft_model
    label_names = [l.strip() for l in open(os.path.join(os.path.dirname(args.data), "labels.txt")) if l.strip()]
    train = load_subset(os.path.join(os.path.dirname(args.data), "train.jsonl"), args.train_n)
    tok = hf_tokenizer(args)
    base = load_base(args, len(label_names))
    torch.manual_seed(args.seed)
    cfg = LoraConfig(task_type=TaskType.SEQ_CLS, r=8, lora_alpha=16, lora_dropout=0.0,
                     target_modules=["q_proj", "v_proj"])
    pm = get_peft_model(base, cfg)
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    y = labels_of(train, label_names)
    xs = [tok(r["input"], truncation=True, max_length=64)["input_ids"] for r in train]
    pm.train()
    t0 = time.time()
    bs = 8
    for ep in range(args.epochs):
        order = torch.randperm(len(xs)).tolist()
        for s in range(0, len(order), bs):
            opt.zero_grad()
            tot = 0.0
            for i in order[s:s + bs]:  # one sample at a time: no padding
                out = pm(input_ids=torch.tensor([xs[i]]), labels=torch.tensor([int(y[i])]))
                (out.loss / bs).backward()
                tot += out.loss.item() / bs
            opt.step()
            log(f"  PEFT train epoch {ep} step {s // bs}: loss {tot:.4f}")
    log(f"PEFT training: {time.time() - t0:.1f} s")
    adir = os.path.join(args.work, "peft_adapter")
    shutil.rmtree(adir, ignore_errors=True)
    pm.save_pretrained(adir)
    pm.eval()
    rows = load_subset(args.data, args.n)
    texts = [r["input"] for r in rows]
    max_len = 512  # afinar's default when the adapter has no afinar.json
    ids = afinar_token_ids(args, texts, max_len)
    res = {"adapter": "PEFT save_pretrained (no afinar.json)", "lora": "r=8 alpha=16 q_proj,v_proj",
           "train": f"{len(xs)} BBC train samples, max_length 64, {args.epochs} epochs, batch {bs}, "
                    f"AdamW lr {args.lr}", "max_seq_len_afinar_default": max_len,
           "files": sorted(os.listdir(adir)), "tokens": token_check(args, texts, ids, max_len)}
    log("tokens:", res["tokens"])
    preds = afinar_predict(args, adir, rows)
    res["afinar_vs_peft"] = compare(preds, peft_probs(pm, ids, "native"), labels_of(rows, label_names))
    log("afinar vs PEFT:", res["afinar_vs_peft"])
    save_result(args, res)


def save_result(args, res):
    import peft
    import transformers
    data = {}
    if os.path.exists(args.results):
        with open(args.results) as f:
            data = json.load(f)
    data[args.key] = res
    data["environment"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                           "peft": peft.__version__, "model": os.path.basename(args.model),
                           "test_subset": f"first {args.n} samples of {args.data}"}
    with open(args.results, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    log(f"wrote {args.results} [{args.key}]")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["a2p", "p2a"])
    ap.add_argument("adapter", nargs="?")
    ap.add_argument("--key", required=True)
    ap.add_argument("--afinar", default="build/afinar")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--data", default="data/bbc/test.jsonl")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--train-n", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1), help="torch threads")
    ap.add_argument("--work", default="/tmp/afinar_interop")
    ap.add_argument("--results", default="tests/fixtures/peft_interop_results.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.work, exist_ok=True)
    if args.cmd == "a2p":
        if not args.adapter:
            ap.error("a2p needs the adapter directory")
        cmd_a2p(args)
    else:
        cmd_p2a(args)


if __name__ == "__main__":
    main()
