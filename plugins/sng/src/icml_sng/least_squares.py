"""Linear least squares with controllable spectral decay: the paper's model problem.

``A = U diag(sigma) V^T`` with ``sigma_i = i^{-decay}`` (``i = 1..p``), random orthogonal ``U, V``,
a consistent right-hand side ``b = A x*``. The residual is ``r(x) = A x - b``; SNG on it is
regularised block Kaczmarz.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LeastSquaresProblem:
    A: torch.Tensor
    b: torch.Tensor
    x_star: torch.Tensor

    @property
    def n(self) -> int:
        return self.A.shape[0]

    def residual_fn(self, x: torch.Tensor):  # noqa: ANN201
        """``idx -> A[idx] @ x - b[idx]`` for a parameter tensor ``x`` (for the optimizers)."""
        return lambda idx: self.A[idx] @ x - self.b[idx]

    def jacobian_fn(self, x: torch.Tensor):  # noqa: ANN201
        """``idx -> (r_idx, A[idx])``: the exact Jacobian, no autograd."""
        return lambda idx: (self.A[idx] @ x.detach() - self.b[idx], self.A[idx])

    def relative_residual(self, x: torch.Tensor) -> float:
        return float((self.A @ x.detach() - self.b).norm() / self.b.norm())

    def relative_error(self, x: torch.Tensor) -> float:
        return float((x.detach() - self.x_star).norm() / self.x_star.norm())


def make_least_squares(n: int = 500, p: int = 100, decay: float = 1.0, seed: int = 0,
                       dtype: torch.dtype = torch.float64,
                       device: str | torch.device = "cpu") -> LeastSquaresProblem:
    """A consistent ``n x p`` problem with singular values ``i^{-decay}``."""
    if n < 1 or p < 1:
        raise ValueError(f"n and p must be positive, got n={n}, p={p}")
    if decay < 0:
        raise ValueError(f"decay must be >= 0, got {decay}")
    g = torch.Generator().manual_seed(seed)
    m = min(n, p)
    U, _ = torch.linalg.qr(torch.randn(n, m, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(p, m, generator=g, dtype=torch.float64))
    sigma = torch.arange(1, m + 1, dtype=torch.float64) ** (-float(decay))
    A = U @ torch.diag(sigma) @ V.T
    x_star = V @ torch.randn(m, generator=g, dtype=torch.float64)  # in the row space
    b = A @ x_star
    return LeastSquaresProblem(A.to(dtype=dtype, device=device), b.to(dtype=dtype, device=device),
                               x_star.to(dtype=dtype, device=device))
