#!/usr/bin/env python3
"""afinar <-> Hugging Face transformers + PEFT interoperability for CAUSAL-LM LoRA adapters
(docs/INTEROP.md, "Causal-LM adapters").

Run with the reference venv from the repository root (NOT part of `make test`: it needs torch,
transformers 5.x, peft, a built afinar (build/afinar + build/libafinar.a) and data/bbc_headlines/):

  .venv-ref/bin/python tests/ref/peft_lm_interop.py a2p RUN_DIR/final
      afinar -> PEFT. RUN_DIR/final is an adapter written by `afinar train --task causal-lm`. It is
      loaded with PeftModel.from_pretrained onto the GGUF base in transformers (AutoModelForCausalLM,
      gguf_file=, float32). On the first --n examples of --data (prompt/completion JSONL):
        (1) logits at every position of afinar's own token ids of the training sequence
            (prompt tokens, completion tokens, EOS: af_tokenize of each string with
            parse_special = 0, as afinar's causal-LM data reader builds it): afinar's come from a
            tiny C program linked against build/libafinar.a (public session API: af_session_new,
            af_session_load_adapter, af_session_eval with all_logits), PEFT's from model(ids).
            Reported: max |diff|, max over examples of max|diff| / (1 + max|logit|), the fraction
            of positions whose argmax agrees.
        (2) greedy continuations of the prompt alone, --max-new 16 tokens: the text printed by
            `afinar generate -m MODEL -a DIR --temp 0 -n 16 -f PROMPTFILE` against PEFT's
            model.generate(do_sample=False) from the same token ids (afinar's tokenization of the
            prompt as `generate` does it: add_special = 1, parse_special = 1), decoded without
            special tokens; both stop at afinar's end-of-generation ids. Also the token ids of
            afinar's greedy decode (session API) against PEFT's, and how many continuations the
            adapter changes against the base model (PEFT with the adapter disabled).
      Negative control: the same adapter with the q/k lora_B rows put back into GGUF order (what an
      export without afinar's q/k row conversion would hold), loaded in PEFT as a second adapter.
  .venv-ref/bin/python tests/ref/peft_lm_interop.py p2a
      PEFT -> afinar. Trains a LoRA in PyTorch + PEFT (TaskType.CAUSAL_LM, r=8, lora_alpha=16,
      target_modules="all-linear", no dropout) for --epochs passes over the first --train-n examples
      of data/bbc_headlines/train.jsonl (loss on completion + EOS, one example at a time,
      --accum examples per AdamW step, lr --lr), save_pretrained()s it (no afinar.json), then the
      same two comparisons with afinar loading the PEFT directory (`afinar generate -a`, session
      API for the logits). Negative control: a copy of the PEFT adapter whose q/k lora_B rows are
      pre-permuted so that afinar's load-time conversion leaves them in HF order, i.e. afinar
      computing as if it did not convert.

Common options: --afinar build/afinar (its directory must hold libafinar.a), --model
models/SmolLM2-135M-Instruct.Q4_1.gguf, --data data/bbc_headlines/test.jsonl, --n 20, --max-new 16,
--threads (torch and afinar threads), --work /tmp/afinar_lm_interop, --results
tests/fixtures/peft_lm_interop_results.json (the mode's entry is replaced, other entries kept).
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time

import numpy as np
import torch

LMDUMP_C = r"""
#include "afinar.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* usage: lmdump MODEL.gguf ADAPTER_DIR|- THREADS MAX_NEW IN OUT
 * IN: u32 len + prompt bytes, u32 len + completion bytes.
 * OUT (little-endian):
 *   u32 n, i32 ids[n]          training sequence: af_tokenize(prompt, 1, 0) ++ af_tokenize(completion, 0, 0)
 *                              ++ EOS (as afinar's prompt/completion reader)
 *   u32 vocab, f32 logits[n][vocab]   af_session_eval(all_logits), adapter applied unmerged (scale 1)
 *   u32 m, i32 gen_prompt[m]   af_tokenize(prompt, 1, 1) (as `afinar generate`)
 *   u32 g, i32 gen[g]          greedy decode (argmax, ties -> lowest id) of MAX_NEW tokens from
 *                              gen_prompt, stopping after an end-of-generation token (included)
 *   u32 e, i32 eog[e]          every id with af_token_is_eog */
static int die(const char *what) { fprintf(stderr, "lmdump: %s: %s\n", what, af_last_error()); return 1; }
static char *rd(FILE *f, unsigned *len) {
    if (fread(len, 4, 1, f) != 1) return NULL;
    char *t = malloc(*len + 1);
    if (!t || fread(t, 1, *len, f) != *len) return NULL;
    t[*len] = 0;
    return t;
}
static void wids(FILE *f, const int32_t *ids, size_t n) {
    uint32_t u = (uint32_t)n;
    fwrite(&u, 4, 1, f);
    fwrite(ids, 4, n, f);
}
int main(int argc, char **argv) {
    if (argc != 7) { fprintf(stderr, "usage: lmdump MODEL ADAPTER|- THREADS MAX_NEW IN OUT\n"); return 2; }
    af_ctx_params cp;
    af_ctx_params_default(&cp);
    cp.n_threads = atoi(argv[3]);
    int max_new = atoi(argv[4]);
    af_ctx *ctx = NULL;
    af_model *m = NULL;
    if (af_ctx_new(&cp, &ctx) != AF_OK) return die("ctx");
    if (af_model_load(ctx, argv[1], &m) != AF_OK) return die("model");
    const af_tokenizer *tok = af_model_tokenizer(m);
    FILE *in = fopen(argv[5], "rb");
    if (!in) return die("input");
    unsigned lp, lc;
    char *prompt = rd(in, &lp), *compl = prompt ? rd(in, &lc) : NULL;
    fclose(in);
    if (!compl) { fprintf(stderr, "lmdump: bad input\n"); return 1; }
    int32_t *a = NULL, *b = NULL, *g = NULL;
    size_t na = 0, nb = 0, ng = 0;
    if (af_tokenize(tok, prompt, lp, 1, 0, &a, &na) != AF_OK || af_tokenize(tok, compl, lc, 0, 0, &b, &nb) != AF_OK ||
        af_tokenize(tok, prompt, lp, 1, 1, &g, &ng) != AF_OK)
        return die("tokenize");
    size_t n = na + nb + 1;
    int32_t *ids = malloc(4 * n);
    memcpy(ids, a, 4 * na);
    memcpy(ids + na, b, 4 * nb);
    ids[n - 1] = af_token_eos(tok);
    int32_t V = af_tokenizer_vocab_size(tok);
    int n_ctx = (int)(n > ng + (size_t)max_new ? n : ng + (size_t)max_new) + 1;
    af_session *s = NULL;
    if (af_session_new(m, n_ctx, &s) != AF_OK) return die("session");
    if (strcmp(argv[2], "-") && af_session_load_adapter(s, argv[2], 1.0f) != AF_OK) return die("adapter");
    float *all = malloc(sizeof(float) * n * (size_t)V), *last = malloc(sizeof(float) * (size_t)V);
    if (!all || !last) return die("memory");
    if (af_session_eval(s, ids, (int)n, NULL, all) != AF_OK) return die("eval");
    FILE *out = fopen(argv[6], "wb");
    if (!out) return die("output");
    wids(out, ids, n);
    uint32_t uv = (uint32_t)V;
    fwrite(&uv, 4, 1, out);
    fwrite(all, sizeof(float), n * (size_t)V, out);
    wids(out, g, ng);
    af_session_reset(s);
    int32_t *gen = malloc(4 * (size_t)(max_new > 0 ? max_new : 1));
    size_t k = 0;
    if (af_session_eval(s, g, (int)ng, last, NULL) != AF_OK) return die("eval prompt");
    while ((int)k < max_new) {
        int32_t best = 0;
        for (int32_t v = 1; v < V; v++)
            if (last[v] > last[best]) best = v;
        gen[k++] = best;
        if (af_token_is_eog(tok, best) || (int)k == max_new) break;
        if (af_session_eval(s, &best, 1, last, NULL) != AF_OK) return die("eval token");
    }
    wids(out, gen, k);
    int32_t *eog = malloc(4 * (size_t)V);
    size_t ne = 0;
    for (int32_t v = 0; v < V; v++)
        if (af_token_is_eog(tok, v)) eog[ne++] = v;
    wids(out, eog, ne);
    if (fclose(out)) return die("write");
    af_session_free(s);
    af_model_free(m);
    af_ctx_free(ctx);
    return 0;
}
"""


def log(*a):
    print(*a, flush=True)


def build_lmdump(args):
    bdir = os.path.dirname(os.path.abspath(args.afinar))
    src, exe = os.path.join(args.work, "lmdump.c"), os.path.join(args.work, "lmdump")
    with open(src, "w") as f:
        f.write(LMDUMP_C)
    subprocess.run(["cc", "-std=c11", "-O1", "-I", "include", src, os.path.join(bdir, "libafinar.a"), "-o", exe,
                    *subprocess.run(["make", "-s", "print-ldlibs"], capture_output=True, text=True,
                                   check=True).stdout.split()], check=True)
    return exe


def read_ids(buf, off):
    (n,) = struct.unpack_from("<I", buf, off)
    off += 4
    return np.frombuffer(buf, dtype="<i4", count=n, offset=off).tolist(), off + 4 * n


def afinar_dump(args, exe, adapter, row):
    """Run the C program on one example: (ids, logits [n, V] float32, gen_prompt_ids, gen_ids, eog_ids)."""
    inp, outp = os.path.join(args.work, "ex.in"), os.path.join(args.work, "ex.out")
    with open(inp, "wb") as f:
        for t in (row["prompt"], row["completion"]):
            b = t.encode()
            f.write(struct.pack("<I", len(b)) + b)
    r = subprocess.run([exe, args.model, adapter or "-", str(args.threads), str(args.max_new), inp, outp],
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"lmdump failed ({r.returncode}): {r.stderr}")
    with open(outp, "rb") as f:
        buf = f.read()
    os.remove(outp)
    ids, off = read_ids(buf, 0)
    (V,) = struct.unpack_from("<I", buf, off)
    off += 4
    logits = np.frombuffer(buf, dtype="<f4", count=len(ids) * V, offset=off).reshape(len(ids), V)
    off += 4 * len(ids) * V
    gprompt, off = read_ids(buf, off)
    gen, off = read_ids(buf, off)
    eog, off = read_ids(buf, off)
    return ids, logits, gprompt, gen, eog


def afinar_generate(args, adapter, prompt):
    pf = os.path.join(args.work, "prompt.txt")
    with open(pf, "w") as f:
        f.write(prompt)
    cmd = [args.afinar, "generate", "-m", args.model, "--temp", "0", "-n", str(args.max_new), "-f", pf,
           "-t", str(args.threads)]
    if adapter:
        cmd[2:2] = ["-a", adapter]
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode:
        sys.exit(f"afinar generate failed ({r.returncode}): {r.stderr.decode(errors='replace')}")
    out = r.stdout.decode("utf-8", errors="replace")
    return out[:-1] if out.endswith("\n") else out  # generate ends its output with one "\n"


def load_rows(path, n):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) == n:
                break
    return rows


def load_base(args):
    from transformers import AutoModelForCausalLM
    d, f = os.path.dirname(args.model) or ".", os.path.basename(args.model)
    base = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    base.eval()
    return base


def hf_tokenizer(args):
    from transformers import AutoTokenizer
    d, f = os.path.dirname(args.model) or ".", os.path.basename(args.model)
    return AutoTokenizer.from_pretrained(d, gguf_file=f)


def head_dims(cfg):
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    return n_head, n_kv, getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head


def permute_qk(state, cfg, to):
    """q/k lora_B rows: to="gguf": HF row (h*hd + a*hd/2 + b) -> GGUF row (h*hd + 2b + a) (inverse of
    transformers' un-permutation on GGUF load); to="hf": the inverse map."""
    n_head, n_kv, hd = head_dims(cfg)
    out = {}
    for k, v in state.items():
        nh = n_head if ".q_proj.lora_B" in k else n_kv if ".k_proj.lora_B" in k else None
        if nh is None:
            out[k] = v
        elif to == "gguf":
            out[k] = v.reshape(nh, 2, hd // 2, -1).transpose(1, 2).reshape(v.shape).contiguous()
        else:
            out[k] = v.reshape(nh, hd // 2, 2, -1).transpose(1, 2).reshape(v.shape).contiguous()
    return out


def permuted_copy(src, dst, cfg, to):
    """Copy adapter dir `src` to `dst` with the q/k lora_B rows permuted (permute_qk)."""
    from safetensors.torch import load_file, save_file
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    p = os.path.join(dst, "adapter_model.safetensors")
    save_file(permute_qk(load_file(p), cfg, to), p, metadata={"format": "pt"})
    return dst


def peft_load_check(pm, adir, name="default"):
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import load_file
    file_t = load_file(os.path.join(adir, "adapter_model.safetensors"))
    sd = get_peft_model_state_dict(pm, adapter_name=name)
    missing = sorted(set(sd) - set(file_t))
    unexpected = sorted(set(file_t) - set(sd))
    bad = [k for k in set(sd) & set(file_t) if not torch.equal(sd[k].float(), file_t[k].float())]
    return {"tensors_in_file": len(file_t), "missing_keys": len(missing), "unexpected_keys": unexpected[:4],
            "value_mismatches": len(bad)}


@torch.no_grad()
def peft_logits(pm, ids):
    return pm(input_ids=torch.tensor([ids])).logits[0].float().numpy()


@torch.no_grad()
def peft_greedy(pm, ids, max_new, eog):
    x = torch.tensor([ids])
    out = pm.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=max_new,
                      eos_token_id=eog, pad_token_id=eog[0], temperature=None, top_p=None, top_k=None)
    gen = out[0, len(ids):].tolist()
    for j, t in enumerate(gen):  # cut after the first end-of-generation token (pad after it)
        if t in eog:
            return gen[:j + 1]
    return gen


def decode(tok, ids):
    return tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


class Stats:
    def __init__(self):
        self.max_abs, self.max_rel, self.argmax_same, self.positions, self.sum_abs, self.count = 0.0, 0.0, 0, 0, 0.0, 0
        self.greedy_text_same, self.greedy_ids_same, self.n = 0, 0, 0
        self.first_diff = None

    def logits(self, la, lp):
        d = np.abs(la.astype(np.float64) - lp.astype(np.float64))
        m = float(d.max())
        self.max_abs = max(self.max_abs, m)
        self.max_rel = max(self.max_rel, m / (1.0 + float(np.abs(la).max())))
        self.sum_abs += float(d.sum())
        self.count += d.size
        self.argmax_same += int((la.argmax(1) == lp.argmax(1)).sum())
        self.positions += la.shape[0]

    def greedy(self, text_a, text_p, ids_a, ids_p, line):
        self.n += 1
        self.greedy_text_same += int(text_a == text_p)
        self.greedy_ids_same += int(ids_a == ids_p)
        if text_a != text_p and self.first_diff is None:
            self.first_diff = {"example": line, "afinar": text_a, "peft": text_p}

    def result(self):
        r = {"n": self.n, "positions": self.positions, "max_abs_logit_diff": self.max_abs, "max_rel": self.max_rel,
             "mean_abs_logit_diff": self.sum_abs / max(1, self.count),
             "argmax_agreement": self.argmax_same / max(1, self.positions),
             "identical_greedy": self.greedy_text_same, "identical_greedy_token_ids": self.greedy_ids_same}
        if self.first_diff:
            r["first_greedy_difference"] = self.first_diff
        return r


def compare(args, exe, tok, pm, afinar_adapter, neg_name, rows):
    """Both comparisons over `rows`: afinar (adapter dir `afinar_adapter`) vs PEFT's active adapter
    "default"; negative control: PEFT's adapter `neg_name` (p2a: None, the control is on afinar's
    side and handled by the caller)."""
    good, neg = Stats(), Stats()
    base_changed = 0
    cli_vs_session = 0
    tokens_same = 0
    max_logit = 0.0
    t0 = time.time()
    for i, row in enumerate(rows):
        ids, la, gprompt, gen_a, eog = afinar_dump(args, exe, afinar_adapter, row)
        max_logit = max(max_logit, float(np.abs(la).max()))
        hp = tok(row["prompt"], add_special_tokens=True)["input_ids"]
        hc = tok(row["completion"], add_special_tokens=False)["input_ids"]
        tokens_same += int(ids == hp + hc + [tok.eos_token_id] and gprompt == hp)
        text_cli = afinar_generate(args, afinar_adapter, row["prompt"])
        cli_vs_session += int(text_cli == decode(tok, [t for t in gen_a if t not in eog]))
        pm.set_adapter("default")
        good.logits(la, peft_logits(pm, ids))
        gen_p = peft_greedy(pm, gprompt, args.max_new, eog)
        good.greedy(text_cli, decode(tok, gen_p), gen_a, gen_p, i + 1)
        with pm.disable_adapter():
            gen_b = peft_greedy(pm, gprompt, args.max_new, eog)
        base_changed += int(gen_b != gen_p)
        if neg_name:
            pm.set_adapter(neg_name)
            neg.logits(la, peft_logits(pm, ids))
            gen_n = peft_greedy(pm, gprompt, args.max_new, eog)
            neg.greedy(text_cli, decode(tok, gen_n), gen_a, gen_n, i + 1)
            pm.set_adapter("default")
        log(f"  [{i + 1}/{len(rows)}] {len(ids)} tokens, max|diff| so far {good.max_abs:.3g}"
            f"{f' (control {neg.max_abs:.3g})' if neg_name else ''}, greedy same {good.greedy_text_same}/{good.n}; "
            f"afinar: {text_cli!r} [{time.time() - t0:.0f} s]")
    res = good.result()
    res["max_abs_logit_afinar"] = max_logit
    res["greedy_changed_by_adapter"] = base_changed
    res["afinar_generate_cli_equals_session_greedy"] = cli_vs_session
    res["token_ids_identical_to_transformers_tokenizer"] = tokens_same
    return res, (neg.result() if neg_name else None)


def cmd_a2p(args):
    from peft import PeftModel
    exe = build_lmdump(args)
    with open(os.path.join(args.adapter, "adapter_config.json")) as f:
        acfg = json.load(f)
    meta = {}
    if os.path.exists(os.path.join(args.adapter, "afinar.json")):
        with open(os.path.join(args.adapter, "afinar.json")) as f:
            meta = json.load(f)
    rows = load_rows(args.data, args.n)
    tok = hf_tokenizer(args)
    base = load_base(args)
    pm = PeftModel.from_pretrained(base, args.adapter)
    pm.eval()
    negdir = permuted_copy(args.adapter, os.path.join(args.work, "a2p_negative_qk_gguf_order"), base.config, "gguf")
    pm.load_adapter(negdir, adapter_name="neg")
    pm.set_adapter("default")
    res = {"adapter": args.adapter, "task_type": acfg.get("task_type"), "r": acfg.get("r"),
           "lora_alpha": acfg.get("lora_alpha"), "target_modules": sorted(acfg.get("target_modules") or []),
           "afinar_json": {k: meta.get(k) for k in ("version", "qk_row_order", "task", "step", "max_seq_len")
                           if k in meta},
           "peft_load": peft_load_check(pm, args.adapter)}
    log("peft load:", res["peft_load"])
    good, neg = compare(args, exe, tok, pm, args.adapter, "neg", rows)
    res.update(good)
    res["negative_control_qk_rows_in_gguf_order"] = neg
    log("afinar vs PEFT:", good)
    log("negative control (q/k rows NOT converted):", neg)
    save_result(args, "afinar_to_peft", res)


def cmd_p2a(args):
    from peft import LoraConfig, PeftModel, TaskType, get_peft_model
    exe = build_lmdump(args)
    tok = hf_tokenizer(args)
    base = load_base(args)
    torch.manual_seed(args.seed)
    cfg = LoraConfig(task_type=TaskType.CAUSAL_LM, r=8, lora_alpha=16, lora_dropout=0.0,
                     target_modules="all-linear")
    pm = get_peft_model(base, cfg)
    train = load_rows(os.path.join(os.path.dirname(args.data), "train.jsonl"), args.train_n)
    eos = tok.eos_token_id
    seqs = []
    for r in train:  # prompt tokens, completion tokens, EOS; loss on completion + EOS (TRL's default)
        p = tok(r["prompt"], add_special_tokens=True)["input_ids"]
        c = tok(r["completion"], add_special_tokens=False)["input_ids"] + [eos]
        ids = (p + c)[:args.max_len]
        lab = ([-100] * len(p) + c)[:args.max_len]
        seqs.append((ids, lab))
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    pm.train()
    t0 = time.time()
    steps = 0
    for ep in range(args.epochs):
        order = torch.randperm(len(seqs)).tolist()
        for s in range(0, len(order), args.accum):
            opt.zero_grad()
            chunk = order[s:s + args.accum]
            n_tg = sum(sum(1 for t in seqs[i][1][1:] if t != -100) for i in chunk)
            tot = 0.0
            for i in chunk:  # one example at a time (no padding); loss = sum over the step's targets / count
                ids, lab = seqs[i]
                logits = pm(input_ids=torch.tensor([ids])).logits[0, :-1]
                loss = torch.nn.functional.cross_entropy(logits, torch.tensor(lab[1:]), ignore_index=-100,
                                                         reduction="sum") / n_tg
                loss.backward()
                tot += loss.item()
            opt.step()
            steps += 1
            log(f"  PEFT train epoch {ep} step {steps}: loss {tot:.4f}")
    log(f"PEFT training: {steps} steps, {time.time() - t0:.1f} s")
    adir = os.path.join(args.work, "peft_lm_adapter")
    shutil.rmtree(adir, ignore_errors=True)
    pm.save_pretrained(adir)
    # reload from disk so that PEFT is compared from exactly the files afinar reads
    base = load_base(args)
    pm = PeftModel.from_pretrained(base, adir)
    pm.eval()
    with open(os.path.join(adir, "adapter_config.json")) as f:
        acfg = json.load(f)
    rows = load_rows(args.data, args.n)
    res = {"adapter": "PEFT save_pretrained (no afinar.json)", "task_type": acfg.get("task_type"),
           "lora": "r=8 lora_alpha=16 target_modules=all-linear dropout 0",
           "target_modules_saved": sorted(acfg.get("target_modules") or []),
           "files": sorted(os.listdir(adir)),
           "train": f"first {len(seqs)} examples of {os.path.join(os.path.dirname(args.data), 'train.jsonl')}, "
                    f"max_length {args.max_len}, loss on completion + EOS, {args.epochs} epoch(s), {steps} AdamW "
                    f"steps of {args.accum} examples, lr {args.lr}, seed {args.seed}"}
    good, _ = compare(args, exe, tok, pm, adir, None, rows)
    res.update(good)
    log("afinar vs PEFT:", good)
    # negative control: afinar loads a copy whose q/k B rows are pre-permuted (HF -> "hf of hf"), so its
    # load-time HF -> GGUF conversion hands the engine the HF rows unchanged: afinar as if it did not convert
    negdir = permuted_copy(adir, os.path.join(args.work, "p2a_negative_no_conversion"), base.config, "hf")
    neg = Stats()
    for i, row in enumerate(rows):
        ids, la, gprompt, gen_a, eog = afinar_dump(args, exe, negdir, row)
        text_cli = afinar_generate(args, negdir, row["prompt"])
        neg.logits(la, peft_logits(pm, ids))
        gen_p = peft_greedy(pm, gprompt, args.max_new, eog)
        neg.greedy(text_cli, decode(tok, gen_p), gen_a, gen_p, i + 1)
        log(f"  control [{i + 1}/{len(rows)}] max|diff| {neg.max_abs:.3g}")
    res["negative_control_qk_rows_not_converted"] = neg.result()
    log("negative control:", res["negative_control_qk_rows_not_converted"])
    save_result(args, "peft_to_afinar", res)


def save_result(args, key, res):
    import peft
    import transformers
    data = {}
    if os.path.exists(args.results):
        with open(args.results) as f:
            data = json.load(f)
    res["command"] = " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    res["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                       "peft": peft.__version__, "model": os.path.basename(args.model),
                       "data": f"first {args.n} examples of {args.data}", "max_new_tokens": args.max_new}
    data[key] = res
    with open(args.results, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    log(f"wrote {args.results} [{key}]")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["a2p", "p2a"])
    ap.add_argument("adapter", nargs="?")
    ap.add_argument("--afinar", default="build/afinar")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--data", default="data/bbc_headlines/test.jsonl")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--max-new", type=int, default=16)
    ap.add_argument("--train-n", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=256, help="p2a training truncation (tokens)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--accum", type=int, default=8, help="p2a: examples per AdamW step")
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1), help="torch and afinar threads")
    ap.add_argument("--work", default="/tmp/afinar_lm_interop")
    ap.add_argument("--results", default="tests/fixtures/peft_lm_interop_results.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    os.makedirs(args.work, exist_ok=True)
    if args.cmd == "a2p":
        if not args.adapter:
            ap.error("a2p needs the adapter directory")
        cmd_a2p(args)
    else:
        cmd_p2a(args)


if __name__ == "__main__":
    main()
