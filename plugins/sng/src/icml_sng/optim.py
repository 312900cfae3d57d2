"""SNG and SPRING as ``torch.optim.Optimizer`` subclasses for least-squares losses.

The loss is least squares over a vector of residuals. Each step linearises the residuals of a
batch (``J_S``: one row per residual, scaled like the loss) and solves the damped ``k x k``
(Woodbury) or ``p x p`` system:

* :class:`SNG`: ``d = J_S^T (J_S J_S^T + lambda I)^{-1} r_S``, ``theta <- theta - eta d``
  (regularised block Kaczmarz / sketch-and-project).
* :class:`SPRING`:
  ``phi = mu phi_prev + J_S^T (J_S J_S^T + lambda I)^{-1}(-r_S - mu J_S phi_prev)``,
  ``theta <- theta + eta phi``, optionally with the norm constraint
  ``eta = min(lr, sqrt(C) / ||phi||)`` (accelerated sketch-and-project,
  :mod:`icml_sng.accelerated`).

Two ways to call ``step``:

1. **torch's closure contract** (the batch is yours, any size, any step)::

       opt = SPRING(model.parameters())
       def closure():
           return least_squares_loss(model(x_batch).squeeze(-1) - y_batch)
       loss = opt.step(closure)

   The closure returns the loss ``0.5 * mean(r^2)`` made by :func:`least_squares_loss`, which
   carries the residual vector to the optimizer (``loss.residuals``; ``reduction="sum"`` for
   ``0.5 * sum(r^2)`` with rows you weighted yourself; ``jacobian=`` a tensor or a zero-argument
   callable giving ``d r / d theta`` if you have a faster one). The same closure works with
   Adam or L-BFGS (``loss.backward()``). The line search calls the closure again at trial
   parameters, so by default it compares the loss on your batch (``line_search_closure=`` to
   compare another loss, e.g. over all points, as ENGD does).
2. **indexed residuals** (the optimizer samples): ``opt.step(residual_fn, num_residuals=n)``
   with ``residual_fn(idx) -> r_idx`` (shape ``(len(idx),)``), loss ``1/(2n) sum_i r_i^2``;
   needed for the optimizer's own samplers (``"uniform"``, squared volume sampling ``"svs"``,
   a callable). ``num_residuals`` may change from step to step; giving it to the constructor
   makes indexed mode the default (then ``opt.step(residual_fn, jacobian_fn)``).
3. **a residual problem** (indexed mode with the problem's own sampling): pass an object with
   ``num_residuals``, ``residual_fn(idx)`` and ``default_sampler()`` (optionally
   ``jacobian_fn(idx)``) in place of ``n`` -- ``SNG(model.parameters(), pinn)`` -- and call
   ``opt.step()``. The sampler the problem supplies (a PINN's stratified interior + boundary
   batches, :meth:`icml_sng.PoissonPINN.default_sampler`) replaces uniform rows, which on a PINN
   mostly miss the few, heavily weighted boundary rows; the class defaults then train the
   plugin's PINNs to 1e-6 (``tests/test_indexed_defaults.py``, five seeds).

State lives in ``self.state[p]`` as tensors (``step``, SPRING's ``momentum_buffer``, the
sampler's generator state ``sampler_rng``), so ``state_dict()``/``load_state_dict()`` resume a
run bit for bit.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from torch.optim import Optimizer

from icml_sng.config import SNGOptions, SPRINGOptions
from icml_sng.sketch import check_damping, sketch_direction
from icml_sng.svs import sample_svs

ResidualFn = Callable[[torch.Tensor], torch.Tensor]
JacobianFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
Sampler = Callable[[int, int, torch.Generator], torch.Tensor]
Closure = Callable[[], torch.Tensor]


@runtime_checkable
class ResidualProblem(Protocol):
    """A least-squares problem that supplies its residual rows and its own sampling (indexed
    mode without a separate ``n``: ``SNG(params, problem)``, then ``opt.step()``).

    ``default_sampler()`` returns a sampler ``(n, k, generator) -> indices`` or ``(indices,
    row_scales)``; it may ignore ``k`` and fix its own batch (a ``batch_size`` attribute on it
    is then taken as the optimizer's ``batch_size``). :class:`icml_sng.PoissonPINN` is one."""

    num_residuals: int

    def residual_fn(self, idx: torch.Tensor) -> torch.Tensor: ...

    def default_sampler(self) -> Sampler: ...

#: The class defaults (shared by SNG and SPRING), read from :class:`SNGOptions` where they are
#: written (README, "Defaults"): ``line_search=12``: grid ``0.5**j, j < 12``;
#: ``line_search_on="batch"``: the grid compares the loss on the step's own batch;
#: ``damping=1e-9`` since 0.3.0; ``adaptive_damping=True`` since 0.4.0. Kept as a dict for
#: ``SNG(params, **DEFAULTS)``-style code.
_SNG = SNGOptions()
_SPRING = SPRINGOptions()
DEFAULTS: dict[str, Any] = dataclasses.asdict(_SNG)
#: The adaptive-damping rule (0.4.0; ours, not the paper's: the paper and the ENGD codes keep
#: ``lambda`` fixed, ``adaptive_damping=False``). After a line-searched step of ``eta = lr * f``:
#: ``f <= raise_at`` (the direction had to be shrunk a lot, or the step was rejected) ->
#: ``lambda *= factor``; ``f >= lower_at`` (a long step was taken) -> ``lambda /= factor``;
#: clipped to ``[min, max]``. It keeps the chosen step in ``(2^-6, 2^-3)``: a Levenberg-
#: Marquardt-style trust region whose signal is the grid the step already searched (no extra
#: loss evaluations). Without a line search the damping stays fixed.
ADAPTIVE_DAMPING: dict[str, float] = dict(raise_at=2.0**-6, lower_at=2.0**-3, factor=2.0,
                                          min=1e-13, max=1e-2)
#: SPRING's momentum and norm constraint for the PINNs (README). SPRING keeps a fixed damping
#: by default: with the adaptive rule one of five 2D seeds stalled (README, "Adaptive damping").
SPRING_DEFAULTS: dict[str, Any] = dict(momentum=_SPRING.momentum,
                                       norm_constraint=_SPRING.norm_constraint or None,
                                       adaptive_damping=_SPRING.adaptive_damping)
#: The public SPRING defaults used for variational Monte Carlo (vmcnet / the SPRING paper):
#: ``SPRING(params, **SPRING_VMC)``; fixed step (no line search) under the norm constraint.
SPRING_VMC: dict[str, Any] = dict(damping=1e-3, momentum=0.99, norm_constraint=1e-3,
                                  line_search=None, lr=1.0, adaptive_damping=False)


class NonFiniteError(FloatingPointError):
    """Residuals or Jacobian are not finite; the parameters were left at their last good values."""


def least_squares_loss(residuals: torch.Tensor, *, reduction: str = "mean",
                       jacobian: torch.Tensor | Callable[[], torch.Tensor] | None = None
                       ) -> torch.Tensor:
    """The least-squares loss of ``residuals`` with the residuals attached for SNG/SPRING.

    ``reduction="mean"``: ``0.5 * mean(r^2)``; ``"sum"``: ``0.5 * sum(r^2)`` (scale the rows
    yourself, e.g. ``r_i / sqrt(k_i)`` for a sum of per-term means). Returns a 0-d tensor
    usable as any loss (``.backward()``), with attributes ``residuals`` (the vector, graph
    intact), ``row_scale`` (``1/sqrt(k)`` or 1) and ``jacobian`` (optional: a ``(k, p)`` tensor
    or a zero-argument callable returning it, columns in parameter order, unscaled)."""
    if not isinstance(residuals, torch.Tensor):
        raise TypeError(f"least_squares_loss needs a tensor of residuals, got "
                        f"{type(residuals).__name__}")
    r = residuals.reshape(-1)
    if r.numel() < 1:
        raise ValueError("least_squares_loss got an empty residual vector: the batch is empty")
    if reduction == "mean":
        scale = 1.0 / math.sqrt(r.numel())
    elif reduction == "sum":
        scale = 1.0
    else:
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    loss = 0.5 * (r * scale).pow(2).sum()
    loss.residuals = r  # type: ignore[attr-defined]
    loss.row_scale = scale  # type: ignore[attr-defined]
    loss.jacobian = jacobian  # type: ignore[attr-defined]
    return loss


def residual_jacobian(residual_fn: ResidualFn, params: Sequence[torch.Tensor],
                      idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Residuals ``r_idx`` and their Jacobian ``(len(idx), p)`` with respect to ``params``
    (flattened in order), by one vmapped backward pass (row-by-row fallback)."""
    with torch.enable_grad():
        r = residual_fn(idx)
        _check_residual(r, idx.shape[0])
    return r.detach(), _jacobian_of(r, params)


def _jacobian_of(r: torch.Tensor, params: Sequence[torch.Tensor]) -> torch.Tensor:
    """``d r / d params`` (``(k, p)``) for a residual vector with its graph intact."""
    k = r.shape[0]
    if not r.requires_grad:
        raise ValueError("the residuals do not depend on the parameters (no autograd graph): "
                         "compute them from the optimizer's parameters with grad enabled, or "
                         "pass jacobian= to least_squares_loss")
    with torch.enable_grad():
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
    return torch.cat(cols, dim=1).detach()


def _check_residual(r: Any, k: int) -> None:
    if not isinstance(r, torch.Tensor):
        raise TypeError(f"residual_fn must return a torch.Tensor of residuals, got "
                        f"{type(r).__name__}")
    if r.shape != (k,):
        raise ValueError(f"residual_fn returned shape {tuple(r.shape)} for {k} "
                         f"indices: it must return one residual per index, shape "
                         f"({k},) (not a scalar loss; flatten vector residuals)")


def uniform_sampler(n: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """``k`` distinct indices out of ``n``, uniformly at random."""
    return torch.randperm(n, generator=generator)[:k]


class _SketchProjectOptimizer(Optimizer):
    """Shared machinery: both calling modes, sampling, Jacobian, checks, line search, state."""

    #: The option dataclass this optimizer takes (``options=``; ``--set sng.*`` builds one).
    Options: type[SNGOptions] = SNGOptions

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict],
                 num_residuals: int | ResidualProblem | None = None, *, lr: float = _SNG.lr,
                 damping: float = _SNG.damping,
                 adaptive_damping: bool = _SNG.adaptive_damping,
                 batch_size: int | None = 32,
                 sampler: str | Sampler | None = None,
                 line_search: int | Sequence[float] | None = _SNG.line_search,
                 line_search_on: str = _SNG.line_search_on,
                 line_search_early_stop: bool = _SNG.line_search_early_stop,
                 line_search_include_zero: bool = _SNG.line_search_include_zero,
                 solve: str = _SNG.solve, seed: int | None = None,
                 options: SNGOptions | None = None) -> None:
        given = dict(lr=lr, damping=damping, adaptive_damping=adaptive_damping,
                     line_search=line_search, line_search_on=line_search_on,
                     line_search_early_stop=line_search_early_stop,
                     line_search_include_zero=line_search_include_zero, solve=solve)
        if options is None:
            options = self.Options(**given, **self._pending)
        else:
            if not isinstance(options, self.Options) or (
                    isinstance(options, SPRINGOptions) and not issubclass(self.Options,
                                                                          SPRINGOptions)):
                raise TypeError(f"{type(self).__name__} takes options={self.Options.__name__}"
                                f"(...), got {type(options).__name__}")
            base = self.Options()
            both = sorted(k for k, v in {**given, **self._pending}.items()
                          if v != getattr(base, k))
            if both:
                raise TypeError(f"{type(self).__name__}: {both} given as keywords and "
                                "options= given too: put them in the options")
        #: The option object this optimizer was built from (the job config's section itself).
        self.options = options
        o = options
        if not isinstance(o.adaptive_damping, bool):
            raise ValueError(f"adaptive_damping must be True or False, got {o.adaptive_damping!r}")
        defaults = dict(lr=o.lr, damping=o.damping, adaptive_damping=o.adaptive_damping,
                        line_search=o.line_search,
                        line_search_on=o.line_search_on,
                        line_search_early_stop=bool(o.line_search_early_stop),
                        line_search_include_zero=o.line_search_include_zero, solve=o.solve,
                        **self._extra_defaults())
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError(f"{type(self).__name__} supports one parameter group (the step "
                             "is a joint solve over all parameters); pass a flat list")
        self._groups_closed = True
        #: The residual problem given in place of ``num_residuals`` (None: an int or nothing).
        self.problem: ResidualProblem | None = None
        if num_residuals is not None and not isinstance(num_residuals, int):
            if not isinstance(num_residuals, ResidualProblem):
                raise TypeError(f"num_residuals must be an int or a residual problem (with "
                                f"num_residuals, residual_fn and default_sampler, e.g. a "
                                f"PoissonPINN), got {type(num_residuals).__name__}")
            self.problem = num_residuals
            num_residuals = int(self.problem.num_residuals)
            if sampler is None:
                sampler = self.problem.default_sampler()
                batch_size = getattr(sampler, "batch_size", batch_size)
        if sampler is None:
            sampler = "uniform"
        if num_residuals is not None:
            _check_n(num_residuals)
        if batch_size is not None and (not isinstance(batch_size, int)
                                       or isinstance(batch_size, bool) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int or None (full batch), "
                             f"got {batch_size!r}")
        if num_residuals is not None and batch_size is not None and batch_size > num_residuals:
            raise ValueError(f"batch_size={batch_size} is larger than num_residuals="
                             f"{num_residuals}: use batch_size <= {num_residuals} (or None for "
                             "full batch)")
        if isinstance(sampler, str) and sampler not in ("uniform", "svs"):
            raise ValueError(f"sampler must be 'uniform', 'svs' or a callable "
                             f"(n, k, generator) -> indices, got {sampler!r}")
        if not isinstance(sampler, str) and not callable(sampler):
            raise ValueError(f"sampler must be 'uniform', 'svs' or a callable, got {sampler!r}")
        self.num_residuals, self.sampler = num_residuals, sampler
        self.batch_size = batch_size
        self.generator = torch.Generator()
        self.generator.manual_seed(int(torch.initial_seed() if seed is None else seed)
                                   % 2**63)
        g = self.param_groups[0]
        check_damping(g["damping"])
        if not (isinstance(g["lr"], (int, float)) and g["lr"] > 0):
            raise ValueError(f"lr must be > 0, got {g['lr']!r}")
        g["line_search"] = _line_search_grid(g["line_search"])
        if g["line_search_on"] not in ("full", "batch"):
            raise ValueError(f"line_search_on must be 'batch' (the step's own rows) or 'full' "
                             f"(all residuals; indexed mode), got {g['line_search_on']!r}")
        if g["solve"] not in ("auto", "woodbury", "param"):
            raise ValueError(f"solve must be 'auto', 'woodbury' or 'param', got {g['solve']!r}")
        self.last: dict[str, float] = {}

    #: Keyword settings a subclass collected for its own options (SPRING: momentum, C).
    _pending: dict[str, Any] = {}

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Refused after construction: the step is one joint solve over the parameters the
        optimizer was built with (one group), and parameters added later would never move.
        Build a new optimizer over all the parameters instead."""
        if getattr(self, "_groups_closed", False):
            raise ValueError(f"{type(self).__name__} does not support add_param_group: its step "
                             "is one joint solve over the parameters it was built with (one "
                             "group); build a new optimizer over all the parameters instead")
        super().add_param_group(param_group)

    @classmethod
    def from_options(cls, options: SNGOptions, params: Iterable[torch.Tensor],
                     num_residuals: int | None = None, **runtime: Any) -> Any:
        """The optimizer built from its option object (kept as ``self.options``); ``runtime``
        are the arguments that are not settings (``batch_size``, ``sampler``, ``seed``)."""
        return cls(params, num_residuals, options=options, **runtime)

    def _extra_defaults(self) -> dict[str, Any]:
        """Group settings a subclass adds to the shared ones (SPRING: momentum, C)."""
        return {}

    # -- torch state ---------------------------------------------------------------------
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's ``load_state_dict`` (which casts floating state to the parameters' dtype),
        then the sampler's generator state is restored from ``state[p0]["sampler_rng"]``."""
        super().load_state_dict(state_dict)
        st = self.state.get(self._params[0], {})
        if "sampler_rng" in st:
            rng = st["sampler_rng"].to(device="cpu", dtype=torch.uint8)
            st["sampler_rng"] = rng
            self.generator.set_state(rng)

    def _adapt_damping(self, eta: float, top: float) -> None:
        """After a step of ``eta`` out of a grid starting at ``top``: the
        :data:`ADAPTIVE_DAMPING` rule (only with ``adaptive_damping`` and a line search). The
        damping lives in the param group, so ``state_dict()`` carries it."""
        g = self.param_groups[0]
        self.last["damping"] = g["damping"]
        if not g["adaptive_damping"] or g["line_search"] is None:
            return
        a, lam = ADAPTIVE_DAMPING, float(g["damping"])
        f = eta / top if top > 0 else 0.0
        if f <= a["raise_at"]:
            lam = min(max(lam * a["factor"], a["min"]), a["max"])
        elif f >= a["lower_at"]:
            lam = max(lam / a["factor"], a["min"])
        g["damping"] = lam

    def _count_step(self) -> None:
        for p in self._params:
            st = self.state[p]
            st["step"] = st.get("step", torch.tensor(0.0)) + 1

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

    def _num_params(self) -> int:
        return sum(q.numel() for q in self._params)

    def _check_finite(self, r: torch.Tensor, J: torch.Tensor) -> None:
        p = self._num_params()
        if J.shape != (r.shape[0], p):
            raise ValueError(f"Jacobian has shape {tuple(J.shape)}, expected "
                             f"({r.shape[0]}, {p}) = (batch, number of parameters)")
        if not torch.isfinite(r).all():
            raise NonFiniteError("the residuals are not finite; the parameters were left at "
                                 "their last good values (lower lr, raise damping or enable "
                                 "the line search)")
        if not torch.isfinite(J).all():
            raise NonFiniteError("the residual Jacobian is not finite; the parameters were "
                                 "left at their last good values")

    # -- the two calling modes -------------------------------------------------------------
    def _remember(self, line_search_closure: Closure | None) -> None:
        """After a step: cache the accepted line-search loss of a separate closure."""
        best = getattr(self, "_ls_best", None)
        self._ls_cache = (None if line_search_closure is None or best is None else
                          (line_search_closure, self._versions(), best))
        self._ls_best = None

    def _linearise(self, closure: Any, jacobian_fn: JacobianFn | None,
                   residual_fn: ResidualFn | None, num_residuals: int | None,
                   line_search_closure: Closure | None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                              Callable[[], float]]:
        """Return ``(loss, r_S, J_S, evaluate)``: the loss before the step, the scaled sampled
        residuals and Jacobian rows, and the line search's loss at the current parameters."""
        n = num_residuals if num_residuals is not None else self.num_residuals
        if residual_fn is None and closure is None and self.problem is not None:
            residual_fn = self.problem.residual_fn
            jacobian_fn = jacobian_fn or getattr(self.problem, "jacobian_fn", None)
        if residual_fn is None and n is not None and closure is not None:
            residual_fn, closure = closure, None  # legacy positional: step(residual_fn, jac)
        if residual_fn is not None:
            if n is None:
                raise ValueError("indexed mode (residual_fn) needs num_residuals: pass "
                                 "step(residual_fn, num_residuals=n) or construct with it")
            _check_n(n)
            return self._linearise_indexed(residual_fn, jacobian_fn, n, line_search_closure)
        if closure is None:
            raise ValueError(f"{type(self).__name__}.step needs a closure returning "
                             "least_squares_loss(residuals) (or residual_fn= with "
                             "num_residuals=)")
        if jacobian_fn is not None:
            raise ValueError("jacobian_fn belongs to indexed mode; in closure mode pass "
                             "jacobian= to least_squares_loss")
        return self._linearise_closure(closure, line_search_closure)

    def _linearise_closure(self, closure: Closure, line_search_closure: Closure | None
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                      Callable[[], float]]:
        with torch.enable_grad():
            loss = closure()
        r = getattr(loss, "residuals", None)
        if r is None:
            raise TypeError(f"{type(self).__name__} needs the residual vector: return "
                            "icml_sng.least_squares_loss(residuals) from the closure (a plain "
                            "scalar loss has lost the least-squares structure)")
        scale = loss.row_scale
        jac = loss.jacobian
        if jac is None:
            J = _jacobian_of(r, self._params)
        else:
            J = jac() if callable(jac) else jac
            J = J.detach()
        r = r.detach()
        self._check_finite(r, J)
        ls = line_search_closure or closure

        def evaluate() -> float:
            with torch.enable_grad():
                return float(ls().detach())

        self._ls_loss0 = (float(loss.detach()) if line_search_closure is None
                          else self._cached_loss0(line_search_closure))
        return loss.detach(), r * scale, J * scale, evaluate

    def _linearise_indexed(self, residual_fn: ResidualFn, jacobian_fn: JacobianFn | None,
                           n: int, line_search_closure: Closure | None
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                      Callable[[], float]]:
        k = n if self.batch_size is None else self.batch_size
        if k > n:
            raise ValueError(f"batch_size={k} is larger than num_residuals={n}: use "
                             f"batch_size <= {n} (or None for full batch)")
        jac = jacobian_fn or (lambda i: residual_jacobian(residual_fn, self._params, i))
        dev = self._params[0].device
        scale: torch.Tensor | float
        if self.sampler == "svs":
            r_all, J_all = self._checked(jac, torch.arange(n, device=dev))
            idx = sample_svs(J_all / math.sqrt(k), k, self.param_groups[0]["damping"],
                             self.generator).to(dev)
            r, J = r_all[idx], J_all[idx]
            scale = 1.0 / math.sqrt(k)
        else:
            scale = None  # type: ignore[assignment]
            if self.sampler == "uniform" or (k == n and isinstance(self.sampler, str)):
                idx = torch.arange(n) if k == n else uniform_sampler(n, k, self.generator)
            else:
                out = self.sampler(n, k, self.generator)  # type: ignore[operator]
                idx, scale = out if isinstance(out, tuple) else (out, None)
                idx = torch.as_tensor(idx, dtype=torch.long).reshape(-1)
                if idx.numel() < 1 or (scale is not None and
                                       torch.as_tensor(scale).shape != idx.shape):
                    raise ValueError(f"the sampler returned {idx.numel()} indices and scales "
                                     f"of shape {tuple(torch.as_tensor(scale).shape)}: return "
                                     "a non-empty index tensor, optionally with one scale each")
            idx = idx.to(dev)
            r, J = self._checked(jac, idx)
            if scale is None:  # a custom sampler may return != batch_size rows
                scale = 1.0 / math.sqrt(idx.numel())
            else:
                scale = torch.as_tensor(scale, dtype=r.dtype, device=r.device)
        self.state[self._params[0]]["sampler_rng"] = self.generator.get_state()
        s_col = scale[:, None] if isinstance(scale, torch.Tensor) else scale
        g = self.param_groups[0]
        full = torch.arange(n, device=dev)

        def evaluate() -> float:
            if line_search_closure is not None:
                with torch.enable_grad():
                    return float(line_search_closure())
            with torch.enable_grad():  # residuals may need input derivatives (PINNs)
                if g["line_search_on"] == "full":
                    rr = residual_fn(full).detach()
                    return float(0.5 * (rr**2).mean())
                rr = residual_fn(idx).detach() * scale
            return float(0.5 * (rr**2).sum())

        r_s = r * scale
        loss = 0.5 * (r_s**2).sum()
        self._ls_loss0 = (float(loss) if line_search_closure is None and
                          g["line_search_on"] == "batch" else -math.inf)
        return loss, r_s, J * s_col, evaluate

    def _versions(self) -> tuple[int, ...]:
        return tuple(p._version for p in self._params)

    def _cached_loss0(self, line_search_closure: Closure) -> float:
        """The separate line-search loss at the current parameters, if known: the value this
        optimizer accepted last step for the same closure object, when no parameter has been
        modified since (``Tensor._version``); else ``-inf`` (the grid is then searched in
        full, which is always correct)."""
        cache = getattr(self, "_ls_cache", None)
        if cache and cache[0] is line_search_closure and cache[1] == self._versions():
            return cache[2]
        return -math.inf

    def _checked(self, jac: JacobianFn, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r, J = jac(idx)
        _check_residual(r, idx.shape[0])
        r, J = r.detach(), J.detach()
        self._check_finite(r, J)
        return r, J

    def _apply(self, evaluate: Callable[[], float], direction: torch.Tensor, lr: float,
               loss0: float) -> float:
        """Move along ``direction`` by ``lr`` (or the best grid step); return the step size.

        ``loss0`` is the compared loss at the current parameters when known (batch line
        search), else ``-inf``. With ``line_search_early_stop`` the grid (largest step first)
        stops at its first local minimum once that is below ``loss0``; otherwise every grid
        point is evaluated (the ENGD-style search)."""
        g = self.param_groups[0]
        theta = self._flat()
        grid = g["line_search"]
        if grid is None:
            self._set_flat(theta + lr * direction)
            return lr
        best_eta, best, evals, prev = 0.0, math.inf, 0, math.inf
        if g["line_search_include_zero"]:
            best = evaluate()
            evals += 1
        for factor in grid:
            self._set_flat(theta + lr * factor * direction)
            val = evaluate()
            evals += 1
            if math.isfinite(val) and val < best:
                best_eta, best = lr * factor, val
            elif g["line_search_early_stop"] and prev == best < loss0 and val > best:
                # past the grid's first local minimum, which already lowers the loss
                break
            prev = val if math.isfinite(val) else math.inf
        if not math.isfinite(best):
            self._set_flat(theta)
            raise NonFiniteError("every line-search step gave a non-finite loss; the "
                                 "parameters were left at their last good values")
        self._set_flat(theta + best_eta * direction)
        self.last["line_search_evals"] = evals
        self._ls_best = best
        return best_eta


def _check_n(n: Any) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"num_residuals must be a positive int, got {n!r}")


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


_STEP_DOC = """
        ``closure()`` returns :func:`least_squares_loss` of the batch's residuals (torch's
        contract; called again by the line search). Indexed mode instead:
        ``step(residual_fn, num_residuals=n)`` (``residual_fn(idx) -> r_idx``), optionally with
        ``jacobian_fn(idx) -> (r_idx, J_idx)``. ``line_search_closure`` replaces the loss the
        line search compares (e.g. the loss over all points). Returns the loss before the step.
"""


class SNG(_SketchProjectOptimizer):
    """Subsampled natural gradient (regularised sketch-and-project / block Kaczmarz).

    Args:
        params: the parameters (one group).
        num_residuals: optional; ``n`` for indexed mode, or a :class:`ResidualProblem` (a
            PINN) whose own sampler and residuals indexed mode then uses, ``opt.step()`` with
            no arguments (see the module docstring). Leave it out for torch's closure mode,
            where each step's batch may have any size.
        lr: step size ``eta`` (the largest one when ``line_search`` is set).
        damping: ``lambda >= 0`` in ``(J_S J_S^T + lambda I)``; 0 = minimum-norm projection.
            With ``adaptive_damping`` it is the starting value.
        adaptive_damping: steer ``lambda`` by the line search's outcome after each step
            (:data:`ADAPTIVE_DAMPING`; default since 0.4.0). ``False`` keeps it fixed, as the
            paper and the ENGD codes do (0.3's behaviour).
        batch_size: indexed mode: ``k`` residuals per step; ``None`` = all
            (Levenberg-Marquardt / ENGD).
        sampler: indexed mode: ``"uniform"``, ``"svs"`` (exact squared volume sampling; needs
            the full Jacobian each step, ``O(n^3)``) or a callable ``(n, k, generator) ->
            indices`` (or ``(indices, row_scales)``). ``None`` (the default): the residual
            problem's ``default_sampler()`` when one is given, else ``"uniform"``.
        line_search: ``None`` (fixed ``lr``), an int ``m`` (grid ``lr * 0.5**j``, ``j < m``,
            as in ENGD) or a sequence of factors; the step with the lowest loss is taken.
        line_search_on: ``"batch"`` (the step's own rows: the closure, or ``residual_fn`` on
            the sampled indices) or ``"full"`` (indexed mode: all ``n`` residuals, the ENGD
            paper's choice and this plugin's default before 0.2.0).
        line_search_include_zero: also consider not moving (the compared loss never increases).
        solve: ``"auto"``, ``"woodbury"`` (``k x k``) or ``"param"`` (``p x p``).
        seed: seed of the optimizer's own batch generator (indexed mode).

    Defaults (:data:`DEFAULTS`) are the ones that train the plugin's PINNs to 1e-6.
    """

    @torch.no_grad()
    def step(self, closure: Closure | ResidualFn | None = None,  # type: ignore[override]
             jacobian_fn: JacobianFn | None = None, *, residual_fn: ResidualFn | None = None,
             num_residuals: int | None = None, line_search_closure: Closure | None = None
             ) -> torch.Tensor:
        g = self.param_groups[0]
        loss, r_S, J_S, evaluate = self._linearise(closure, jacobian_fn, residual_fn,
                                                   num_residuals, line_search_closure)
        d = sketch_direction(J_S, r_S, g["damping"], g["solve"])
        self.last = {}
        eta = self._apply(evaluate, -d, g["lr"], self._ls_loss0)
        self._remember(line_search_closure)
        self._adapt_damping(eta, g["lr"])
        self._count_step()
        self.last.update(loss=float(loss), lr=eta, step_norm=eta * float(d.norm()),
                         rows=float(r_S.shape[0]))
        return loss

    step.__doc__ = "One SNG step." + _STEP_DOC


class SPRING(_SketchProjectOptimizer):
    """SPRING: subsampled natural gradient with structured momentum (accelerated
    sketch-and-project).

    ``phi_t = mu phi_{t-1} + J_S^T (J_S J_S^T + lambda I)^{-1} (-r_S - mu J_S phi_{t-1})``,
    ``theta <- theta + eta_t phi_t`` with ``eta_t = min(lr, sqrt(C) / ||phi_t||)`` when
    ``norm_constraint=C`` is set, then the line search (if any) over ``eta_t * grid``.
    ``momentum=0`` is :class:`SNG`. When the line search includes step 0 and takes it, the
    momentum restarts (``phi`` is reset to zero).

    Defaults (:data:`DEFAULTS`, :data:`SPRING_DEFAULTS`: fixed ``damping=1e-9``,
    ``momentum=0.5``, no norm constraint, 12-point grid line search on the batch) train the
    plugin's PINNs to 1e-6. ``adaptive_damping=True`` (SNG's default since 0.4.0) is available
    but off: it sped up four of five 2D seeds and stalled the fifth (README). The public VMC
    defaults (``lambda=1e-3``, ``mu=0.99``, ``C=1e-3``, fixed step) are
    ``SPRING(params, **SPRING_VMC)``. Other arguments as in :class:`SNG`.
    """

    Options: type[SNGOptions] = SPRINGOptions

    def __init__(self, params: Iterable[torch.Tensor],
                 num_residuals: int | ResidualProblem | None = None, *,
                 momentum: float = _SPRING.momentum,
                 norm_constraint: float | None = _SPRING.norm_constraint,
                 adaptive_damping: bool = _SPRING.adaptive_damping,
                 **kwargs: Any) -> None:
        self._pending = dict(momentum=momentum, norm_constraint=norm_constraint or 0.0)
        super().__init__(params, num_residuals, adaptive_damping=adaptive_damping, **kwargs)

    @classmethod
    def from_options(cls, options: SPRINGOptions, params: Iterable[torch.Tensor],  # type: ignore[override]
                     num_residuals: int | None = None, **runtime: Any) -> Any:
        """SPRING built from its option object (kept as ``self.options``)."""
        return cls(params, num_residuals, options=options, **runtime)

    def _extra_defaults(self) -> dict[str, Any]:
        o = self.options
        momentum, norm_constraint = o.momentum, o.norm_constraint  # type: ignore[attr-defined]
        if not 0.0 <= float(momentum) < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum!r} (mu = 1 can "
                             "diverge; the paper's analysis needs mu < 1)")
        if norm_constraint is not None and not float(norm_constraint) >= 0:
            raise ValueError(f"norm_constraint must be > 0 (0 or None = off), got "
                             f"{norm_constraint!r}")
        return dict(momentum=float(momentum), norm_constraint=norm_constraint or None)


    def _phi_prev(self, like: torch.Tensor) -> torch.Tensor:
        bufs = [self.state[p].get("momentum_buffer") for p in self._params]
        if any(b is None for b in bufs):
            return torch.zeros_like(like)
        return torch.cat([b.reshape(-1) for b in bufs]).to(like)

    def _store_phi(self, phi: torch.Tensor) -> None:
        offset = 0
        for p in self._params:
            self.state[p]["momentum_buffer"] = phi[offset:offset + p.numel()].view_as(p).clone()
            offset += p.numel()

    @torch.no_grad()
    def step(self, closure: Closure | ResidualFn | None = None,  # type: ignore[override]
             jacobian_fn: JacobianFn | None = None, *, residual_fn: ResidualFn | None = None,
             num_residuals: int | None = None, line_search_closure: Closure | None = None
             ) -> torch.Tensor:
        g = self.param_groups[0]
        loss, r_S, J_S, evaluate = self._linearise(closure, jacobian_fn, residual_fn,
                                                   num_residuals, line_search_closure)
        mu = g["momentum"]
        phi_prev = self._phi_prev(J_S[0])
        phi = mu * phi_prev + sketch_direction(J_S, -r_S - mu * (J_S @ phi_prev),
                                               g["damping"], g["solve"])
        lr = g["lr"]
        norm = float(phi.norm())
        if g["norm_constraint"] is not None and norm > 0:
            lr = min(lr, math.sqrt(g["norm_constraint"]) / norm)
        self.last = {}
        eta = self._apply(evaluate, phi, lr, self._ls_loss0)
        self._remember(line_search_closure)
        # A rejected step (line search chose 0) restarts the momentum: keeping a direction
        # that was not taken would only grow it.
        self._store_phi(phi if eta > 0 else torch.zeros_like(phi))
        self._adapt_damping(eta, lr)
        self._count_step()
        self.last.update(loss=float(loss), lr=eta, step_norm=eta * norm,
                         rows=float(r_S.shape[0]))
        return loss

    step.__doc__ = "One SPRING step." + _STEP_DOC


def _shared_signature(init: Callable[..., None]) -> None:
    """Show the shared keywords in ``init``'s signature (``help(SPRING)``, IDEs) in place of
    ``**kwargs``: they are declared once, on the base class."""
    own = inspect.signature(init)
    mine = [q for q in own.parameters.values() if q.kind is not q.VAR_KEYWORD]
    names = {q.name for q in mine}
    shared = [q for q in inspect.signature(_SketchProjectOptimizer.__init__).parameters.values()
              if q.name not in names]
    init.__signature__ = own.replace(parameters=mine + shared)  # type: ignore[attr-defined]


_shared_signature(SPRING.__init__)


# The conformance kit (icml.testing, issue 48) checks `api` targets that are classes (its
# hand-off calls isinstance(section, target)), so the classmethods get class-shaped twins.
class SNGFromOptions:
    """``SNGFromOptions(options, params)`` is ``SNG.from_options(options, params)``: an
    :class:`SNG` built from (and keeping) the job config's ``sng`` section."""

    def __new__(cls, options: SNGOptions, params: Iterable[torch.Tensor],  # type: ignore[misc]
                num_residuals: int | None = None, **runtime: Any) -> SNG:
        return SNG.from_options(options, params, num_residuals, **runtime)


class SPRINGFromOptions:
    """``SPRINGFromOptions(options, params)`` is ``SPRING.from_options(options, params)``."""

    def __new__(cls, options: SPRINGOptions, params: Iterable[torch.Tensor],  # type: ignore[misc]
                num_residuals: int | None = None, **runtime: Any) -> SPRING:
        return SPRING.from_options(options, params, num_residuals, **runtime)
