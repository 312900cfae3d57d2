"""Convolutional smoothing ``f_σ(x) = (f * p_σ)(x) = E_u f(x + σu)``, ``u ~ N(0, I)``: a generic
utility with Stein-identity gradients and Hessians, and the closed form for ``|x|``.

Stein's identities: ``∇f_σ(x) = E[f(x+σu) u]/σ`` and ``∇²f_σ(x) = E[f(x+σu)(uuᵀ − I)]/σ²`` need
only values of ``f``, so they work on non-smooth and non-differentiable functions; the curvature
of ``f_σ`` is the curvature of ``f`` averaged over the kernel (the paper's view of multimodal
training). In 1-D, Gauss–Hermite quadrature replaces Monte Carlo.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch


class Smoothed:
    """``f`` convolved with a Gaussian of width ``sigma`` (see :func:`smooth`).

    ``method``: ``"quadrature"`` (Gauss–Hermite, 1-D), ``"mc"`` (Monte Carlo with
    ``n_samples`` antithetic draws from ``seed``) or ``"auto"`` (quadrature for scalars).
    ``vectorized=True`` when ``f`` maps a batch ``(n, *x.shape)`` to ``n`` values (fast).
    """

    def __init__(self, f: Callable[[torch.Tensor], torch.Tensor], sigma: float, *,
                 n_samples: int = 4096, seed: int = 0, method: str = "auto",
                 antithetic: bool = True, vectorized: bool = False) -> None:
        if not sigma > 0:
            raise ValueError(f"sigma={sigma!r}: the kernel width must be > 0 (sigma=0 is f)")
        if method not in ("auto", "mc", "quadrature"):
            raise ValueError(f"method={method!r}: choose 'auto', 'mc' or 'quadrature'")
        if n_samples < 2:
            raise ValueError(f"n_samples={n_samples}: need at least 2")
        self.f, self.sigma, self.n, self.seed = f, float(sigma), int(n_samples), int(seed)
        self.method, self.antithetic, self.vectorized = method, antithetic, vectorized

    def _nodes(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Kernel samples ``u`` (n, *x.shape) and weights summing to 1."""
        quad = self.method == "quadrature" or (self.method == "auto" and x.numel() == 1)
        if quad:
            if x.numel() != 1:
                raise ValueError("quadrature is 1-D only; use method='mc' for vectors")
            import numpy as np

            t, w = np.polynomial.hermite_e.hermegauss(min(self.n, 180))
            u = torch.as_tensor(t, dtype=torch.float64).reshape(-1, *x.shape)
            wt = torch.as_tensor(w / w.sum(), dtype=torch.float64)
            return u.to(x), wt.to(x)
        g = torch.Generator(device="cpu").manual_seed(self.seed)
        half = self.n // 2 if self.antithetic else self.n
        u = torch.randn(half, *x.shape, generator=g, dtype=torch.float64)
        if self.antithetic:
            u = torch.cat([u, -u])
        return u.to(x), torch.full((u.shape[0],), 1.0 / u.shape[0], dtype=x.dtype,
                                   device=x.device)

    def _values(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        if self.vectorized:  # f maps a batch (n, *x.shape) to n values
            return torch.as_tensor(self.f(x + self.sigma * u)).reshape(u.shape[0]).to(x)
        vals = torch.stack([torch.as_tensor(self.f(x + self.sigma * ui)) for ui in u])
        return vals.reshape(u.shape[0]).to(x)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``f_σ(x)``."""
        x = torch.as_tensor(x, dtype=torch.float64)
        u, w = self._nodes(x)
        return (w * self._values(x, u)).sum()

    def grad(self, x: torch.Tensor) -> torch.Tensor:
        """``∇f_σ(x)`` by Stein's identity (baseline-subtracted)."""
        x = torch.as_tensor(x, dtype=torch.float64)
        u, w = self._nodes(x)
        fv = self._values(x, u)
        fv = fv - (w * fv).sum()
        return torch.einsum("n,n...->...", w * fv, u) / self.sigma

    def hessian(self, x: torch.Tensor) -> torch.Tensor:
        """``∇²f_σ(x)`` (d × d for a d-vector, a scalar in 1-D) by the second Stein identity."""
        x = torch.as_tensor(x, dtype=torch.float64)
        u, w = self._nodes(x)
        fv = self._values(x, u) - torch.as_tensor(self.f(x)).to(x)  # E[uuᵀ − I] = 0
        flat = u.reshape(u.shape[0], -1)
        outer = flat[:, :, None] * flat[:, None, :] - torch.eye(flat.shape[1]).to(flat)
        H = torch.einsum("n,nij->ij", w * fv, outer) / self.sigma ** 2
        return H.reshape(()) if x.numel() == 1 and x.ndim == 0 else H


def smooth(f: Callable[[torch.Tensor], torch.Tensor], sigma: float, **kwargs) -> Smoothed:
    """Gaussian convolution of any function ``f`` (a loss of parameters, a 1-D test function):
    ``smooth(f, σ)(x)``, ``.grad(x)``, ``.hessian(x)``. Keyword args go to :class:`Smoothed`."""
    return Smoothed(f, sigma, **kwargs)


def _phi(z: torch.Tensor) -> torch.Tensor:
    return torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def smoothed_abs(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Closed form of ``E|x + σu|``: ``σ√(2/π) e^{−x²/2σ²} + x(1 − 2Φ(−x/σ))``."""
    x = torch.as_tensor(x, dtype=torch.float64)
    z = x / sigma
    Phi = 0.5 * torch.erfc(z / math.sqrt(2))  # Φ(−z)
    return sigma * math.sqrt(2 / math.pi) * torch.exp(-0.5 * z * z) + x * (1 - 2 * Phi)


def smoothed_abs_curvature(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Second derivative of :func:`smoothed_abs`: ``2φ(x/σ)/σ`` (peak ``√(2/π)/σ`` at 0)."""
    x = torch.as_tensor(x, dtype=torch.float64)
    return 2 * _phi(x / sigma) / sigma
