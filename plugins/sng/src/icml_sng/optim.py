"""SNG and SPRING as ``torch.optim.Optimizer`` subclasses stepping on a residual function.

The loss is least squares, ``L(theta) = 1/(2n) sum_i r_i(theta)^2``. Each step samples ``k`` of
the ``n`` residuals, forms the sketched Jacobian with rows ``grad r_i / sqrt(k)`` (the ``1/sqrt(n)``
row scaling of the full Jacobian times the ``sqrt(n/k)`` mini-batch rescaling) and solves the
``k x k`` damped system (Woodbury form).

* :class:`SNG`: ``d = J_S^T (J_S J_S^T + lambda I)^{-1} r_S``, ``theta <- theta - eta d``
  (regularised block Kaczmarz / sketch-and-project).
* :class:`SPRING`:
  ``phi = mu phi_prev + J_S^T (J_S J_S^T + lambda I)^{-1}(-r_S - mu J_S phi_prev)``,
  ``theta <- theta + eta phi`` with ``eta = min(lr, sqrt(C) / ||phi||)`` under the norm
  constraint ``C`` (accelerated sketch-and-project, see :mod:`icml_sng.accelerated`).

Usage::

    opt = SNG(model.parameters(), num_residuals=n, batch_size=32)
    for _ in range(steps):
        opt.step(residual_fn)          # residual_fn(idx) -> residuals r_idx, shape (len(idx),)

``residual_fn`` must compute the residuals from the optimizer's parameters (autograd graph
intact); the Jacobian rows come from one batched backward pass (``torch.func`` vmap). A faster
``jacobian_fn(idx) -> (r_idx, J_idx)`` (e.g. ``torch.func.jacrev`` + ``vmap``) may be passed too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.optim import Optimizer

from icml_sng.sketch import check_damping, sketch_direction
from icml_sng.svs import sample_svs

ResidualFn = Callable[[torch.Tensor], torch.Tensor]
JacobianFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
Sampler = Callable[[int, int, torch.Generator], torch.Tensor]


class NonFiniteError(FloatingPointError):
    """Residuals or Jacobian are not finite; the parameters were left at their last good values."""


def residual_jacobian(residual_fn: ResidualFn, params: Sequence[torch.Tensor],
                      idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Residuals ``r_idx`` and their Jacobian ``(len(idx), p)`` with respect to ``params``
    (flattened in order), by one vmapped backward pass (row-by-row fallback)."""
    with torch.enable_grad():
        r = residual_fn(idx)
        _check_residual(r, idx)
        k = r.shape[0]
        eye = torch.eye(k, dtype=r.dtype, device=r.device)
        try:
            grads = torch.autograd.grad(r, list(params), grad_outputs=eye, allow_unused=True,
                                        is_grads_batched=True)
        except RuntimeError:
            rows = [torch.autograd.grad(r[i], list(params), retain_graph=True,
                                        allow_unused=True) for i in range(k)]
            grads = [torch.stack([row[j] if row[j] is not None else torch.zeros_like(p)
                                  for row in rows]) if any(row[j] is not None for row in rows)
                     else None for j, p in enumerate(params)]
    cols = [(g if g is not None else torch.zeros(k, *p.shape, dtype=r.dtype, device=r.device))
            .reshape(k, -1) for g, p in zip(grads, params)]
    return r.detach(), torch.cat(cols, dim=1).detach()


def _check_residual(r: Any, idx: torch.Tensor) -> None:
    if not isinstance(r, torch.Tensor):
        raise TypeError(f"residual_fn must return a torch.Tensor of residuals, got "
                        f"{type(r).__name__}")
    if r.shape != (idx.shape[0],):
        raise ValueError(f"residual_fn returned shape {tuple(r.shape)} for {idx.shape[0]} "
                         f"indices: it must return one residual per index, shape "
                         f"({idx.shape[0]},) (not a scalar loss; flatten vector residuals)")


def uniform_sampler(n: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """``k`` distinct indices out of ``n``, uniformly at random."""
    return torch.randperm(n, generator=generator)[:k]


class _SketchProjectOptimizer(Optimizer):
    """Shared machinery: sampling, Jacobian, checks, line search."""

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict], defaults: dict,
                 num_residuals: int, batch_size: int | None, sampler: str | Sampler,
                 seed: int | None) -> None:
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError(f"{type(self).__name__} supports one parameter group (the step "
                             "is a joint solve over all parameters); pass a flat list")
        if not isinstance(num_residuals, int) or num_residuals < 1:
            raise ValueError(f"num_residuals must be a positive int, got {num_residuals!r}")
        k = num_residuals if batch_size is None else batch_size
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"batch_size must be a positive int or None (full batch), "
                             f"got {batch_size!r}")
        if k > num_residuals:
            raise ValueError(f"batch_size={k} is larger than num_residuals={num_residuals}: "
                             f"use batch_size <= {num_residuals} (or None for full batch)")
        if isinstance(sampler, str) and sampler not in ("uniform", "svs"):
            raise ValueError(f"sampler must be 'uniform', 'svs' or a callable "
                             f"(n, k, generator) -> indices, got {sampler!r}")
        self.num_residuals, self.batch_size, self.sampler = num_residuals, k, sampler
        self.generator = torch.Generator()
        self.generator.manual_seed(int(torch.initial_seed() if seed is None else seed)
                                   % 2**63)
        g = self.param_groups[0]
        check_damping(g["damping"])
        if not g["lr"] > 0:
            raise ValueError(f"lr must be > 0, got {g['lr']!r}")
        g["line_search"] = _line_search_grid(g["line_search"])
        if g["line_search_on"] not in ("full", "batch"):
            raise ValueError(f"line_search_on must be 'full' or 'batch', "
                             f"got {g['line_search_on']!r}")
        self.last: dict[str, float] = {}

    def state_dict(self) -> dict[str, Any]:
        """The usual optimizer state plus the batch generator's state (exact resumption)."""
        sd = super().state_dict()
        sd["generator"] = self.generator.get_state()
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        gen = state_dict.pop("generator", None)
        super().load_state_dict(state_dict)
        if gen is not None:
            self.generator.set_state(gen)

    # -- helpers -----------------------------------------------------------------------
    @property
    def _params(self) -> list[torch.Tensor]:
        return list(self.param_groups[0]["params"])

    def _flat(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self._params])

    @torch.no_grad()
    def _set_flat(self, vec: torch.Tensor) -> None:
        offset = 0
        for p in self._params:
            p.copy_(vec[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    def _sample_and_linearise(self, residual_fn: ResidualFn, jacobian_fn: JacobianFn | None
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n, k = self.num_residuals, self.batch_size
        jac = jacobian_fn or (lambda i: residual_jacobian(residual_fn, self._params, i))
        if self.sampler == "svs":
            r_all, J_all = self._checked(jac, torch.arange(n))
            idx = sample_svs(J_all / math.sqrt(k), k, self.param_groups[0]["damping"],
                             self.generator)
            r, J = r_all[idx], J_all[idx]
        else:
            scale = None
            if self.sampler == "uniform" or (k == n and isinstance(self.sampler, str)):
                idx = torch.arange(n) if k == n else uniform_sampler(n, k, self.generator)
            else:
                out = self.sampler(n, k, self.generator)
                idx, scale = out if isinstance(out, tuple) else (out, None)
                idx = torch.as_tensor(idx, dtype=torch.long).reshape(-1)
                if idx.numel() < 1 or (scale is not None and
                                       torch.as_tensor(scale).shape != idx.shape):
                    raise ValueError(f"the sampler returned {idx.numel()} indices and scales "
                                     f"of shape {tuple(torch.as_tensor(scale).shape)}: return "
                                     "a non-empty index tensor, optionally with one scale each")
            r, J = self._checked(jac, idx)
            if scale is not None:
                scale = torch.as_tensor(scale, dtype=r.dtype, device=r.device)
                return idx, r * scale, J * scale[:, None]
        scale = 1.0 / math.sqrt(idx.numel())  # a custom sampler may return != batch_size rows
        return idx, r * scale, J * scale

    def _checked(self, jac: JacobianFn, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dev = self._params[0].device
        idx = idx.to(dev)
        r, J = jac(idx)
        _check_residual(r, idx)
        p = sum(q.numel() for q in self._params)
        if J.shape != (idx.shape[0], p):
            raise ValueError(f"Jacobian has shape {tuple(J.shape)}, expected "
                             f"({idx.shape[0]}, {p}) = (batch, number of parameters)")
        if not torch.isfinite(r).all():
            raise NonFiniteError("residual_fn returned non-finite residuals; the parameters "
                                 "were left at their last good values (lower lr, raise "
                                 "damping or enable the line search)")
        if not torch.isfinite(J).all():
            raise NonFiniteError("the residual Jacobian is not finite; the parameters were "
                                 "left at their last good values")
        return r.detach(), J.detach()

    def _loss_at(self, residual_fn: ResidualFn, idx: torch.Tensor) -> float:
        with torch.enable_grad():  # residuals may need input derivatives (PINNs)
            r = residual_fn(idx).detach()
        return float(0.5 * (r**2).mean())

    def _apply(self, residual_fn: ResidualFn, direction: torch.Tensor, lr: float,
               idx: torch.Tensor) -> float:
        """Move along ``direction`` by ``lr`` (or the best grid step); return the step size."""
        g = self.param_groups[0]
        theta = self._flat()
        grid = g["line_search"]
        if grid is None:
            self._set_flat(theta + lr * direction)
            return lr
        n = self.num_residuals
        ls_idx = (torch.arange(n) if g["line_search_on"] == "full" else idx)
        ls_idx = ls_idx.to(theta.device)
        best_eta, best = 0.0, math.inf
        if g["line_search_include_zero"]:
            best = self._loss_at(residual_fn, ls_idx)
        for factor in grid:
            self._set_flat(theta + lr * factor * direction)
            val = self._loss_at(residual_fn, ls_idx)
            if math.isfinite(val) and val < best:
                best_eta, best = lr * factor, val
        if not math.isfinite(best):
            self._set_flat(theta)
            raise NonFiniteError("every line-search step gave a non-finite loss; the "
                                 "parameters were left at their last good values")
        self._set_flat(theta + best_eta * direction)
        return best_eta


def _line_search_grid(value: Any) -> tuple[float, ...] | None:
    """``None``/``0`` = fixed step; an int ``m`` = factors ``0.5**j, j < m``; or explicit."""
    if value is None or value is False or value == 0:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"line_search must be >= 0 grid points, got {value}")
        return tuple(0.5**j for j in range(value))
    grid = tuple(float(v) for v in torch.as_tensor(value).reshape(-1).tolist())
    if not grid or any(not (v > 0 and math.isfinite(v)) for v in grid):
        raise ValueError(f"line_search factors must be positive and finite, got {value!r}")
    return grid


class SNG(_SketchProjectOptimizer):
    """Subsampled natural gradient (regularised sketch-and-project / block Kaczmarz).

    Args:
        params: the parameters (one group).
        num_residuals: ``n``, the number of residuals ``residual_fn`` can index.
        lr: step size ``eta`` (the largest one when ``line_search`` is set).
        damping: ``lambda >= 0`` in ``(J_S J_S^T + lambda I)``; 0 = minimum-norm projection.
        batch_size: ``k`` residuals per step; ``None`` = all (Levenberg-Marquardt).
        sampler: ``"uniform"``, ``"svs"`` (exact squared volume sampling; needs the full
            Jacobian each step, ``O(n^3)``) or a callable ``(n, k, generator) -> indices``.
        line_search: ``None`` (fixed ``lr``), an int ``m`` (grid ``lr * 0.5**j``, ``j < m``,
            as in ENGD) or a sequence of factors; the step with the lowest loss is taken.
        line_search_on: ``"full"`` loss over all ``n`` residuals or the sampled ``"batch"``.
        line_search_include_zero: also consider not moving (the loss never increases).
        solve: ``"auto"``, ``"woodbury"`` (``k x k``) or ``"param"`` (``p x p``).
        seed: seed of the optimizer's own batch generator.
    """

    def __init__(self, params: Iterable[torch.Tensor], num_residuals: int, lr: float = 1.0,
                 damping: float = 1e-8, batch_size: int | None = 32,
                 sampler: str | Sampler = "uniform",
                 line_search: int | Sequence[float] | None = None,
                 line_search_on: str = "full", line_search_include_zero: bool = False,
                 solve: str = "auto", seed: int | None = None) -> None:
        defaults = dict(lr=lr, damping=damping, line_search=line_search,
                        line_search_on=line_search_on,
                        line_search_include_zero=line_search_include_zero, solve=solve)
        super().__init__(params, defaults, num_residuals, batch_size, sampler, seed)

    def step(self, residual_fn: ResidualFn, jacobian_fn: JacobianFn | None = None
             ) -> torch.Tensor:  # type: ignore[override]
        """One SNG step. Returns the sampled loss ``0.5 * mean(r_S^2)`` before the step."""
        g = self.param_groups[0]
        idx, r_S, J_S = self._sample_and_linearise(residual_fn, jacobian_fn)
        d = sketch_direction(J_S, r_S, g["damping"], g["solve"])
        eta = self._apply(residual_fn, -d, g["lr"], idx)
        self.state["step"] = self.state.get("step", 0) + 1
        loss = 0.5 * (r_S**2).sum()
        self.last = {"loss": float(loss), "lr": eta, "step_norm": eta * float(d.norm())}
        return loss


class SPRING(_SketchProjectOptimizer):
    """SPRING: subsampled natural gradient with structured momentum (accelerated
    sketch-and-project).

    ``phi_t = mu phi_{t-1} + J_S^T (J_S J_S^T + lambda I)^{-1} (-r_S - mu J_S phi_{t-1})``,
    ``theta <- theta + eta_t phi_t`` with ``eta_t = min(lr, sqrt(C) / ||phi_t||)`` when
    ``norm_constraint=C`` is set. ``momentum=0`` is :class:`SNG`. When the line search
    includes step 0 and takes it, the momentum restarts (``phi`` is reset to zero).
    Defaults are the public SPRING defaults (``lambda=1e-3``, ``mu=0.99``, ``C=1e-3``) used for
    VMC; for the PINNs here ``lambda=1e-10``, ``mu=0.5``, no norm constraint and a 12-point
    line search worked best (see README).
    Other arguments as in :class:`SNG`.
    """

    def __init__(self, params: Iterable[torch.Tensor], num_residuals: int, lr: float = 1.0,
                 damping: float = 1e-3, momentum: float = 0.99,
                 norm_constraint: float | None = 1e-3, batch_size: int | None = 32,
                 sampler: str | Sampler = "uniform",
                 line_search: int | Sequence[float] | None = None,
                 line_search_on: str = "full", line_search_include_zero: bool = False,
                 solve: str = "auto", seed: int | None = None) -> None:
        if not 0.0 <= float(momentum) < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum!r} (mu = 1 can "
                             "diverge; the paper's analysis needs mu < 1)")
        if norm_constraint is not None and not float(norm_constraint) > 0:
            raise ValueError(f"norm_constraint must be > 0 or None, got {norm_constraint!r}")
        defaults = dict(lr=lr, damping=damping, momentum=float(momentum),
                        norm_constraint=norm_constraint, line_search=line_search,
                        line_search_on=line_search_on,
                        line_search_include_zero=line_search_include_zero, solve=solve)
        super().__init__(params, defaults, num_residuals, batch_size, sampler, seed)

    def step(self, residual_fn: ResidualFn, jacobian_fn: JacobianFn | None = None
             ) -> torch.Tensor:  # type: ignore[override]
        """One SPRING step. Returns the sampled loss ``0.5 * mean(r_S^2)`` before the step."""
        g = self.param_groups[0]
        idx, r_S, J_S = self._sample_and_linearise(residual_fn, jacobian_fn)
        mu = g["momentum"]
        phi_prev = self.state.get("phi")
        if phi_prev is None:
            phi_prev = torch.zeros(J_S.shape[1], dtype=J_S.dtype, device=J_S.device)
        phi = mu * phi_prev + sketch_direction(J_S, -r_S - mu * (J_S @ phi_prev),
                                               g["damping"], g["solve"])
        lr = g["lr"]
        norm = float(phi.norm())
        if g["norm_constraint"] is not None and norm > 0:
            lr = min(lr, math.sqrt(g["norm_constraint"]) / norm)
        eta = self._apply(residual_fn, phi, lr, idx)
        # A rejected step (line search chose 0) restarts the momentum: keeping a direction
        # that was not taken would only grow it.
        self.state["phi"] = phi if eta > 0 else torch.zeros_like(phi)
        self.state["step"] = self.state.get("step", 0) + 1
        loss = 0.5 * (r_S**2).sum()
        self.last = {"loss": float(loss), "lr": eta, "step_norm": eta * norm}
        return loss
