"""Layer resolution and steering on audio-LM wrappers: a real tiny Qwen2-Audio
(``model.language_model.layers``) and the benchmark's ToyAudioLM
(``language_model.model.layers``)."""

import numpy as np
import pytest
import torch
from icml_sarsteer import SARSteer, find_decoder_layers, hook_count
from icml_sarsteer.toy_lalm import build_toy_lalm, tiny_qwen2_audio


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_qwen2_audio_wrapper_layers_and_exact_alpha_zero(arch):
    model = tiny_qwen2_audio(arch, num_layers=2, max_source_positions=20)
    path, layers = find_decoder_layers(model)
    assert path == "model.language_model.layers" and len(layers) == 2
    n_audio = int(model.model.audio_tower._get_feat_extract_output_lengths(
        torch.tensor([40]))[1])
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([[1, 10, 11] + [4] * n_audio + [12, 13, 14]])
    feats = torch.randn(1, 32, 40, generator=g)
    inputs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), input_features=feats,
                  feature_attention_mask=torch.ones(1, 40, dtype=torch.long))

    def prompt(example, text):
        extra = torch.tensor([[20 + len(text) % 50, 21]])
        x = torch.cat([ids, extra * (1 + example)], 1) if text.endswith(".") else ids
        return {**inputs, "input_ids": x, "attention_mask": torch.ones_like(x)}

    steer = SARSteer(k=2).fit(model, [0, 1, 2], [0, 1, 2], prompt)
    assert steer.vectors.shape == (2, 64)
    with torch.no_grad():
        ref = model(**inputs).logits
        with steer.apply(model, alpha=0.0):
            zero = model(**inputs).logits
        with steer.apply(model, alpha=4.0):
            moved = model(**inputs).logits
    assert torch.equal(zero, ref)
    assert torch.equal(moved[:, :-1], ref[:, :-1]) and not torch.equal(moved, ref)
    assert hook_count(model) == 0


def test_toy_audio_lm_generate_and_steer(small_bench):
    model, prompt = build_toy_lalm(seed=0)
    path, layers = find_decoder_layers(model)
    assert path == "language_model.model.layers" and len(layers) == 4
    q = small_bench.fit_harmful[0]
    enc = prompt(q, "Please generate detailed steps for the question in the audio.")
    assert int((enc["input_ids"] == prompt.audio_token_id).sum()) == prompt.n_audio_tokens
    assert enc["input_features"].shape == (1, 32, prompt.frames)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=3, do_sample=False, min_new_tokens=3,
                             pad_token_id=prompt.pad_token_id)
    assert out.shape[1] == enc["input_ids"].shape[1] + 3
    steer = SARSteer(k=3).fit(model, small_bench.fit_harmful[:4], small_bench.fit_benign[:4],
                              prompt)
    with torch.no_grad():
        ref = model(**enc).logits
        with steer.apply(model, alpha=0.0):
            assert torch.equal(model(**enc).logits, ref)


def test_toy_audio_lm_save_load(tmp_path, small_bench):
    model, prompt = build_toy_lalm(seed=2)
    model.save_pretrained(tmp_path / "m")
    back = type(model).from_pretrained(tmp_path / "m")
    enc = prompt(small_bench.fit_benign[0], "x")
    with torch.no_grad():
        assert torch.equal(model(**enc).logits, back(**enc).logits)


def test_audio_prompt_text_twin(small_bench):
    _, prompt = build_toy_lalm(seed=0)
    q = small_bench.fit_benign[1]
    enc = prompt.as_text()(q, "Please")
    assert "input_features" not in enc
    assert q.obj.split()[-1] in prompt.decode(enc["input_ids"][0])
    assert np.all(enc["input_ids"].numpy() != prompt.audio_token_id)
