#!/usr/bin/env python3
"""Write tests/fixtures/optim_ref.bin: reference AdamW trajectories for src/train/optim.c.

Run from the repository root with the reference venv:
    .venv-ref/bin/python tests/ref/make_optim_ref.py

Each run trains a random 1000-element float32 parameter for 10 steps with torch.optim.AdamW
(foreach=False, fused=False: the single-tensor CPU implementation) on given random gradients.
Before some steps torch.nn.utils.clip_grad_norm_(max_norm) is applied; the learning rate of each
step comes from the warm-up + cosine/linear schedule of src/train/optim.h (af_lr_at), computed
here with the same double formula and rounded to float32 like the C function. All hyper-parameters
are float32-representable values (the C API stores them as float), passed to torch as the doubles
those floats represent. A run may split the parameter into two param groups: elements
[0, n_decay) with weight_decay wd and [n_decay, n) with weight_decay 0.0 (the C side uses a
decay_mask); with n_decay == n there is one group (the C side passes decay_mask NULL).

File format (all little-endian):
    header : char magic[4] = "AFOR"; u32 version = 1; u32 n_runs
    run    : u32 n; u32 n_steps; u32 n_decay; u32 sched (0 constant, 1 cosine, 2 linear);
             u32 warmup; u32 total (schedule length, = n_steps);
             f32 lr; f32 lr_min; f32 beta1; f32 beta2; f32 eps; f32 weight_decay; f32 max_norm
             f32 p0[n]                                    initial parameters
             n_steps times:
               u32 clip     1 if clip_grad_norm_(max_norm) ran before this step
               f32 lr       learning rate used for this step (float32 schedule value)
               f32 norm     total norm returned by clip_grad_norm_ (pre-clip; 0 when clip = 0)
               f32 g[n]     raw gradient of this step (before clipping)
             f32 p_final[n]                               parameters after the last step
"""
import math
import os
import struct

import numpy as np
import torch

OUT = os.path.join("tests", "fixtures", "optim_ref.bin")
F32 = lambda x: float(np.float32(x))  # noqa: E731  (double value of the nearest float32)


def lr_at(sched, lr, lr_min, step, warmup, total):
    """Mirror of af_lr_at (src/train/optim.c): double math on float32 inputs, float32 result."""
    lr, lr_min = F32(lr), F32(lr_min)
    step = max(step, 0)
    if warmup > 0 and step < warmup:
        return F32(lr * (step + 1) / warmup)
    if sched == 0:
        return lr
    warmup = max(warmup, 0)
    span = total - 1 - warmup
    if span <= 0:
        return lr
    progress = min((step - warmup) / span, 1.0)
    f = 0.5 * (1.0 + math.cos(math.pi * progress)) if sched == 1 else 1.0 - progress
    return F32(lr_min + (lr - lr_min) * f)


def run(out, rng, n, sched, warmup, lr, lr_min, wd, n_decay, max_norm, scales, clip_steps):
    n_steps = len(scales)
    beta1, beta2, eps = F32(0.9), F32(0.999), F32(1e-8)
    wd, max_norm = F32(wd), F32(max_norm)
    p0 = rng.standard_normal(n).astype(np.float32)
    full = torch.tensor(p0)
    parts = [full[:n_decay].clone(), full[n_decay:].clone()] if n_decay < n else [full.clone()]
    params = [torch.nn.Parameter(t) for t in parts]
    groups = [{"params": [params[0]], "weight_decay": wd}]
    if len(params) == 2:
        groups.append({"params": [params[1]], "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=F32(lr), betas=(beta1, beta2), eps=eps, foreach=False, fused=False)
    out += struct.pack("<6I7f", n, n_steps, n_decay, sched, warmup, n_steps,
                       F32(lr), F32(lr_min), beta1, beta2, eps, wd, max_norm)
    out += p0.tobytes()
    for s in range(n_steps):
        g = (rng.standard_normal(n) * scales[s]).astype(np.float32)
        gt = torch.tensor(g)
        off = 0
        for p in params:
            p.grad = gt[off:off + p.numel()].clone()
            off += p.numel()
        clip = s in clip_steps
        norm = 0.0
        if clip:
            norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=False))
        lr_s = lr_at(sched, lr, lr_min, s, warmup, n_steps)
        for grp in opt.param_groups:
            grp["lr"] = lr_s
        opt.step()
        out += struct.pack("<Iff", 1 if clip else 0, lr_s, norm)
        out += g.tobytes()
    final = torch.cat([p.detach() for p in params]).numpy().astype(np.float32)
    out += final.tobytes()


def main():
    rng = np.random.default_rng(20240617)
    torch.manual_seed(0)
    scales = [0.1, 0.01, 0.05, 0.2, 0.02, 0.1, 0.005, 0.3, 0.03, 0.08]  # pre-clip norms ~0.16 .. 9.5
    out = bytearray(b"AFOR" + struct.pack("<II", 1, 2))
    # run 0: cosine schedule, weight decay 0.01 on everything, clipping on all steps but 3 and 7
    run(out, rng, 1000, 1, 3, 1e-2, 1e-3, 0.01, 1000, 1.0, scales, set(range(10)) - {3, 7})
    # run 1: linear schedule to 0, weight decay 0.01 on [0, 600) and 0.0 on [600, 1000), clip on even steps
    run(out, rng, 1000, 2, 2, 5e-3, 0.0, 0.01, 600, 1.0, scales[::-1], {0, 2, 4, 6, 8})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "wb") as f:
        f.write(out)
    print(f"wrote {OUT}: {len(out)} bytes")


if __name__ == "__main__":
    main()
