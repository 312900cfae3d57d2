"""Issue 61: the architecture-matched unimodal controls (const_b, twin_a), the mechanism
controls against stochastic pairing (matched noise, SAM, within-class mixup), the knob that
breaks conditional independence given the class, and the real two-view dataset (digits)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from icml_modality_pairing.data import MultimodalData, make_synthetic
from icml_modality_pairing.experiment import Settings, arm_view, make_data, run_arm
from icml_modality_pairing.models import LateFusion
from icml_modality_pairing.training import (
    ARMS,
    build_arm_model,
    matched_noise_std,
    train_model,
)

from icml.testing import load_script


def _flat(m):
    return torch.cat([p.detach().flatten() for p in m.parameters()])


def test_unimodal_controls_keep_the_fusion_architecture():
    train, _ = make_synthetic(200, 10, seed=0)
    fixed = build_arm_model("fixed", train, width=8, hidden=8)
    for arm in ("const_b", "twin_a"):
        view = arm_view(arm, train)
        m = build_arm_model(arm, view, width=8, hidden=8)
        assert isinstance(m, LateFusion)
        assert _flat(m).numel() == _flat(fixed).numel()
        assert torch.equal(view.modalities["a"], train.modalities["a"])
        assert torch.equal(view.labels, train.labels)
    assert not arm_view("const_b", train).modalities["b"].any()
    assert torch.equal(arm_view("twin_a", train).modalities["b"], train.modalities["a"])
    assert arm_view("fixed", train) is train


def test_matched_noise_std_is_the_rms_of_the_pairing_swap():
    """Exact by enumeration: E_i E_{j ~ class(i)} (x_j - x_i)^2 per feature, times p."""
    g = torch.Generator().manual_seed(0)
    y = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    x = torch.randn(9, 3, generator=g, dtype=torch.float64)
    data = MultimodalData({"a": x.clone(), "b": x}, y, 3)
    want = torch.zeros(3, dtype=torch.float64)
    for i in range(9):
        same = (y == y[i]).nonzero().flatten()
        want += ((x[same] - x[i]) ** 2).mean(0) / 9
    for p in (1.0, 0.3):
        assert torch.allclose(matched_noise_std(data, "b", p) ** 2, p * want, rtol=1e-12)


def _trained(train, **kw):
    torch.manual_seed(0)
    m = build_arm_model("fixed", train, width=6, hidden=6)
    train_model(m, train, p_stochastic=0.0, epochs=2, batch_size=20, seed=5, **kw)
    return _flat(m)


def test_controls_reduce_to_fixed_pairing_at_zero_strength():
    """Zero noise and SAM radius 0 are bit-equal to the fixed arm (the controls' draws use a
    second generator, so the batch order is the fixed arm's); positive strengths move the
    weights."""
    train, _ = make_synthetic(120, 10, seed=0)
    base = _trained(train)
    zero = {"b": torch.zeros(16)}
    assert torch.equal(_trained(train, control="noise", noise_std=zero), base)
    assert torch.equal(_trained(train, control="sam", sam_rho=0.0), base)
    assert not torch.equal(_trained(train, control="noise", noise_std={"b": torch.ones(16)}),
                           base)
    assert not torch.equal(_trained(train, control="sam", sam_rho=0.05), base)
    with pytest.raises(ValueError, match="control"):
        _trained(train, control="dropout")
    with pytest.raises(ValueError, match="noise_std"):
        _trained(train, control="noise")


def test_mixup_mixes_only_within_a_class():
    """When all samples of a class are identical, within-class mixup changes nothing (up to
    rounding of λx + (1-λ)x); mixing across classes would. With distinct samples it does."""
    g = torch.Generator().manual_seed(0)
    y = torch.arange(120) % 4
    protos = {m: torch.randn(4, 16, generator=g) for m in "ab"}
    same = MultimodalData({m: protos[m][y] for m in "ab"}, y, 4)
    assert torch.allclose(_trained(same, control="mixup", mixup_alpha=0.5), _trained(same),
                          atol=1e-5)
    train, _ = make_synthetic(120, 10, seed=0)
    assert (_trained(train, control="mixup") - _trained(train)).abs().max() > 1e-3


def test_sam_gradient_is_the_gradient_at_the_ascent_point():
    from icml_modality_pairing.training import _sam_second_gradient

    train, _ = make_synthetic(40, 10, seed=0)
    torch.manual_seed(0)
    m = build_arm_model("fixed", train, width=4, hidden=4).double()
    batch = {k: v.double() for k, v in train.modalities.items()}
    y = train.labels
    theta = _flat(m).clone()
    F.cross_entropy(m(**batch), y).backward()
    g = torch.cat([p.grad.flatten() for p in m.parameters()])
    _sam_second_gradient(m, batch, y, 0.1)
    got = torch.cat([p.grad.flatten() for p in m.parameters()])
    assert torch.equal(_flat(m), theta)                       # θ restored exactly
    m2 = build_arm_model("fixed", train, width=4, hidden=4).double()
    torch.nn.utils.vector_to_parameters(theta + 0.1 * g / g.norm(), m2.parameters())
    F.cross_entropy(m2(**batch), y).backward()
    want = torch.cat([p.grad.flatten() for p in m2.parameters()])
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)


def test_every_arm_runs_and_a_second_modality_carries_information():
    """All arms train and measure; on the default data the fixed fusion arm beats the same
    network with modality b replaced by a constant by more than 5 points (2 seeds)."""
    s = Settings(n_test=400, trace_samples=0, gauss_samples=1, power_iters=30, tol=1e-2)
    acc = {}
    for arm in ARMS:
        runs = [run_arm(arm, 1000, 8, seed, s).metrics for seed in (0, 1)]
        assert all(r["diverged"] == 0 and r["lambda_max"] > 0 for r in runs), arm
        acc[arm] = sum(r["accuracy"] for r in runs) / 2
    assert acc["fixed"] > acc["const_b"] + 0.05


@pytest.mark.parametrize("shared", [0.0, 0.5, 0.9])
def test_shared_noise_sets_the_within_class_correlation(shared):
    """Conditional independence given the class fails by exactly ``shared_noise``: the
    correlation of the two modalities' within-class residuals, per feature."""
    train, _ = make_synthetic(20000, 1, shared_noise=shared, seed=3)
    ra = train.modalities["a"] - _class_means(train, "a")
    rb = train.modalities["b"] - _class_means(train, "b")
    corr = ((ra * rb).mean(0) / (ra.std(0) * rb.std(0))).mean()
    assert float(corr) == pytest.approx(shared, abs=0.02)


def _class_means(data, m):
    x, y = data.modalities[m], data.labels
    means = torch.stack([x[y == c].mean(0) for c in range(data.n_classes)])
    return means[y]


def test_digits_two_views():
    pytest.importorskip("sklearn")
    from icml_modality_pairing.data import make_digits
    from sklearn.datasets import load_digits

    train, test = make_digits(500, 2000, seed=1)
    assert len(train) == 500 and len(test) == 1297 and train.n_classes == 10
    assert train.dims == {"a": 32, "b": 32}
    images = torch.as_tensor(load_digits().images, dtype=torch.float32) / 16
    whole = torch.cat([train.modalities["a"].view(-1, 8, 4), train.modalities["b"].view(-1, 8, 4)],
                      -1)
    first = int((images == whole[0]).all(-1).all(-1).nonzero()[0])
    assert int(train.labels[0]) == int(load_digits().target[first])
    again, _ = make_digits(500, 2000, seed=1)
    assert torch.equal(again.modalities["b"], train.modalities["b"])
    with pytest.raises(ValueError, match="n_train"):
        make_digits(1797, 10)
    s = Settings(dataset="digits", n_test=500)
    tr, te = make_data(300, s, 0)
    assert all(torch.isfinite(v).all() for v in [*tr.modalities.values(),
                                                  *te.modalities.values()])


def test_digits_regime_too_large_is_a_config_error(tmp_path):
    from icml_modality_pairing.config import TrainConfig
    from icml_modality_pairing.job import train

    import icml

    ctx = icml.RunContext.__new__(icml.RunContext)
    with pytest.raises(icml.ConfigError, match="regimes"):
        train(ctx, TrainConfig(dataset="digits", regimes=["2000x15"]))


def test_controls_benchmark_writes_its_results_file(tmp_path, monkeypatch):
    """The benchmark's results-file path on a tiny setting: every table, CIs as estimates."""
    pytest.importorskip("sklearn")
    from pathlib import Path

    from icml import results

    monkeypatch.delenv("ICML_RESULTS_DIR", raising=False)
    path = Path(__file__).parents[1] / "benchmarks" / "controls.py"
    mod = load_script(path, "mp_controls")
    out = tmp_path / "controls.json"
    mod.main(["--seeds", "2", "--regime", "120x1", "--shared", "0.5", "--digits", "60x1",
              "--n-test", "40", "--out-results", str(out)])
    data = results.load(out)
    names = [t["name"] for t in data["tables"]]
    assert names == ["controls-default", "contrasts", "ci-sweep", "controls-digits"]
    default = data["tables"][0]
    assert [r[0] for r in default["rows"]] == list(mod.ARMS)
    cell = default["rows"][0][3]
    assert set(cell) >= {"value", "lo", "hi"} and cell["lo"] <= cell["value"] <= cell["hi"]
    assert data["command"].startswith("python plugins/modality-pairing/benchmarks/controls.py")
