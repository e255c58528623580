#!/usr/bin/env python3
"""Chat fine-tuning (SFT) example: a list of conversations -> LoRA on every linear layer with the
loss on the assistant turns (TRL's SFTTrainer convention) -> generation with the adapter.

    pip install ./python tqdm
    python examples/chat_sft.py                                  # a short real run (~100 steps)
    python examples/chat_sft.py --max-steps 2 --max-seq-len 64   # what CI runs
"""
import argparse
import os

import afinar

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
p.add_argument("--out", default="runs/example-chat-sft")
p.add_argument("--max-steps", type=int, default=100)
p.add_argument("--max-seq-len", type=int, default=128)
p.add_argument("--threads", type=int, default=None)
args = p.parse_args()

# conversations in the {"messages": [...]} form of Hugging Face datasets / TRL
facts = [("What is the capital of Norway?", "Oslo."), ("What is the capital of Peru?", "Lima."),
         ("What is the capital of Kenya?", "Nairobi."), ("What is the capital of Chile?", "Santiago."),
         ("What is the capital of Egypt?", "Cairo."), ("What is the capital of Japan?", "Tokyo.")]
conversations = [{"messages": [{"role": "system", "content": "Answer in one word."},
                               {"role": "user", "content": q},
                               {"role": "assistant", "content": a}]} for q, a in facts]

model = afinar.Model(args.model, threads=args.threads)
metrics = afinar.train(model, train=conversations, output_dir=args.out, task="causal-lm",
                       max_steps=args.max_steps, per_device_train_batch_size=2, learning_rate=2e-4,
                       max_length=args.max_seq_len, lora_r=8, lora_alpha=16,
                       target_modules="all-linear", overwrite=True, plot=False, threads=args.threads)
print("train loss %.4f after %d steps" % (metrics["train_loss"], metrics["steps_done"]))

adapter = os.path.join(args.out, "final")
question = [{"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": "What is the capital of Peru?"}]
print("base:    ", model.generate(question, max_new_tokens=16, temperature=0))
print("adapter: ", model.generate(question, max_new_tokens=16, temperature=0, adapter=adapter))
print("streamed:", end=" ", flush=True)
for piece in model.generate(question, max_new_tokens=16, temperature=0, adapter=adapter, stream=True):
    print(piece, end="", flush=True)
print()
