"""CapKV on models other plugins produced (icml.compose, issue 50): presses read the model's own
attention inputs through its own projections, so a function-preserving residual-basis change
keeps the kept positions; ``--set model=`` takes a previous run folder."""

import copy
import json

import pytest
import torch
from icml_capkv.generation import prefill
from icml_capkv.presses import make_press

from icml.compose import Transform, mark, save_model
from icml.models import byte_tokenizer, tiny_causal_lm


@torch.no_grad()
def rotated(model, seed=0):
    """A function-preserving residual rotation h -> h Q (unit norm scales), marked with maps."""
    m = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(m.config.hidden_size, m.config.hidden_size, generator=g,
                                       dtype=torch.float64))
    q = q.to(m.lm_head.weight.dtype)
    m.model.embed_tokens.weight.copy_(m.model.embed_tokens.weight @ q)
    if not m.config.tie_word_embeddings:
        m.lm_head.weight.copy_(m.lm_head.weight @ q)
    for layer in m.model.layers:
        a, f = layer.self_attn, layer.mlp
        for lin in (a.q_proj, a.k_proj, a.v_proj, f.gate_proj, f.up_proj):
            lin.weight.copy_(lin.weight @ q)
        for lin in (a.o_proj, f.down_proj):
            lin.weight.copy_(q.T @ lin.weight)
    return mark(m, Transform("rotation", "test", preserves_function=True,
                             changes_residual_basis=True,
                             to_original=lambda h, i: h @ q.T.to(h.dtype),
                             from_original=lambda h, i: h @ q.to(h.dtype)))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("policy", ["capkv", "snapkv", "h2o", "knorm"])
def test_kept_positions_unchanged_by_a_residual_rotation(arch, policy):
    model = tiny_causal_lm(arch, seed=1, num_layers=3, hidden_size=32, num_heads=4,
                           num_kv_heads=2)
    ids = torch.randint(4, model.config.vocab_size, (2, 40), generator=torch.Generator()
                        .manual_seed(0))
    kept = []
    for m in (model, rotated(model)):
        cache = prefill(m, ids, make_press(policy, 0.5))
        kept.append([layer.positions for layer in cache.layers])
    for a, b in zip(*kept):
        assert torch.equal(a, b)


def test_model_from_previous_run_folder(tmp_path):
    from icml import ConfigError
    from icml.runner import run

    model = tiny_causal_lm("llama", hidden_size=32, num_heads=4, num_kv_heads=2)
    folder = save_model(tmp_path / "producer", model, byte_tokenizer(), producer="test")
    (tmp_path / "producer" / "result.json").write_text(
        json.dumps({"artifacts": {"model": str(folder)}}))
    over = ["eval_samples=4", "context_len=24", "n_pairs=3", "ratios=[0.5]",
            "policies=capkv,h2o"]
    res = run("capkv", "infer", overrides=[f"model={tmp_path / 'producer'}", *over],
              out=tmp_path / "run", device="cpu", show_progress=False)
    assert res.status == "ok", res.error
    assert 0.0 <= res.metrics["kl/capkv/0.5"] < float("inf")
    with pytest.raises(ConfigError, match="model='no/such/run'"):
        run("capkv", "infer", overrides=["model=no/such/run", *over], out=tmp_path / "r2",
            device="cpu")
