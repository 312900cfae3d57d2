"""The cvxpy QP layer: cvxpy's canonicalisation in, dXPP gradients out.

References that do not share the layer's pipeline: cvxpy's own solve (forward), central finite
differences of cvxpy's own solutions (backward), closed forms, and the KKT backward."""

from __future__ import annotations

import numpy as np
import pytest
import torch

cp = pytest.importorskip("cvxpy", reason="the cvxpy layer needs cvxpy: pip install cvxpy")

from icml_dxpp import QPInputError  # noqa: E402
from icml_dxpp.cvxpy_layer import CvxpyQPLayer  # noqa: E402


def _constrained_ls(n=6, m=9, seed=0):
    """min ‖Fx − g‖² + 0.1‖x‖² s.t. x ≥ lo, 1ᵀx = 1 (parameters F, g, lo; a batched-able QP)."""
    F, g, lo = cp.Parameter((m, n)), cp.Parameter(m), cp.Parameter(n)
    x = cp.Variable(n)
    prob = cp.Problem(cp.Minimize(cp.sum_squares(F @ x - g) + 0.1 * cp.sum_squares(x)),
                      [x >= lo, cp.sum(x) == 1])
    rng = np.random.default_rng(seed)
    vals = [rng.standard_normal((m, n)), rng.standard_normal(m), -0.05 * np.ones(n)]
    return prob, [F, g, lo], x, vals


def _cvxpy_solution(prob, params, x, vals):
    for p, v in zip(params, vals, strict=True):
        p.value = v
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    return np.asarray(x.value)


def test_forward_matches_cvxpy_and_backward_matches_finite_differences():
    prob, params, x, vals = _constrained_ls()
    layer = CvxpyQPLayer(prob, params, [x])
    ts = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in vals]
    (xs,) = layer(*ts)
    ref_x = _cvxpy_solution(prob, params, x, vals)
    np.testing.assert_allclose(xs.detach().numpy(), ref_x, atol=1e-7)
    active = np.sum(ref_x < vals[2] + 1e-7)
    assert 0 < active < len(ref_x) - 1  # the bounds matter, and not all of them
    w = np.random.default_rng(1).standard_normal(len(ref_x))
    (xs * torch.as_tensor(w)).sum().backward()
    eps = 1e-6
    rng = np.random.default_rng(2)
    for k in (0, 1):  # F and g: central differences of cvxpy's own solutions (8 entries each)
        entries = list(np.ndindex(vals[k].shape))
        picked = [entries[i] for i in rng.choice(len(entries), 8, replace=False)]
        fd, got = np.zeros(8), ts[k].grad.numpy()
        for j, idx in enumerate(picked):
            up = [v.copy() for v in vals]
            dn = [v.copy() for v in vals]
            up[k][idx] += eps
            dn[k][idx] -= eps
            fd[j] = w @ (_cvxpy_solution(prob, params, x, up)
                         - _cvxpy_solution(prob, params, x, dn)) / (2 * eps)
        mine = np.array([got[idx] for idx in picked])
        assert np.linalg.norm(mine - fd) <= 1e-4 * np.linalg.norm(fd)


def test_dxpp_matches_kkt_reference_through_the_layer_batched():
    prob, params, x, vals = _constrained_ls(seed=2)
    B = 3
    rng = np.random.default_rng(3)
    batch = [np.stack([vals[0] + 0.1 * rng.standard_normal(vals[0].shape) for _ in range(B)]),
             np.stack([vals[1] + 0.1 * rng.standard_normal(vals[1].shape) for _ in range(B)]),
             vals[2]]  # lo shared across the batch (unbatched)
    grads = {}
    for backward in ("dxpp", "kkt"):
        ts = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in batch]
        (xs,) = CvxpyQPLayer(prob, params, [x], backward=backward)(*ts)
        assert xs.shape == (B, 6)
        xs.pow(3).sum().backward()
        grads[backward] = [t.grad.clone() for t in ts]
    for got, ref in zip(grads["dxpp"], grads["kkt"], strict=True):
        assert torch.linalg.norm(got - ref) <= 1e-5 * torch.linalg.norm(ref)


def test_relu_closed_form_and_matrix_variable_order():
    """min ‖X − Y‖² s.t. X ≥ 0 is the ReLU: ∂⟨W, X*⟩/∂Y = W ⊙ [Y > 0]; a matrix variable and
    parameter check cvxpy's column-major vectorisation."""
    Y = cp.Parameter((3, 4))
    X = cp.Variable((3, 4))
    layer = CvxpyQPLayer(cp.Problem(cp.Minimize(cp.sum_squares(X - Y)), [X >= 0]), [Y], [X])
    y = torch.tensor(np.random.default_rng(4).standard_normal((3, 4)), requires_grad=True)
    (xs,) = layer(y)
    torch.testing.assert_close(xs, torch.relu(y), atol=1e-8, rtol=0)
    w = torch.arange(12.0, dtype=torch.float64).reshape(3, 4)
    (xs * w).sum().backward()
    torch.testing.assert_close(y.grad, w * (y > 0), atol=1e-5, rtol=0)


def test_not_a_qp_or_not_dpp_is_a_clear_error():
    x, c = cp.Variable(3), cp.Parameter(3)
    with pytest.raises(QPInputError, match="not a QP.*cvxpylayers"):
        CvxpyQPLayer(cp.Problem(cp.Minimize(cp.norm(x - c, 2)), [x >= 0]), [c], [x])
    a = cp.Parameter(nonneg=True)
    with pytest.raises(QPInputError, match="not DPP"):
        CvxpyQPLayer(cp.Problem(cp.Minimize(cp.sum_squares(x) + a * a * cp.sum(x))), [a], [x])
    with pytest.raises(QPInputError, match="missing"):
        CvxpyQPLayer(cp.Problem(cp.Minimize(cp.sum_squares(x - c))), [], [x])


def test_tensor_reading_equals_probing_cvxpy():
    """The fast path (cvxpy's parameter tensors, one gather) gives exactly the map that
    probing cvxpy's apply_parameters column by column gives, parameters in any order."""
    from icml_dxpp.cvxpy_layer import _tensor_blocks, extract_qp

    P, c = cp.Parameter((3, 4)), cp.Parameter(4)
    d = cp.Parameter(2)
    X = cp.Variable((4, 2))
    prob = cp.Problem(cp.Minimize(cp.sum_squares(P @ X) + c @ X[:, 0] + cp.sum(X @ d)),
                      [X >= -1, cp.sum(X, axis=0) == d, X[0, :] <= c[:2]])
    for order in ([P, c, d], [d, P, c]):
        fast, _ = extract_qp(prob, order, method="tensor")
        slow, prog = extract_qp(prob, order, method="probe")
        assert _tensor_blocks(prog, order) is not None  # the fast path ran, no fallback
        for key in fast:
            np.testing.assert_allclose(fast[key].base, slow[key].base, atol=1e-12)
            np.testing.assert_allclose(fast[key].J.toarray(), slow[key].J.toarray(), atol=1e-12)


def test_probing_fallback_through_the_layer(monkeypatch):
    """When the parameter tensors cannot be read (another cvxpy layout), construction falls
    back to probing ``apply_parameters``; the layer then gives the same solution and gradients
    (cvxpy 1.7.5's ``apply_parameters`` has no ``quad_obj`` keyword: this path raised
    TypeError there)."""
    import icml_dxpp.cvxpy_layer as cl

    prob, params, x, vals = _constrained_ls(seed=5)
    outs = []
    for broken in (False, True):
        if broken:
            def fail(*_a, **_k):
                raise TypeError("unexpected layout")
            monkeypatch.setattr(cl, "_tensor_blocks", fail)
        ts = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in vals]
        (xs,) = CvxpyQPLayer(prob, params, [x])(*ts)
        assert all(p.value is None for p in params)  # construction leaves them unset
        xs.pow(3).sum().backward()
        outs.append((xs.detach(), [t.grad.clone() for t in ts]))
    torch.testing.assert_close(outs[1][0], outs[0][0], atol=1e-12, rtol=0)
    for got, ref in zip(outs[1][1], outs[0][1], strict=True):
        torch.testing.assert_close(got, ref, atol=1e-9, rtol=1e-9)


def test_dense_and_sparse_parameter_maps_agree(monkeypatch):
    """The per-call map θ -> (Q, ..., b) gives the same data and gradients whether a block's
    Jacobian is kept dense (small blocks, the fast path) or sparse (large blocks)."""
    import icml_dxpp.cvxpy_layer as cl

    prob, params, x, vals = _constrained_ls(seed=6)
    outs = []
    for limit in (cl._DENSE_MAP_MAX, 0):
        monkeypatch.setattr(cl, "_DENSE_MAP_MAX", limit)
        layer = CvxpyQPLayer(prob, params, [x])
        ts = [torch.tensor(np.stack([v, v + 0.01]), requires_grad=True) for v in vals]
        (xs,) = layer(*ts)
        xs.pow(3).sum().backward()
        Js = [m._tensors(torch.float64, torch.device("cpu"))[1] for m in layer.maps.values()]
        Js = [J for J in Js if J is not None]
        assert Js and all((J.layout == torch.strided) == (limit > 0) for J in Js)
        outs.append((xs.detach(), [t.grad.clone() for t in ts]))
    torch.testing.assert_close(outs[0][0], outs[1][0], atol=1e-12, rtol=0)
    for a, b in zip(outs[0][1], outs[1][1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-8, rtol=1e-7)  # round-off through ρ/β
