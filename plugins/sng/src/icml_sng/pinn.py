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


def forward_laplacian(layers: Sequence[object], params: Sequence[torch.Tensor],
                      x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(u(x), Laplace u(x))`` of a tanh MLP in one forward pass, no double backward.

    ``layers`` is the model's sequence of ``"linear"`` / ``"tanh"`` tags and ``params`` its
    weights and biases in order. Carries, per point, the value ``h``, its input gradient
    ``G = dh/dx`` (``(N, d, width)``) and Laplacian ``L``: a linear layer maps all three by
    ``W`` (the bias only enters ``h``); ``tanh`` maps ``h -> a = tanh h``,
    ``G -> a' G``, ``L -> a' L + a'' sum_j G_j^2`` with ``a' = 1 - a^2``, ``a'' = -2 a a'``.
    Exact (the chain rule for second derivatives of a composition), differentiable in
    ``params``, and several times cheaper than autograd's nested backward on small nets."""
    it = iter(params)
    W, b = next(it), next(it)  # first layer: G = W^T for every point, L = 0
    h, G, L = x @ W.T + b, W.T.unsqueeze(0), None
    for kind in layers[1:]:
        if kind == "linear":
            W, b = next(it), next(it)
            h, G = h @ W.T + b, G @ W.T
            L = None if L is None else L @ W.T
        elif L is None:
            a = torch.tanh(h)
            s = 1.0 - a * a
            h, L, G = a, -2.0 * a * s * (G * G).sum(1), G * s.unsqueeze(1)
        else:
            a = torch.tanh(h)
            s = 1.0 - a * a
            h, L, G = a, s * L - 2.0 * a * s * (G * G).sum(1), G * s.unsqueeze(1)
    if L is None:  # a purely linear model
        L = torch.zeros_like(h)
    return h[:, 0], L[:, 0]


def one_hidden_layer_jacobian(params: Sequence[torch.Tensor], x: torch.Tensor
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                         torch.Tensor]:
    """``u``, ``Laplace u`` and their per-point Jacobians in the parameters (``(N, p)``,
    columns in the order ``W1`` (row-major), ``b1``, ``W2``, ``b2``) for the one-hidden-layer
    tanh MLP ``u = W2 tanh(W1 x + b1) + b2`` (the ENGD paper's network), in closed form.

    With ``a = tanh z``, ``a1 = 1 - a^2``, ``a2 = -2 a a1``, ``a3 = -2 a1^2 + 4 a^2 a1`` (the
    derivatives of tanh), ``v = W2`` and ``|w_i|^2 = sum_j W1_ij^2``:
    ``Laplace u = sum_i v_i a2_i |w_i|^2``; its derivatives ``d/dv_i = a2_i |w_i|^2``,
    ``d/db1_i = v_i a3_i |w_i|^2``, ``d/dW1_ij = v_i (a3_i x_j |w_i|^2 + 2 a2_i W1_ij)``;
    ``du/dv_i = a_i``, ``du/db2 = 1``, ``du/db1_i = v_i a1_i``, ``du/dW1_ij = v_i a1_i x_j``.
    Checked against ``torch.func`` in the tests."""
    W, b, V, c = params
    v = V[0]
    a = torch.tanh(x @ W.T + b)
    s = 1.0 - a * a
    a2 = -2.0 * a * s
    a3 = s * (4.0 * a * a - 2.0 * s)
    nw = (W * W).sum(1)
    u = a @ v + c[0]
    lap = (a2 * nw) @ v
    n, (w, d) = x.shape[0], W.shape
    g3 = v * a3 * nw  # d lap / d b1
    J_lap = torch.cat([(g3.unsqueeze(2) * x.unsqueeze(1) + 2.0 * (v * a2).unsqueeze(2) * W)
                       .reshape(n, w * d), g3, a2 * nw, torch.zeros_like(u).unsqueeze(1)], 1)
    vs = v * s
    J_u = torch.cat([(vs.unsqueeze(2) * x.unsqueeze(1)).reshape(n, w * d), vs, a,
                     torch.ones_like(u).unsqueeze(1)], 1)
    return u, lap, J_u, J_lap


def _tanh_mlp_layers(model: nn.Module) -> list[str] | None:
    """``["linear", "tanh", ...]`` if ``model`` is an ``nn.Sequential`` of ``nn.Linear`` (with
    bias) and ``nn.Tanh`` ending in a 1-output linear layer; ``None`` otherwise."""
    if not isinstance(model, nn.Sequential) or not len(model):
        return None
    tags = []
    for m in model:
        if isinstance(m, nn.Linear) and m.bias is not None:
            tags.append("linear")
        elif isinstance(m, nn.Tanh):
            tags.append("tanh")
        else:
            return None
    last = model[-1]
    return tags if isinstance(last, nn.Linear) and last.out_features == 1 else None


def exact_solution(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(math.pi * x).prod(dim=-1)


class PoissonPINN:
    """The ``d``-dimensional Poisson problem and a model.

    Interior points: a uniform grid of ``n_interior`` points per axis (cell midpoints);
    boundary points: ``n_boundary`` per face (``d = 1``: the two end points).
    """

    def __init__(self, model: nn.Module, dim: int = 1, n_interior: int = 200,
                 n_boundary: int = 30, n_test: int | None = None,
                 laplacian: str = "auto") -> None:
        if dim not in (1, 2):
            raise ValueError(f"dim must be 1 or 2 (1D or 2D Poisson), got {dim!r}")
        if n_interior < 2 or n_boundary < 1:
            raise ValueError(f"n_interior must be >= 2 and n_boundary >= 1, got {n_interior}, "
                             f"{n_boundary}")
        if laplacian not in ("auto", "forward", "autograd"):
            raise ValueError(f"laplacian must be 'auto', 'forward' or 'autograd', got "
                             f"{laplacian!r}")
        self._layers = _tanh_mlp_layers(model)
        if laplacian == "forward" and self._layers is None:
            raise ValueError("laplacian='forward' needs an nn.Sequential of nn.Linear and "
                             "nn.Tanh layers ending in one output (use 'autograd' otherwise)")
        #: "forward": the tanh-MLP forward Laplacian; "autograd": nested backward (any model)
        self.laplacian = "autograd" if self._layers is None or laplacian == "autograd" \
            else "forward"
        p0 = next(model.parameters())
        self._n_interior, self._n_boundary = n_interior, n_boundary
        self._laplacian_arg = laplacian
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

        if self.laplacian == "forward":
            layers = self._layers

            def r_int_fwd(ps: tuple, x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
                return self.w_int * (-forward_laplacian(layers, ps, x.unsqueeze(0))[1][0] - f)

            def r_bdy_fwd(ps: tuple, x: torch.Tensor) -> torch.Tensor:
                return self.w_bdy * forward_laplacian(layers, ps, x.unsqueeze(0))[0][0]

            self._jf_int = vmap(jacrev(r_int_fwd, argnums=0), in_dims=(None, 0, 0))
            self._jf_bdy = vmap(jacrev(r_bdy_fwd, argnums=0), in_dims=(None, 0))
        self._u = vmap(u, in_dims=(None, 0))
        self._r_int = vmap(r_int, in_dims=(None, 0, 0))
        self._r_bdy = vmap(r_bdy, in_dims=(None, 0))
        self._j_int = vmap(jacrev(r_int, argnums=0), in_dims=(None, 0, 0))
        self._j_bdy = vmap(jacrev(r_bdy, argnums=0), in_dims=(None, 0))

    # -- residuals ---------------------------------------------------------------------
    def _split(self, idx: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(idx, device=self.device).reshape(-1)
        if idx.numel() and bool(((idx < 0) | (idx >= self.n)).any()):
            raise IndexError(f"residual indices must lie in [0, {self.n}), got "
                             f"[{int(idx.min())}, {int(idx.max())}]")
        mask = idx < self.n_int
        return idx, mask, idx[mask], idx[~mask] - self.n_int

    def residual_fn(self, idx: torch.Tensor) -> torch.Tensor:
        """Weighted residuals at ``idx`` from the model's live parameters (autograd-connected).

        The Laplacian comes from batched double backward through the model (one forward, ``d+1``
        backward passes); the model must act pointwise on its batch (no batch norm)."""
        idx, mask, ii, ib = self._split(idx)
        if self.laplacian == "forward":
            return self._residual_forward(list(self.model.parameters()), idx, mask, ii, ib)
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

    def _residual_forward(self, params: Sequence[torch.Tensor], idx: torch.Tensor,
                          mask: torch.Tensor, ii: torch.Tensor, ib: torch.Tensor
                          ) -> torch.Tensor:
        """Residuals by :func:`forward_laplacian`, interior and boundary points in one pass."""
        x = torch.cat([self.x_int[ii], self.x_bdy[ib]])
        if self._analytic:  # one hidden layer: Laplace u = sum_i v_i a2_i |w_i|^2
            W, b, V, c = params
            a = torch.tanh(x @ W.T + b)
            u = a @ V[0] + c[0]
            lap = (-2.0 * a * (1.0 - a * a) * (W * W).sum(1)) @ V[0]
        else:
            u, lap = forward_laplacian(self._layers, params, x)  # type: ignore[arg-type]
        ki = ii.numel()
        r = torch.cat([self.w_int * (-lap[:ki] - self.f_int[ii]), self.w_bdy * u[ki:]])
        if bool(mask[:ki].all()):  # indices already interior-first (the samplers' order)
            return r
        order = torch.cat([torch.nonzero(mask).reshape(-1), torch.nonzero(~mask).reshape(-1)])
        return torch.empty_like(r).index_copy(0, order, r)

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

    @property
    def num_residuals(self) -> int:
        """``n``: interior plus boundary rows (for the optimizers' indexed mode)."""
        return self.n

    def default_sampler(self):  # noqa: ANN201
        """The sampler the optimizers use when given this problem (``SNG(params, pinn)``):
        stratified batches of :data:`DEFAULT_BATCH` interior points plus every boundary point,
        each part scaled as its own loss term (:meth:`stratified_sampler`) -- the batches of
        the closure route (:meth:`sample_batch`)."""
        return self.stratified_sampler(min(self.DEFAULT_BATCH[self.dim], self.n_int))

    #: Interior points per batch when :meth:`sample_batch` is not told, by dimension (all
    #: boundary points are added): 1D 32 of 200 (+ 2 ends = 34 rows < p = 97); 2D 256 of 900
    #: (+ 120 boundary = 376 rows, about 3p for p = 129). Rows near p stall (README, 2D study).
    DEFAULT_BATCH = {1: 32, 2: 256}

    def sample_batch(self, k_interior: int | None = None, k_boundary: int | None = None,
                     generator: torch.Generator | None = None) -> torch.Tensor:
        """Indices of a stratified batch: ``k_interior`` interior points (default
        :data:`DEFAULT_BATCH` for the dimension) and ``k_boundary`` boundary points (default
        all), drawn without replacement; for :meth:`batch_loss`."""
        ki = self.DEFAULT_BATCH[self.dim] if k_interior is None else int(k_interior)
        kb = self.n_bdy if k_boundary is None else int(k_boundary)
        if not 1 <= ki <= self.n_int or not 0 <= kb <= self.n_bdy:
            raise ValueError(f"k_interior must be in [1, {self.n_int}] and k_boundary in "
                             f"[0, {self.n_bdy}], got {k_interior}, {k_boundary}")
        ii = torch.randperm(self.n_int, generator=generator)[:ki]
        ib = torch.randperm(self.n_bdy, generator=generator)[:kb] + self.n_int
        return torch.cat([ii, ib]).to(self.device)

    def batch_loss(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        """The PINN loss on a batch, ``1/(2 k_int) sum r_int^2 + 1/(2 k_bdy) sum r_bdy^2``, as
        :func:`icml_sng.least_squares_loss` (residual vector attached, Jacobian rows from
        ``torch.func`` on demand): the closure for SNG/SPRING, and a plain loss for Adam or
        L-BFGS. ``idx=None`` is every point (then it equals :meth:`loss`)."""
        from icml_sng.optim import least_squares_loss

        idx = torch.arange(self.n, device=self.device) if idx is None else idx
        idx, mask, ii, ib = self._split(idx)
        ki, kb = int(ii.numel()), int(ib.numel())
        kw = dict(dtype=self.dtype, device=self.device)
        scale = torch.where(mask, torch.tensor(1.0 / (self.w_int * math.sqrt(max(ki, 1))), **kw),
                            torch.tensor(1.0 / (self.w_bdy * math.sqrt(max(kb, 1))), **kw))
        r = self.residual_fn(idx) * scale

        analytic = self._analytic
        if not analytic and idx.numel() <= self.autograd_max_rows:
            return least_squares_loss(r, reduction="sum")  # the optimizer backpropagates

        def jacobian() -> torch.Tensor:  # closed form, or per-sample torch.func rows
            jac = self.jacobian_fn_analytic if analytic else self.jacobian_fn_forward
            return jac(idx)[1] * scale[:, None]

        return least_squares_loss(r, reduction="sum", jacobian=jacobian)

    def jacobian_fn(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(r_idx, J_idx)``, columns in the order of ``model.parameters()``: for small batches
        (<= ``autograd_max_rows``) one vmapped backward pass through the batched residual
        (cost grows like ``k^2`` but with little overhead), otherwise per-sample
        ``torch.func`` Jacobians (:meth:`jacobian_fn_func`, cost linear in ``k``)."""
        if self._analytic:
            return self.jacobian_fn_analytic(idx)
        if torch.as_tensor(idx).numel() <= self.autograd_max_rows:
            from icml_sng.optim import residual_jacobian

            return residual_jacobian(self.residual_fn, list(self.model.parameters()),
                                     torch.as_tensor(idx, device=self.device))
        return self.jacobian_fn_func(idx)

    @property
    def _analytic(self) -> bool:
        return self._layers == ["linear", "tanh", "linear"] and self.laplacian == "forward"

    def jacobian_fn_analytic(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(r_idx, J_idx)`` in closed form (:func:`one_hidden_layer_jacobian`; one-hidden-
        layer tanh MLPs only)."""
        if self._layers != ["linear", "tanh", "linear"]:
            raise ValueError("the analytic Jacobian needs a one-hidden-layer tanh MLP "
                             "(nn.Sequential(Linear, Tanh, Linear)); use jacobian_fn")
        idx, mask, ii, ib = self._split(idx)
        ps = [q.detach() for q in self.model.parameters()]
        x = torch.cat([self.x_int[ii], self.x_bdy[ib]])
        with torch.no_grad():
            u, lap, J_u, J_lap = one_hidden_layer_jacobian(ps, x)
            ki = ii.numel()
            r = torch.cat([self.w_int * (-lap[:ki] - self.f_int[ii]), self.w_bdy * u[ki:]])
            J = torch.cat([-self.w_int * J_lap[:ki], self.w_bdy * J_u[ki:]])
            if not bool(mask[:ki].all()):
                order = torch.cat([torch.nonzero(mask).reshape(-1),
                                   torch.nonzero(~mask).reshape(-1)])
                r = torch.empty_like(r).index_copy(0, order, r)
                J = torch.empty_like(J).index_copy(0, order, J)
        return r, J

    def jacobian_fn_forward(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(r_idx, J_idx)`` with per-sample rows by ``vmap(jacrev)`` of the forward Laplacian
        (tanh MLPs; cost linear in the batch)."""
        if self.laplacian != "forward":
            return self.jacobian_fn_func(idx)
        idx, mask, ii, ib = self._split(idx)
        ps = tuple(q.detach() for q in self.model.parameters())
        with torch.no_grad():
            r = self._residual_forward(ps, idx, mask, ii, ib)
            J = torch.zeros(idx.shape[0], self.num_params, dtype=self.dtype, device=self.device)
            if ii.numel():
                J[mask] = torch.cat([j.reshape(j.shape[0], -1) for j in
                                     self._jf_int(ps, self.x_int[ii], self.f_int[ii])], 1)
            if ib.numel():
                J[~mask] = torch.cat([j.reshape(j.shape[0], -1) for j in
                                      self._jf_bdy(ps, self.x_bdy[ib])], 1)
        return r, J

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
