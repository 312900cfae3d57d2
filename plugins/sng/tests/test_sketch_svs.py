"""Closed forms of the sketch-and-project step and of squared volume sampling."""

import math

import pytest
import torch
from icml_sng import (
    elementary_symmetric,
    projection_matrix,
    sample_svs,
    sample_svs_many,
    sketch_direction,
    svs_enumerate,
    svs_expectations_exact,
    svs_expected_projection,
    svs_preconditioner,
    svs_rate,
)

D = torch.float64


def _J(n, p, seed=0):
    g = torch.Generator().manual_seed(seed)
    scales = torch.logspace(0, -1.5, p, dtype=D)
    return torch.randn(n, p, generator=g, dtype=D) * scales, torch.randn(n, generator=g,
                                                                         dtype=D)


@pytest.mark.parametrize("k,p", [(4, 9), (9, 4), (6, 6)])
@pytest.mark.parametrize("lam", [0.0, 1e-2, 3.0])
def test_woodbury_and_parameter_space_solves_agree(k, p, lam):
    J, r = _J(k, p)
    d1 = sketch_direction(J, r, lam, solve="woodbury")
    d2 = sketch_direction(J, r, lam, solve="param")
    torch.testing.assert_close(d1, d2, rtol=1e-9, atol=1e-10)
    if lam > 0:  # the regularised least-squares characterisation, independently
        ref = torch.linalg.solve(J.T @ J + lam * torch.eye(p, dtype=D), J.T @ r)
        torch.testing.assert_close(d1, ref, rtol=1e-9, atol=1e-11)


def test_undamped_step_is_minimum_norm_projection():
    J, r = _J(5, 11)
    d = sketch_direction(J, r, 0.0)
    torch.testing.assert_close(J @ d, r, rtol=0, atol=1e-12)  # sampled equations solved
    torch.testing.assert_close(d, torch.linalg.pinv(J) @ r, rtol=1e-10, atol=1e-12)
    # minimum norm: no component in the null space of J
    null = torch.eye(11, dtype=D) - projection_matrix(J)
    assert float((null @ d).norm()) < 1e-12


def test_elementary_symmetric_matches_brute_force():
    import itertools

    x = torch.tensor([0.5, 2.0, 3.0, 0.1, 1.5], dtype=D)
    e = elementary_symmetric(x, 5)
    for j in range(6):
        ref = sum(math.prod(c) for c in itertools.combinations(x.tolist(), j)) if j else 1.0
        assert float(e[j]) == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("n,p,k", [(7, 5, 3), (5, 8, 2), (6, 4, 4)])
@pytest.mark.parametrize("lam", [0.0, 0.3])
def test_svs_closed_forms_match_exhaustive_enumeration(n, p, k, lam):
    J, r = _J(n, p, seed=n + p)
    Ed, EPi = svs_expectations_exact(J, r, k, lam)
    P = svs_preconditioner(J, k, lam)
    torch.testing.assert_close(Ed, P @ J.T @ r, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(EPi, svs_expected_projection(J, k, lam), rtol=1e-9, atol=1e-12)
    if lam == 0:
        assert float(torch.trace(EPi)) == pytest.approx(k, rel=1e-10)
    # the rate constant is the smallest positive eigenvalue of E[Pi]
    ev = torch.linalg.eigvalsh(EPi)
    assert svs_rate(J, k, lam) == pytest.approx(float(ev[ev > 1e-9].min()), rel=1e-8)


def test_svs_edge_cases_scaled_gd_and_gauss_newton():
    J, r = _J(8, 4, seed=1)
    # k = 1: E[d] = J^T r / ||J||_F^2, a scaled gradient step
    torch.testing.assert_close(svs_preconditioner(J, 1), torch.eye(4, dtype=D) / (J**2).sum())
    # k = rank: E[d] = (J^T J)^{-1} J^T r, the Gauss-Newton step
    torch.testing.assert_close(svs_preconditioner(J, 4), torch.linalg.inv(J.T @ J),
                               rtol=1e-9, atol=1e-10)


def test_uniform_sampling_does_not_give_the_preconditioned_form():
    """The coupled expectation under *uniform* batches is not P J^T r (contrast check)."""
    J, r = _J(7, 5, seed=2)
    subsets, _ = svs_enumerate(J, 3)
    Ed_uniform = sum(sketch_direction(J[list(S)], r[list(S)]) for S in subsets) / len(subsets)
    target = svs_preconditioner(J, 3) @ J.T @ r
    assert float((Ed_uniform - target).norm() / target.norm()) > 0.05


@pytest.mark.parametrize("lam", [0.0, 0.5])
def test_kdpp_sampler_matches_svs_probabilities(lam):
    J, _ = _J(6, 4, seed=5)
    subsets, probs = svs_enumerate(J, 2, lam)
    pos = {S: i for i, S in enumerate(subsets)}
    g = torch.Generator().manual_seed(0)
    draws = 2000
    counts = torch.zeros(len(subsets), dtype=D)
    for _ in range(draws):
        counts[pos[tuple(sample_svs(J, 2, lam, g).tolist())]] += 1
    tv = 0.5 * float((counts / draws - probs).abs().sum())
    assert tv < 0.05, tv


def test_svs_bad_input():
    J, _ = _J(5, 3)
    with pytest.raises(ValueError, match="larger than the number of residuals"):
        svs_preconditioner(J, 6)
    with pytest.raises(ValueError, match="rank"):
        svs_preconditioner(J, 4)  # rank 3 < k without damping
    with pytest.raises(ValueError, match="damping"):
        sketch_direction(J, torch.zeros(5, dtype=D), -1.0)
    with pytest.raises(ValueError, match="shape"):
        sketch_direction(J, torch.zeros(4, dtype=D))


def test_monte_carlo_svs_expected_projection_at_n_200():
    """k-DPP draws at n = 200 reproduce the closed-form E[Pi_S]; uniform batches do not."""
    g = torch.Generator().manual_seed(0)
    n, p, k = 200, 6, 3
    rows = torch.logspace(0, -1.5, n, dtype=D)[:, None]  # heterogeneous row norms
    J = torch.randn(n, p, generator=g, dtype=D) * rows * torch.logspace(0, -1, p, dtype=D)
    target = svs_expected_projection(J, k)
    draws = 1000
    svs = sum(projection_matrix(J[b]) for b in sample_svs_many(J, k, draws, 0.0, g)) / draws
    uni = sum(projection_matrix(J[torch.randperm(n, generator=g)[:k]])
              for _ in range(draws)) / draws
    assert float((svs - target).norm()) < 0.05
    assert float((uni - target).norm()) > 0.1
