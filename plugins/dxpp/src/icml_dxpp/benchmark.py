"""Measurements used by the hooks and ``benchmarks/bench.py``: gradient error of dXPP against
the KKT reference, forward/backward timings, a β sweep, and end-to-end portfolio training."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from icml_dxpp.forward import QPResult, solve_qp
from icml_dxpp.kkt import kkt_backward
from icml_dxpp.penalty import PenaltyOptions, dxpp_backward
from icml_dxpp.qp import QPProblem

__all__ = ["rel_error", "best_time", "CompareRow", "compare_backwards",
           "beta_sweep", "portfolio_training"]


def _sqnorm(g: Any) -> float:
    if sp.issparse(g):
        return float(np.sum(np.asarray(g.data) ** 2))
    return float(np.sum(np.asarray(g) ** 2))


def rel_error(grads: dict[str, Any], ref: dict[str, Any]) -> float:
    """‖grads − ref‖ / ‖ref‖ over all six gradients (sparse ones stay sparse)."""
    diff = sum(_sqnorm(grads[k] - ref[k]) for k in ("Q", "q", "G", "h", "A", "b"))
    base = sum(_sqnorm(ref[k]) for k in ("Q", "q", "G", "h", "A", "b"))
    return float(np.sqrt(diff) / max(np.sqrt(base), 1e-300))


def best_time(fn: Callable[[], Any], repeats: int = 3) -> tuple[float, Any]:
    """Fastest wall time of ``repeats`` calls, and the last result."""
    best, out = float("inf"), None
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


@dataclass
class CompareRow:
    family: str
    size: int
    n: int
    m: int
    p: int
    active: int
    forward_s: float
    times: dict[str, float]  # backward seconds per method
    errors: dict[str, float]  # relative gradient error vs the reference, per method
    closed_form_error: float | None = None


def compare_backwards(prob: QPProblem, family: str = "", size: int = 0, *,
                      solver: str = "auto", tol: float | None = None,
                      penalty: PenaltyOptions | None = None,
                      methods: tuple[str, ...] = ("dxpp", "kkt-reduced", "kkt-full"),
                      reference: str = "kkt-reduced", repeats: int = 3, seed: int = 0,
                      polish: bool = False,
                      sol: QPResult | None = None,
                      closed_form: Callable[[QPResult, np.ndarray], np.ndarray] | None = None,
                      step: Callable[[str], AbstractContextManager[Any]] | None = None
                      ) -> CompareRow:
    """Solve once, then time each backward on the same solution and upstream gradient
    ḡ ~ N(0, I); errors are relative to ``reference`` over all six gradients.

    ``step(desc)``, a context manager (``RunContext.step``), wraps the forward solve and each
    backward so that long problems report progress; ``None``: silent."""
    penalty = penalty or PenaltyOptions()
    stage = step or (lambda desc: nullcontext())
    label = f"{family} n={prob.n}: " if family else f"n={prob.n}: "
    if sol is None:
        with stage(f"{label}forward solve ({solver})"):
            forward_s, sol = best_time(lambda: solve_qp(prob, solver, tol, penalty.active_tol,
                                                        polish_solution=polish),
                                       1 if prob.n > 20_000 else repeats)
    else:
        forward_s = float("nan")
    g = np.random.default_rng(seed).standard_normal(prob.n)
    args = (prob, sol.x, sol.ineq_dual, sol.eq_dual, g)
    run = {
        "dxpp": lambda: dxpp_backward(*args, opts=penalty)[0],
        "kkt-reduced": lambda: kkt_backward(*args, mode="reduced",
                                            active_tol=penalty.active_tol)[0],
        "kkt-full": lambda: kkt_backward(*args, mode="full", active_tol=penalty.active_tol)[0],
    }
    times, grads = {}, {}
    for name in methods:
        if name not in run:
            raise ValueError(f"unknown method {name!r}: use {', '.join(run)}")
        with stage(f"{label}{name} backward"):
            times[name], grads[name] = best_time(run[name], repeats)
    ref = grads.get(reference)
    if ref is None:
        with stage(f"{label}{reference} reference backward"):
            ref = run[reference]()
    errors = {k: rel_error(v, ref) for k, v in grads.items() if k != reference}
    cf = None
    if closed_form is not None:
        exact = closed_form(sol, g)
        cf = float(np.linalg.norm(grads["dxpp"]["q"] - exact) /
                   max(np.linalg.norm(exact), 1e-300))
    active = int(np.sum(prob.slack(sol.x) < penalty.active_tol))
    return CompareRow(family, size, prob.n, prob.m, prob.p, active, forward_s, times, errors, cf)


def beta_sweep(prob: QPProblem, sol: QPResult, betas: list[float], *, seed: int = 0,
               penalty: PenaltyOptions | None = None) -> list[tuple[float, float]]:
    """(β, relative error of dXPP vs the reduced-KKT reference) for each β."""
    penalty = penalty or PenaltyOptions()
    g = np.random.default_rng(seed).standard_normal(prob.n)
    args = (prob, sol.x, sol.ineq_dual, sol.eq_dual, g)
    ref = kkt_backward(*args, mode="reduced", active_tol=penalty.active_tol)[0]
    out = []
    for beta in betas:
        opts = PenaltyOptions(**{**penalty.__dict__, "beta": beta})
        out.append((beta, rel_error(dxpp_backward(*args, opts=opts)[0], ref)))
    return out


def portfolio_training(method: str = "dxpp", *, T: int = 5, k: int = 10, steps: int = 50,
                       lr: float = 0.05, seed: int = 0, solver: str = "auto",
                       beta: float = 1e-6, device: Any = None, dtype: Any = None
                       ) -> dict[str, Any]:
    """Train a linear return predictor μ̂ₜ = W fₜ end to end through the multi-period
    portfolio QP (n = T·k) to maximise realised return minus risk; returns the loss curve.

    Data are synthetic (seeded): features fₜ ∈ ℝ^k, true returns rₜ = B fₜ + noise. The loss is
    −Σₜ rₜᵀwₜ + ½γ Σₜ wₜᵀΣwₜ over a batch of 8 scenarios, and only μ̂ (hence q) is learned.
    """
    import torch

    from icml_dxpp.layer import dxpp_solve
    from icml_dxpp.problems import portfolio_qp

    device = device or torch.device("cpu")
    dtype = dtype or torch.float64
    rng = np.random.default_rng(seed)
    F = rng.standard_normal((k, k)) / np.sqrt(k)
    Sigma = F @ F.T / k + 0.05 * np.eye(k)
    Btrue = rng.standard_normal((k, k)) / np.sqrt(k)
    w0 = np.full(k, 1.0 / k)
    base = portfolio_qp(Sigma, np.zeros((T, k)), w0)
    Q = torch.tensor(base.Q, dtype=dtype, device=device)
    G = torch.tensor(base.G, dtype=dtype, device=device)
    h = torch.tensor(base.h, dtype=dtype, device=device)
    A = torch.tensor(base.A, dtype=dtype, device=device)
    b = torch.tensor(base.b, dtype=dtype, device=device)
    q0 = torch.tensor(base.q, dtype=dtype, device=device)  # holds the −κw₀ term
    S = torch.tensor(Sigma, dtype=dtype, device=device)
    gen = torch.Generator().manual_seed(seed)
    W = torch.zeros(k, k, dtype=dtype, device=device, requires_grad=True)
    opt = torch.optim.Adam([W], lr=lr)
    backward = "dxpp" if method == "dxpp" else "kkt"
    feats = torch.randn(8, T, k, generator=gen, dtype=torch.float64).to(device, dtype)
    rets = (feats @ torch.tensor(Btrue.T, dtype=dtype, device=device) +
            0.1 * torch.randn(8, T, k, generator=gen, dtype=torch.float64).to(device, dtype))
    losses = []
    for _ in range(steps):
        mu_hat = feats @ W.T  # (8, T, k)
        q = q0 - mu_hat.reshape(8, T * k)
        x = dxpp_solve(Q, q, G, h, A, b, solver=solver, beta=beta, backward=backward).x
        w = x.reshape(8, T, k)
        loss = (-(rets * w).sum((1, 2)) + 0.5 * torch.einsum("btk,kl,btl->b", w, S, w)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return {"losses": losses, "W": W.detach().cpu().numpy()}
