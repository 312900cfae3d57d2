"""synsem on models other plugins produced (icml.compose, issue 50): representations are read in
the original residual basis (to_original), so a function-preserving rotation gives the original
model's representations at layers 0..L-1; layer L (after the final norm) and a basis change
without maps are refused with one line; ``--set model=`` takes a previous run folder."""

import json

import pytest
import torch
from icml_synsem import extract_sentence_reps
from icml_synsem.config import ExtractionOptions

from icml.compose import CompositionError, save_model
from icml.testing import rotated_copy


def rotated(model, seed=0, maps=True):
    """A function-preserving residual rotation h -> h Q (icml.testing.rotated_copy), marked."""
    return rotated_copy(model, seed=seed, maps=maps, producer="test")


@pytest.mark.parametrize("stop_early", [True, False])
def test_representations_mapped_to_the_original_basis(byte_lm, sentences, stop_early):
    model, tok = byte_lm
    rot = rotated(model)
    want = extract_sentence_reps(model, tok, sentences, ExtractionOptions(layers=[0, 1],
                                                                          stop_early=stop_early))
    got = extract_sentence_reps(rot, tok, sentences, ExtractionOptions(layers=[0, 1],
                                                                       stop_early=stop_early))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    with pytest.raises(CompositionError, match="layer 2 .*rotation.*layers 0..1"):
        extract_sentence_reps(rot, tok, sentences, ExtractionOptions(layers=[1, 2]))


def test_basis_change_without_maps_refused(byte_lm, sentences):
    model, tok = byte_lm
    with pytest.raises(CompositionError, match="synsem: representation extraction.*rotation"):
        extract_sentence_reps(rotated(model, maps=False), tok, sentences,
                              ExtractionOptions(layers=[1]))


def test_model_from_previous_run_folder(tmp_path):
    from icml_synsem import make_toy_data, planted_llama, toy_tokenizer

    from icml.runner import run

    small = ["toy.n_templates=8", "toy.per_template=3", "toy.num_layers=2",
             "analysis.imbalance_resamples=5", "extraction.layers=[1,2]"]
    builtin = run("synsem", "evaluate", overrides=small, out=tmp_path / "b", device="cpu",
                  show_progress=False)
    _, lex = make_toy_data(n_templates=8, per_template=3)
    folder = save_model(tmp_path / "producer", planted_llama(lex, num_layers=2, seed=0),
                        toy_tokenizer(lex), producer="test")
    (tmp_path / "producer" / "result.json").write_text(
        json.dumps({"artifacts": {"model": str(folder)}}))
    loaded = run("synsem", "evaluate", overrides=small + [f"model={tmp_path / 'producer'}"],
                 out=tmp_path / "l", device="cpu", show_progress=False)
    assert builtin.status == loaded.status == "ok"
    assert loaded.metrics == pytest.approx(builtin.metrics, abs=1e-6)
