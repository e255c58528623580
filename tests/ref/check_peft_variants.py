#!/usr/bin/env python3
"""PEFT loads the LoRA-variant adapters afinar saves: a small C program (built against build/libafinar.a)
trains three steps on the tiny Hugging Face llama of tests/fixtures/hf_tiny_llama with DoRA, with the
PiSSA and with the OLoRA initialisation (afinar's public trainer, r 4, lora_alpha 8, all 7 projections),
saves each adapter and prints its summed next-token loss on two fixed samples; PEFT 0.21
(PeftModel.from_pretrained on the unmodified base) computes the same loss from the saved directory.
PiSSA / OLoRA adapters arrive as PEFT's converted form (rank 8, init_lora_weights true); the DoRA one
with use_dora and its lora_magnitude_vector tensors.

Run from the repository root after `make`:  .venv-ref/bin/python tests/ref/check_peft_variants.py
Exit status 1 when a loss differs by more than 1e-5 relative.
"""
import os
import subprocess
import sys
import tempfile
import warnings

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

HF = os.path.join("tests", "fixtures", "hf_tiny_llama")
TOKENS = [(i * 37 + 11) % 250 + 3 for i in range(18)]
SAMPLES = ((0, 7), (7, 18))

SAVE_C = r"""
#include "afinar.h"
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) { /* argv: model dir, output dir, use_dora, init_lora_weights */
    af_model *m = NULL;
    if (af_model_load(NULL, argv[1], &m) != AF_OK) { fprintf(stderr, "%s\n", af_last_error()); return 1; }
    af_lora_trainer_opts o;
    af_lora_trainer_opts_defaults(&o);
    o.r = 4, o.lora_alpha = 8, o.lora_dropout = 0, o.targets = "all-linear";
    o.use_dora = atoi(argv[3]), o.init_lora_weights = atoi(argv[4]);
    af_lora_trainer *tr = NULL;
    if (af_lora_trainer_new(m, &o, &tr) != AF_OK) { fprintf(stderr, "%s\n", af_last_error()); return 1; }
    int32_t tok[18], tgt[18], ss[3] = {0, 7, 18};
    for (int i = 0; i < 18; i++) tok[i] = (i * 37 + 11) % 250 + 3;
    for (int b = 0; b < 2; b++)
        for (int t = ss[b]; t < ss[b + 1]; t++) tgt[t] = t + 1 < ss[b + 1] ? tok[t + 1] : -1;
    for (int s = 0; s < 3; s++) {
        double l;
        af_lora_trainer_accumulate_lm(tr, tok, ss, 2, tgt, 1.0f, &l, NULL, NULL);
        af_lora_trainer_step(tr, 2e-2f, NULL);
    }
    double l = 0;
    af_lora_trainer_forward_lm(tr, tok, ss, 2, tgt, &l, NULL, NULL);
    if (af_lora_trainer_save_adapter(tr, argv[2], NULL) != AF_OK) { fprintf(stderr, "%s\n", af_last_error()); return 1; }
    printf("%.9g\n", l);
    return 0;
}
"""


def peft_loss(adapter):
    base = AutoModelForCausalLM.from_pretrained(HF, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter)
    loss = 0.0
    with torch.no_grad():
        for a, b in SAMPLES:
            ids = torch.tensor(TOKENS[a:b]).unsqueeze(0)
            lg = model(input_ids=ids).logits[0]
            loss += torch.nn.functional.cross_entropy(lg[:-1], ids[0, 1:], reduction="sum").item()
    return loss, model.peft_config["default"]


def main():
    warnings.filterwarnings("ignore")
    work = tempfile.mkdtemp(prefix="af_variants_")
    src, exe = os.path.join(work, "save.c"), os.path.join(work, "save")
    with open(src, "w") as f:
        f.write(SAVE_C)
    ldlibs = subprocess.run(["make", "-s", "print-ldlibs"], capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["cc", "-std=c11", "-O1", "-I", "include", src, os.path.join("build", "libafinar.a"), "-o", exe,
                    *ldlibs], check=True)
    bad = 0
    for name, dora, init in (("dora", 1, 0), ("pissa", 0, 2), ("olora", 0, 3)):
        d = os.path.join(work, name)
        out = subprocess.run([exe, HF, d, str(dora), str(init)], capture_output=True, text=True, check=True).stdout
        ours = float(out.split()[0])
        theirs, cfg = peft_loss(d)
        rel = abs(ours - theirs) / abs(theirs)
        bad += rel > 1e-5
        print(f"{name:6s} afinar loss {ours:.6f}  PEFT on the saved adapter {theirs:.6f}  rel. diff {rel:.1e}  "
              f"(r {cfg.r}, lora_alpha {cfg.lora_alpha}, use_dora {cfg.use_dora})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
