#!/usr/bin/env python3
"""Scaling model of afinar's data-parallel training (README "Multi-process training").

Per optimizer step of A micro-batches over N ranks (A = k * N: k micro-batches per rank; the global
batch grows with N, the way data parallelism is used to go faster):
  compute  = k * t_mb                          (t_mb: seconds per micro-batch on one node)
  gather   = (A - k) * row_bytes / bw + (N - 1) * alpha   (ring all-gather: every rank receives the
                                                           other ranks' per-micro-batch rows; alpha
                                                           per hop)
  efficiency = compute / (compute + gather)    (no overlap of the gather with compute: the gather
                                                starts after the rank's last micro-batch)
row_bytes = 4 * trainable floats + 32 (the per-micro-batch statistics).
  python3 bench/dist_scaling.py T_MB_SECONDS N_PARAMS [k] [alpha_us]
"""
import sys

t_mb = float(sys.argv[1])
n_params = int(sys.argv[2])
k = int(sys.argv[3]) if len(sys.argv) > 3 else 1
alpha = (float(sys.argv[4]) if len(sys.argv) > 4 else 50.0) * 1e-6
row = 4 * n_params + 32
print("t_mb %.3g s, %d trainable floats (row %.2f MB), %d micro-batch(es) per rank per step, alpha %.0f us"
      % (t_mb, n_params, row / 1e6, k, alpha * 1e6))
print("| nodes | " + " | ".join("%d Gb/s: gather s / efficiency" % g for g in (10, 25, 100)) + " |")
print("|---:|" + "---:|" * 3)
for n in (2, 4, 8, 16, 32, 64):
    cells = []
    for gbps in (10, 25, 100):
        bw = gbps * 1e9 / 8
        a = k * n
        gather = (a - k) * row / bw + (n - 1) * alpha
        comp = k * t_mb
        cells.append("%.3f / %.1f%%" % (gather, 100 * comp / (comp + gather)))
    print("| %d | %s |" % (n, " | ".join(cells)))
