"""Physics-informed networks for Poisson's equation, with residuals and per-sample Jacobians
from ``torch.func`` (analytic Laplacians by ``hessian``, Jacobian rows by ``vmap(jacrev)``).

``-Laplace u = f`` on ``[0, 1]^d`` with ``u = 0`` on the boundary and the exact solution
``u*(x) = prod_j sin(pi x_j)`` (so ``f = d pi^2 u*``). The loss is the usual PINN loss
``1/(2 N_int) sum r_int^2 + 1/(2 N_bdy) sum r_bdy^2``, written as ``1/(2n) sum r_i^2`` over one
residual vector by scaling the interior and boundary residuals by ``sqrt(n/N_int)`` and
``sqrt(n/N_bdy)``; the optimizers then see a plain least-squares problem.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.func import functional_call, hessian, jacrev, vmap


def mlp(dim: int, hidden: Sequence[int] = (32,), dtype: torch.dtype = torch.float64,
        device: str | torch.device = "cpu", seed: int = 0) -> nn.Sequential:
    """A tanh MLP ``dim -> hidden... -> 1`` (the ENGD paper's [d, 32, 1] by default)."""
    if not hidden or any(int(h) < 1 for h in hidden):
        raise ValueError(f"hidden must be a non-empty list of positive widths, got {hidden!r}")
    g = torch.Generator().manual_seed(seed)
    layers: list[nn.Module] = []
    widths = [dim, *map(int, hidden)]
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    layers.append(nn.Linear(widths[-1], 1))
    net = nn.Sequential(*layers)
    with torch.no_grad():
        for m in net:
            if isinstance(m, nn.Linear):  # Glorot-uniform init, reproducible
                bound = math.sqrt(6.0 / (m.in_features + m.out_features))
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) * 2 * bound - bound)
                m.bias.zero_()
    return net.to(dtype=dtype, device=device)


def exact_solution(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(math.pi * x).prod(dim=-1)


class PoissonPINN:
    """The ``d``-dimensional Poisson problem and a model.

    Interior points: a uniform grid of ``n_interior`` points per axis (cell midpoints);
    boundary points: ``n_boundary`` per face (``d = 1``: the two end points).
    """

    def __init__(self, model: nn.Module, dim: int = 1, n_interior: int = 200,
                 n_boundary: int = 30, n_test: int | None = None) -> None:
        if dim not in (1, 2):
            raise ValueError(f"dim must be 1 or 2 (1D or 2D Poisson), got {dim!r}")
        if n_interior < 2 or n_boundary < 1:
            raise ValueError(f"n_interior must be >= 2 and n_boundary >= 1, got {n_interior}, "
                             f"{n_boundary}")
        p0 = next(model.parameters())
        self._n_interior, self._n_boundary = n_interior, n_boundary
        self.model, self.dim = model, dim
        self.dtype, self.device = p0.dtype, p0.device
        kw = dict(dtype=self.dtype, device=self.device)
        grid = (torch.arange(n_interior, **kw) + 0.5) / n_interior
        if dim == 1:
            self.x_int = grid[:, None]
            self.x_bdy = torch.tensor([[0.0], [1.0]], **kw)
            t = torch.linspace(0, 1, n_test or 1001, **kw)[:, None]
        else:
            X, Y = torch.meshgrid(grid, grid, indexing="ij")
            self.x_int = torch.stack([X.reshape(-1), Y.reshape(-1)], dim=1)
            s = (torch.arange(n_boundary, **kw) + 0.5) / n_boundary
            zero, one = torch.zeros_like(s), torch.ones_like(s)
            self.x_bdy = torch.cat([torch.stack(c, 1) for c in
                                    ((s, zero), (s, one), (zero, s), (one, s))])
            t1 = torch.linspace(0, 1, n_test or 101, **kw)
            TX, TY = torch.meshgrid(t1, t1, indexing="ij")
            t = torch.stack([TX.reshape(-1), TY.reshape(-1)], dim=1)
        self.x_test, self.u_test = t, exact_solution(t)
        self.n_int, self.n_bdy = self.x_int.shape[0], self.x_bdy.shape[0]
        self.n = self.n_int + self.n_bdy
        self.w_int = math.sqrt(self.n / self.n_int)
        self.w_bdy = math.sqrt(self.n / self.n_bdy)
        self.f_int = dim * math.pi**2 * exact_solution(self.x_int)
        self.names = [name for name, _ in model.named_parameters()]
        self.autograd_max_rows = 64
        self.num_params = sum(q.numel() for q in model.parameters())

        def u(params: dict, x: torch.Tensor) -> torch.Tensor:
            return functional_call(self.model, params, (x.unsqueeze(0),)).reshape(())

        def r_int(params: dict, x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
            lap = torch.diagonal(hessian(u, argnums=1)(params, x)).sum()
            return self.w_int * (-lap - f)

        def r_bdy(params: dict, x: torch.Tensor) -> torch.Tensor:
            return self.w_bdy * u(params, x)

        self._u = vmap(u, in_dims=(None, 0))
        self._r_int = vmap(r_int, in_dims=(None, 0, 0))
        self._r_bdy = vmap(r_bdy, in_dims=(None, 0))
        self._j_int = vmap(jacrev(r_int, argnums=0), in_dims=(None, 0, 0))
        self._j_bdy = vmap(jacrev(r_bdy, argnums=0), in_dims=(None, 0))

    # -- residuals ---------------------------------------------------------------------
    def _split(self, idx: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(idx, device=self.device).reshape(-1)
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.n):
            raise IndexError(f"residual indices must lie in [0, {self.n}), got "
                             f"[{int(idx.min())}, {int(idx.max())}]")
        mask = idx < self.n_int
        return idx, mask, idx[mask], idx[~mask] - self.n_int

    def residual_fn(self, idx: torch.Tensor) -> torch.Tensor:
        """Weighted residuals at ``idx`` from the model's live parameters (autograd-connected).

        The Laplacian comes from batched double backward through the model (one forward, ``d+1``
        backward passes); the model must act pointwise on its batch (no batch norm)."""
        idx, mask, ii, ib = self._split(idx)
        parts = []
        if ii.numel():
            x = self.x_int[ii].detach().requires_grad_(True)
            u = self.model(x).reshape(-1)
            du = torch.autograd.grad(u.sum(), x, create_graph=True)[0]
            lap = sum(torch.autograd.grad(du[:, j].sum(), x, create_graph=True)[0][:, j]
                      for j in range(self.dim))
            parts.append((mask, self.w_int * (-lap - self.f_int[ii])))
        if ib.numel():
            parts.append((~mask, self.w_bdy * self.model(self.x_bdy[ib]).reshape(-1)))
        if len(parts) == 1:
            return parts[0][1]
        out = torch.zeros(idx.shape[0], dtype=self.dtype, device=self.device)
        for m, vals in parts:
            out = out.masked_scatter(m, vals)
        return out

    def residual_fn_func(self, idx: torch.Tensor) -> torch.Tensor:
        """The same residuals through ``torch.func`` (``vmap`` of ``hessian``); a cross-check."""
        idx, mask, ii, ib = self._split(idx)
        params = dict(self.model.named_parameters())
        out = torch.zeros(idx.shape[0], dtype=self.dtype, device=self.device)
        if ii.numel():
            out = out.masked_scatter(mask, self._r_int(params, self.x_int[ii], self.f_int[ii]))
        if ib.numel():
            out = out.masked_scatter(~mask, self._r_bdy(params, self.x_bdy[ib]))
        return out

    def stratified_sampler(self, k_interior: int, k_boundary: int | None = None):  # noqa: ANN201
        """A sampler for the optimizers drawing ``k_interior`` interior and ``k_boundary``
        boundary points (all boundary points by default, capped at ``n_boundary``), with the
        row scales ``1/sqrt(k_interior)``, ``1/sqrt(k_boundary)`` of the separate PINN losses
        (as in ENGD/SPRING PINN codes) instead of the uniform ``1/sqrt(k)``."""
        kb = self.n_bdy if k_boundary is None else min(int(k_boundary), self.n_bdy)
        ki = int(k_interior)
        if not 1 <= ki <= self.n_int or kb < 0:
            raise ValueError(f"k_interior must be in [1, {self.n_int}] and k_boundary >= 0, "
                             f"got {k_interior}, {k_boundary}")
        s_int = math.sqrt(self.n_int / (self.n * ki))
        s_bdy = math.sqrt(self.n_bdy / (self.n * max(kb, 1)))

        def sample(n: int, k: int, generator: torch.Generator):  # noqa: ANN202
            ii = torch.randperm(self.n_int, generator=generator)[:ki]
            ib = torch.randperm(self.n_bdy, generator=generator)[:kb] + self.n_int
            scale = torch.cat([torch.full((ki,), s_int), torch.full((kb,), s_bdy)])
            return torch.cat([ii, ib]), scale.to(self.dtype)

        sample.batch_size = ki + kb  # type: ignore[attr-defined]
        return sample

    def jacobian_fn(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(r_idx, J_idx)``, columns in the order of ``model.parameters()``: for small batches
        (<= ``autograd_max_rows``) one vmapped backward pass through the batched residual
        (cost grows like ``k^2`` but with little overhead), otherwise per-sample
        ``torch.func`` Jacobians (:meth:`jacobian_fn_func`, cost linear in ``k``)."""
        if torch.as_tensor(idx).numel() <= self.autograd_max_rows:
            from icml_sng.optim import residual_jacobian

            return residual_jacobian(self.residual_fn, list(self.model.parameters()),
                                     torch.as_tensor(idx, device=self.device))
        return self.jacobian_fn_func(idx)

    def jacobian_fn_func(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(r_idx, J_idx)`` with per-sample Jacobian rows by ``vmap(jacrev)`` of the
        ``hessian``-based residual (``torch.func``)."""
        idx, mask, ii, ib = self._split(idx)
        params = {k: v.detach() for k, v in self.model.named_parameters()}
        r = torch.zeros(idx.shape[0], dtype=self.dtype, device=self.device)
        J = torch.zeros(idx.shape[0], self.num_params, dtype=self.dtype, device=self.device)
        with torch.no_grad():
            if ii.numel():
                r[mask] = self._r_int(params, self.x_int[ii], self.f_int[ii])
                J[mask] = self._flatten(self._j_int(params, self.x_int[ii], self.f_int[ii]))
            if ib.numel():
                r[~mask] = self._r_bdy(params, self.x_bdy[ib])
                J[~mask] = self._flatten(self._j_bdy(params, self.x_bdy[ib]))
        return r, J

    def _flatten(self, jac: dict) -> torch.Tensor:
        return torch.cat([jac[name].reshape(jac[name].shape[0], -1) for name in self.names], 1)

    def loss(self) -> float:
        """``1/(2n) sum r_i^2`` over all collocation points."""
        with torch.enable_grad():  # the Laplacian needs input gradients
            r = self.residual_fn(torch.arange(self.n, device=self.device)).detach()
        return float(0.5 * (r**2).mean())

    def relative_l2(self) -> float:
        """``||u - u*|| / ||u*||`` on the test grid."""
        with torch.no_grad():
            u = self.model(self.x_test).reshape(-1)
        return float((u - self.u_test).norm() / self.u_test.norm())
