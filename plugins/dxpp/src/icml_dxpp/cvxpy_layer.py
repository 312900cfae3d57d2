"""cvxpy problems in: ``CvxpyQPLayer``, a drop-in for cvxpylayers' ``CvxpyLayer`` on QPs.

A parametrised (DPP) cvxpy problem is canonicalised once by cvxpy itself, through its QP
chain (the one cvxpy uses for OSQP). Its problem data

    min ½ zᵀPz + qᵀz   s.t.  Gz ≤ h,  Az = b      (z: all variables stacked, cvxpy's order)

are an affine function of the parameters θ (that is what DPP guarantees). The layer records
that map exactly, column by column, with cvxpy's own ``apply_parameters`` (one call per scalar
parameter, at construction), and at run time evaluates it in torch, so

    θ ──(affine, torch)──▶ (Q, q, G, h, A, b) ──(dxpp_solve)──▶ z* ──▶ the variables' values

is differentiable end to end: autograd chains dXPP's gradients of (Q, q, G, h, A, b) with the
affine map. Batches follow cvxpylayers: every parameter may have one extra leading dimension.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from icml_dxpp.layer import _options, _solve
from icml_dxpp.qp import QPInputError

__all__ = ["CvxpyQPLayer", "extract_qp"]


def _f_flat(value: Any) -> np.ndarray:
    return np.asarray(value, dtype=np.float64).reshape(-1, order="F")


class _AffineMap:
    """vec(data) = J θ + c for one block of the problem data (sparse J)."""

    def __init__(self, shape: tuple[int, ...], base: Any, cols: list[Any]):
        self.shape = shape
        size = int(np.prod(shape, dtype=int))
        self.base = np.asarray(base.toarray() if sp.issparse(base) else base,
                               dtype=np.float64).reshape(-1)
        if cols:  # columns as sparse (size, 1) vectors, C-order like self.base
            J = sp.hstack([sp.csr_matrix(c).reshape(size, 1) if sp.issparse(c)
                           else sp.csr_matrix(np.asarray(c).reshape(size, 1)) for c in cols])
            J = sp.csr_matrix(J)
            J.eliminate_zeros()
        else:
            J = sp.csr_matrix((size, 0))
        self.J = J
        self._cache: dict[tuple[Any, Any], tuple[torch.Tensor, torch.Tensor | None]] = {}

    def _tensors(self, dtype: Any, device: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        key = (dtype, device)
        if key not in self._cache:
            base = torch.as_tensor(self.base, dtype=dtype, device=device)
            J = None
            if self.J.nnz:
                coo = self.J.tocoo()
                idx = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
                J = torch.sparse_coo_tensor(idx, torch.from_numpy(coo.data), self.J.shape,
                                            check_invariants=False)
                J = J.to(dtype=dtype, device=device).coalesce()
            self._cache[key] = (base, J)
        return self._cache[key]

    def torch(self, theta: torch.Tensor) -> torch.Tensor:
        """(B, K) parameters -> (B, *shape) data, differentiable in θ."""
        B = theta.shape[0]
        base, J = self._tensors(theta.dtype, theta.device)
        out = base.expand(B, -1)
        if J is not None:
            out = out + torch.sparse.mm(J, theta.T).T
        return out.reshape(B, *self.shape)


def _problem_data(problem: Any) -> Any:
    import cvxpy as cp

    if not problem.is_dcp(dpp=True):
        raise QPInputError("the cvxpy problem is not DPP (disciplined parametrised): the map "
                           "from parameters to problem data must be affine; see "
                           "https://www.cvxpy.org/tutorial/dpp/ (e.g. multiply parameters by "
                           "variables, not by each other)")
    if not problem.is_qp():
        raise QPInputError("the cvxpy problem is not a QP: the objective must be a convex "
                           "quadratic (or affine) function and every constraint affine "
                           "(==, <=, >=); for cones (SOC, exp, PSD) use cvxpylayers")
    try:
        data, _chain, _inv = problem.get_problem_data(cp.OSQP)
    except Exception as exc:  # noqa: BLE001 - cvxpy raises several types; re-raise with context
        raise QPInputError(f"cvxpy could not canonicalise the problem as a QP: {exc}") from exc
    for key in ("lower_bounds", "upper_bounds"):
        if data.get(key) is not None:
            raise QPInputError("variable bounds (Variable(bounds=...)) are not supported by "
                               "the dXPP cvxpy layer: write them as constraints (x >= lo)")
    return data


def extract_qp(problem: Any, parameters: list[Any]) -> tuple[dict[str, _AffineMap], Any]:
    """The affine maps θ -> (P, q, G, h, A, b) of a DPP cvxpy QP, from cvxpy's own
    canonicalisation, and cvxpy's parametric program (which holds the variable offsets)."""
    import cvxpy as cp

    data = _problem_data(problem)
    prog = data[cp.settings.PARAM_PROB]
    n_eq = int(data["dims"].zero if hasattr(data["dims"], "zero") else data["dims"]["zero"])
    given = {p.id for p in parameters}
    needed = {p.id for p in problem.parameters()}
    if given != needed:
        names = sorted(p.name() for p in problem.parameters() if p.id not in given)
        extra = sorted(p.name() for p in parameters if p.id not in needed)
        raise QPInputError(f"parameters must be exactly the problem's parameters: missing "
                           f"{names}, not in the problem {extra}")

    def evaluate(values: dict[int, np.ndarray]) -> list[Any]:
        P, q, _d, AF, bg = _apply(prog, values)
        return [sp.csr_matrix(P), np.asarray(q, dtype=np.float64).reshape(-1),
                sp.csr_matrix(AF), np.asarray(bg, dtype=np.float64).reshape(-1)]

    zeros = {p.id: np.zeros(p.shape) for p in parameters}
    base = evaluate(zeros)
    cols: list[list[np.ndarray]] = [[] for _ in base]
    for p in parameters:
        for k in range(int(np.prod(p.shape, dtype=int))):
            e = np.zeros(int(np.prod(p.shape, dtype=int)))
            e[k] = 1.0
            vals = dict(zeros)
            vals[p.id] = e.reshape(p.shape, order="F")
            for j, block in enumerate(evaluate(vals)):
                cols[j].append(block - base[j])
    P0, q0, AF0, bg0 = base
    n = q0.size

    def asym(M: Any) -> float:
        return float(abs(M - M.T).max()) if M.nnz else 0.0

    # ½zᵀPz with P symmetric; cvxpy may hand over one triangle only
    tri = asym(P0) > 1e-12 or any(asym(c) > 1e-12 for c in cols[0])
    if tri:
        def sym(M: Any) -> Any:
            return sp.csr_matrix(M + M.T - sp.diags(M.diagonal()))
    else:
        def sym(M: Any) -> Any:
            return sp.csr_matrix(0.5 * (M + M.T))
    maps = {
        "Q": _AffineMap((n, n), sym(P0), [sym(c) for c in cols[0]]),
        "q": _AffineMap((n,), q0, cols[1]),
        # cvxpy's QP data: AF z + bg = 0 (first n_eq rows) and AF z + bg >= 0 (the rest)
        "A": _AffineMap((n_eq, n), AF0[:n_eq], [c[:n_eq] for c in cols[2]]),
        "b": _AffineMap((n_eq,), -bg0[:n_eq], [-c[:n_eq] for c in cols[3]]),
        "G": _AffineMap((AF0.shape[0] - n_eq, n), -AF0[n_eq:], [-c[n_eq:] for c in cols[2]]),
        "h": _AffineMap((AF0.shape[0] - n_eq,), bg0[n_eq:], [c[n_eq:] for c in cols[3]]),
    }
    return maps, prog


def _apply(prog: Any, values: dict[int, np.ndarray]) -> tuple[Any, ...]:
    out = prog.apply_parameters(values, keep_zeros=True, quad_obj=True)
    if len(out) != 5:
        raise QPInputError("this cvxpy version's QP data has an unexpected layout "
                           f"({len(out)} blocks); please report it with cvxpy's version")
    return out


class CvxpyQPLayer(torch.nn.Module):
    """A differentiable cvxpy QP, solved and differentiated by dXPP.

    Same call as cvxpylayers' ``CvxpyLayer``::

        layer = CvxpyQPLayer(problem, parameters=[A, b], variables=[x])
        (x_star,) = layer(A_t, b_t)          # tensors in parameters' order, optional batch dim

    ``problem`` must be DPP and a QP (convex quadratic objective, affine constraints); checked
    at construction with a clear error. ``**options`` are :func:`icml_dxpp.dxpp_solve`'s
    (``beta``, ``solver``, ``backward``, ``linear_solver``, ...).
    """

    def __init__(self, problem: Any, parameters: list[Any], variables: list[Any],
                 **options: Any) -> None:
        super().__init__()
        self.parameters_ = list(parameters)
        self.variables_ = list(variables)
        known = {v.id for v in problem.variables()}
        for v in self.variables_:
            if v.id not in known:
                raise QPInputError(f"variable {v.name()} is not a variable of the problem")
        self.maps, prog = extract_qp(problem, self.parameters_)
        self.offsets = [int(prog.var_id_to_col[v.id]) for v in self.variables_]
        self.opts = _options(**options)
        self.sizes = [int(np.prod(p.shape, dtype=int)) for p in self.parameters_]

    def _theta(self, values: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, bool]:
        if len(values) != len(self.parameters_):
            raise QPInputError(f"expected {len(self.parameters_)} parameter tensors (in the "
                               f"order of `parameters`), got {len(values)}")
        flats, batch = [], None
        for p, t in zip(self.parameters_, values, strict=True):
            if not isinstance(t, torch.Tensor):
                t = torch.as_tensor(t)
            nd = len(p.shape)
            if t.dim() == nd + 1:
                b = t.shape[0]
            elif t.dim() == nd:
                b = None
            else:
                raise QPInputError(f"parameter {p.name()} has shape {tuple(t.shape)}; expected "
                                   f"{p.shape} or (batch, *{p.shape})")
            if tuple(t.shape[t.dim() - nd:]) != tuple(p.shape):
                raise QPInputError(f"parameter {p.name()} has shape {tuple(t.shape)}; expected "
                                   f"{p.shape} or (batch, *{p.shape})")
            if b is not None:
                if batch not in (None, b):
                    raise QPInputError(f"batch sizes differ: {batch} and {b}")
                batch = b
            flats.append((t, b is not None, nd))
        B = batch or 1
        cols = []
        for t, batched, nd in flats:
            tb = t if batched else t.unsqueeze(0).expand(B, *t.shape)
            # Fortran order, as cvxpy vectorises parameters
            tb = tb.permute(0, *range(nd, 0, -1)) if nd > 1 else tb
            cols.append(tb.reshape(B, -1))
        dtype = torch.float64 if any(c.dtype == torch.float64 for c in cols) else cols[0].dtype
        return torch.cat([c.to(dtype) for c in cols], dim=1), batch is not None

    def forward(self, *params: torch.Tensor) -> tuple[torch.Tensor, ...]:
        theta, batched = self._theta(params)
        data = {k: m.torch(theta) for k, m in self.maps.items()}
        G, h = (data["G"], data["h"]) if data["G"].shape[1] else (None, None)
        A, b = (data["A"], data["b"]) if data["A"].shape[1] else (None, None)
        z = _solve(self.opts, data["Q"], data["q"], G, h, A, b).x
        outs = []
        for v, off in zip(self.variables_, self.offsets, strict=True):
            size = int(np.prod(v.shape, dtype=int))
            val = z[:, off:off + size]
            shape = tuple(reversed(v.shape))
            val = val.reshape(z.shape[0], *shape)
            if len(shape) > 1:  # back from Fortran order
                val = val.permute(0, *range(len(shape), 0, -1))
            outs.append(val if batched else val[0])
        return tuple(outs)
