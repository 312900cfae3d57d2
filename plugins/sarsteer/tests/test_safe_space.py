"""Closed forms of the safe-space ablation and the benign subspace."""

import numpy as np
import pytest
import torch
from icml_sarsteer.safe_space import benign_subspace, refusal_direction, safe_ablate


def _data(n=30, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    scales = torch.linspace(3.0, 0.1, d)
    return torch.randn(n, d, generator=g) * scales + 1.5, torch.randn(d, generator=g)


def test_basis_orthonormal_and_matches_covariance_eigenvectors():
    h, _ = _data()
    mu, u = benign_subspace(h, 5)
    assert torch.allclose(u.T @ u, torch.eye(5), atol=1e-5)
    assert torch.allclose(mu, h.mean(0))
    # the projector onto U_k equals the one onto the top-5 eigenvectors of the covariance
    c = np.cov(h.numpy().T.astype(np.float64))
    w, vecs = np.linalg.eigh(c)
    top = vecs[:, np.argsort(w)[::-1][:5]]
    assert np.allclose(u.numpy() @ u.numpy().T, top @ top.T, atol=1e-4)


def test_lambda_one_removes_the_benign_component():
    h, d = _data()
    _, u = benign_subspace(h, 6)
    v = safe_ablate(d, u, 1.0)
    assert float((u.T @ v).norm()) < 1e-5
    assert float(v.norm()) < float(d.norm())


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.7, 1.0, 2.0])
def test_projection_scales_by_one_minus_lambda(lam):
    h, d = _data(seed=2)
    _, u = benign_subspace(h, 4)
    v = safe_ablate(d, u, lam)
    assert torch.allclose(u.T @ v, (1 - lam) * (u.T @ d), atol=1e-5)
    # the orthogonal complement is untouched
    p = torch.eye(len(d)) - u @ u.T
    assert torch.allclose(p @ v, p @ d, atol=1e-5)


def test_k_zero_or_lambda_zero_gives_d():
    h, d = _data()
    _, u0 = benign_subspace(h, 0)
    assert u0.shape == (16, 0)
    assert torch.equal(safe_ablate(d, u0, 1.0), d)
    _, u = benign_subspace(h, 3)
    assert torch.equal(safe_ablate(d, u, 0.0), d)


def test_mean_of_differences_is_difference_of_means():
    g = torch.Generator().manual_seed(1)
    base, refused = torch.randn(9, 2, 8, generator=g), torch.randn(9, 2, 8, generator=g)
    d = refusal_direction(base, refused)
    assert torch.allclose(d, refused.mean(0) - base.mean(0), atol=1e-6)


def test_centering_matters():
    h, _ = _data()
    _, uc = benign_subspace(h, 1, center=True)
    _, un = benign_subspace(h, 1, center=False)
    # uncentred, the first direction follows the (large) mean
    m = h.mean(0) / h.mean(0).norm()
    assert abs(float(un[:, 0] @ m)) > abs(float(uc[:, 0] @ m))


def test_bad_k_and_shapes():
    h, d = _data(n=5, d=16)
    with pytest.raises(ValueError, match="exceeds the number of benign samples"):
        benign_subspace(h, 6)
    with pytest.raises(ValueError, match="hidden size"):
        benign_subspace(torch.randn(40, 4), 5)
    with pytest.raises(ValueError, match="empty"):
        benign_subspace(torch.zeros(0, 4), 0)
    with pytest.raises(ValueError, match="same shape"):
        refusal_direction(torch.zeros(3, 4), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="rows"):
        safe_ablate(d, torch.zeros(5, 2), 1.0)
