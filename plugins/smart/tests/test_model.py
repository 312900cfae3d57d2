"""SMARTModel: query independence, permutation invariance, save/load, bad input."""

import pytest
import torch
from icml_smart import SMARTConfig, SMARTModel


def _inputs(data, dtype=torch.float64):
    b = data.batch([0, 1])
    return (b["geometry"].to(dtype), b["params"].to(dtype), b["queries"].to(dtype))


def test_query_independence(tiny_model, tiny_data):
    g, p, q = _inputs(tiny_data)
    with torch.no_grad():
        full = tiny_model(g, p, q)
        chunked = tiny_model.predict(g, p, q, chunk_size=7)
        perm = torch.randperm(q.shape[1])
        permuted = tiny_model(g, p, q[:, perm])
        other = q.clone()
        other[:, 10:] = torch.rand_like(other[:, 10:]) * 3 - 1.5
        replaced = tiny_model(g, p, other)
        alone = tiny_model(g, p, q[:, 3:4])
    assert torch.allclose(tiny_model.normalize(chunked), full, atol=1e-10)
    assert torch.allclose(permuted, full[:, perm], atol=1e-10)
    assert torch.allclose(replaced[:, :10], full[:, :10], atol=1e-10)
    assert torch.allclose(alone[:, 0], full[:, 3], atol=1e-10)
    assert not torch.allclose(replaced[:, 10:], full[:, 10:], atol=1e-3)  # queries do matter


def test_geometry_permutation_invariance(tiny_model, tiny_data):
    g, p, q = _inputs(tiny_data)
    perm = torch.randperm(g.shape[1])
    with torch.no_grad():
        a, b = tiny_model(g, p, q), tiny_model(g[:, perm], p, q)
    assert torch.allclose(a, b, atol=1e-10)


def test_outputs_depend_on_geometry_and_params(tiny_model, tiny_data):
    g, p, q = _inputs(tiny_data)
    with torch.no_grad():
        base = tiny_model(g, p, q)
        assert not torch.allclose(tiny_model(g * 1.2, p, q), base, atol=1e-4)
        assert not torch.allclose(tiny_model(g, p + 0.3, q), base, atol=1e-4)


def test_save_load_round_trip(tmp_path, tiny_data):
    torch.manual_seed(1)
    m = SMARTModel(SMARTConfig(max_freq=8.0, dim=32, depth=2, num_supernodes=16, num_neighbors=4,
                               target_mean=[0.1, 0.2, 0.3], target_std=[1.0, 2.0, 3.0])).eval()
    g, p, q = _inputs(tiny_data, torch.float32)
    m.save_pretrained(tmp_path / "m")
    m2 = SMARTModel.from_pretrained(tmp_path / "m").eval()
    assert m2.config.target_std == [1.0, 2.0, 3.0]
    with torch.no_grad():
        assert torch.equal(m.predict(g, p, q), m2.predict(g, p, q))


@pytest.mark.parametrize("decoder", ["cross_layer", "last_layer", "concat"])
def test_decoders_share_the_parameter_count(decoder):
    ref = SMARTModel(SMARTConfig(max_freq=8.0, dim=32, depth=3, num_supernodes=8))
    m = SMARTModel(SMARTConfig(max_freq=8.0, dim=32, depth=3, num_supernodes=8, decoder=decoder))
    assert sum(x.numel() for x in m.parameters()) == sum(x.numel() for x in ref.parameters())


def test_cross_layer_decoder_reads_each_encoder_layer(tiny_data):
    """Perturbing the last encoder block changes only the last decoder layer's context for the
    cross-layer decoder; for the last-layer decoder every layer reads it. A hook on the contexts
    seen by each decoder layer checks the wiring directly."""
    for decoder, expect in (("cross_layer", [0, 1, 2]), ("last_layer", [2, 2, 2])):
        torch.manual_seed(0)
        m = SMARTModel(SMARTConfig(max_freq=8.0, dim=32, depth=3, num_supernodes=8,
                                   decoder=decoder)).eval()
        g, p, q = _inputs(tiny_data, torch.float32)
        enc = m.encode(g, p)
        seen = []
        for blk in m.decoder:
            blk.norm_ctx.register_forward_hook(lambda mod, inp, out, s=seen: s.append(inp[0]))
        m.decode(enc, q)
        got = [next(i for i, z in enumerate(enc["latents"]) if z is s) for s in seen]
        assert got == expect


def test_three_dimensional_and_bfloat16():
    from icml_smart.data import PotentialFlowDataset

    d = PotentialFlowDataset(2, n_boundary=32, n_queries=20, kind="sphere")
    m = SMARTModel(SMARTConfig(max_freq=8.0, space_dim=3, param_dim=5, out_dim=4, dim=32, depth=2,
                               num_supernodes=8)).eval()
    b = d.batch([0, 1])
    b = {k: v.bfloat16().float() for k, v in b.items()}  # the inputs bfloat16 can represent
    with torch.no_grad():
        y = m.predict(b["geometry"], b["params"], b["queries"])
        yb = m.to(torch.bfloat16).predict(b["geometry"].bfloat16(), b["params"].bfloat16(),
                                          b["queries"].bfloat16())
    assert y.shape == (2, 20, 4) and yb.dtype == torch.bfloat16
    assert (yb.float() - y).norm() / y.norm() < 0.2  # bfloat16 keeps 8 mantissa bits


def test_bad_input_gets_clear_errors(tiny_model, tiny_data):
    g, p, q = _inputs(tiny_data)
    with torch.no_grad():
        with pytest.raises(ValueError, match="empty point cloud"):
            tiny_model(g[:, :0], p, q)
        with pytest.raises(ValueError, match="cannot pick 16 supernodes from 5"):
            tiny_model(g[:, :5], p, q)
        bad = g.clone()
        bad[0, 0, 0] = float("nan")
        with pytest.raises(ValueError, match="NaN"):
            tiny_model(bad, p, q)
        with pytest.raises(ValueError, match="param_dim=4"):
            tiny_model(g, p[:, :3], q)
        with pytest.raises(ValueError, match="degenerate"):
            tiny_model(torch.zeros_like(g), p, q)
        with pytest.raises(ValueError, match="queries must be"):
            tiny_model(g, p, q[..., :1])
        with pytest.raises(ValueError, match="chunk_size"):
            tiny_model.predict(g, p, q, chunk_size=0)
    with pytest.raises(ValueError, match="decoder_depth"):
        SMARTConfig(depth=3, decoder_depth=2)
    with pytest.raises(ValueError, match="divisible"):
        SMARTConfig(dim=30, heads=4)


def test_float64_and_integer_inputs_are_cast_to_the_model_dtype():
    """A float32 model given float64 inputs raised a raw matmul dtype error; int64 inputs a
    misleading "degenerate geometry" one. Both are now cast (same numbers as float32)."""
    torch.manual_seed(0)
    m = SMARTModel(SMARTConfig(max_freq=8.0, dim=32, depth=2, heads=4, num_supernodes=8,
                               num_neighbors=4, fourier_features=4)).eval()
    g = torch.randint(-3, 4, (1, 20, 2))          # integer grid coordinates, int64
    p = torch.randint(0, 3, (1, 4))
    q = torch.randint(-3, 4, (1, 10, 2))
    with torch.no_grad():
        ref = m(g.float(), p.float(), q.float())
        assert torch.equal(m(g, p, q), ref)
        assert torch.equal(m(g.double(), p.double(), q.double()), ref)
        assert torch.equal(m.predict(g.double(), p, q, chunk_size=3),
                           m.predict(g.float(), p.float(), q.float(), chunk_size=3))
        with pytest.raises(ValueError, match="geometry is torch.bool"):
            m(g.bool(), p, q)


def test_model_files_missing_empty_or_garbled_are_one_line_errors(tmp_path, tiny_model):
    from icml_smart import load_smart

    saved = tmp_path / "ok"
    tiny_model.save_pretrained(saved)
    assert load_smart(saved).config.dim == tiny_model.config.dim
    cases = {"missing": (lambda d: None, "no such folder"),
             "noconfig": (lambda d: d.mkdir(), "config.json: missing"),
             "emptyconfig": (lambda d: (d.mkdir(), (d / "config.json").write_text("")),
                             r"config.json: not a JSON config \(empty file\)"),
             "other": (lambda d: (d.mkdir(), (d / "config.json").write_text(
                 '{"model_type": "llama"}')), "model_type is 'llama'")}
    for name, (make, match) in cases.items():
        make(tmp_path / name)
        with pytest.raises(ValueError, match=match) as err:
            load_smart(tmp_path / name)
        assert name in str(err.value) and "\n" not in str(err.value)
    for name, data in (("emptyweights", b""), ("garbled", b"\x00garbage" * 50)):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text((saved / "config.json").read_text())
        (d / "model.safetensors").write_bytes(data)
        with pytest.raises(ValueError, match="model.safetensors") as err:
            load_smart(d)
        assert name in str(err.value) and "\n" not in str(err.value)


def test_radius_pooling_limits_the_neighbourhood():
    """With a radius smaller than any point spacing each supernode pools only itself; with a
    radius larger than the cloud it pools all k nearest (= plain kNN pooling)."""
    from icml_smart.fourier import FourierFeatures
    from icml_smart.supernodes import SupernodePooling

    torch.manual_seed(0)
    g = torch.rand(2, 30, 2, dtype=torch.float64)
    ff = FourierFeatures(2, 3)
    tiny = SupernodePooling(2, 16, 8, 5, 1e-9, ff).double()
    big = SupernodePooling(2, 16, 8, 5, 100.0, ff).double()
    knn = SupernodePooling(2, 16, 8, 5, None, ff).double()
    big.load_state_dict(tiny.state_dict())
    knn.load_state_dict(tiny.state_dict())
    t_tiny, centers = tiny(g)
    own = tiny.message(torch.cat([torch.zeros_like(centers), ff(centers)], -1))
    assert torch.allclose(t_tiny, own, atol=1e-12)
    assert torch.allclose(big(g)[0], knn(g)[0], atol=1e-12)
    assert not torch.allclose(t_tiny, knn(g)[0], atol=1e-6)
