#!/usr/bin/env python3
"""PEFT reference of one DoRA projection (peft 0.21 use_dora=True on a bias-free nn.Linear) for
tests/test_dora.c: forward output and the gradients of A, B, the magnitude m and the input x, without
dropout and with a fixed dropout mask (PEFT's lora_dropout module replaced by a multiplication with a
given 0 or 1/(1-p) mask, so that the C side can use the same mask).

Setup: W [16, 24], LoRA r 4, lora_alpha 8 (scale 2), x [5, 24], upstream gradient dy [5, 16]; lora_B
random (not PEFT's zero init) and the magnitude moved away from its initial norm (m = 1.3 x initial
norm + noise) so that every term is exercised. loss = sum(y * dy).

Run from the repository root:  .venv-ref/bin/python tests/ref/make_dora_ref.py
Output: tests/fixtures/dora_ref.safetensors (F64 tensors): W, A, B, m, x, dy, mask, scale [1],
  nrm0 (PEFT's initial magnitude = the row norms of W), and for each of "nodrop", "drop":
  <case>.y, <case>.dA, <case>.dB, <case>.dm, <case>.dx; also "merged" [16, 24]: PEFT's
  merge_and_unload weight.
"""
import os

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from safetensors.numpy import save_file

OUT = os.path.join("tests", "fixtures", "dora_ref.safetensors")
IN, OUTF, R, ALPHA, N = 24, 16, 4, 8.0, 5


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(IN, OUTF, bias=False)

    def forward(self, x):
        return self.proj(x)


class FixedMask(torch.nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.mask = mask

    def forward(self, x):
        return x * self.mask


def run(params, x, dy, mask):
    torch.manual_seed(0)
    net = Net().double()
    with torch.no_grad():
        net.proj.weight.copy_(torch.from_numpy(params["W"]))
    cfg = LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.1 if mask is not None else 0.0, target_modules=["proj"],
                     use_dora=True)
    model = get_peft_model(net, cfg).double()
    layer = model.base_model.model.proj
    nrm0 = layer.lora_magnitude_vector["default"].weight.detach().numpy().copy()
    with torch.no_grad():
        layer.lora_A["default"].weight.copy_(torch.from_numpy(params["A"]))
        layer.lora_B["default"].weight.copy_(torch.from_numpy(params["B"]))
        layer.lora_magnitude_vector["default"].weight.copy_(torch.from_numpy(params["m"]))
    if mask is not None:
        layer.lora_dropout["default"] = FixedMask(torch.from_numpy(mask))
    model.train()
    xt = torch.from_numpy(x).requires_grad_(True)
    y = model(xt)
    (y * torch.from_numpy(dy)).sum().backward()
    res = {"y": y.detach().numpy(), "dA": layer.lora_A["default"].weight.grad.numpy(),
           "dB": layer.lora_B["default"].weight.grad.numpy(),
           "dm": layer.lora_magnitude_vector["default"].weight.grad.numpy(), "dx": xt.grad.numpy()}
    merged = None
    if mask is None:
        merged = model.merge_and_unload().proj.weight.detach().numpy()
    return res, nrm0, merged


def main():
    rng = np.random.default_rng(20261127)
    W = rng.normal(0, 0.3, (OUTF, IN))
    params = {"W": W, "A": rng.uniform(-0.2, 0.2, (R, IN)), "B": rng.normal(0, 0.2, (OUTF, R))}
    params["m"] = 1.3 * np.linalg.norm(W, axis=1) + rng.normal(0, 0.05, OUTF)
    x = rng.normal(0, 1, (N, IN))
    dy = rng.normal(0, 1, (N, OUTF))
    p = 0.3
    mask = np.where(rng.uniform(size=(N, IN)) >= p, 1.0 / (1.0 - p), 0.0)
    t = dict(params, x=x, dy=dy, mask=mask, scale=np.array([ALPHA / R]))
    nodrop, nrm0, merged = run(params, x, dy, None)
    drop, _, _ = run(params, x, dy, mask)
    assert np.allclose(nrm0, np.linalg.norm(W, axis=1))
    t["nrm0"] = nrm0
    t["merged"] = merged
    for name, res in (("nodrop", nodrop), ("drop", drop)):
        for k, v in res.items():
            t[f"{name}.{k}"] = np.ascontiguousarray(v, dtype=np.float64)
    save_file({k: np.ascontiguousarray(v, dtype=np.float64) for k, v in t.items()}, OUT)
    print("wrote", OUT, "|dm| =", np.abs(nodrop["dm"]).max(), "|y| =", np.abs(nodrop["y"]).max())


if __name__ == "__main__":
    main()
