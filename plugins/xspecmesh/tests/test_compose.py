"""xspecmesh on models other plugins produced (icml.compose, issue 50): speculative decoding
reads only the verified model's own final state and logits, so on a function-preserving
residual rotation greedy decoding is unchanged and stays lossless; ``--set model=`` takes a
backbone from a previous run folder, checked against the mesh vocabulary."""

import json

import pytest
import torch
from icml_xspecmesh.speculative import autoregressive_generate, speculative_generate

from icml import ConfigError
from icml.compose import save_model
from icml.testing import rotated_copy


def rotated(model, seed=0):
    """A function-preserving residual rotation h -> h Q (icml.testing.rotated_copy), marked
    with maps."""
    return rotated_copy(model, seed=seed, producer="test")


def test_greedy_speculative_on_a_rotated_backbone(lm, random_heads):
    rot = rotated(lm)
    ids = torch.tensor([[1, 9, 4]])
    outs = []
    for m in (lm, rot):
        heads = random_heads(m, num_heads=3, seed=0)  # heads built on (distilled for) m
        spec = speculative_generate(m, heads, ids, max_new_tokens=24, acceptance="greedy",
                                    eos_token_id=[], accept_top_k=None)
        ar = autoregressive_generate(m, ids, max_new_tokens=24, acceptance="greedy",
                                     eos_token_id=[], accept_top_k=None)
        assert spec.sequences.tolist() == ar.sequences.tolist()
        outs.append(ar.sequences.tolist())
    assert outs[0] == outs[1]


def _over(model):
    return [f"model={model}", "n_train=16", "num_meshes=1", "distill_steps=2",
            "max_new_tokens=12", "acceptance=greedy", "chamfer_points=16", "n_refs=1",
            "num_heads=2"]


def test_backbone_from_previous_run_folder(tmp_path):
    from icml_xspecmesh.dataset import CLASSES
    from icml_xspecmesh.tokenizer import MeshTokenizer

    from icml.models import byte_tokenizer, tiny_causal_lm
    from icml.runner import run

    tok = MeshTokenizer(n_bins=32, n_classes=len(CLASSES), axis_tokens=True)  # the job's

    m = tiny_causal_lm("llama", seed=0, num_layers=2, hidden_size=32, num_heads=4,
                       num_kv_heads=2, vocab_size=tok.vocab_size, max_positions=512)
    # icml.compose.load_model needs tokenizer files in the folder (any: the mesh tokenizer is
    # not a transformers one), so the producer saves a byte tokenizer beside the backbone
    folder = save_model(tmp_path / "producer", m, byte_tokenizer(), producer="test")
    (tmp_path / "producer" / "result.json").write_text(
        json.dumps({"artifacts": {"model": str(folder)}}))
    res = run("xspecmesh", "infer", overrides=_over(tmp_path / "producer"),
              out=tmp_path / "run", device="cpu", show_progress=False)
    assert res.status == "ok", res.error
    m.save_pretrained(tmp_path / "plain")  # a local HF folder (no manifest) works the same
    byte_tokenizer().save_pretrained(tmp_path / "plain")
    plain = run("xspecmesh", "infer", overrides=_over(tmp_path / "plain"),
                out=tmp_path / "run-plain", device="cpu", show_progress=False)
    assert plain.status == "ok"
    assert plain.metrics["spec_greedy_tokens_per_call"] == res.metrics[
        "spec_greedy_tokens_per_call"]
    small = tiny_causal_lm("llama", num_layers=1, hidden_size=32, vocab_size=50)
    small.save_pretrained(tmp_path / "wrong-vocab")
    byte_tokenizer().save_pretrained(tmp_path / "wrong-vocab")
    with pytest.raises(ConfigError, match="model.*50 output tokens"):
        run("xspecmesh", "infer", overrides=_over(tmp_path / "wrong-vocab"),
            out=tmp_path / "run2", device="cpu", show_progress=False)
    with pytest.raises(ConfigError, match="model"):
        run("xspecmesh", "infer", overrides=_over("no/such/folder"), out=tmp_path / "run3",
            device="cpu")
