"""Device check: the layer on a given device (default cuda) against the CPU/SciPy path.

    python plugins/dxpp/benchmarks/device_check.py --device cuda --batch 64 --n 50

Solves a batch of random QPs with inputs on --device, backpropagates (the dense dXPP backward
is one batched torch Cholesky on that device), and compares every input gradient with the
per-problem SciPy backward (linear_solver="dense") on the CPU. Prints the max relative
difference and the backward times; exits 1 if the difference exceeds --tol.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from icml_dxpp import dxpp_solve
from icml_dxpp.problems import random_qp


def run(device: str, batch: int, n: int, linear_solver: str, dtype: torch.dtype
        ) -> tuple[dict[str, torch.Tensor], float]:
    probs = [random_qp(n, seed=s).problem for s in range(batch)]
    ts = {k: torch.tensor(np.stack([np.asarray(getattr(p, k)) for p in probs]), dtype=dtype,
                          device=device).requires_grad_() for k in "QqGhAb"}
    sol = dxpp_solve(*ts.values(), linear_solver=linear_solver)
    w = torch.linspace(-1, 1, sol.x.numel(), dtype=dtype, device=device).reshape(sol.x.shape)
    loss = (sol.x * w).sum() + sol.ineq_dual.sum() + sol.eq_dual.sum()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t = time.perf_counter()
    loss.backward()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    dt = time.perf_counter() - t
    return {k: v.grad.detach().cpu().double() for k, v in ts.items()}, dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    ap.add_argument("--tol", type=float, default=1e-6)
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    dev_grads, dev_t = run(args.device, args.batch, args.n, "batched", dtype)
    ref_grads, ref_t = run("cpu", args.batch, args.n, "dense", torch.float64)
    worst = max(float((dev_grads[k] - ref_grads[k]).norm() / ref_grads[k].norm().clamp_min(1e-300))
                for k in ref_grads)
    print(f"device {args.device} ({args.dtype}): batched backward {1e3 * dev_t:.1f} ms; "
          f"CPU per-problem SciPy backward {1e3 * ref_t:.1f} ms; max rel grad diff {worst:.2e}")
    return 0 if worst <= args.tol else 1


if __name__ == "__main__":
    raise SystemExit(main())
