"""The paper's backward: implicit differentiation of the smoothed exact-penalty problem,
evaluated at the solver's solution (dXPP).

Exact ℓ1 penalty  P(x) = f(x) + ρ_I Σᵢ max(0, Gᵢx − hᵢ) + ρ_E Σⱼ |Aⱼx − bⱼ|, with every kink
smoothed by a softplus of width β. Stationarity ∇ₓP = 0 at x* gives, by the implicit function
theorem, one SPD n×n system

    H = Q + G_𝒜ᵀ diag(w_I) G_𝒜 + Aᵀ diag(w_E) A + ridge·I,
    w_I,i = (ρ_I/β) σ'(zᵢ),  zᵢ = (Gᵢx* − hᵢ)/β,   i ∈ 𝒜 = {hᵢ − Gᵢx* < active_tol}
    w_E,j = (ρ_E/β)(σ'(zⱼ) + σ'(−zⱼ)),             zⱼ = (Aⱼx* − bⱼ)/β

with ρ_I = c‖ν*‖₁, ρ_E = c‖μ*‖₁ (c = ``penalty_coeff``). The duals are the smooth functions
νᵢ = ρ_I σ(zᵢ), μⱼ = ρ_E(σ(zⱼ) − σ(−zⱼ)) of (x, G, h, A, b), so upstream gradients on them enter
both the right-hand side and, directly, the gradients of G, h, A, b:

    H v = ḡₓ + G_𝒜ᵀ(w_I ⊙ ḡ_ν) + Aᵀ(w_E ⊙ ḡ_μ),
    r = w_I ⊙ (G_𝒜 v − ḡ_ν),  s = w_E ⊙ (A v − ḡ_μ)

and :func:`icml_dxpp.gradients.assemble_grads` turns (v, r, s) into ∂ℓ/∂(Q, q, G, h, A, b);
the multiplier in ∂G is the solver's exact ν* (as in the official code).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from icml_dxpp.config import PenaltyOptions
from icml_dxpp.gradients import assemble_grads
from icml_dxpp.linsolve import PenaltySystem, solve_system
from icml_dxpp.qp import QPProblem

__all__ = ["PenaltyOptions", "penalty_weights", "dxpp_backward"]


def _dsigmoid(z: np.ndarray) -> np.ndarray:
    s = 0.5 * (1.0 + np.tanh(0.5 * z))  # overflow-free σ(z)
    return s * (1.0 - s)


def _row_sq_mean(M: Any) -> float:
    if M.shape[0] == 0:
        return 0.0
    sq = M.multiply(M).sum(axis=1) if sp.issparse(M) else np.square(M).sum(axis=1)
    return float(np.mean(np.asarray(sq)))


def _q_scale(Q: Any) -> float:
    d = Q.diagonal() if sp.issparse(Q) else np.diagonal(Q)
    return float(np.max(np.abs(d), initial=0.0))


def block_rhos(s_i: float, s_e: float, t_i: float, t_e: float, q_scale: float,
               row_sq_i: float, row_sq_e: float, opts: PenaltyOptions
               ) -> tuple[float, float, bool, bool]:
    """ρ_I, ρ_E from the blocks' dual norms s = ‖dual‖₁ (the paper: ρ = c·max(s, rho_min)),
    with the zero-dual guard (ours); t = ‖dual‖∞.

    A block's *dual scale* is S = max(the other block's ‖dual‖∞, max|Qᵢᵢ| / mean‖row‖²): the
    first is the size one multiplier has in this problem, the second the multiplier that
    makes the penalty's curvature ρ‖row‖²/β comparable to c/β times Q's, which is what keeps
    x on the block's rows in the backward (1 when both are 0). When s < ``zero_dual_guard``·S
    (duals exactly zero, or a solver's round-off of zero), ρ = c·S; otherwise the paper's ρ.
    Returns ``(rho_i, rho_e, guarded_i, guarded_e)``.
    """
    c = opts.penalty_coeff
    out, flags = [], []
    for s, other, row_sq in ((s_i, t_e, row_sq_i), (s_e, t_i, row_sq_e)):
        rho, guarded = c * max(s, opts.rho_min), False
        if opts.zero_dual_guard is not None and row_sq > 0:
            scale = max(other, q_scale / row_sq)
            scale = scale if scale > 0 else 1.0
            if s < opts.zero_dual_guard * scale and c * scale > rho:
                rho, guarded = c * scale, True
        out.append(rho)
        flags.append(guarded)
    return out[0], out[1], flags[0], flags[1]


def penalty_weights(prob: QPProblem, x: np.ndarray, nu: np.ndarray, mu: np.ndarray,
                    opts: PenaltyOptions, info: dict | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Active set 𝒜 and the smoothed-penalty curvatures w_I (on 𝒜) and w_E.

    ``info`` (optional dict) receives ``rho_guard``: the blocks whose ρ the zero-dual guard
    set ("ineq", "eq")."""
    active = np.flatnonzero(prob.slack(x) < opts.active_tol)
    rho_i, rho_e, g_i, g_e = block_rhos(
        float(np.abs(nu).sum()), float(np.abs(mu).sum()), float(np.abs(nu).max(initial=0.0)),
        float(np.abs(mu).max(initial=0.0)), _q_scale(prob.Q),
        _row_sq_mean(prob.G[active]), _row_sq_mean(prob.A), opts)
    if info is not None:
        info["rho_guard"] = tuple(k for k, f in (("ineq", g_i), ("eq", g_e)) if f)
    z_i = (prob.G[active] @ x - prob.h[active]) / opts.beta
    z_e = (prob.A @ x - prob.b) / opts.beta
    w_i = rho_i / opts.beta * _dsigmoid(np.asarray(z_i).reshape(-1))
    w_e = 2.0 * rho_e / opts.beta * _dsigmoid(np.asarray(z_e).reshape(-1))  # σ' is even
    return active, w_i, w_e


def dxpp_backward(prob: QPProblem, x: np.ndarray, nu: np.ndarray, mu: np.ndarray,
                  grad_x: np.ndarray | None, grad_nu: np.ndarray | None = None,
                  grad_mu: np.ndarray | None = None, opts: PenaltyOptions | None = None
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """dXPP gradients of ℓ w.r.t. (Q, q, G, h, A, b) given ∂ℓ/∂x*, ∂ℓ/∂ν*, ∂ℓ/∂μ*.

    Returns ``(grads, info)``; ``info`` says which linear solver ran and the active-set size.
    """
    opts = opts or PenaltyOptions()
    n = prob.n
    gx = np.zeros(n) if grad_x is None else np.asarray(grad_x, dtype=np.float64)
    guard: dict = {}
    active, w_i, w_e = penalty_weights(prob, x, nu, mu, opts, guard)
    GA = prob.G[active]
    gnu_a = np.zeros(active.size) if grad_nu is None else \
        np.asarray(grad_nu, dtype=np.float64)[active]
    gmu = np.zeros(prob.p) if grad_mu is None else np.asarray(grad_mu, dtype=np.float64)
    system = PenaltySystem(prob.Q, GA, w_i, prob.A, w_e, opts.ridge)
    # The dual gradients enter as G_𝒜ᵀW_I ḡ_ν + AᵀW_E ḡ_μ, of size ~ρ/β ≫ 1; solved as they
    # stand, r = W_I(G_𝒜v − ḡ_ν) cancels catastrophically (percent errors with CG or the
    # Woodbury path). Shift by y with G_𝒜y = ḡ_ν, Ay = ḡ_μ: then H(v − y) has an O(1)
    # right-hand side and r, s need no cancellation.
    y = _dual_shift(GA, prob.A, gnu_a, gmu)
    d_i = np.asarray(GA @ y).reshape(-1) - gnu_a if active.size else np.zeros(0)
    d_e = np.asarray(prob.A @ y).reshape(-1) - gmu if prob.p else np.zeros(0)
    g = gx - np.asarray(prob.Q @ y).reshape(-1) - opts.ridge * y
    if active.size:
        g = g - np.asarray(GA.T @ (w_i * d_i)).reshape(-1)
    if prob.p:
        g = g - np.asarray(prob.A.T @ (w_e * d_e)).reshape(-1)
    u, info = solve_system(system, g, opts.linear_solver, opts.cg_tol, opts.cg_maxiter,
                           opts.cg_min_n)
    v = u + y
    r = np.zeros(prob.m)
    if active.size:
        r[active] = w_i * (np.asarray(GA @ u).reshape(-1) + d_i)
    Au = info.pop("Av", None)
    if Au is None and prob.p:
        Au = np.asarray(prob.A @ u).reshape(-1)
    s = w_e * (Au + d_e) if prob.p else np.zeros(0)
    nu_active = np.zeros(prob.m)
    nu_active[active] = nu[active]  # inactive rows get exactly zero gradient
    grads = assemble_grads(prob, x, nu_active, mu, v, r, s)
    info.update(active=int(active.size), **guard)
    return grads, info


def _dual_shift(GA: Any, A: Any, gnu_a: np.ndarray, gmu: np.ndarray) -> np.ndarray:
    """Least-norm y with G_𝒜 y = ḡ_ν,𝒜 and A y = ḡ_μ (least squares where LICQ fails);
    zero when both upstream dual gradients vanish (the common case costs nothing)."""
    n = GA.shape[1]
    c = np.concatenate([gnu_a, gmu])
    if not np.any(c):
        return np.zeros(n)
    if sp.issparse(GA) or sp.issparse(A):
        from scipy.sparse.linalg import lsqr, splu

        C = sp.vstack([sp.csr_matrix(GA), sp.csr_matrix(A)]).tocsr()
        try:  # y = Cᵀ(CCᵀ)⁻¹c, plus one refinement step
            lu = splu(sp.csc_matrix(C @ C.T), permc_spec="MMD_AT_PLUS_A")
            y = C.T @ lu.solve(c)
            y = y + C.T @ lu.solve(c - C @ y)
            if np.all(np.isfinite(y)):
                return np.asarray(y).reshape(-1)
        except RuntimeError:  # CCᵀ singular (LICQ fails)
            pass
        return lsqr(C, c, atol=1e-14, btol=1e-14, iter_lim=10 * n + 100)[0]
    C = np.vstack([np.asarray(GA), np.asarray(A)])
    return np.linalg.lstsq(C, c, rcond=None)[0]


def dxpp_backward_batched(Q: Any, G: Any, h: Any, A: Any, b: Any, x: Any, nu: Any, mu: Any,
                          grad_x: Any, grad_nu: Any, grad_mu: Any,
                          opts: PenaltyOptions | None = None) -> dict[str, Any]:
    """The same backward for a batch of dense problems as torch tensors, on their device.

    Shapes: Q (B, n, n), G (B, m, n), h (B, m), A (B, p, n), b (B, p), x (B, n), nu (B, m),
    mu (B, p) and the upstream gradients like x, nu, mu (m or p may be 0). Inactive rows get
    w_I = 0, so every problem of the batch shares one shape and H is factored by one batched
    Cholesky (LU where Cholesky fails). Computes in float64; returns float64 gradients.
    """
    import torch

    opts = opts or PenaltyOptions()
    f64 = torch.float64
    Q, G, h, A, b, x, nu, mu = (t.to(f64) for t in (Q, G, h, A, b, x, nu, mu))
    gx, gnu, gmu = (t.to(f64) for t in (grad_x, grad_nu, grad_mu))
    B, n = x.shape
    Gx = (G @ x.unsqueeze(-1)).squeeze(-1)
    active = (h - Gx) < opts.active_tol
    s_i, s_e = nu.abs().sum(-1), mu.abs().sum(-1)
    zeros = torch.zeros(B, dtype=f64, device=x.device)
    q_scale = Q.diagonal(dim1=-2, dim2=-1).abs().amax(-1) if n else zeros
    row_i = (G.square().sum(-1) * active).sum(-1) / active.sum(-1).clamp_min(1)
    row_e = A.square().sum(-1).mean(-1) if A.shape[-2] else zeros
    c = opts.penalty_coeff

    def rho(s: torch.Tensor, other: torch.Tensor, row_sq: torch.Tensor) -> torch.Tensor:
        paper = c * s.clamp_min(opts.rho_min)  # vectorised block_rhos
        if opts.zero_dual_guard is None:
            return paper
        has = row_sq > 0
        scale = torch.maximum(other, q_scale / torch.where(has, row_sq, torch.ones_like(row_sq)))
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        guard = has & (s < opts.zero_dual_guard * scale) & (c * scale > paper)
        return torch.where(guard, c * scale, paper)

    t_i = nu.abs().amax(-1) if nu.shape[-1] else torch.zeros(B, dtype=f64, device=x.device)
    t_e = mu.abs().amax(-1) if mu.shape[-1] else torch.zeros(B, dtype=f64, device=x.device)
    rho_i, rho_e = rho(s_i, t_e, row_i), rho(s_e, t_i, row_e)

    def dsig(z: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(z)
        return s * (1 - s)

    w_i = rho_i[:, None] / opts.beta * dsig((Gx - h) / opts.beta) * active
    Ax = (A @ x.unsqueeze(-1)).squeeze(-1)
    w_e = 2.0 * rho_e[:, None] / opts.beta * dsig((Ax - b) / opts.beta)
    gnu = gnu * active
    H = Q + G.transpose(-1, -2) @ (w_i.unsqueeze(-1) * G) \
        + A.transpose(-1, -2) @ (w_e.unsqueeze(-1) * A)
    H = H + opts.ridge * torch.eye(n, dtype=f64, device=H.device)
    rhs = gx + (G.transpose(-1, -2) @ (w_i * gnu).unsqueeze(-1)).squeeze(-1) \
        + (A.transpose(-1, -2) @ (w_e * gmu).unsqueeze(-1)).squeeze(-1)
    L, info = torch.linalg.cholesky_ex(H)
    if bool((info == 0).all()):
        v = torch.cholesky_solve(rhs.unsqueeze(-1), L).squeeze(-1)
    else:
        v = torch.linalg.solve(H, rhs)
    r = w_i * ((G @ v.unsqueeze(-1)).squeeze(-1) - gnu)
    s = w_e * ((A @ v.unsqueeze(-1)).squeeze(-1) - gmu)
    nu_a = nu * active
    dQ = -0.5 * (v.unsqueeze(-1) * x.unsqueeze(-2) + x.unsqueeze(-1) * v.unsqueeze(-2))
    dG = -(nu_a.unsqueeze(-1) * v.unsqueeze(-2) + r.unsqueeze(-1) * x.unsqueeze(-2))
    dA = -(mu.unsqueeze(-1) * v.unsqueeze(-2) + s.unsqueeze(-1) * x.unsqueeze(-2))
    return {"Q": dQ, "q": -v, "G": dG, "h": r, "A": dA, "b": s}
