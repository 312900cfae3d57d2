"""Issue 59: forces against the exact coefficients, the query-parameter option, and the GINO
peer adapter (neuraloperator, when installed into .peers/gino or the environment)."""

import sys
from pathlib import Path

import pytest
import torch
from icml_smart import SMARTConfig, SMARTModel
from icml_smart.gino import segment_csr

GINO_DIR = Path(__file__).resolve().parents[3] / ".peers" / "gino"


def _loop_segment_csr(src, ptr, reduction):
    out = torch.zeros(len(ptr) - 1, src.shape[-1], dtype=src.dtype)
    for i in range(len(ptr) - 1):
        seg = src[ptr[i]:ptr[i + 1]]
        if len(seg):
            out[i] = seg.sum(0) / (len(seg) if reduction == "mean" else 1)
    return out


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_vectorised_segment_csr_equals_the_loop(reduction):
    src = torch.randn(30, 4, dtype=torch.float64)
    ptr = torch.tensor([0, 3, 3, 10, 30])  # an empty segment too
    ref = _loop_segment_csr(src, ptr, reduction)
    assert torch.allclose(segment_csr(src, ptr, reduction), ref)
    batched = segment_csr(torch.stack([src, 2 * src]), ptr[None].expand(2, -1), reduction)
    assert torch.allclose(batched[0], ref) and torch.allclose(batched[1], 2 * ref)
    with pytest.raises(ValueError, match="reduce"):
        segment_csr(src, ptr, "max")


def test_exact_forces_and_quadratures():
    from icml_smart.data import PotentialFlowDataset
    from icml_smart.job import free_stream_predictor
    from icml_smart.training import evaluate_forces

    data = PotentialFlowDataset(6, n_boundary=64, n_queries=8, seed=2)
    ex = evaluate_forces(None, data, dense=256)
    assert ex["dense_lift_mae"] < 1e-3 and ex["dense_drag_mae"] < 1e-3  # quadrature converges
    assert 1e-3 < ex["cloud_lift_mae"] < 0.2   # 64 random points: the cloud quadrature's error
    assert abs(ex["dense_lift_slope"] - 1) < 1e-3
    fs = evaluate_forces(free_stream_predictor(2), data, dense=64)
    exact_lift = [-2 * b.circulation / b.U for b in data.bodies]
    assert fs["dense_lift_slope"] == 0 and fs["dense_drag_mae"] == 0
    assert fs["dense_lift_mae"] == pytest.approx(sum(map(abs, exact_lift)) / 6, rel=1e-6)
    with pytest.raises(ValueError, match="ellipse"):
        evaluate_forces(None, PotentialFlowDataset(2, n_queries=8, kind="sphere"))


def test_query_params_option(tiny_data, tmp_path):
    assert SMARTConfig().query_params is False  # default: the published layout, numbers unchanged
    torch.manual_seed(0)
    cfg = SMARTConfig(dim=32, depth=2, num_supernodes=16, num_neighbors=6, query_params=True)
    m = SMARTModel(cfg).double().eval()
    b = tiny_data.batch([0, 1])
    g, p, q = b["geometry"].double(), b["params"].double(), b["queries"].double()
    with torch.no_grad():
        full = m(g, p, q)
        alone = m(g, p, q[:, 5:6])
        base = SMARTModel(SMARTConfig(dim=32, depth=2, num_supernodes=16, num_neighbors=6))
        base.load_state_dict(m.state_dict())  # same weights, no direct parameter path
        other = base.double().eval()(g, p, q)
    assert torch.allclose(alone[:, 0], full[:, 5], atol=1e-10)  # still query-independent
    assert not torch.allclose(full, other)
    m.save_pretrained(tmp_path / "m")
    again = SMARTModel.from_pretrained(tmp_path / "m").double().eval()
    assert again.config.query_params is True
    with torch.no_grad():
        assert torch.allclose(again(g, p, q), full, atol=1e-10)


@pytest.fixture
def neuralop_path():
    if GINO_DIR.is_dir():
        sys.path.insert(0, str(GINO_DIR))
    pytest.importorskip("neuralop", reason="neuraloperator not installed (see bench_peers.py)")
    yield
    if str(GINO_DIR) in sys.path:
        sys.path.remove(str(GINO_DIR))


def test_gino_peer_is_gino_forward_per_case(neuralop_path, tiny_data):
    from icml_smart.baselines import num_params
    from icml_smart.gino import GINOPeer, GINOPeerConfig, gino_for_params

    torch.manual_seed(0)
    m = GINOPeer(GINOPeerConfig(width=8, grid=8, modes=4, fno_layers=1, gno_hidden=[16])).eval()
    b = tiny_data.batch([0, 1])
    g, p, q = b["geometry"], b["params"], b["queries"]
    with torch.no_grad():
        ours = m(g, p, q)
        for i in range(2):  # GINO.forward itself, one case at a time
            ref = m.gino(input_geom=m._unit(g[i])[None], latent_queries=m.grid[None],
                         output_queries=m._unit(q[i])[None],
                         latent_features=m.latent_features(g[i:i + 1], p[i:i + 1]))
            assert torch.allclose(ours[i:i + 1], ref, atol=1e-5)
        alone = m(g, p, q[:, 7:8])
    assert torch.allclose(alone[:, 0], ours[:, 7], atol=1e-5)  # query-independent
    small = gino_for_params(30_000, grid=8, modes=4, fno_layers=1, gno_hidden=[16])
    assert abs(num_params(small) - 30_000) < 0.1 * 30_000


def test_normalize_params_option(tiny_data, tmp_path):
    from icml_smart.training import train_surrogate

    assert SMARTConfig().normalize_params is False  # default off: default numbers unchanged
    kw = dict(dim=32, depth=2, num_supernodes=16, num_neighbors=6)
    torch.manual_seed(0)
    m = SMARTModel(SMARTConfig(normalize_params=True, **kw))
    train_surrogate(m, tiny_data, steps=1, batch_size=2)
    xi = torch.stack([c["params"] for c in tiny_data.cases]).double()
    assert m.config.param_mean == pytest.approx(xi.mean(0).tolist())
    plain = SMARTModel(SMARTConfig(**kw))
    plain.load_state_dict(m.state_dict())
    m, plain = m.double().eval(), plain.double().eval()
    b = tiny_data.batch([0, 1])
    g, p, q = b["geometry"].double(), b["params"].double(), b["queries"].double()
    mean = torch.tensor(m.config.param_mean, dtype=torch.float64)
    std = torch.tensor(m.config.param_std, dtype=torch.float64)
    with torch.no_grad():  # the option is exactly the z-scoring wrapper of bench_force_diag.py
        assert torch.allclose(m(g, p, q), plain(g, (p - mean) / std, q), atol=1e-10)
    m.save_pretrained(tmp_path / "m")
    again = SMARTModel.from_pretrained(tmp_path / "m").double().eval()
    with torch.no_grad():
        assert torch.allclose(again(g, p, q), m(g, p, q), atol=1e-10)
    with pytest.raises(ValueError, match="param_mean"):
        SMARTConfig(param_mean=[0.0], param_dim=4)
