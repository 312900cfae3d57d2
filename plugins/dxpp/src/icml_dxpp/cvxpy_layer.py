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


#: an affine block's Jacobian is kept dense when it has at most this many entries (8 MB)
_DENSE_MAP_MAX = 1_000_000


def _f_flat(value: Any) -> np.ndarray:
    return np.asarray(value, dtype=np.float64).reshape(-1, order="F")


class _AffineMap:
    """vec(data) = J θ + c for one block of the problem data (sparse J)."""

    def __init__(self, shape: tuple[int, ...], base: np.ndarray, J: Any):
        self.shape = shape
        self.base = np.asarray(base, dtype=np.float64).reshape(-1)
        self.J = sp.csr_matrix(J)
        self.J.eliminate_zeros()
        self._cache: dict[tuple[Any, Any], tuple[torch.Tensor, torch.Tensor | None]] = {}

    def _tensors(self, dtype: Any, device: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(base, Jᵀ) on this dtype/device, built once: Jᵀ dense (K, size) when it is small
        (one ``addmm`` per call, contiguous output), else sparse; None for a constant block."""
        key = (dtype, device)
        if key not in self._cache:
            base = torch.as_tensor(self.base, dtype=dtype, device=device)
            J = None
            if self.J.nnz:
                if self.J.shape[0] * self.J.shape[1] <= _DENSE_MAP_MAX:
                    J = torch.as_tensor(self.J.T.toarray(), dtype=dtype, device=device)
                else:
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
        if J is None:  # constant block: a view, nothing computed per call
            return base.reshape(1, *self.shape).expand(B, *self.shape)
        if J.layout == torch.strided:
            out = torch.addmm(base, theta, J)
        else:
            out = base + torch.sparse.mm(J, theta.T).T
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
    # cvxpy 1.4 applies the parameters' current values while canonicalising (an unset one is
    # NaN and fails an assertion); the data's map is affine in them, so any valid value works
    unset = [p for p in problem.parameters() if p.value is None]
    try:
        for p in unset:
            try:
                p.value = np.zeros(p.shape)
            except ValueError:  # e.g. pos=True
                p.value = np.ones(p.shape)
        data, _chain, _inv = problem.get_problem_data(cp.OSQP)
    except Exception as exc:  # noqa: BLE001 - cvxpy raises several types; re-raise with context
        raise QPInputError(f"cvxpy could not canonicalise the problem as a QP: {exc}") from exc
    finally:
        for p in unset:
            p.value = None
    for key in ("lower_bounds", "upper_bounds"):
        if data.get(key) is not None:
            raise QPInputError("variable bounds (Variable(bounds=...)) are not supported by "
                               "the dXPP cvxpy layer: write them as constraints (x >= lo)")
    return data


def extract_qp(problem: Any, parameters: list[Any], method: str = "tensor"
               ) -> tuple[dict[str, _AffineMap], Any]:
    """The affine maps θ -> (P, q, G, h, A, b) of a DPP cvxpy QP, from cvxpy's own
    canonicalisation, and cvxpy's parametric program (which holds the variable offsets).

    ``method``: ``"tensor"`` reads cvxpy's parameter tensors (falls back to probing when this
    cvxpy lays them out differently), ``"probe"`` calls ``apply_parameters`` per scalar."""
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

    try:
        blocks = _tensor_blocks(prog, parameters) if method == "tensor" else None
    except (AttributeError, TypeError, ValueError, IndexError):  # another cvxpy layout
        blocks = None
    if blocks is None:
        blocks = _probe_blocks(prog, parameters)
    (P0, JP), (q0, Jq), (AF0, JAF), (bg0, Jbg) = blocks
    n, m_all = q0.size, bg0.size
    # ½zᵀPz with P symmetric; cvxpy may hand over one triangle only
    tr = np.arange(n * n).reshape(n, n).T.reshape(-1)  # C-order index of the transpose
    asym = max(float(np.abs(P0 - P0[tr]).max(initial=0.0)),
               float(abs(JP - JP[tr]).max()) if JP.nnz else 0.0)
    if asym > 1e-12:
        diag = np.zeros(n * n)
        diag[np.arange(n) * (n + 1)] = 1.0
        P0 = P0 + P0[tr] - diag * P0
        JP = JP + JP[tr] - sp.diags(diag) @ JP
    else:
        P0, JP = 0.5 * (P0 + P0[tr]), 0.5 * (JP + JP[tr])
    eq_rows = np.arange(n_eq * n)  # C order: row-major, the first n_eq rows of AF
    in_rows = np.arange(n_eq * n, m_all * n)
    maps = {
        "Q": _AffineMap((n, n), P0, JP),
        "q": _AffineMap((n,), q0, Jq),
        # cvxpy's QP data: AF z + bg = 0 (first n_eq rows) and AF z + bg >= 0 (the rest)
        "A": _AffineMap((n_eq, n), AF0[eq_rows], JAF[eq_rows]),
        "b": _AffineMap((n_eq,), -bg0[:n_eq], -Jbg[:n_eq]),
        "G": _AffineMap((m_all - n_eq, n), -AF0[in_rows], -JAF[in_rows]),
        "h": _AffineMap((m_all - n_eq,), bg0[n_eq:], Jbg[n_eq:]),
    }
    return maps, prog


Block = tuple[np.ndarray, Any]  # (C-order flat base, sparse Jacobian: flat size × K)


def _probe_blocks(prog: Any, parameters: list[Any]) -> list[Block]:
    """The affine map by probing: cvxpy's ``apply_parameters`` at θ = 0 and at every unit
    vector (K + 1 calls; exact, since the map is affine)."""
    def evaluate(values: dict[int, np.ndarray]) -> list[np.ndarray]:
        P, q, _d, AF, bg = _apply(prog, values)
        return [np.asarray(sp.csr_matrix(P).toarray()).reshape(-1),
                np.asarray(q, dtype=np.float64).reshape(-1),
                np.asarray(sp.csr_matrix(AF).toarray()).reshape(-1),
                np.asarray(bg, dtype=np.float64).reshape(-1)]

    zeros = {p.id: np.zeros(p.shape) for p in parameters}
    base = evaluate(zeros)
    cols: list[list[Any]] = [[] for _ in base]
    for p in parameters:
        size = int(np.prod(p.shape, dtype=int))
        for k in range(size):
            e = np.zeros(size)
            e[k] = 1.0
            vals = dict(zeros)
            vals[p.id] = e.reshape(p.shape, order="F")
            for j, block in enumerate(evaluate(vals)):
                cols[j].append(sp.csc_matrix((block - base[j]).reshape(-1, 1)))
    return [(b, sp.csr_matrix(sp.hstack(c)) if c else sp.csr_matrix((b.size, 0)))
            for b, c in zip(base, cols, strict=True)]


def _tensor_blocks(prog: Any, parameters: list[Any]) -> list[Block] | None:
    """The affine map read from cvxpy's parameter tensors (``matrix_data``: one row per entry
    of the column-major data matrix, one column per scalar parameter, the last column the
    constant); one sparse gather instead of K + 1 calls. Checked against probing in the tests."""
    K = int(prog.total_param_size)
    order = np.concatenate([int(prog.param_id_to_col[p.id]) + np.arange(int(np.prod(
        p.shape, dtype=int))) for p in parameters]) if parameters else np.zeros(0, int)
    if order.size != K:
        return None
    n = int(prog.x.size)

    def split(T: Any, R: int, C: int) -> Block:
        T = sp.csc_matrix(T)
        if T.shape != (R * C, K + 1):
            raise ValueError("unexpected tensor shape")
        rows = (np.arange(R)[:, None] + R * np.arange(C)[None, :]).reshape(-1)  # F -> C
        T = sp.csr_matrix(T)[rows]
        return (np.asarray(T[:, K].toarray()).reshape(-1), sp.csr_matrix(T[:, order]))

    P = split(prog.reduced_P.matrix_data, n, n)
    qd = split(prog.q, n + 1, 1)
    m_all = prog.reduced_A.matrix_data.shape[0] // (n + 1)
    Ab = split(prog.reduced_A.matrix_data, m_all, n + 1)
    idx = np.arange(m_all * (n + 1)).reshape(m_all, n + 1)
    AF = (Ab[0][idx[:, :n].reshape(-1)], Ab[1][idx[:, :n].reshape(-1)])
    bg = (Ab[0][idx[:, n]], Ab[1][idx[:, n]])
    return [P, (qd[0][:n], qd[1][:n]), AF, bg]


def _apply(prog: Any, values: dict[int, np.ndarray]) -> tuple[Any, ...]:
    """cvxpy's ``apply_parameters`` returning (P, q, d, AF, bg) in every supported version:
    older cvxpy (1.4.0 and 1.7.5 tested) hands OSQP a ``ParamQuadProg`` whose
    ``apply_parameters`` has no ``quad_obj`` and always returns P; newer versions (1.9.3) a
    ``ParamConeProg`` that returns P only with ``quad_obj=True``."""
    import inspect

    kwargs: dict[str, Any] = {"keep_zeros": True}
    if "quad_obj" in inspect.signature(prog.apply_parameters).parameters:
        kwargs["quad_obj"] = True
    out = prog.apply_parameters(values, **kwargs)
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
