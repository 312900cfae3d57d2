"""The Expo-SDF geometry field (reconstructed): an MLP ``s_ψ: R³ → R`` with geometric (sphere)
initialisation, the reliability-weighted geometric loss against the Gaussians' depth and normals
and the eikonal term

``L_geo = Σ_p r̃(p)[|s(o + D_gs(p)·d)| + λ_n(1 - ⟨∇s/‖∇s‖, n_gs⟩)] / Σ_p r̃(p)
          + λ_eik E(‖∇s‖ - 1)²``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

Tensor = torch.Tensor


class SDFNetwork(nn.Module):
    """MLP 3 → hidden^layers → 1 with softplus(β) activations and geometric initialisation
    (Atzmon & Lipman): at init ``s(x) ≈ ‖x‖ - radius``."""

    def __init__(self, hidden: int = 64, layers: int = 2, radius: float = 1.0,
                 beta: float = 100.0, geometric_init: bool = True) -> None:
        super().__init__()
        dims = [3] + [hidden] * layers + [1]
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.act = nn.Softplus(beta=beta)
        if geometric_init:
            for i, lin in enumerate(self.lins):
                out_dim = lin.weight.shape[0]
                if i == len(self.lins) - 1:
                    nn.init.normal_(lin.weight, mean=math.sqrt(math.pi) / math.sqrt(dims[i]),
                                    std=1e-4)
                    nn.init.constant_(lin.bias, -radius)
                else:
                    nn.init.normal_(lin.weight, 0.0, math.sqrt(2) / math.sqrt(out_dim))
                    nn.init.constant_(lin.bias, 0.0)

    def forward(self, x: Tensor) -> Tensor:
        for lin in self.lins[:-1]:
            x = self.act(lin(x))
        return self.lins[-1](x).squeeze(-1)

    def gradient(self, x: Tensor, create_graph: bool = True) -> tuple[Tensor, Tensor]:
        """``(s(x), ∇s(x))``."""
        if not x.requires_grad:
            x = x.requires_grad_(True)
        s = self.forward(x)
        (g,) = torch.autograd.grad(s.sum(), x, create_graph=create_graph)
        return s, g


def eikonal_loss(grad: Tensor) -> Tensor:
    """``E(‖∇s‖ - 1)²``."""
    return ((grad.norm(dim=-1) - 1) ** 2).mean()


def geometric_loss(sdf: object, points: Tensor, normals: Tensor, weights: Tensor, *,
                   lambda_normal: float = 0.1, lambda_eik: float = 0.1,
                   eik_points: Tensor | None = None) -> dict[str, Tensor]:
    """Reliability-weighted surface + normal consistency + eikonal loss. ``points`` (P, 3) are
    GS surface points ``o + D_gs d``, ``normals`` (P, 3) the GS normals, ``weights`` (P,) the
    reliability. ``eik_points`` add extra eikonal samples (e.g. near-surface samples)."""
    s, g = sdf.gradient(points)  # type: ignore[attr-defined]
    gn = g / g.norm(dim=-1, keepdim=True).clamp_min(1e-8)
    cos = (gn * normals).sum(-1)
    wsum = weights.sum().clamp_min(1e-8)
    surf = (weights * s.abs()).sum() / wsum
    nrm = (weights * (1 - cos)).sum() / wsum
    grads = g
    if eik_points is not None:
        _, g2 = sdf.gradient(eik_points)  # type: ignore[attr-defined]
        grads = torch.cat([g, g2])
    eik = eikonal_loss(grads)
    return {"loss": surf + lambda_normal * nrm + lambda_eik * eik, "surface": surf,
            "normal": nrm, "eikonal": eik}
