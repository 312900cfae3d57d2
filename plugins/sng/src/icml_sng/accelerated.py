"""Sketch-and-project on linear least squares, plain and accelerated, and SPRING's place in it.

For ``A x = b`` with batches ``S_t`` (rows scaled by ``1/sqrt(k)`` as in the optimizers) the
regularised sketch-and-project step is ``g(y) = A_S^T (A_S A_S^T + lambda I)^{-1}(A_S y - b_S)``.

* :func:`kaczmarz`: ``x_{t+1} = x_t - g(x_t)`` (SNG with ``lr = 1``).
* :func:`nesterov_kaczmarz`: ``y_t = x_t + mu (x_t - x_{t-1})``, ``x_{t+1} = y_t - g(y_t)``.
  SPRING with ``lr = 1`` produces exactly these iterates (``phi_t = x_{t+1} - x_t``).
* :func:`accelerated_sketch_project`: the three-sequence method of Tu et al. (2017) / Gower et
  al. (2018):  ``y = a v + (1-a) x``,  ``x_+ = y - g(y)``,  ``v_+ = b v + (1-b) y - c g(y)``.
  Eliminating ``v`` gives ``y_{t+1} = (a + b - ab - ac) y_t + (1 - a + ac) x_{t+1} - b(1-a) x_t``,
  so whenever ``a + b - ab - ac = 0`` it *is* Nesterov-Kaczmarz with ``mu = b (1 - a)``, i.e.
  SPRING. :func:`spring_parameters` returns such ``(a, b, c)`` for a given ``mu``;
  :func:`theoretical_parameters` gives the ``(a, b, c)`` from the rate constants ``(alpha, nu)``
  and for ``nu = 1`` they satisfy the condition with ``mu = (1 - sqrt(alpha))/(1 + sqrt(alpha))``.
  (This derivation is ours; see the README on what is reconstructed.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from icml_sng.sketch import sketch_direction


def _g(A: torch.Tensor, b: torch.Tensor, y: torch.Tensor, idx: torch.Tensor,
       damping: float) -> torch.Tensor:
    s = 1.0 / math.sqrt(idx.shape[0])
    A_S, b_S = A[idx] * s, b[idx] * s
    return sketch_direction(A_S, A_S @ y - b_S, damping)


def kaczmarz(A: torch.Tensor, b: torch.Tensor, x0: torch.Tensor,
             batches: Iterable[torch.Tensor], damping: float = 0.0) -> list[torch.Tensor]:
    """Regularised block Kaczmarz iterates ``[x_0, x_1, ...]``."""
    xs = [x0.clone()]
    for idx in batches:
        xs.append(xs[-1] - _g(A, b, xs[-1], idx, damping))
    return xs


def nesterov_kaczmarz(A: torch.Tensor, b: torch.Tensor, x0: torch.Tensor,
                      batches: Iterable[torch.Tensor], damping: float = 0.0,
                      momentum: float = 0.0) -> list[torch.Tensor]:
    """Nesterov-extrapolated regularised Kaczmarz iterates ``[x_0, x_1, ...]``."""
    xs = [x0.clone()]
    prev = x0.clone()
    for idx in batches:
        y = xs[-1] + momentum * (xs[-1] - prev)
        prev = xs[-1]
        xs.append(y - _g(A, b, y, idx, damping))
    return xs


def accelerated_sketch_project(A: torch.Tensor, b: torch.Tensor, x0: torch.Tensor,
                               batches: Iterable[torch.Tensor], a: float, b_coef: float,
                               c: float, damping: float = 0.0) -> list[torch.Tensor]:
    """Three-sequence accelerated sketch-and-project iterates ``[x_0, x_1, ...]``
    (``v_0 = x_0``); ``b_coef`` is the method's ``b`` (the right-hand side is ``b``)."""
    x, v = x0.clone(), x0.clone()
    xs = [x.clone()]
    for idx in batches:
        y = a * v + (1 - a) * x
        g = _g(A, b, y, idx, damping)
        x = y - g
        v = b_coef * v + (1 - b_coef) * y - c * g
        xs.append(x.clone())
    return xs


def theoretical_parameters(alpha: float, nu: float = 1.0) -> tuple[float, float, float]:
    """``(a, b, c)`` of accelerated sketch-and-project from ``alpha = lambda_min^+(E[Pi])`` and
    ``nu >= 1`` with ``E[Pi E[Pi]^+ Pi] <= nu E[Pi]``; contraction ``1 - sqrt(alpha / nu)``."""
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
    if not nu >= 1:
        raise ValueError(f"nu must be >= 1, got {nu!r}")
    c = 1.0 / math.sqrt(alpha * nu)
    return 1.0 / (1.0 + c * nu), 1.0 - math.sqrt(alpha / nu), c


def spring_parameters(momentum: float) -> tuple[float, float, float]:
    """``(a, b, c)`` for which the three-sequence method equals SPRING / Nesterov-Kaczmarz with
    ``mu = momentum``: the ``nu = 1`` theoretical parameters of ``alpha`` with
    ``(1 - sqrt(alpha))/(1 + sqrt(alpha)) = mu``, i.e. ``a = (1-mu)/2``, ``b = 2mu/(1+mu)``,
    ``c = (1+mu)/(1-mu)``."""
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    mu = float(momentum)
    return (1 - mu) / 2, 2 * mu / (1 + mu), (1 + mu) / (1 - mu)


def momentum_from_rate(alpha: float) -> float:
    """The SPRING momentum the accelerated theory (``nu = 1``) suggests:
    ``(1 - sqrt(alpha)) / (1 + sqrt(alpha))``."""
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
    s = math.sqrt(alpha)
    return (1 - s) / (1 + s)
