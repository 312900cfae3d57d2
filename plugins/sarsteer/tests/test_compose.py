"""SARSteer on models other plugins produced (icml.compose, issue 50): activations are read and
steering vectors added in the original residual basis (to_original / from_original), so on a
function-preserving rotation the recorded activations and the steered logits equal the original
model's; a basis change without maps is refused with one line; ``--set model=`` takes the text
decoder from a previous run folder."""

import copy
import json

import pytest
import torch
from icml_sarsteer.activations import last_position_hidden
from icml_sarsteer.steering import steering_hooks

from icml.compose import CompositionError, save_model
from icml.models import byte_tokenizer, tiny_causal_lm
from icml.testing import rotated_copy


def rotated(model, seed=0, maps=True):
    """A function-preserving residual rotation h -> h Q (icml.testing.rotated_copy), marked."""
    return rotated_copy(model, seed=seed, maps=maps, producer="test")


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_reads_and_steering_in_the_original_basis(arch):
    model = tiny_causal_lm(arch, seed=2, num_layers=3, hidden_size=32, num_heads=4,
                           num_kv_heads=2)
    rot = rotated(model)
    inputs = {"input_ids": torch.tensor([[3, 7, 11, 5, 9]])}
    torch.testing.assert_close(last_position_hidden(rot, inputs),
                               last_position_hidden(model, inputs), atol=1e-5, rtol=0)
    g = torch.Generator().manual_seed(0)
    vectors = {i: torch.randn(32, generator=g) for i in (0, 2)}
    logits = []
    for m in (model, rot):
        with torch.no_grad(), steering_hooks(m, vectors, alpha=2.0):
            logits.append(m(**inputs).logits)
    torch.testing.assert_close(logits[1], logits[0], atol=1e-5, rtol=0)
    # the same vectors added in the rotated basis (no map) steer somewhere else
    plain = copy.copy(rot)
    object.__setattr__(plain, "icml_transforms", [])
    with torch.no_grad(), steering_hooks(plain, vectors, alpha=2.0):
        wrong = plain(**inputs).logits
    assert (wrong - logits[0]).abs().max() > 1e-2


def test_basis_change_without_maps_refused():
    model = tiny_causal_lm("llama", num_layers=2, hidden_size=32)
    rot = rotated(model, maps=False)
    with pytest.raises(CompositionError, match="sarsteer: activation reads.*rotation"):
        last_position_hidden(rot, {"input_ids": torch.tensor([[1, 2]])})
    with pytest.raises(CompositionError, match="sarsteer: steering vectors.*rotation"):
        with steering_hooks(rot, {0: torch.zeros(32)}):
            pass


def test_text_decoder_from_previous_run_folder(tmp_path):
    from icml.runner import run

    lm = tiny_causal_lm("qwen2", seed=0, num_layers=2, hidden_size=32, num_heads=4,
                        num_kv_heads=2)
    folder = save_model(tmp_path / "producer", lm, byte_tokenizer(), producer="test")
    (tmp_path / "producer" / "result.json").write_text(
        json.dumps({"artifacts": {"model": str(folder)}}))
    smoke = ["n_fit=8", "n_eval=4", "train_steps=11", "steer.k=4", "audio_backend=tones",
             "alphas=[]", f"model={tmp_path / 'producer'}"]
    res = run("sarsteer", "evaluate", overrides=smoke, out=tmp_path / "run", device="cpu",
              show_progress=False)
    assert res.status == "ok", res.error
    lm.save_pretrained(tmp_path / "plain")  # a local HF folder (no manifest) works the same
    byte_tokenizer().save_pretrained(tmp_path / "plain")
    plain = run("sarsteer", "evaluate", overrides=[*smoke[:-1], f"model={tmp_path / 'plain'}"],
                out=tmp_path / "run-plain", device="cpu", show_progress=False)
    assert plain.status == "ok"
    assert plain.tables[0].rows == res.tables[0].rows
