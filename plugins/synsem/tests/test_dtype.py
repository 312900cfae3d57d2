"""The ``extraction.dtype`` setting (issue 70): the forward pass in bfloat16 with the model's
parameters cast for the call and restored bit for bit, float32 clipping and pooling, and the
setting refused with one line when it names no dtype."""

from __future__ import annotations

import pytest
import torch
from icml_synsem import cast_parameters, extract_sentence_reps
from icml_synsem.config import EvaluateConfig, ExtractionOptions

from icml.config import ConfigError, build_config
from icml.runner import run


def test_bad_dtype_is_one_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"extraction\.dtype"):
        ExtractionOptions(dtype="int8")
    with pytest.raises(ConfigError, match=r"extraction\.dtype"):
        build_config(EvaluateConfig, {}, ["extraction.dtype=half"])


def test_bfloat16_extraction_is_close_and_leaves_the_model_as_it_was(byte_lm, sentences):
    model, tok = byte_lm
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    f32 = extract_sentence_reps(model, tok, sentences, ExtractionOptions(layers=[1, 2]))
    same = extract_sentence_reps(model, tok, sentences, ExtractionOptions(layers=[1, 2],
                                                                          dtype="float32"))
    bf16 = extract_sentence_reps(model, tok, sentences, ExtractionOptions(layers=[1, 2],
                                                                          dtype="bfloat16"))
    assert torch.equal(f32, same)  # "model" is the model's own float32
    assert bf16.dtype == torch.float32 and not torch.equal(bf16, f32)  # it did run in bfloat16
    cos = torch.nn.functional.cosine_similarity(bf16, f32, dim=-1)
    assert cos.min() > 0.995, cos.min()
    for n, p in model.named_parameters():  # restored bit for bit
        assert p.dtype == torch.float32 and torch.equal(p, before[n]), n


def test_cast_parameters_restores_on_error_and_keeps_buffers(byte_lm):
    model, _ = byte_lm
    p = next(model.parameters())
    ref = p.detach().clone()
    buffers = {n: b.dtype for n, b in model.named_buffers()}
    with pytest.raises(RuntimeError, match="boom"), cast_parameters(model, torch.bfloat16):
        assert p.dtype == torch.bfloat16
        assert {n: b.dtype for n, b in model.named_buffers()} == buffers
        raise RuntimeError("boom")
    assert p.dtype == torch.float32 and torch.equal(p, ref)


def test_the_job_takes_the_dtype_setting(tmp_path):
    res = run("synsem", "evaluate", overrides=[
        "toy.n_templates=6", "toy.per_template=3", "toy.num_layers=2",
        "analysis.imbalance_resamples=3", "extraction.dtype=bfloat16"],
        out=tmp_path, show_progress=False)
    assert res.status == "ok" and res.metrics["n_queries"] > 0
