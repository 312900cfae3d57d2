"""Real spherical harmonics up to degree 3 (the 3DGS / gsplat basis and constants).

``eval_sh(degree, coeffs, dirs)`` returns ``Σ_{l≤degree, m} Y_lm(d) c_lm`` for coefficients
``coeffs`` (N, K, C) with ``K >= (degree+1)²`` and directions ``dirs`` (N, 3) (normalised here).
Degree 0 is ``C0 · c_00``. The Gaussian model uses the DC term as log-irradiance directly and the
higher bands as a view-dependent offset (``sh_view_offset``), so degree 0 is exactly the DC-only
path.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor

C0 = 0.28209479177387814
C1 = 0.4886025119029199
C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792,
      0.5462742152960396)
C3 = (-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
      -0.4570457994644658, 1.445305721320277, -0.5900435899266435)


def num_sh_bases(degree: int) -> int:
    """``(degree + 1)²`` coefficients per channel."""
    if degree not in (0, 1, 2, 3):
        raise ValueError(f"sh degree {degree!r}: use 0, 1, 2 or 3")
    return (degree + 1) ** 2


def sh_basis(degree: int, dirs: Tensor) -> Tensor:
    """The real SH basis ``Y`` (N, (degree+1)²) at unit directions (normalised here)."""
    k = num_sh_bases(degree)
    d = dirs / dirs.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    x, y, z = d.unbind(-1)
    out = [torch.full_like(x, C0)]
    if degree >= 1:
        out += [-C1 * y, C1 * z, -C1 * x]
    if degree >= 2:
        xx, yy, zz, xy, yz, xz = x * x, y * y, z * z, x * y, y * z, x * z
        out += [C2[0] * xy, C2[1] * yz, C2[2] * (2 * zz - xx - yy), C2[3] * xz,
                C2[4] * (xx - yy)]
    if degree >= 3:
        out += [C3[0] * y * (3 * xx - yy), C3[1] * xy * z, C3[2] * y * (4 * zz - xx - yy),
                C3[3] * z * (2 * zz - 3 * xx - 3 * yy), C3[4] * x * (4 * zz - xx - yy),
                C3[5] * z * (xx - yy), C3[6] * x * (xx - 3 * yy)]
    basis = torch.stack(out, -1)
    assert basis.shape[-1] == k
    return basis


def eval_sh(degree: int, coeffs: Tensor, dirs: Tensor) -> Tensor:
    """``Σ_k Y_k(d) coeffs[:, k]``: coeffs (N, K, C) with ``K >= (degree+1)²``, dirs (N, 3);
    returns (N, C)."""
    k = num_sh_bases(degree)
    if coeffs.shape[-2] < k:
        raise ValueError(f"sh degree {degree} needs {k} coefficients per channel, got "
                         f"{coeffs.shape[-2]}")
    return (sh_basis(degree, dirs)[..., None] * coeffs[..., :k, :]).sum(-2)


def sh_view_offset(degree: int, rest: Tensor, dirs: Tensor) -> Tensor:
    """The view-dependent part ``Σ_{l>=1} Y_lm(d) c_lm`` for the non-DC coefficients ``rest``
    (N, (degree+1)² - 1, C); zero (N, C) for degree 0."""
    if degree == 0:
        return rest.new_zeros(rest.shape[0], rest.shape[-1])
    basis = sh_basis(degree, dirs)[:, 1:]
    return (basis[..., None] * rest).sum(-2)
