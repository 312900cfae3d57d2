"""Exact potential flow: 2-D flow past a rotated ellipse with circulation (Joukowski map) and
3-D flow past a sphere. NumPy only, float64, so the data generator is a reference for the tests.

Every field is returned as ``(u/U, v/U[, w/U], C_p)`` with ``C_p = 1 - |V|^2 / U^2``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_OUTSIDE_TOL = 1e-9


@dataclass(frozen=True)
class Ellipse:
    """An ellipse centred at the origin with semi-axes ``a >= b > 0`` rotated by ``theta``.

    The flow has free-stream speed ``U`` at angle of attack ``alpha`` and circulation ``gamma``
    (counter-clockwise positive; ``Gamma = 2 pi U R gamma`` with ``R = (a + b) / 2``).
    """

    a: float
    b: float
    theta: float = 0.0
    U: float = 1.0
    alpha: float = 0.0
    gamma: float = 0.0

    def __post_init__(self) -> None:
        if not (np.isfinite([self.a, self.b, self.theta, self.U, self.alpha, self.gamma]).all()):
            raise ValueError(f"Ellipse parameters must be finite, got {self}")
        if not self.a >= self.b > 0:
            raise ValueError(f"Ellipse needs a >= b > 0 (semi-axes), got a={self.a}, b={self.b}: "
                             "swap them and add pi/2 to theta")
        if self.U <= 0:
            raise ValueError(f"free-stream speed U must be > 0, got {self.U}")

    @property
    def R(self) -> float:
        return 0.5 * (self.a + self.b)

    @property
    def k2(self) -> float:
        return 0.25 * (self.a ** 2 - self.b ** 2)

    @property
    def circulation(self) -> float:
        """The circulation Gamma (counter-clockwise positive)."""
        return 2 * np.pi * self.U * self.R * self.gamma

    def params(self) -> np.ndarray:
        """The simulation parameters xi = (U, cos alpha, sin alpha, gamma) the model sees."""
        return np.array([self.U, np.cos(self.alpha), np.sin(self.alpha), self.gamma])

    # geometry ---------------------------------------------------------------------------
    def boundary(self, n: int, rng: np.random.Generator | None = None) -> tuple[np.ndarray,
                                                                                 np.ndarray]:
        """``n`` surface points and outward unit normals, ``[n, 2]`` each. Random angles when
        ``rng`` is given, else equally spaced in the ellipse's parametric angle."""
        if n < 1:
            raise ValueError(f"n={n}: ask for at least one boundary point")
        t = (rng.uniform(0, 2 * np.pi, n) if rng is not None
             else np.linspace(0, 2 * np.pi, n, endpoint=False))
        xb = np.stack([self.a * np.cos(t), self.b * np.sin(t)], -1)
        nb = np.stack([self.b * np.cos(t), self.a * np.sin(t)], -1)
        nb /= np.linalg.norm(nb, axis=-1, keepdims=True)
        rot = _rot(self.theta)
        return xb @ rot.T, nb @ rot.T

    def inside(self, x: np.ndarray) -> np.ndarray:
        """Boolean mask of points strictly inside the body (where the field is undefined)."""
        xb = np.asarray(x, dtype=np.float64) @ _rot(self.theta)
        return (xb[..., 0] / self.a) ** 2 + (xb[..., 1] / self.b) ** 2 < 1 - _OUTSIDE_TOL

    # flow -------------------------------------------------------------------------------
    def _zeta(self, zb: np.ndarray) -> np.ndarray:
        if self.k2 == 0:
            return zb
        s = np.sqrt(zb * zb - 4 * self.k2)
        z1, z2 = 0.5 * (zb + s), 0.5 * (zb - s)
        return np.where(np.abs(z1) >= np.abs(z2), z1, z2)

    def complex_velocity(self, x: np.ndarray, inside: str = "raise") -> np.ndarray:
        """``u - i v`` at points ``x [..., 2]`` (world frame). ``inside`` says what to do with
        points inside the body: ``"raise"`` (ValueError) or ``"nan"`` (NaN there)."""
        x = _check_points(x, 2)
        mask = self.inside(x)
        if mask.any() and inside == "raise":
            raise ValueError(f"{int(mask.sum())} query point(s) lie inside the body, where the "
                             "flow is undefined: drop them (Ellipse.inside) or pass inside='nan'")
        zb = (x[..., 0] + 1j * x[..., 1]) * np.exp(-1j * self.theta)
        zeta = self._zeta(zb)
        ap = self.alpha - self.theta
        R2 = self.R ** 2
        dw_dzeta = (self.U * (np.exp(-1j * ap) - R2 * np.exp(1j * ap) / zeta ** 2)
                    - 1j * self.circulation / (2 * np.pi * zeta))
        with np.errstate(divide="ignore", invalid="ignore"):
            dw = dw_dzeta / (1 - self.k2 / zeta ** 2)
        # at the ellipse tips (zeta = +-k) dz/dzeta = 0: a removable singularity only if the
        # Kutta condition holds; fall back to a point a hair off the surface
        bad = ~np.isfinite(dw)
        if bad.any():
            dw[bad] = self.complex_velocity(x[bad] * (1 + 1e-7), inside="nan")
        dw = dw * np.exp(-1j * self.theta)  # body -> world: conj(V_w) = e^{-i theta} conj(V_b)
        if mask.any():
            dw = np.where(mask, complex(np.nan, np.nan), dw)
        return dw

    def stream_function(self, x: np.ndarray) -> np.ndarray:
        """The stream function psi = Im w (zero on the body when gamma = 0)."""
        x = _check_points(x, 2)
        zb = (x[..., 0] + 1j * x[..., 1]) * np.exp(-1j * self.theta)
        zeta = self._zeta(zb)
        ap = self.alpha - self.theta
        w = (self.U * (zeta * np.exp(-1j * ap) + self.R ** 2 * np.exp(1j * ap) / zeta)
             - 1j * self.circulation / (2 * np.pi) * np.log(zeta / self.R))
        return w.imag

    def fields(self, x: np.ndarray, inside: str = "raise") -> np.ndarray:
        """``[..., 3]`` targets ``(u/U, v/U, C_p)`` at ``x [..., 2]``."""
        dw = self.complex_velocity(x, inside=inside)
        u, v = dw.real / self.U, -dw.imag / self.U
        return np.stack([u, v, 1 - u * u - v * v], -1)


@dataclass(frozen=True)
class Sphere:
    """A sphere of radius ``radius`` at ``center`` in a uniform stream of speed ``U`` along the
    unit vector ``direction`` (no circulation exists in 3-D potential flow past a sphere)."""

    radius: float
    center: tuple[float, float, float] = (0.0, 0.0, 0.0)
    U: float = 1.0
    direction: tuple[float, float, float] = (1.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        if not self.radius > 0 or not np.isfinite(self.radius):
            raise ValueError(f"sphere radius must be finite and > 0, got {self.radius}")
        if self.U <= 0:
            raise ValueError(f"free-stream speed U must be > 0, got {self.U}")
        d = np.asarray(self.direction, dtype=np.float64)
        if d.shape != (3,) or not np.linalg.norm(d) > 0:
            raise ValueError(f"direction must be a non-zero 3-vector, got {self.direction}")

    @property
    def e(self) -> np.ndarray:
        d = np.asarray(self.direction, dtype=np.float64)
        return d / np.linalg.norm(d)

    def params(self) -> np.ndarray:
        """xi = (U, e_x, e_y, e_z, 0): the same width as the 2-D case plus one."""
        return np.array([self.U, *self.e, 0.0])

    def boundary(self, n: int, rng: np.random.Generator | None = None) -> tuple[np.ndarray,
                                                                                 np.ndarray]:
        """``n`` surface points (random, or a Fibonacci lattice) and outward normals."""
        if n < 1:
            raise ValueError(f"n={n}: ask for at least one boundary point")
        if rng is not None:
            nrm = rng.standard_normal((n, 3))
        else:
            i = np.arange(n) + 0.5
            phi = np.arccos(1 - 2 * i / n)
            th = np.pi * (1 + 5 ** 0.5) * i
            nrm = np.stack([np.cos(th) * np.sin(phi), np.sin(th) * np.sin(phi), np.cos(phi)], -1)
        nrm /= np.linalg.norm(nrm, axis=-1, keepdims=True)
        return np.asarray(self.center) + self.radius * nrm, nrm

    def inside(self, x: np.ndarray) -> np.ndarray:
        r = np.linalg.norm(np.asarray(x, dtype=np.float64) - np.asarray(self.center), axis=-1)
        return r < self.radius * (1 - _OUTSIDE_TOL)

    def velocity(self, x: np.ndarray, inside: str = "raise") -> np.ndarray:
        """Velocity ``[..., 3]``: the gradient of ``phi = U (e.r)(1 + R^3 / (2 |r|^3))``."""
        x = _check_points(x, 3)
        mask = self.inside(x)
        if mask.any() and inside == "raise":
            raise ValueError(f"{int(mask.sum())} query point(s) lie inside the sphere, where the "
                             "flow is undefined: drop them (Sphere.inside) or pass inside='nan'")
        r = x - np.asarray(self.center)
        rn = np.linalg.norm(r, axis=-1, keepdims=True)
        e = self.e
        R3 = self.radius ** 3
        er = (r * e).sum(-1, keepdims=True)
        V = self.U * ((1 + R3 / (2 * rn ** 3)) * e - 1.5 * R3 * er * r / rn ** 5)
        return np.where(mask[..., None], np.nan, V)

    def fields(self, x: np.ndarray, inside: str = "raise") -> np.ndarray:
        """``[..., 4]`` targets ``(u/U, v/U, w/U, C_p)``."""
        V = self.velocity(x, inside=inside) / self.U
        return np.concatenate([V, 1 - (V * V).sum(-1, keepdims=True)], -1)


def _rot(t: float) -> np.ndarray:
    c, s = np.cos(t), np.sin(t)
    return np.array([[c, -s], [s, c]])


def _check_points(x: np.ndarray, dim: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 1 or x.shape[-1] != dim:
        raise ValueError(f"points must have shape [..., {dim}], got {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("points contain NaN or inf coordinates: remove them")
    return x
