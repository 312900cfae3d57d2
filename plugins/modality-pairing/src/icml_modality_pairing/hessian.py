"""Curvature of a model's loss from Hessian-vector products: top eigenvalue by power iteration
and by Lanczos, and the Hessian trace by Hutchinson's estimator.

All functions take ``(model, loss_fn, batches)`` (see :class:`~.objective.Objective`) or an
``Objective`` directly, and a seed for their random start/probe vectors.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from icml_modality_pairing.objective import Objective, SharpnessError


class ConvergenceError(RuntimeError):
    """An iterative eigensolver did not reach its tolerance (raised with ``strict=True``)."""


class ConvergenceWarning(UserWarning):
    """An iterative eigensolver stopped at ``iters`` before reaching its tolerance."""


@dataclass
class EigenResult:
    """``eigenvalue`` and unit ``eigenvector`` (flat, in the objective's parameter order);
    ``residual = ‖Hv − λv‖``; ``converged`` says whether ``tol`` was reached in ``iterations``
    Hessian-vector products."""

    eigenvalue: float
    eigenvector: torch.Tensor
    iterations: int
    converged: bool
    residual: float
    method: str


@dataclass
class TraceResult:
    """Hutchinson estimate ``trace`` with its standard error over ``n_samples`` probes."""

    trace: float
    stderr: float
    n_samples: int
    samples: torch.Tensor


def objective_of(model_or_obj: Any, loss_fn: Any = None, batches: Any = None,
                 **kwargs: Any) -> Objective:
    """``model_or_obj`` if it is already an :class:`Objective`, else one built from the args."""
    if isinstance(model_or_obj, Objective):
        return model_or_obj
    if loss_fn is None or batches is None:
        raise SharpnessError("pass (model, loss_fn, batches) or an Objective")
    return Objective(model_or_obj, loss_fn, batches, **kwargs)


def _start(obj: Objective, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    v = torch.randn(obj.dim, generator=g, dtype=torch.float64)
    v = (v / v.norm()).to(device=obj.theta0.device, dtype=obj.theta0.dtype)
    return v


def _not_converged(method: str, iters: int, tol: float, strict: bool, detail: str) -> None:
    hint = "raise iters, loosen tol, or use method='lanczos'" if method.startswith("power") \
        else "raise iters or loosen tol"
    msg = (f"{method} did not converge to tol={tol:g} in {iters} Hessian-vector products "
           f"({detail}); {hint}")
    if strict:
        raise ConvergenceError(msg)
    warnings.warn(msg, ConvergenceWarning, stacklevel=3)


def power_iteration(obj: Objective, *, iters: int = 100, tol: float = 1e-4, seed: int = 0,
                    strict: bool = False) -> EigenResult:
    """Dominant (largest-magnitude) Hessian eigenvalue by power iteration on HVPs.

    Stops when the Rayleigh quotient changes by less than ``tol`` relative to its size (the
    criterion PyHessian uses). Non-convergence warns (``strict=True``: raises) and is reported
    in ``converged``; ``residual`` is ``‖Hv − λv‖`` of the returned vector.
    """
    if iters < 1:
        raise SharpnessError(f"iters={iters}: need at least 1 iteration")
    v = _start(obj, seed)
    lam_prev: float | None = None
    lam, residual, converged, change = 0.0, float("inf"), False, float("inf")
    k = 0
    for step in range(1, iters + 1):
        k = step
        hv = obj.hvp(v)
        lam = float(torch.dot(hv.double(), v.double()))
        norm = float(hv.norm())
        if not (math.isfinite(lam) and math.isfinite(norm)):
            raise SharpnessError("the Hessian-vector product is not finite: the loss is not "
                                 "twice differentiable here or overflows (try float32/64)")
        residual = float((hv - lam * v).norm())
        if norm == 0.0:  # v lies in the null space: H v = 0
            converged = True
            break
        if lam_prev is not None:
            change = abs(lam - lam_prev) / max(abs(lam), 1e-12)
            if change <= tol:
                converged = True
                break
        lam_prev = lam
        v = hv / norm
    if not converged:
        _not_converged("power iteration", iters, tol, strict,
                       f"last relative change {change:.2g}")
    return EigenResult(lam, v, k, converged, residual, "power")


def lanczos(obj: Objective, *, iters: int = 60, tol: float = 1e-6, seed: int = 0,
            strict: bool = False, which: str = "max") -> EigenResult:
    """Extreme Hessian eigenvalue by Lanczos with full reorthogonalisation.

    ``which="max"``: the largest (algebraic) eigenvalue; ``"min"``: the smallest; ``"abs"``: the
    largest in magnitude (what power iteration finds). Stops when the Ritz value's residual bound
    ``|β_k s_k|`` falls below ``tol·|λ|``; ``iters`` is capped at the dimension.
    """
    if which not in ("max", "min", "abs"):
        raise SharpnessError(f"which={which!r}: choose 'max', 'min' or 'abs'")
    if iters < 1:
        raise SharpnessError(f"iters={iters}: need at least 1 iteration")
    m = min(iters, obj.dim)
    dt = obj.theta0.dtype
    Q = torch.zeros(m, obj.dim, dtype=dt, device=obj.theta0.device)
    alphas, betas = [], []
    q = _start(obj, seed)
    beta, converged, k = 0.0, False, 0
    theta, s = 0.0, None
    for k in range(1, m + 1):
        Q[k - 1] = q
        w = obj.hvp(q)
        alpha = float(torch.dot(w.double(), q.double()))
        if not math.isfinite(alpha):
            raise SharpnessError("the Hessian-vector product is not finite")
        w = w - alpha * q - (beta * Q[k - 2] if k > 1 else 0.0)
        basis = Q[:k]
        for _ in range(2):  # full reorthogonalisation, twice is enough
            w = w - basis.T @ (basis @ w)
        beta = float(w.norm())
        alphas.append(alpha)
        T = torch.diag(torch.tensor(alphas, dtype=torch.float64))
        if betas:
            off = torch.tensor(betas, dtype=torch.float64)
            T = T + torch.diag(off, 1) + torch.diag(off, -1)
        evals, evecs = torch.linalg.eigh(T)
        j = {"max": -1, "min": 0, "abs": int(evals.abs().argmax())}[which]
        theta, s = float(evals[j]), evecs[:, j]
        bound = abs(beta * float(s[-1]))
        if bound <= tol * max(abs(theta), 1e-12) or beta <= 1e-12 * max(abs(theta), 1.0):
            converged = True
            break
        if k == m:
            break
        betas.append(beta)
        q = w / beta
    vec = (s.to(dt).to(Q.device) @ Q[:k])
    vec = vec / vec.norm()
    residual = float((obj.hvp(vec) - theta * vec).norm())
    if not converged and k < obj.dim:
        _not_converged("Lanczos", k, tol, strict, f"residual {residual:.2g}")
    return EigenResult(theta, vec, k, converged or k >= obj.dim, residual, "lanczos")


def hessian_top_eigenvalue(model: Any, loss_fn: Any = None, batches: Any = None, *,
                           method: str = "lanczos", iters: int = 100, tol: float = 1e-4,
                           seed: int = 0, strict: bool = False, backend: str = "autograd",
                           ) -> EigenResult:
    """Top Hessian eigenvalue of ``loss_fn`` over ``batches`` at the model's parameters.

    ``method="lanczos"`` (default: the largest algebraic eigenvalue; fewer HVPs and far more
    accurate than power iteration at equal tolerance) or ``"power"`` (the dominant eigenvalue,
    PyHessian's method and stopping rule). See :func:`power_iteration` and :func:`lanczos`.
    """
    obj = objective_of(model, loss_fn, batches, backend=backend)
    if method == "power":
        return power_iteration(obj, iters=iters, tol=tol, seed=seed, strict=strict)
    if method == "lanczos":
        return lanczos(obj, iters=iters, tol=tol, seed=seed, strict=strict)
    raise SharpnessError(f"method={method!r}: choose 'power' or 'lanczos'")


def hessian_trace(model: Any, loss_fn: Any = None, batches: Any = None, *,
                  n_samples: int = 32, seed: int = 0, probes: torch.Tensor | None = None,
                  distribution: str = "rademacher", backend: str = "autograd") -> TraceResult:
    """Hutchinson's estimator ``E_v[vᵀHv]`` of the Hessian trace (``v`` Rademacher or Gaussian).

    ``probes`` (rows) replaces the random probe vectors, e.g. all sign vectors of a tiny model,
    for which the mean is exactly the trace.
    """
    obj = objective_of(model, loss_fn, batches, backend=backend)
    if probes is None:
        if n_samples < 1:
            raise SharpnessError(f"n_samples={n_samples}: need at least one probe")
        g = torch.Generator(device="cpu").manual_seed(int(seed))
        if distribution == "rademacher":
            probes = torch.randint(0, 2, (n_samples, obj.dim), generator=g).double() * 2 - 1
        elif distribution == "gaussian":
            probes = torch.randn(n_samples, obj.dim, generator=g, dtype=torch.float64)
        else:
            raise SharpnessError(f"distribution={distribution!r}: 'rademacher' or 'gaussian'")
    probes = torch.as_tensor(probes).to(device=obj.theta0.device, dtype=obj.theta0.dtype)
    if probes.ndim != 2 or probes.shape[1] != obj.dim:
        raise SharpnessError(f"probes must be (n, {obj.dim}), got {tuple(probes.shape)}")
    vals = torch.stack([torch.dot(obj.hvp(v).double(), v.double()) for v in probes])
    n = vals.numel()
    stderr = float(vals.std(unbiased=True) / math.sqrt(n)) if n > 1 else float("nan")
    return TraceResult(float(vals.mean()), stderr, n, vals)


def hvp(model: Any, loss_fn: Any, batches: Any, v: torch.Tensor, *,
        backend: str = "autograd") -> torch.Tensor:
    """``H @ v`` for a flat ``v`` in the order of the model's trainable parameters."""
    obj = objective_of(model, loss_fn, batches, backend=backend)
    v = torch.as_tensor(v).to(obj.theta0)
    if v.shape != obj.theta0.shape:
        raise SharpnessError(f"v has shape {tuple(v.shape)}, expected ({obj.dim},)")
    return obj.hvp(v)
