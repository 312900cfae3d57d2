"""A batched forward for many small dense QPs, in torch (``solver="torch"``; ours, not the
paper's).

    min ½ xᵀQx + qᵀx   s.t.  Gx ≤ h,  Ax = b          (B problems of the same shape)

One call solves the whole batch on the inputs' device, in float64:

1. **Warm start** (when the layer was built with ``warm_start=True`` and has the previous
   call's active sets): the exact KKT solve of step 3 on those sets; problems that verify are
   done and skip the interior point.
2. **Primal-dual interior point** (Mehrotra predictor-corrector, as qpth does): slacks s, duals
   z ≥ 0 and y; each iteration factors the reduced KKT matrices [[Q + GᵀDG, Aᵀ], [A, 0]]
   (D = diag(z/s)) of the whole batch by one batched LU and solves twice (predictor and
   corrector). Converged problems are frozen; it stops when every problem has converged
   (residuals and complementarity ≤ ``tol``, default 1e-8) or after ``max_iter`` iterations.
3. **Batched active-set polish**: on the guessed active set {i : zᵢ > sᵢ} one batched exact KKT
   solve, inactive rows' duals fixed to 0 (a unit row keeps every system the same shape), and
   the same verification as :func:`icml_dxpp.forward.polish` per problem (primal feasible,
   ν ≥ 0, stationary, each to 1e-9 relative; hence optimal).

Problems that do not verify (infeasible, unbounded, degenerate, not converged) are reported in
``ok``; the layer sends them to the per-problem path (:func:`icml_dxpp.forward.solve_qp` with
``solver="auto"``), which raises its usual errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["BatchResult", "solve_batch", "polish_batch", "TORCH_DEFAULT_TOL",
           "TORCH_SOLVER_OPTIONS"]

#: the interior point only has to identify the active set: the polish makes the point exact
TORCH_DEFAULT_TOL = 1e-8
#: keys the torch solver takes in ``solver_options`` (with their defaults)
TORCH_SOLVER_OPTIONS = {"max_iter": 50}


@dataclass
class BatchResult:
    """x (B, n), ν ≥ 0 (B, m), μ (B, p) in float64; ``ok`` (B,) marks verified KKT points;
    ``warm`` (B,) those taken from the warm start; ``active`` (B, m) the active sets;
    ``iterations`` the interior-point iterations run."""

    x: Any
    nu: Any
    mu: Any
    ok: Any
    warm: Any
    active: Any
    iterations: int


# small batched mat-vecs are several times faster as a product and a sum than as bmm on the CPU
_SMALL = 4096


def _mv(M: Any, v: Any) -> Any:
    if M.shape[-1] * M.shape[-2] <= _SMALL:
        return (M * v.unsqueeze(-2)).sum(-1)
    return (M @ v.unsqueeze(-1)).squeeze(-1)


def _mtv(M: Any, v: Any) -> Any:
    if M.shape[-1] * M.shape[-2] <= _SMALL:
        return (M * v.unsqueeze(-1)).sum(-2)
    return (M.transpose(-1, -2) @ v.unsqueeze(-1)).squeeze(-1)


def _chol_solve(L: Any, r: Any) -> Any:
    """(L Lᵀ)⁻¹ r for a batch of vectors (B, k) or matrices (B, k, j)."""
    import torch

    vec = r.dim() == L.dim() - 1
    r = r.unsqueeze(-1) if vec else r
    y = torch.linalg.solve_triangular(L, r, upper=False)
    out = torch.linalg.solve_triangular(L.transpose(-1, -2), y, upper=True)
    return out.squeeze(-1) if vec else out


def polish_batch(Q: Any, q: Any, G: Any, h: Any, A: Any, b: Any, active: Any
                 ) -> tuple[Any, Any, Any, Any]:
    """Exact KKT solve on the given active sets (B, m) for the whole batch, verified per problem
    as :func:`icml_dxpp.forward.polish` verifies. Returns ``(x, nu, mu, ok)``."""
    import torch

    act = active.to(q.dtype)
    # C = [G_𝒜; A] with inactive rows zeroed; the KKT system [[Q, Cᵀ], [C, 0]] is solved by
    # the augmented-Lagrangian form: H = Q + CᵀC (positive definite when the KKT matrix is
    # non-singular), then the Schur complement S = C H⁻¹ Cᵀ + diag(inactive) (inactive rows get
    # a unit diagonal, so their duals are 0); two batched Choleskys, and one step of iterative
    # refinement where the point does not verify
    C = torch.cat([G * act.unsqueeze(-1), A], dim=-2)
    d = torch.cat([h * act, b], dim=-1)
    free = torch.cat([1.0 - act, torch.zeros_like(b)], dim=-1)
    fac = _kkt_factor(Q, C, free)
    x, lam = _kkt_solve(fac, -q, d)
    x, nu, mu, ok = _verify(Q, q, G, h, A, b, act, x, lam, fac[-1])
    if not bool(ok.all()):  # one step of iterative refinement where the check failed
        dx, dlam = _kkt_solve(fac, -q - _mv(Q, x) - _mtv(C, lam), d - _mv(C, x) - free * lam)
        x2, nu2, mu2, ok2 = _verify(Q, q, G, h, A, b, act, x + dx, lam + dlam, fac[-1])
        take = (ok2 & ~ok).unsqueeze(-1)
        x, nu, mu = torch.where(take, x2, x), torch.where(take, nu2, nu), \
            torch.where(take, mu2, mu)
        ok = ok | ok2
    return x, nu.clamp_min(0.0), mu, ok


def _verify(Q: Any, q: Any, G: Any, h: Any, A: Any, b: Any, act: Any, x: Any, lam: Any,
            good: Any) -> tuple[Any, Any, Any, Any]:
    """Split λ into (ν, μ) and check the point as :func:`icml_dxpp.forward.polish` does:
    primal feasible, ν ≥ 0, stationary, each to 1e-9 relative (non-finite points fail)."""
    import torch

    B = q.shape[0]
    m, p = h.shape[-1], b.shape[-1]
    nu, mu = lam[:, :m] * act, lam[:, m:]
    good = good & torch.isfinite(x).all(-1) & torch.isfinite(lam).all(-1)
    x = torch.where(good.unsqueeze(-1), x, torch.zeros_like(x))
    nu = torch.where(good.unsqueeze(-1), nu, torch.zeros_like(nu))
    mu = torch.where(good.unsqueeze(-1), mu, torch.zeros_like(mu))

    def amax(t: Any) -> Any:
        return t.abs().amax(-1) if t.shape[-1] else torch.zeros(B, dtype=q.dtype,
                                                                 device=q.device)

    scale = 1e-9 * (1.0 + amax(h) + amax(b) + amax(nu) + amax(mu))
    ok = good
    if m:
        ok = ok & ((_mv(G, x) - h).amax(-1) <= scale) & (nu.amin(-1) >= -scale)
    if p:
        ok = ok & ((_mv(A, x) - b).abs().amax(-1) <= scale)
    Qx = _mv(Q, x)
    stat = Qx + q + _mtv(G, nu) + _mtv(A, mu)
    ok = ok & (amax(stat) <= 1e-9 * (1.0 + amax(q) + amax(Qx)))
    return x, nu, mu, ok


def _kkt_factor(Q: Any, C: Any, free: Any) -> tuple[Any, ...]:
    """Factor [[Q, Cᵀ], [C, F]] (F = diag(free); a row with free = 1 must be zero in C, its
    multiplier is then decoupled) for the whole batch: H = Q + CᵀC (the augmented-Lagrangian
    form, positive definite whenever the KKT matrix is non-singular and Q is PSD), then
    S = C H⁻¹ Cᵀ + F; two batched Choleskys. Returns (L_H, H⁻¹Cᵀ, L_S, C, F, good)."""
    import torch

    H = Q + C.transpose(-1, -2) @ C
    LH, info = torch.linalg.cholesky_ex(H)
    HiCt = _chol_solve(LH, C.transpose(-1, -2))
    S = C @ HiCt + torch.diag_embed(free)
    LS, info2 = torch.linalg.cholesky_ex(S)
    return LH, HiCt, LS, C, free, (info == 0) & (info2 == 0)


def _kkt_solve(fac: tuple[Any, ...], r1: Any, r2: Any) -> tuple[Any, Any]:
    """Solve [[Q, Cᵀ], [C, F]] [x; λ] = [r1; r2] with :func:`_kkt_factor`'s factors. Adding
    Cᵀ(row 2) to row 1 gives H x + Cᵀλ = r1 + Cᵀr2 (CᵀF = 0), so with w = H⁻¹(r1 + Cᵀr2):
    (C H⁻¹Cᵀ + F) λ = C w − r2 + 2F r2 and x = w − H⁻¹Cᵀ λ."""
    LH, HiCt, LS, C, free, _ = fac
    w = _chol_solve(LH, r1 + _mtv(C, r2))
    if C.shape[-2] == 0:
        return w, r2
    lam = _chol_solve(LS, _mv(C, w) - r2 + 2.0 * free * r2)
    return w - _mv(HiCt, lam), lam


def _direction(fac: tuple[Any, ...], G: Any, d: Any, s: Any, rz: Any, r1: Any,
               r2: Any, rc: Any) -> tuple[Any, Any, Any, Any]:
    """Newton direction (dx, ds, dz, dy) for complementarity right-hand side ``rc``."""
    rcs = rc / s
    dx, dy = _kkt_solve(fac, r1 + _mtv(G, rcs), r2)
    Gdx = _mv(G, dx)
    return dx, -rz - Gdx, d * (Gdx + rz) - rcs, dy


def _max_step(s: Any, z: Any, ds: Any, dz: Any) -> Any:
    """Largest α ≤ 1 keeping s + α ds ≥ 0 and z + α dz ≥ 0, per problem."""
    import torch

    v, dv = torch.cat([s, z], -1), torch.cat([ds, dz], -1)
    ratio = torch.where(dv < 0, -v / dv, torch.ones_like(v))
    return ratio.amin(-1).clamp(max=1.0)


def _interior_point(Q: Any, q: Any, G: Any, h: Any, A: Any, b: Any, tol: float,
                    max_iter: int) -> tuple[Any, Any, Any, Any, Any, int]:
    """Mehrotra predictor-corrector on the batch (m ≥ 1 inequalities). Returns x, s, z, y,
    converged (B,) and the iterations run. A problem whose factorisation fails or whose
    iterate is not finite stops (not converged); converged problems are frozen."""
    import torch

    B, n = q.shape
    m, p = h.shape[-1], b.shape[-1]
    f64, dev = q.dtype, q.device
    Gt, At = G.transpose(-1, -2), A.transpose(-1, -2)
    # constant part of the reduced KKT matrix; the ridge keeps it factorable where Q is singular
    Q0 = Q + At @ A + 1e-12 * torch.eye(n, dtype=f64, device=dev)

    no_free = torch.zeros(B, p, dtype=f64, device=dev)

    def factor(d: Any) -> tuple[Any, ...]:
        LH, info = torch.linalg.cholesky_ex(Q0 + Gt @ (d.unsqueeze(-1) * G))
        if not p:
            return LH, None, None, A, no_free, info == 0
        HiAt = _chol_solve(LH, At)
        LS, info2 = torch.linalg.cholesky_ex(A @ HiAt)
        return LH, HiAt, LS, A, no_free, (info == 0) & (info2 == 0)

    # initial point (as CVXOPT/qpth): least squares with D = I, then s, z shifted inside
    fac = factor(torch.ones(B, m, dtype=f64, device=dev))
    x, y = _kkt_solve(fac, -q + _mtv(G, h), b)
    s = h - _mv(G, x)

    def inside(v: Any) -> Any:  # v + (1 + max(-v)) when some entry is not positive
        lo = -v.amin(-1, keepdim=True)
        return torch.where(lo >= 0, v + 1.0 + lo, v)

    s, z = inside(s), inside(-s)
    scale = torch.stack([1.0 + q.abs().amax(-1), 1.0 + h.abs().amax(-1),
                         1.0 + (b.abs().amax(-1) if p else torch.zeros_like(q[:, 0])),
                         torch.ones_like(q[:, 0])], -1) * tol
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    bad = ~fac[-1]
    it = 0
    while it < max_iter:
        it += 1
        Gx = _mv(G, x)
        rx = _mv(Q, x) + q + _mtv(G, z) + (_mtv(A, y) if p else 0.0)
        rz = Gx + s - h
        ry = _mv(A, x) - b if p else None
        sz = s * z
        mu_ = sz.sum(-1) / m
        res = torch.stack([rx.abs().amax(-1), rz.abs().amax(-1),
                           ry.abs().amax(-1) if p else torch.zeros_like(mu_), mu_], -1)
        bad = bad | torch.isnan(res).any(-1)
        done = done | bad | (res <= scale).all(-1)
        if bool(done.all()):
            break
        d = torch.where(done.unsqueeze(-1), torch.ones_like(s), z / s)  # frozen: a safe D
        fac = factor(d)
        bad = bad | (~fac[-1] & ~done)
        r1 = -rx - _mtv(G, d * rz)
        r2 = -ry if p else y
        dx, ds, dz, dy = _direction(fac, G, d, s, rz, r1, r2, sz)  # predictor (affine)
        a = _max_step(s, z, ds, dz).unsqueeze(-1)
        sigma = (((s + a * ds) * (z + a * dz)).sum(-1) / sz.sum(-1)).clamp(0.0, 1.0) ** 3
        dx, ds, dz, dy = _direction(fac, G, d, s, rz, r1, r2,  # corrector
                                    sz + ds * dz - (sigma * mu_).unsqueeze(-1))
        alpha = torch.where(done, torch.zeros_like(mu_), 0.99 * _max_step(s, z, ds, dz))
        a = alpha.unsqueeze(-1)
        x, s, z = x + a * dx, s + a * ds, z + a * dz
        if p:
            y = y + a * dy
    return x, s, z, y, done & ~bad, it


def solve_batch(Q: Any, q: Any, G: Any, h: Any, A: Any, b: Any, *, tol: float | None = None,
                max_iter: int | None = None, warm_active: Any = None) -> BatchResult:
    """Solve a batch of dense QPs in torch (float64, the inputs' device). ``G`` (B, m, n),
    ``A`` (B, p, n) may have m = 0 or p = 0 rows. ``warm_active`` (B, m) bool: try these active
    sets first (exact and verified). See the module docstring."""
    import torch

    tol = TORCH_DEFAULT_TOL if tol is None else float(tol)
    max_iter = TORCH_SOLVER_OPTIONS["max_iter"] if max_iter is None else int(max_iter)
    f64 = torch.float64
    Q, q, G, h, A, b = (t.to(f64) for t in (Q, q, G, h, A, b))
    B, n = q.shape
    m = h.shape[-1]
    dev = q.device
    x = torch.zeros(B, n, dtype=f64, device=dev)
    nu = torch.zeros(B, m, dtype=f64, device=dev)
    mu = torch.zeros(B, b.shape[-1], dtype=f64, device=dev)
    ok = torch.zeros(B, dtype=torch.bool, device=dev)
    warm = torch.zeros(B, dtype=torch.bool, device=dev)
    if warm_active is not None and tuple(warm_active.shape) == (B, m):
        x, nu, mu, ok = polish_batch(Q, q, G, h, A, b, warm_active.to(dev))
        warm = ok.clone()
        if bool(ok.all()):
            return BatchResult(x, nu, mu, ok, warm, nu > h - _mv(G, x), 0)
    rest = torch.nonzero(~ok).reshape(-1)
    sub = (lambda t: t) if rest.numel() == B else (lambda t: t.index_select(0, rest))
    Qr, qr, Gr, hr, Ar, br = (sub(t) for t in (Q, q, G, h, A, b))
    if m:
        xr, sr, zr, _yr, _conv, iters = _interior_point(Qr, qr, Gr, hr, Ar, br, tol,
                                                              max_iter)
        act = zr > sr
    else:  # equality constraints only: the polish alone is the exact solve
        act, iters = torch.zeros(rest.numel(), 0, dtype=torch.bool, device=dev), 0
    xr, nur, mur, okr = polish_batch(Qr, qr, Gr, hr, Ar, br, act)
    if rest.numel() == B:
        x, nu, mu, ok = xr, nur, mur, okr
    else:
        x, nu, mu, ok = (t.index_copy(0, rest, r) for t, r in
                         ((x, xr), (nu, nur), (mu, mur), (ok, okr)))
    return BatchResult(x, nu, mu, ok, warm, nu > h - _mv(G, x), iters)
