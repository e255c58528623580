#!/usr/bin/env python3
"""Notebook-style example: a pandas DataFrame of texts and labels -> LoRA fine-tuning of a sequence
classifier -> predictions and an evaluation.

    pip install ./python pandas tqdm
    python examples/classify_dataframe.py                      # a short real run (~200 steps)
    python examples/classify_dataframe.py --max-steps 2 --max-seq-len 32   # what CI runs
"""
import argparse
import os

import pandas as pd

import afinar

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
p.add_argument("--out", default="runs/example-classify")
p.add_argument("--max-steps", type=int, default=200)
p.add_argument("--max-seq-len", type=int, default=64)
p.add_argument("--threads", type=int, default=None)
args = p.parse_args()

# 1. the data: any DataFrame with a text column and a label column (names or ids)
pos = ["a wonderful, moving film", "great acting and a clever plot", "I loved every minute",
       "beautifully shot, warm and funny", "the best film of the year", "a delight from start to end"]
neg = ["a dull, boring mess", "terrible acting and a silly plot", "I walked out halfway",
       "ugly, cold and never funny", "the worst film of the year", "a chore from start to end"]
df = pd.DataFrame({"text": pos + neg, "label": ["positive"] * len(pos) + ["negative"] * len(neg)})
df = df.sample(frac=1.0, random_state=0).reset_index(drop=True)
train_df, eval_df = df.iloc[:9], df.iloc[9:]

# 2. fine-tune: TRL-style names or afinar's own (lr, batch, ...); a tqdm bar shows the steps
model = afinar.Model(args.model, threads=args.threads)
print(model, model.info["num_hidden_layers"], "layers")
metrics = afinar.train(model, train=train_df, eval=eval_df, output_dir=args.out, task="classification",
                       max_steps=args.max_steps, per_device_train_batch_size=4, gradient_accumulation_steps=1,
                       learning_rate=5e-4, max_length=args.max_seq_len, lora_r=16, lora_alpha=32,
                       overwrite=True, plot=False, threads=args.threads)
print({k: v for k, v in metrics.items() if k != "log_history"})

# 3. use the adapter
adapter = os.path.join(args.out, "best")
for pred, text in zip(model.classify(["what a lovely film", "so boring"], adapter=adapter),
                      ["what a lovely film", "so boring"]):
    print("%-20s -> %s %s" % (text, pred["label"], pred["probabilities"]))
report = afinar.evaluate(model, eval_df, adapter=adapter)
print("accuracy %.3f, macro-F1 %.3f on %d held-out texts" % (report["accuracy"], report["macro_f1"], report["n"]))
