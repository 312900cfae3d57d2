"""Problem generators for the benchmark families (NumPy/SciPy; seeded).

* :func:`random_qp` -- dense, well-conditioned and strictly complementary by construction:
  x*, ν*, μ* are drawn first and q, h, b are set so they are the exact KKT point.
* :func:`dqp_random_qp` -- the dQP paper's dense generator (ill-conditioned beyond n ≈ 300;
  kept for timing, not for accuracy tests).
* :func:`simplex_projection` -- sparse projection onto the probability simplex, with the closed
  forms :func:`simplex_solution` and :func:`simplex_vjp`.
* :func:`chain_projection` -- N points in ℝᵈ on a cycle, smoothed and with |xᵢ − xᵢ₊₁| ≤ 1 per
  coordinate (sparse).
* :func:`portfolio_qp` -- one multi-period portfolio QP (T periods, k assets, long-only, fully
  invested, quadratic trading cost) in the form used by the end-to-end benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from icml_dxpp.config import FAMILIES
from icml_dxpp.qp import QPProblem, make_problem

__all__ = ["KnownQP", "random_qp", "dqp_random_qp", "simplex_projection", "simplex_solution",
           "simplex_vjp", "chain_projection", "portfolio_qp", "FAMILIES", "make_family"]


@dataclass
class KnownQP:
    """A problem with its exact solution and duals."""

    problem: QPProblem
    x: np.ndarray
    ineq_dual: np.ndarray
    eq_dual: np.ndarray


def random_qp(n: int, m: int | None = None, p: int | None = None, seed: int = 0,
              active_frac: float = 0.5, margin: float = 0.5) -> KnownQP:
    """Dense QP with a known, strictly complementary solution.

    Q = MMᵀ/(2n) + 1e-3·I with M ∈ ℝ^{n×2n} (eigenvalues in about [0.09, 2.9]); G, A Gaussian
    scaled by 1/√n; m = n and p = n // 4 by default. A fraction ``active_frac`` of the
    inequalities is active with ν ∈ [margin, 1 + margin], the rest have slack in the same range.
    """
    m = n if m is None else m
    p = n // 4 if p is None else p
    if p >= n:
        raise ValueError(f"random_qp needs p < n for a unique solution, got p={p}, n={n}")
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n, 2 * n))
    Q = M @ M.T / (2 * n) + 1e-3 * np.eye(n)
    G = rng.standard_normal((m, n)) / np.sqrt(n)
    A = rng.standard_normal((p, n)) / np.sqrt(n)
    x = rng.standard_normal(n)
    k = min(int(round(active_frac * m)), n - p - 1) if m else 0
    k = max(k, 0)
    active = rng.permutation(m)[:k]
    nu = np.zeros(m)
    nu[active] = margin + rng.random(k)
    slack = margin + rng.random(m)
    slack[active] = 0.0
    mu = rng.standard_normal(p)
    h = G @ x + slack
    b = A @ x
    q = -(Q @ x + G.T @ nu + A.T @ mu)
    prob = make_problem(Q, q, G if m else None, h if m else None, A if p else None,
                        b if p else None)
    return KnownQP(prob, x, nu, mu)


def dqp_random_qp(n: int, seed: int = 0) -> QPProblem:
    """dQP's dense generator: Q = PPᵀ + 1e-4·I, P, q, G, A ~ U[0,1), h = G·1 + 1, b = A·1,
    m = n, p = ⌈n/2⌉."""
    rng = np.random.default_rng(seed)
    P = rng.random((n, n))
    Q = P @ P.T + 1e-4 * np.eye(n)
    q = rng.random(n)
    G = rng.random((n, n))
    p = int(np.ceil(n / 2))
    A = rng.random((p, n))
    return make_problem(Q, q, G, G.sum(1) + 1.0, A, A.sum(1))


def simplex_projection(n: int, seed: int = 0, sparse: bool = True) -> QPProblem:
    """Project y ~ N(0, 1) onto {x ≥ 0, 1ᵀx = 1}: Q = I, q = −y, G = −I, h = 0, A = 1ᵀ, b = 1."""
    rng = np.random.default_rng(seed)
    y = rng.standard_normal(n)
    if sparse:
        Q, G = sp.identity(n, format="csr"), -sp.identity(n, format="csr")
        A = sp.csr_matrix(np.ones((1, n)))
    else:
        Q, G, A = np.eye(n), -np.eye(n), np.ones((1, n))
    return make_problem(Q, -y, G, np.zeros(n), A, np.ones(1))


def simplex_solution(y: np.ndarray) -> np.ndarray:
    """Euclidean projection of y onto the probability simplex (sort-based closed form)."""
    u = np.sort(y)[::-1]
    css = np.cumsum(u) - 1.0
    k = np.flatnonzero(u - css / np.arange(1, y.size + 1) > 0)[-1]
    tau = css[k] / (k + 1)
    return np.maximum(y - tau, 0.0)


def simplex_vjp(x: np.ndarray, grad_x: np.ndarray) -> np.ndarray:
    """∂ℓ/∂q for the simplex projection (q = −y): −(I_S − 𝟙𝟙ᵀ/|S|)ḡ on the support S."""
    S = x > 0
    out = np.zeros_like(grad_x)
    out[S] = -(grad_x[S] - grad_x[S].mean())
    return out


def chain_projection(d: int, N: int = 100, seed: int = 0) -> QPProblem:
    """N points in ℝᵈ on a cycle: Q = ½I + L₁ᵀL₁ with L₁ = D ⊗ I_d (D the cyclic difference),
    q = −10·N(0, 1), and |xᵢ − xᵢ₊₁| ≤ 1 per coordinate (G = [L₁; −L₁], h = 1). Sparse."""
    rng = np.random.default_rng(seed)
    D = sp.identity(N, format="csr") - sp.csr_matrix(
        (np.ones(N), (np.arange(N), (np.arange(N) + 1) % N)), shape=(N, N))
    L1 = sp.kron(D, sp.identity(d), format="csr")
    n = N * d
    Q = 0.5 * sp.identity(n, format="csr") + (L1.T @ L1).tocsr()
    G = sp.vstack([L1, -L1], format="csr")
    q = -10.0 * rng.standard_normal(n)
    return make_problem(Q, q, G, np.ones(2 * n))


def portfolio_qp(Sigma: np.ndarray, mu_hat: np.ndarray, w0: np.ndarray, gamma: float = 1.0,
                 kappa: float = 1.0) -> QPProblem:
    """Multi-period portfolio: min Σₜ γ/2 wₜᵀΣwₜ − μ̂ₜᵀwₜ + κ/2‖wₜ − wₜ₋₁‖², 1ᵀwₜ = 1, wₜ ≥ 0.

    ``mu_hat`` is (T, k); ``w0`` the holdings before period 1. Variables stack w₁..w_T.
    """
    T, k = mu_hat.shape
    n = T * k
    D = np.eye(T) - np.eye(T, k=-1)  # wₜ − wₜ₋₁ with w₀ moved to q
    Q = gamma * np.kron(np.eye(T), Sigma) + kappa * np.kron(D.T @ D, np.eye(k))
    q = -mu_hat.reshape(-1).copy()
    q[:k] -= kappa * w0
    A = np.kron(np.eye(T), np.ones((1, k)))
    return make_problem(Q, q, -np.eye(n), np.zeros(n), A, np.ones(T))




def make_family(family: str, size: int, seed: int = 0) -> QPProblem:
    """One problem of a benchmark family; ``size`` is n (random, dqp, simplex) or d (chain)."""
    if family == "random":
        return random_qp(size, seed=seed).problem
    if family == "dqp":
        return dqp_random_qp(size, seed=seed)
    if family == "simplex":
        return simplex_projection(size, seed=seed)
    if family == "chain":
        return chain_projection(size, seed=seed)
    raise ValueError(f"unknown problem family {family!r}: use one of {', '.join(FAMILIES)}")
