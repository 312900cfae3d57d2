"""CapKV on models other plugins produced (icml.compose, issue 50): presses read the model's own
attention inputs through its own projections, so a function-preserving residual-basis change
keeps the kept positions; ``--set model=`` takes a previous run folder."""

import copy
import json

import pytest
import torch
from icml_capkv.generation import prefill
from icml_capkv.presses import make_press

from icml.compose import CompositionError, Transform, mark, save_model
from icml.models import byte_tokenizer, tiny_causal_lm
from icml.testing import rotated_copy


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("policy", ["capkv", "snapkv", "h2o", "knorm"])
def test_kept_positions_unchanged_by_a_residual_rotation(arch, policy):
    model = tiny_causal_lm(arch, seed=1, num_layers=3, hidden_size=32, num_heads=4,
                           num_kv_heads=2)
    ids = torch.randint(4, model.config.vocab_size, (2, 40), generator=torch.Generator()
                        .manual_seed(0))
    kept = []
    for m in (model, rotated_copy(model)):  # h -> h Q, marked with maps
        cache = prefill(m, ids, make_press(policy, 0.5))
        kept.append([layer.positions for layer in cache.layers])
    for a, b in zip(*kept):
        assert torch.equal(a, b)


@pytest.mark.parametrize("policy", ["capkv", "knorm", "leverage", "greedy_logdet", "snapkv",
                                    "h2o", "streaming", "random"])
def test_policies_that_score_keys_or_values_refuse_re_parametrised_heads(policy):
    """A transform that re-parametrised each head's key/value spaces (attention unchanged,
    e.g. fptquant's trained pre-RoPE/value transforms) changes key norms, cosines and value
    leverage: the policies that score them refuse with one line naming the pair, before any
    forward; the attention-score and position policies run."""
    model = tiny_causal_lm("llama", seed=1, num_layers=2, hidden_size=32, num_heads=4,
                           num_kv_heads=2)
    marked = mark(copy.deepcopy(model), Transform("head transforms", "other-plugin",
                                                  preserves_function=True,
                                                  changes_head_bases=True))
    ids = torch.randint(4, model.config.vocab_size, (1, 24),
                        generator=torch.Generator().manual_seed(0))
    reads = {"capkv": "value leverage", "knorm": "key norms", "leverage": "value leverage",
             "greedy_logdet": "value leverage"}
    if policy in reads:
        with pytest.raises(CompositionError) as err:
            prefill(marked, ids, make_press(policy, 0.5))
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith(f"{policy}: ") and reads[policy] in msg
        assert "head transforms (from other-plugin)" in msg
        prefill(model, ids, make_press(policy, 0.5))  # unmarked: runs
    else:
        a = prefill(marked, ids, make_press(policy, 0.5))
        b = prefill(model, ids, make_press(policy, 0.5))
        assert all(torch.equal(x.positions, y.positions) for x, y in zip(a.layers, b.layers))


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
