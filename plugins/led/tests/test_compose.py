"""LED on a model whose residual basis a producer changed (icml.compose, issue 50): the
final-norm read-out is mapped back and equals the original model's per-depth distributions; the
un-normed read-out (and DoLa, which reads un-normed layers) is refused with one line; a
basis-changing transform without maps is refused on both read-outs."""

import copy
import dataclasses

import pytest
import torch
from icml_led.generate import DoLaDecoding, LEDDecoding
from icml_led.layers import entropy_profile, layer_indices, layerwise_logits
from icml_led.led import LEDConfig

from icml.compose import CompositionError, mark, transforms
from icml.testing import rotated_copy


@torch.no_grad()
def with_final_gain(model, seed=1):
    """``model`` with a non-unit final-norm gain (a trained model has one)."""
    m = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    m.model.norm.weight.copy_(0.5 + torch.rand(m.config.hidden_size, generator=g))
    return m


def rotated(model, seed=0, maps=True, seen=None, unwrap=False):
    """A third party's function-preserving transform (icml.testing.rotated_copy: norm gains,
    the final one included, folded into the linears that read them, and the residual stream
    rotated by a random orthogonal Q). ``unwrap=True`` marks it with ``unwrap`` giving the
    original model back."""
    rot = rotated_copy(model, seed=seed, maps=maps, producer="test",
                       on_map=seen.append if seen is not None else None)
    if unwrap:
        (t,) = transforms(rot)
        mark(rot, dataclasses.replace(t, unwrap=lambda: model), replace=True)
    return rot


def test_final_norm_readout_equals_original(model):
    model = with_final_gain(model)
    ids = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator()
                        .manual_seed(0))
    seen = []
    rot = rotated(model, seen=seen)
    want = layerwise_logits(model, ids, depth=4, use_final_norm=True)
    got = layerwise_logits(rot, ids, depth=4, use_final_norm=True)
    torch.testing.assert_close(got.softmax(-1), want.softmax(-1), atol=1e-5, rtol=0)
    assert sorted(set(seen)) == sorted(layer_indices(6, 4)[1:])  # every read state was mapped
    mask = torch.ones_like(ids, dtype=torch.bool)
    assert entropy_profile(rot, ids, mask, True) == pytest.approx(
        entropy_profile(model, ids, mask, True), abs=1e-4)


def test_unnormed_readout_through_the_unwrapped_head(model):
    """With the gain folded into lm_head no basis map gives the un-normed read-out back; the
    producer's unwrap does (its head reads the mapped state): equal to the original's."""
    model = with_final_gain(model)
    ids = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator()
                        .manual_seed(1))
    rot = rotated(model, unwrap=True)
    want = layerwise_logits(model, ids, depth=4, use_final_norm=False)
    got = layerwise_logits(rot, ids, depth=4, use_final_norm=False)
    torch.testing.assert_close(got.softmax(-1), want.softmax(-1), atol=1e-5, rtol=0)
    # the rotated model's own head on the mapped states: a different distribution (the gain)
    from icml.compose import readout_basis

    with torch.no_grad():
        hs = rot(ids, output_hidden_states=True).hidden_states
        own = rot.lm_head(readout_basis(rot, hs[4], 4)[:, -1]).float()
    assert (own - want[:, 1]).abs().max() > 0.1 * want[:, 1].abs().max()
    mask = torch.ones_like(ids, dtype=torch.bool)
    assert entropy_profile(rot, ids, mask, False) == pytest.approx(
        entropy_profile(model, ids, mask, False), abs=1e-4)
    dola = DoLaDecoding(dola_layers=[2, 4], generator=torch.Generator().manual_seed(3))
    outs = [m.generate(ids[:1], custom_generate=dola, max_new_tokens=4, do_sample=False,
                       pad_token_id=0) for m in (model, rot)]
    assert torch.equal(outs[0], outs[1])


def test_unnormed_readout_and_dola_refused_on_rebased_model(llama):
    ids = torch.tensor([[1, 2, 3, 4]])
    rot = rotated(llama)
    with pytest.raises(CompositionError, match="LED's layer read-out.*random rotation.*unwrap"):
        layerwise_logits(rot, ids, depth=4, use_final_norm=False)
    with pytest.raises(CompositionError, match="random rotation"):
        LEDDecoding(LEDConfig(depth=3, use_final_norm=False)).setup(rot, ids, None)
    with pytest.raises(CompositionError, match="random rotation"):
        DoLaDecoding().setup(rot, ids, None)
    # depth 1 reads no intermediate layer: nothing to refuse
    LEDDecoding(LEDConfig(depth=1, use_final_norm=False)).setup(rot, ids, None)


def test_transform_without_maps_refused(llama):
    ids = torch.tensor([[1, 2, 3, 4]])
    rot = rotated(llama, maps=False)
    with pytest.raises(CompositionError) as err:
        layerwise_logits(rot, ids, depth=4, use_final_norm=True)
    assert "\n" not in str(err.value) and "random rotation (from test)" in str(err.value)


def test_led_generate_on_rotated_model_matches_original(llama, tok):
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    cfg = LEDConfig(depth=3, use_final_norm=True, think_only=False)
    rot = rotated(llama)
    outs = []
    for m in (llama, rot):
        dec = LEDDecoding(cfg, torch.Generator().manual_seed(7), lazy=False)
        outs.append(m.generate(ids, custom_generate=dec, max_new_tokens=6, do_sample=True,
                               temperature=1.0, pad_token_id=0))
    assert torch.equal(outs[0], outs[1])
    assert layer_indices(llama.config.num_hidden_layers, 3) == [6, 4, 3]


def _small(**kw):
    base = {"hidden_size": "32", "num_layers": "4", "led.depth": "3", "sft_steps": "0",
            "post_steps": "0", "num_problems": "2", "num_samples": "2", "ks": "[1, 2]",
            "num_terms": "2"}
    base.update(kw)
    return [f"{k}={v}" for k, v in base.items()]


def _run_folder(path, model, tok):
    """What a producing plugin leaves: ``<run>/model`` (icml.compose.save_model) named in
    ``result.json``'s artifacts."""
    import json

    from icml.compose import save_model

    folder = save_model(path, model, tok, producer="test")
    (path / "result.json").write_text(json.dumps({"artifacts": {"model": str(folder)}}))
    return path


def test_model_from_previous_run_folder(tmp_path, tok):
    from icml import ConfigError
    from icml.models import tiny_causal_lm
    from icml.runner import run

    m = tiny_causal_lm("llama", num_layers=4, hidden_size=32)
    src = _run_folder(tmp_path / "producer-run", m, tok)
    res = run("led", "infer", overrides=_small(model=str(src)), out=tmp_path / "r",
              device="cpu", show_progress=False)
    assert res.status == "ok", res.error
    # a saved re-based model without its producer's loader has lost its maps: refused
    src2 = _run_folder(tmp_path / "rotated-run", rotated(m), tok)
    with pytest.raises(CompositionError, match="random rotation"):
        run("led", "infer", overrides=_small(model=str(src2), **{"led.use_final_norm": "true"},
                                             profile_final_norm="true"),
            out=tmp_path / "r2", device="cpu", show_progress=False)
    with pytest.raises(ConfigError, match="model='nowhere/at-all'"):
        run("led", "infer", overrides=_small(model="nowhere/at-all"), out=tmp_path / "r3",
            device="cpu")
