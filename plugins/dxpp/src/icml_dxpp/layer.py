"""PyTorch API: the differentiable QP layer (``DXPPQPLayer``), its functional form
(``dxpp_solve``) and the NumPy-level ``differentiate``.

Forward: every problem of the batch is solved on the CPU by a ``qpsolvers`` backend (float64);
backward: dXPP's penalty system (default) or the KKT reference, per problem. Leading batch
dimensions broadcast like qpth/NumPy (a Q of shape (n, n) is shared by a batch of q's, and its
gradient is summed over the batch). Inputs on CUDA are accepted: the solve runs on the CPU and
outputs and gradients come back on the input's device and dtype.

``torch.sparse`` (COO or CSR) Q, G, A are accepted for a single problem, and as (B, rows, n)
COO tensors for a batch (every input then batched to the same B); their gradients are sparse
on the same pattern.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp
import torch
from torch.autograd.function import once_differentiable

from icml_dxpp.forward import QPResult, check_solver, solve_qp
from icml_dxpp.kkt import kkt_backward
from icml_dxpp.penalty import PenaltyOptions, dxpp_backward
from icml_dxpp.qp import QPInputError, QPProblem, make_problem

__all__ = ["QPSolution", "LayerOptions", "DXPPQPLayer", "dxpp_solve", "differentiate"]

_NAMES = ("Q", "q", "G", "h", "A", "b")


class QPSolution(NamedTuple):
    """Outputs of the layer: x* (…, n), μ* for Ax = b (…, p), ν* ≥ 0 for Gx ≤ h (…, m)."""

    x: torch.Tensor
    eq_dual: torch.Tensor
    ineq_dual: torch.Tensor


@dataclass(frozen=True)
class LayerOptions:
    """Every option of the layer; see :class:`DXPPQPLayer` for their meaning."""

    solver: str = "auto"
    tol: float | None = None
    backward: str = "dxpp"
    kkt_mode: str = "reduced"
    recover_duals: str = "auto"
    polish: bool = False
    check_inputs: bool = True
    penalty: PenaltyOptions = field(default_factory=PenaltyOptions)
    solver_options: dict | None = None
    warm_start: bool = False
    # the previous call's active set per (batch index, n, m, p), used when warm_start is on
    cache: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def validate(self) -> LayerOptions:
        pen = self.penalty
        for name, val in (("beta", pen.beta), ("penalty_coeff", pen.penalty_coeff),
                          ("active_tol", pen.active_tol),
                          ("tol", 1.0 if self.tol is None else self.tol)):
            if not (isinstance(val, (int, float)) and np.isfinite(val) and val > 0):
                raise ValueError(f"{name} must be a positive number, got {val!r}")
        if pen.rho_min < 0 or pen.ridge < 0:
            raise ValueError("rho_min and ridge must be >= 0")
        zg = pen.zero_dual_guard
        if zg is not None and not (isinstance(zg, (int, float)) and np.isfinite(zg) and zg >= 0):
            raise ValueError(f"zero_dual_guard must be a number >= 0 or None (the paper's "
                             f"rule unguarded), got {zg!r}")
        if self.backward not in ("dxpp", "kkt"):
            raise ValueError(f"backward {self.backward!r} is unknown: use 'dxpp' (the penalty "
                             "method) or 'kkt' (the KKT reference)")
        if self.kkt_mode not in ("reduced", "full"):
            raise ValueError(f"kkt_mode {self.kkt_mode!r} is unknown: use 'reduced' or 'full'")
        if pen.linear_solver not in ("auto", "batched", "dense", "sparse", "cg"):
            raise ValueError(f"linear_solver {pen.linear_solver!r} is unknown: use 'auto', "
                             "'batched', 'dense', 'sparse' or 'cg'")
        if self.recover_duals not in ("auto", "always", "never"):
            raise ValueError(f"recover_duals {self.recover_duals!r} is unknown: use 'auto', "
                             "'always' or 'never'")
        check_solver(self.solver)
        if self.solver == "torch":
            from icml_dxpp.forward import check_torch_options

            check_torch_options(self.solver_options)
        return self


def _options(penalty: PenaltyOptions | None = None, **kw: Any) -> LayerOptions:
    """Options from keywords: ``PenaltyOptions`` fields (``beta=...``) override ``penalty``
    (the config's section, or the defaults); the rest are ``LayerOptions`` fields. Every default
    lives in those two classes, not here."""
    pen_keys = {f for f in PenaltyOptions.__dataclass_fields__}
    pen = {k: kw.pop(k) for k in list(kw) if k in pen_keys}
    own = set(LayerOptions.__dataclass_fields__) - {"penalty", "cache"}
    unknown = set(kw) - own
    if unknown:
        allowed = sorted(pen_keys | own | {"penalty"})
        raise TypeError(f"unknown option(s) {sorted(unknown)}: allowed are {allowed}")
    if penalty is not None and not isinstance(penalty, PenaltyOptions):
        raise TypeError(f"penalty must be a PenaltyOptions, got {type(penalty).__name__}")
    base = penalty if penalty is not None else PenaltyOptions()
    return LayerOptions(penalty=replace(base, **pen), **kw).validate()


# -- conversions --------------------------------------------------------------------------

def _is_sparse(t: torch.Tensor | None) -> bool:
    return t is not None and t.layout != torch.strided


def _to_scipy(t: torch.Tensor) -> sp.csr_matrix:
    t = t.detach().cpu().to(torch.float64)
    if t.layout == torch.sparse_csr:
        return sp.csr_matrix((t.values().numpy(), t.col_indices().numpy(),
                              t.crow_indices().numpy()), shape=tuple(t.shape))
    t = t.to_sparse_coo().coalesce() if t.layout != torch.sparse_coo else t.coalesce()
    idx = t.indices().numpy()
    return sp.csr_matrix((t.values().numpy(), (idx[0], idx[1])), shape=tuple(t.shape))


def _grad_to_torch(g: Any, like: torch.Tensor) -> torch.Tensor:
    if sp.issparse(g):
        # SciPy's canonical CSR -> COO is already sorted row-major without duplicates, i.e.
        # coalesced: say so instead of calling coalesce(), whose threaded sort took 380 ms
        # for 10⁵ entries at 2 threads on the loaded 2-core machine (8 ms at 1 thread)
        csr = sp.csr_matrix(g)
        csr.sum_duplicates()  # sorts indices and merges duplicates (no-op when canonical)
        coo = csr.tocoo()
        idx = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
        out = torch.sparse_coo_tensor(idx, torch.from_numpy(coo.data), tuple(coo.shape),
                                      check_invariants=False, is_coalesced=True)
        out = out.to(dtype=like.dtype, device=like.device)
        return out.to_sparse_csr() if like.layout == torch.sparse_csr else out
    return torch.as_tensor(np.asarray(g), dtype=like.dtype, device=like.device)


class _QPFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, opts: LayerOptions, Q: torch.Tensor, q: torch.Tensor,
                G: torch.Tensor | None, h: torch.Tensor | None, A: torch.Tensor | None,
                b: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        inputs = (Q, q, G, h, A, b)
        B = q.shape[0]
        if opts.solver == "torch":
            return _torch_forward(ctx, opts, inputs)

        def item(t: torch.Tensor | None, i: int) -> Any:
            if t is None:
                return None
            if _is_sparse(t):
                return _to_scipy(t.select(0, i) if t.dim() == 3 else t)
            return t[i].detach().cpu().to(torch.float64).numpy()

        probs, sols = [], []
        for i in range(B):
            index = i if B > 1 else None
            prob = make_problem(*(item(t, i) for t in inputs), check=opts.check_inputs,
                                index=index)
            probs.append(prob)
            key = (i, prob.n, prob.m, prob.p)
            warm = opts.cache.get(key) if opts.warm_start else None
            sols.append(solve_qp(prob, opts.solver, opts.tol, opts.penalty.active_tol,
                                 opts.recover_duals, opts.solver_options, index,
                                 polish_solution=opts.polish, warm_active=warm))
            if opts.warm_start and "active" in sols[-1].extras:
                opts.cache[key] = sols[-1].extras["active"]
        if opts.warm_start:
            opts.cache["paths"] = [s.extras.get("path") for s in sols]
        ctx.opts, ctx.probs, ctx.sols = opts, probs, sols
        ctx.likes = [None if t is None else (t if _is_sparse(t) else t[:0]) for t in inputs]
        ctx.dense = not any(_is_sparse(t) for t in inputs)
        if ctx.dense:  # kept for the batched torch backward
            ctx.inputs = tuple(None if t is None else t.detach() for t in inputs)
        dev, dt = q.device, q.dtype

        def stack(key: str, dtype: Any = dt) -> torch.Tensor:
            return torch.as_tensor(np.stack([getattr(s, key) for s in sols]), dtype=dtype,
                                   device=dev)

        ctx.sol64 = tuple(stack(k, torch.float64) for k in ("x", "ineq_dual", "eq_dual"))
        return stack("x"), stack("eq_dual"), stack("ineq_dual")

    @staticmethod
    @once_differentiable  # the backward runs in NumPy: a second derivative must fail loudly
    def backward(ctx: Any, gx: torch.Tensor, gmu: torch.Tensor, gnu: torch.Tensor
                 ) -> tuple[Any, ...]:
        opts: LayerOptions = ctx.opts
        needs = ctx.needs_input_grad[1:]
        if not any(needs):
            return (None,) * 7
        ls = opts.penalty.linear_solver
        on_accelerator = ctx.likes[1].device.type != "cpu"
        if opts.backward == "dxpp" and ctx.dense and (
                ls == "batched" or (ls == "auto" and on_accelerator)):
            return (None, *_batched_backward(ctx, gx, gmu, gnu, needs))
        if opts.backward == "dxpp" and ls == "auto" and opts.solver == "torch":
            return (None, *_batched_backward(ctx, gx, gmu, gnu, needs))
        if ls == "batched":
            opts = replace(opts, penalty=replace(opts.penalty, linear_solver="auto"))
        if ctx.probs is None:  # the torch forward keeps tensors only
            ctx.probs, ctx.sols = _numpy_problems(ctx)
        per: list[dict[str, Any]] = []
        for i, (prob, sol) in enumerate(zip(ctx.probs, ctx.sols, strict=False)):
            args = (prob, sol.x, sol.ineq_dual, sol.eq_dual,
                    gx[i].detach().cpu().double().numpy(),
                    gnu[i].detach().cpu().double().numpy(),
                    gmu[i].detach().cpu().double().numpy())
            if opts.backward == "dxpp":
                grads, _ = dxpp_backward(*args, opts=opts.penalty)
            else:
                grads, _ = kkt_backward(*args, mode=opts.kkt_mode,
                                        active_tol=opts.penalty.active_tol)
            per.append(grads)
        out: list[Any] = [None]
        for k, name in enumerate(_NAMES):
            like = ctx.likes[k]
            if like is None or not needs[k]:
                out.append(None)
            elif _is_sparse(like) and like.dim() == 3:  # batched torch.sparse (COO)
                out.append(torch.stack([_grad_to_torch(g[name], like) for g in per]).coalesce())
            elif _is_sparse(like):
                out.append(_grad_to_torch(per[0][name], like))
            elif len(per) == 1:
                out.append(_grad_to_torch(per[0][name], like).unsqueeze(0))
            else:
                out.append(torch.stack([_grad_to_torch(g[name], like) for g in per]))
        return tuple(out)


def _torch_forward(ctx: Any, opts: LayerOptions, inputs: tuple[Any, ...]
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``solver="torch"``: the whole dense batch in one batched solver call on the inputs'
    device (:func:`icml_dxpp.batched.solve_batch`); problems whose point does not verify go
    through the per-problem default path (``solver="auto"``), which raises its usual errors."""
    from icml_dxpp.batched import solve_batch
    from icml_dxpp.forward import check_torch_options

    if any(_is_sparse(t) for t in inputs):
        raise QPInputError("solver 'torch' (the batched dense interior point) takes dense "
                           "tensors: use solver='auto' for torch.sparse inputs")
    Q, q, G, h, A, b = (None if t is None else t.detach().to(torch.float64) for t in inputs)
    B, n = q.shape
    dev = q.device
    G = torch.zeros(B, 0, n, dtype=torch.float64, device=dev) if G is None else G
    h = torch.zeros(B, 0, dtype=torch.float64, device=dev) if h is None else h
    A = torch.zeros(B, 0, n, dtype=torch.float64, device=dev) if A is None else A
    b = torch.zeros(B, 0, dtype=torch.float64, device=dev) if b is None else b
    if opts.check_inputs:
        _check_batch(Q, q, G, h, A, b)
    m, p = h.shape[-1], b.shape[-1]
    key = ("torch", B, n, m, p)
    warm = opts.cache.get(key) if opts.warm_start else None
    so = check_torch_options(opts.solver_options)
    if n == 0 or m + p == 0:  # nothing for the interior point: the per-problem path
        res = None
    else:
        res = solve_batch(Q, q, G, h, A, b, tol=opts.tol, max_iter=so["max_iter"],
                          warm_active=warm)
    if res is None:
        x = torch.zeros(B, n, dtype=torch.float64, device=dev)
        nu = torch.zeros(B, m, dtype=torch.float64, device=dev)
        mu = torch.zeros(B, p, dtype=torch.float64, device=dev)
        ok = torch.zeros(B, dtype=torch.bool, device=dev)
        paths = ["torch"] * B
    else:
        x, nu, mu, ok = res.x, res.nu, res.mu, res.ok
        paths = ["torch:warm" if w else "torch" for w in res.warm.tolist()]
    bad = torch.nonzero(~ok).reshape(-1).tolist()
    for i in bad:  # the existing per-problem path
        index = i if B > 1 else None
        prob = make_problem(*(t[i].cpu().numpy() for t in (Q, q, G, h, A, b)), check=False,
                            index=index)
        sol = solve_qp(prob, "auto", opts.tol, opts.penalty.active_tol, opts.recover_duals,
                       None, index)
        x[i] = torch.as_tensor(sol.x, device=dev)
        nu[i] = torch.as_tensor(sol.ineq_dual, device=dev)
        mu[i] = torch.as_tensor(sol.eq_dual, device=dev)
        paths[i] = f"torch -> {sol.extras.get('path', sol.solver)}"
    if opts.warm_start:
        opts.cache[key] = nu > h - (G @ x.unsqueeze(-1)).squeeze(-1)
        opts.cache["paths"] = paths
    ctx.opts, ctx.probs, ctx.sols = opts, None, None
    ctx.likes = [None if t is None else t[:0] for t in inputs]
    ctx.dense = True
    ctx.inputs = tuple(None if t is None else t.detach() for t in inputs)
    ctx.sol64 = (x, nu, mu)
    dt = inputs[1].dtype
    return x.to(dt), mu.to(dt), nu.to(dt)


def _check_batch(Q: Any, q: Any, G: Any, h: Any, A: Any, b: Any) -> None:
    """The per-problem input checks (:func:`icml_dxpp.qp.check_problem`) for a whole dense
    batch: finite data, symmetric and PSD Q, tested batched; a problem that fails one is
    re-checked by :func:`make_problem`, which raises the per-problem path's error."""
    B, n = q.shape
    flags = torch.zeros(B, dtype=torch.bool, device=q.device)
    for t in (Q, q, G, h, A, b):
        if t.numel():
            flags |= ~torch.isfinite(t.reshape(B, -1)).all(-1)
    if n:
        Qf = torch.nan_to_num(Q)
        scale = 1.0 + Qf.abs().amax((-2, -1))
        flags |= (Qf - Qf.transpose(-1, -2)).abs().amax((-2, -1)) > 1e-8 * scale
        eye = torch.eye(n, dtype=Q.dtype, device=Q.device)
        _, info = torch.linalg.cholesky_ex(Qf + 1e-8 * scale[:, None, None] * eye)
        flags |= info != 0
    else:
        flags[:] = True
    for i in torch.nonzero(flags).reshape(-1).tolist():
        make_problem(*(t[i].cpu().numpy() for t in (Q, q, G, h, A, b)), check=True,
                     index=i if B > 1 else None)


def _numpy_problems(ctx: Any) -> tuple[list[QPProblem], list[QPResult]]:
    """QPProblem/QPResult per batch index from the torch forward's tensors (for the
    per-problem backwards)."""
    Q, q, G, h, A, b = (None if t is None else t.detach().cpu().to(torch.float64).numpy()
                        for t in ctx.inputs)
    x, nu, mu = (t.cpu().numpy() for t in ctx.sol64)
    probs, sols = [], []
    for i in range(q.shape[0]):
        probs.append(make_problem(Q[i], q[i], None if G is None else G[i],
                                  None if h is None else h[i], None if A is None else A[i],
                                  None if b is None else b[i], check=False))
        sols.append(QPResult(x[i], eq_dual=mu[i], ineq_dual=nu[i], solver="torch"))
    return probs, sols


def _batched_backward(ctx: Any, gx: torch.Tensor, gmu: torch.Tensor, gnu: torch.Tensor,
                      needs: tuple[bool, ...]) -> list[Any]:
    """dXPP backward for the whole dense batch with torch (batched Cholesky, input device)."""
    from icml_dxpp.penalty import dxpp_backward_batched

    Q, q, G, h, A, b = ctx.inputs
    B, n = q.shape
    dev = q.device
    zeros = {"m": torch.zeros(B, 0, n, dtype=torch.float64, device=dev),
             "v": torch.zeros(B, 0, dtype=torch.float64, device=dev)}
    G_, h_ = (zeros["m"], zeros["v"]) if G is None else (G, h)
    A_, b_ = (zeros["m"], zeros["v"]) if A is None else (A, b)
    x, nu, mu = ctx.sol64
    grads = dxpp_backward_batched(Q, G_, h_, A_, b_, x, nu, mu, gx, gnu, gmu,
                                  ctx.opts.penalty)
    out: list[Any] = []
    for k, name in enumerate(_NAMES):
        like = ctx.likes[k]
        out.append(None if like is None or not needs[k] else grads[name].to(like.dtype))
    return out


def _batch_shape(name: str, t: torch.Tensor, tail: int) -> tuple[int, ...]:
    if t.dim() < tail:
        raise QPInputError(f"{name} must have at least {tail} dimension(s), got shape "
                           f"{tuple(t.shape)}")
    return tuple(t.shape[: t.dim() - tail])


def dxpp_solve(Q: torch.Tensor, q: torch.Tensor, G: torch.Tensor | None = None,
               h: torch.Tensor | None = None, A: torch.Tensor | None = None,
               b: torch.Tensor | None = None, **options: Any) -> QPSolution:
    """Solve min ½xᵀQx + qᵀx s.t. Gx ≤ h, Ax = b and return a differentiable
    :class:`QPSolution` ``(x, eq_dual, ineq_dual)``.

    Options (all keyword): ``beta`` (1e-6), ``penalty_coeff`` (10), ``active_tol`` (1e-5),
    ``rho_min`` (0, the paper), ``cg_min_n`` (50 000: sparse systems this large use CG under
    'auto'), ``ridge`` (1e-9), ``linear_solver`` ('auto' | 'dense' | 'sparse' | 'cg'),
    ``cg_tol``, ``cg_maxiter``, ``zero_dual_guard`` (1e-3; None: the paper's ρ rule
    unguarded), ``solver`` ('auto': piqp + verified polish, clarabel fallback; 'torch': the
    batched dense interior point of :mod:`icml_dxpp.batched`; or any installed qpsolvers
    backend), ``tol`` (the forward solver's tolerance; None = a per-solver default),
    ``backward`` ('dxpp' | 'kkt'), ``kkt_mode`` ('reduced' | 'full'),
    ``recover_duals`` ('auto' | 'always' | 'never'), ``polish`` (False; active-set refinement
    of the solver's point),
    ``check_inputs`` (True), ``solver_options`` (dict passed to the backend).
    """
    return _solve(_options(**options), Q, q, G, h, A, b)


def _solve(opts: LayerOptions, Q: torch.Tensor, q: torch.Tensor, G: torch.Tensor | None,
           h: torch.Tensor | None, A: torch.Tensor | None, b: torch.Tensor | None
           ) -> QPSolution:
    if (G is None) != (h is None):
        raise QPInputError("G and h come together: pass both (Gx <= h) or neither")
    if (A is None) != (b is None):
        raise QPInputError("A and b come together: pass both (Ax = b) or neither")
    tensors = {k: v for k, v in zip(_NAMES, (Q, q, G, h, A, b), strict=False) if v is not None}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise QPInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}; use "
                               "torch.as_tensor(...) or icml_dxpp.differentiate for NumPy")
        if not t.is_floating_point():
            raise QPInputError(f"{name} has dtype {t.dtype}: use float64 or float32")
    dtype = torch.float64 if any(t.dtype == torch.float64 for t in tensors.values()) \
        else q.dtype
    if q.dim() == 0:
        raise QPInputError("q is a scalar (0-D tensor): it must be a vector of length n, or "
                           "(..., n) for a batch; use q.reshape(1) for a one-variable QP")
    n = q.shape[-1]
    if any(_is_sparse(t) and t.dim() == 3 for t in tensors.values()):
        return _solve_sparse_batched(opts, tensors, n, Q, q, G, h, A, b)
    if any(_is_sparse(t) for t in tensors.values()):
        for name, t in tensors.items():
            if t.dim() != (2 if name in "QGA" else 1):
                raise QPInputError(f"{name} has shape {tuple(t.shape)}: torch.sparse inputs "
                                   "are supported for one unbatched problem; loop over the "
                                   "batch or pass dense tensors")
        args = [None if t is None else (t if _is_sparse(t) else t.unsqueeze(0))
                for t in (Q, q, G, h, A, b)]
        _check_tails(n, Q, G, h, A, b)
        x, mu, nu = _QPFunction.apply(opts, *args)
        # views (squeeze), not x[0]: select's backward allocates and fills a zero batch,
        # tens of ms at n = 10⁵ with two threads on a loaded machine
        return QPSolution(x.squeeze(0), mu.squeeze(0), nu.squeeze(0))
    _check_tails(n, Q, G, h, A, b)
    shapes = [_batch_shape("Q", Q, 2), _batch_shape("q", q, 1)]
    if G is not None:
        shapes += [_batch_shape("G", G, 2), _batch_shape("h", h, 1)]
    if A is not None:
        shapes += [_batch_shape("A", A, 2), _batch_shape("b", b, 1)]
    try:
        bshape = tuple(np.broadcast_shapes(*shapes))  # torch's goes through a slow Python path
    except ValueError:
        raise QPInputError(f"the batch dimensions of the inputs {shapes} do not broadcast: "
                           "give every input the same leading dimensions or none") from None
    B = int(np.prod(bshape)) if bshape else 1

    def flat(t: torch.Tensor | None, tail: int) -> torch.Tensor | None:
        if t is None:
            return None
        t = t.to(dtype)
        full = t.expand(*bshape, *t.shape[t.dim() - tail:])
        return full.reshape(B, *t.shape[t.dim() - tail:])

    x, mu, nu = _QPFunction.apply(opts, flat(Q, 2), flat(q, 1), flat(G, 2), flat(h, 1),
                                  flat(A, 2), flat(b, 1))
    return QPSolution(x.reshape(*bshape, -1), mu.reshape(*bshape, -1), nu.reshape(*bshape, -1))


def _solve_sparse_batched(opts: LayerOptions, tensors: dict[str, torch.Tensor], n: int,
                          Q: torch.Tensor, q: torch.Tensor, G: Any, h: Any, A: Any, b: Any
                          ) -> QPSolution:
    """A batch of sparse problems: Q, G, A as (B, ·, n) torch.sparse COO tensors (or dense
    (B, ·, n)), q, h, b as (B, ·); every input carries the same batch size B (no broadcasting)."""
    B = q.shape[0] if q.dim() == 2 else None
    for name, t in tensors.items():
        want = 3 if name in "QGA" else 2
        if t.dim() != want or t.shape[0] != B:
            raise QPInputError(f"{name} has shape {tuple(t.shape)}: a batch of torch.sparse "
                               f"problems needs every input batched with the same size (B, "
                               f"...), {name} as {'(B, rows, n)' if want == 3 else '(B, rows)'}"
                               "; shared inputs must be expanded")
        if _is_sparse(t) and t.layout != torch.sparse_coo:
            raise QPInputError(f"{name} is a batched {t.layout} tensor: batched sparse inputs "
                               "must be COO (t.to_sparse_coo())")
    _check_tails(n, Q, G, h, A, b)
    x, mu, nu = _QPFunction.apply(opts, Q, q, G, h, A, b)
    return QPSolution(x, mu, nu)


def _check_tails(n: int, Q: torch.Tensor, G: Any, h: Any, A: Any, b: Any) -> None:
    if Q.dim() < 2 or tuple(Q.shape[-2:]) != (n, n):
        raise QPInputError(f"Q has shape {tuple(Q.shape)} but q has length {n}: Q must be "
                           f"(..., {n}, {n})")
    for M, v, Mn, vn in ((G, h, "G", "h"), (A, b, "A", "b")):
        if M is None:
            continue
        if M.dim() < 2 or M.shape[-1] != n:
            raise QPInputError(f"{Mn} has shape {tuple(M.shape)}: it needs {n} columns (the "
                               "length of q)")
        if v.dim() < 1 or v.shape[-1] != M.shape[-2]:
            raise QPInputError(f"{Mn} has {M.shape[-2]} rows but {vn} has shape "
                               f"{tuple(v.shape)}: they must match")


class DXPPQPLayer(torch.nn.Module):
    """Differentiable convex QP layer with dXPP's penalty backward.

    ``layer(Q, q, G, h, A=None, b=None)`` returns :class:`QPSolution` ``(x, eq_dual,
    ineq_dual)``, differentiable w.r.t. every tensor input.

    Every option is a keyword; the defaults are those of :class:`~icml_dxpp.config.PenaltyOptions`
    (the backward, also accepted whole as ``penalty=``, e.g. a job config's ``penalty``
    section; keywords such as ``beta=`` override its fields) and :class:`LayerOptions` (the
    rest), written once there.

    Args:
        penalty: a :class:`~icml_dxpp.config.PenaltyOptions` (default: its defaults).
        beta: softplus smoothing width β of the penalty (paper default 1e-6 in every example).
        penalty_coeff: c in ρ_I = c‖ν*‖₁, ρ_E = c‖μ*‖₁ (paper: 10).
        solver: 'auto' (default since 0.3.0: piqp at 1e-8 plus a verified active-set polish
            wherever Q is known PSD, clarabel at 1e-12 otherwise or when the polish does not
            verify; see :func:`icml_dxpp.forward.solve_qp`) or any installed ``qpsolvers``
            backend (run as it stands, e.g. 'clarabel', 0.2's default), or 'torch' (ours: the
            whole dense batch by one batched interior point + verified batched polish on the
            inputs' device, per-problem 'auto' for problems that do not verify;
            :mod:`icml_dxpp.batched`; ``solver_options={"max_iter": 50}``).
        active_tol: a row is active when h_i − G_i x* < active_tol (paper: 1e-5).
        linear_solver: 'auto' (dense tensors on an accelerator: 'batched'; on the CPU: SciPy
            Cholesky per problem; sparse tensors: sparse LU), 'batched' (one batched torch
            Cholesky for the whole dense batch, on the input's device), 'dense', 'sparse' or
            'cg' (matrix-free, residual-checked, direct fallback).
        backward: 'dxpp' (the paper) or 'kkt' (reference; ``kkt_mode`` 'reduced' or 'full').
        tol: the forward solver's tolerance.
        rho_min: floor on ‖ν*‖₁ and ‖μ*‖₁ in ρ (default 0: the paper's ρ = c‖dual‖₁); 1 keeps
            a constraint whose duals are all zero in the backward (our option, see README).
            The default ``zero_dual_guard=1e-3`` (ours; ``None`` turns it off) does that only
            for a block whose duals are (near) zero (:func:`icml_dxpp.penalty.block_rhos`).
        **options: ``ridge``, ``cg_tol``, ``cg_maxiter``, ``recover_duals``, ``polish``,
            ``check_inputs``, ``warm_start`` (False; ours: each call first tries the previous
            call's active set per batch index by an exact, verified KKT solve and runs the
            solver only when that point is not optimal — the same solution, faster across
            training steps whose active sets do not change; README "Warm starts"),
            ``solver_options`` (see :func:`dxpp_solve`).
    """

    def __init__(self, penalty: PenaltyOptions | None = None, **options: Any) -> None:
        super().__init__()
        self.options = _options(penalty, **options)

    def forward(self, Q: torch.Tensor, q: torch.Tensor, G: torch.Tensor | None = None,
                h: torch.Tensor | None = None, A: torch.Tensor | None = None,
                b: torch.Tensor | None = None) -> QPSolution:
        return _solve(self.options, Q, q, G, h, A, b)

    def extra_repr(self) -> str:
        o = self.options
        return (f"solver={o.solver!r}, backward={o.backward!r}, beta={o.penalty.beta}, "
                f"penalty_coeff={o.penalty.penalty_coeff}, "
                f"linear_solver={o.penalty.linear_solver!r}")


def differentiate(problem: QPProblem, grad_x: np.ndarray | None = None,
                  grad_ineq_dual: np.ndarray | None = None,
                  grad_eq_dual: np.ndarray | None = None, method: str = "dxpp",
                  solution: QPResult | None = None, **options: Any
                  ) -> tuple[QPResult, dict[str, Any], dict[str, Any]]:
    """NumPy API: solve ``problem`` (unless ``solution`` is given) and return
    ``(solution, grads, info)`` where ``grads`` maps Q, q, G, h, A, b to ∂ℓ/∂· for the upstream
    gradients given. ``method`` is 'dxpp' or 'kkt' (``kkt_mode`` picks reduced/full)."""
    opts = _options(**options)
    opts = replace(opts, backward=method).validate()
    if solution is None:
        solution = solve_qp(problem, opts.solver, opts.tol, opts.penalty.active_tol,
                            opts.recover_duals, opts.solver_options,
                            polish_solution=opts.polish)
    upstream = []
    for name, g, size in (("grad_x", grad_x, problem.n), ("grad_ineq_dual", grad_ineq_dual,
                                                           problem.m),
                          ("grad_eq_dual", grad_eq_dual, problem.p)):
        if g is None:
            upstream.append(np.zeros(size) if name == "grad_x" else None)
            continue
        arr = np.asarray(g, dtype=np.float64)
        if arr.shape != (size,):
            raise QPInputError(f"{name} has shape {arr.shape} but the problem needs ({size},) "
                               "(n for grad_x, m for grad_ineq_dual, p for grad_eq_dual)")
        upstream.append(arr)
    args = (problem, solution.x, solution.ineq_dual, solution.eq_dual, *upstream)
    if method == "dxpp":
        grads, info = dxpp_backward(*args, opts=opts.penalty)
    else:
        grads, info = kkt_backward(*args, mode=opts.kkt_mode,
                                   active_tol=opts.penalty.active_tol)
    return solution, grads, info
