"""Squared volume sampling (SVS): the paper's theoretical proxy for the mini-batch.

A batch ``S`` of ``k`` rows of the Jacobian ``J`` (``n x p``) is drawn with probability

    P(S) proportional to det(J_S J_S^T + lambda I_k)

(``lambda = 0``: the squared k-volume of the rows, classical volume sampling). This is a k-DPP
with L-ensemble kernel ``J J^T + lambda I``. Under it the expected *coupled* SNG direction is a
preconditioned gradient step, ``E[d] = P J^T r`` with ``P = V diag(pi) V^T`` (``V`` the right
singular vectors of ``J``) and

* ``lambda = 0``: ``pi_i = e_{k-1}(sigma^2_{-i}) / e_k(sigma^2)``
* ``lambda > 0``: ``pi_i = sum_{j<k} lambda^{k-1-j} C(n-1-j, k-1-j) e_j(sigma^2_{-i})
  / sum_{j<=k} lambda^{k-j} C(n-j, k-j) e_j(sigma^2)``

where ``e_j`` is the elementary symmetric polynomial and ``sigma^2_{-i}`` leaves out the i-th
squared singular value. The expected projection is ``E[Pi_S] = V diag(sigma_i^2 pi_i) V^T`` and
the sketch-and-project rate constant is its smallest positive eigenvalue. The damped formula is a
reconstruction (see README), checked here by exhaustive enumeration in the tests.
"""

from __future__ import annotations

import itertools
import math

import torch

from icml_sng.sketch import check_damping, projection_matrix, sketch_direction


def elementary_symmetric(x: torch.Tensor, k: int) -> torch.Tensor:
    """``[e_0(x), ..., e_k(x)]`` for the last dimension of ``x`` (batched over leading dims)."""
    x = torch.as_tensor(x)
    e = torch.zeros(*x.shape[:-1], k + 1, dtype=x.dtype, device=x.device)
    e[..., 0] = 1.0
    for m in range(x.shape[-1]):
        xm = x[..., m:m + 1]
        e = torch.cat([e[..., :1], e[..., 1:] + xm * e[..., :-1]], dim=-1)
    return e


def _check_k(n: int, k: int) -> None:
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"batch size k must be a positive integer, got {k!r}")
    if k > n:
        raise ValueError(f"batch size k={k} is larger than the number of residuals n={n}: "
                         f"use k <= {n}")


def svs_weights(J: torch.Tensor, k: int, damping: float = 0.0
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(V, sigma, pi)`` of the closed form: ``V`` (``p x p``) right singular vectors of
    ``J`` as columns, ``sigma`` (length ``p``, zero-padded) and the weights ``pi``."""
    if J.ndim != 2:
        raise ValueError(f"J must be a matrix (n, p), got shape {tuple(J.shape)}")
    damping = check_damping(damping)
    n, p = J.shape
    _check_k(n, k)
    Jd = J.to(torch.float64)
    _, s, Vh = torch.linalg.svd(Jd, full_matrices=True)
    sigma = torch.zeros(p, dtype=torch.float64, device=J.device)
    sigma[: s.shape[0]] = s
    s2 = sigma**2
    scale = s2.max().clamp_min(1e-300) if damping == 0 else s2.max().clamp_min(damping)
    x = s2 / scale  # normalised for a stable recursion; pi scales back by 1/scale
    lam = damping / scale
    e_all = elementary_symmetric(x, k)
    minus = x.expand(p, p).clone()
    minus.fill_diagonal_(0.0)  # row i: the values without the i-th one
    e_minus = elementary_symmetric(minus, k)  # (p, k+1)
    if damping == 0:
        if e_all[k] <= 0:
            raise ValueError(f"J has rank < k={k}: volume sampling needs rank(J) >= k; "
                             "use damping > 0 or a smaller batch")
        pi = e_minus[:, k - 1] / e_all[k]
    else:
        num = sum(lam ** (k - 1 - j) * math.comb(n - 1 - j, k - 1 - j) * e_minus[:, j]
                  for j in range(k))
        den = sum(lam ** (k - j) * math.comb(n - j, k - j) * e_all[j] for j in range(k + 1))
        pi = num / den
    return Vh.T, sigma, (pi / scale).to(J.dtype)


def svs_preconditioner(J: torch.Tensor, k: int, damping: float = 0.0) -> torch.Tensor:
    """The analytic ``P`` with ``E_SVS[d] = P J^T r`` for the SNG direction ``d`` (``p x p``)."""
    V, _, pi = svs_weights(J, k, damping)
    V = V.to(J.dtype)
    return V @ torch.diag(pi) @ V.T


def svs_expected_projection(J: torch.Tensor, k: int, damping: float = 0.0) -> torch.Tensor:
    """``E_SVS[Pi_S] = V diag(sigma^2 pi) V^T``; its trace is ``k`` when ``damping = 0``."""
    V, sigma, pi = svs_weights(J, k, damping)
    V = V.to(J.dtype)
    return V @ torch.diag(sigma.to(J.dtype) ** 2 * pi) @ V.T


def svs_rate(J: torch.Tensor, k: int, damping: float = 0.0, rtol: float = 1e-10) -> float:
    """``alpha = lambda_min^+(E[Pi_S])`` (over directions with ``sigma > rtol * sigma_max``):
    the sketch-and-project contraction ``E||x_+ - x*||^2 <= (1 - alpha) ||x - x*||^2``
    for undamped steps with step size 1, on the row space of ``J``."""
    _, sigma, pi = svs_weights(J, k, damping)
    keep = sigma > rtol * sigma.max()
    return float((sigma[keep].to(pi.dtype) ** 2 * pi[keep]).min())


def svs_enumerate(J: torch.Tensor, k: int, damping: float = 0.0, max_subsets: int = 200_000
                  ) -> tuple[list[tuple[int, ...]], torch.Tensor]:
    """All ``k``-subsets of the rows and their exact SVS probabilities (tiny problems only)."""
    damping = check_damping(damping)
    n = J.shape[0]
    _check_k(n, k)
    if math.comb(n, k) > max_subsets:
        raise ValueError(f"C({n}, {k}) = {math.comb(n, k)} subsets is too many to enumerate "
                         f"(max_subsets={max_subsets}); use sample_svs for Monte Carlo")
    subsets = list(itertools.combinations(range(n), k))
    eye = torch.eye(k, dtype=J.dtype, device=J.device)
    w = torch.stack([torch.linalg.det(J[list(S)] @ J[list(S)].T + damping * eye)
                     for S in subsets]).clamp_min(0)
    if not w.sum() > 0:
        raise ValueError("every subset has zero volume: rank(J) < k; use damping > 0")
    return subsets, w / w.sum()


def svs_expectations_exact(J: torch.Tensor, r: torch.Tensor, k: int, damping: float = 0.0
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(E[d], E[Pi_S])`` under SVS by exhaustive enumeration (the ground truth the closed
    form is tested against)."""
    subsets, probs = svs_enumerate(J, k, damping)
    p = J.shape[1]
    Ed = torch.zeros(p, dtype=J.dtype, device=J.device)
    EP = torch.zeros(p, p, dtype=J.dtype, device=J.device)
    for S, w in zip(subsets, probs):
        idx = list(S)
        Ed += w * sketch_direction(J[idx], r[idx], damping)
        EP += w * projection_matrix(J[idx], damping)
    return Ed, EP


def _esp_table(evals: torch.Tensor, k: int) -> tuple[list[float], list[list[float]]]:
    """Normalised eigenvalues and ``E[l][m] = e_l(lam_1..lam_m)`` in plain floats (small-op
    overhead of torch dominates at these sizes)."""
    N = evals.shape[0]
    lam = (evals / evals.max()).to(torch.float64).cpu().tolist()
    E = [[1.0] * (N + 1)] + [[0.0] * (N + 1) for _ in range(k)]
    for m in range(1, N + 1):
        lm = lam[m - 1]
        for j in range(min(k, m), 0, -1):
            E[j][m] = E[j][m - 1] + lm * E[j - 1][m - 1]
    return lam, E


def _kdpp_select_eigen(table: tuple[list[float], list[list[float]]], k: int,
                       generator: torch.Generator | None) -> list[int]:
    """Step 1 of the exact k-DPP sampler (Kulesza & Taskar, Alg. 8): choose k eigenvectors."""
    lam, E = table
    N = len(lam)
    chosen, left = [], k
    u = torch.rand(N, generator=generator, dtype=torch.float64).tolist()
    for m in range(N, 0, -1):
        if left == 0:
            break
        if E[left][m] <= 0:
            raise ValueError(f"the kernel has rank < k={k}: use damping > 0 or a smaller batch")
        if u[m - 1] < lam[m - 1] * E[left - 1][m - 1] / E[left][m]:
            chosen.append(m - 1)
            left -= 1
    return chosen


def _projection_dpp(V: torch.Tensor, generator: torch.Generator | None) -> list[int]:
    """Step 2: sample from the projection DPP spanned by the orthonormal columns of ``V``."""
    V = V.clone()
    out: list[int] = []
    while V.shape[1] > 0:
        probs = (V**2).sum(1).clamp_min(0)
        probs[out] = 0.0
        i = int(torch.multinomial((probs / probs.sum()).cpu(), 1, generator=generator))
        out.append(i)
        j = int(V[i].abs().argmax())
        col = V[:, j]
        V = V - torch.outer(col / col[i], V[i])
        V = torch.cat([V[:, :j], V[:, j + 1:]], dim=1)
        if V.shape[1] > 0:
            V, _ = torch.linalg.qr(V)
    return sorted(out)


def svs_nu_exact(J: torch.Tensor, k: int, damping: float = 0.0) -> float:
    """The accelerated sketch-and-project constant ``nu``: the smallest ``nu`` with
    ``E[Pi E[Pi]^+ Pi] <= nu E[Pi]`` under SVS, by exhaustive enumeration (tiny problems)."""
    subsets, probs = svs_enumerate(J, k, damping)
    EP = svs_expected_projection(J, k, damping).to(torch.float64)
    ev, V = torch.linalg.eigh(EP)
    keep = ev > ev.max() * 1e-12
    EP_pinv = V[:, keep] @ torch.diag(1.0 / ev[keep]) @ V[:, keep].T
    half = V[:, keep] @ torch.diag(ev[keep] ** -0.5) @ V[:, keep].T
    Jd = J.to(torch.float64)
    M = torch.zeros_like(EP)
    for S, w in zip(subsets, probs):
        Pi = projection_matrix(Jd[list(S)], damping)
        M += w * Pi @ EP_pinv @ Pi
    return float(torch.linalg.eigvalsh(half @ M @ half).max())


def _svs_kernel_eig(J: torch.Tensor, damping: float) -> tuple[torch.Tensor, torch.Tensor]:
    Jd = J.detach().to(torch.float64).cpu()
    n = Jd.shape[0]
    K = Jd @ Jd.T + damping * torch.eye(n, dtype=torch.float64)
    evals, evecs = torch.linalg.eigh(K)
    evals = evals.clamp_min(0)
    evals = torch.where(evals > evals.max() * n * 1e-14, evals, torch.zeros_like(evals))
    return evals, evecs


def sample_svs(J: torch.Tensor, k: int, damping: float = 0.0,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one batch of ``k`` row indices from the (damped) squared volume distribution.

    Exact k-DPP sampling with kernel ``J J^T + damping I``: an ``n x n`` eigendecomposition,
    ``O(n^3)`` per draw, fine for ``n`` up to a few thousand. Returns a sorted LongTensor.
    """
    return sample_svs_many(J, k, 1, damping, generator)[0]


def sample_svs_many(J: torch.Tensor, k: int, num: int, damping: float = 0.0,
                    generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """``num`` independent SVS batches for the same ``J`` (one eigendecomposition shared)."""
    damping = check_damping(damping)
    n = J.shape[0]
    _check_k(n, k)
    evals, evecs = _svs_kernel_eig(J, damping)
    table = _esp_table(evals, k)
    out = []
    for _ in range(num):
        chosen = _kdpp_select_eigen(table, k, generator)
        idx = _projection_dpp(evecs[:, chosen], generator)
        out.append(torch.tensor(idx, dtype=torch.long, device=J.device))
    return out
