"""The config is the API (issue 48): the job's ``extraction`` and ``analysis`` sections reach
``centroid_ablation_profile`` as they are, every default is written once (in the option
classes), and bad values are refused by the options themselves, from Python too."""

from __future__ import annotations

import inspect

import pytest
from icml_synsem import (
    AnalysisOptions,
    EvaluateConfig,
    ExtractionOptions,
    protocol,
    representations,
)

from icml.config import ConfigError, build_config
from icml.runner import run


def test_the_job_hands_its_sections_to_the_api(tmp_path, monkeypatch):
    seen = {}
    real = protocol.centroid_ablation_profile

    def spy(model, tok, data, extraction, analysis, **kw):
        seen.update(extraction=extraction, analysis=analysis)
        return real(model, tok, data, extraction, analysis, **kw)

    monkeypatch.setattr(protocol, "centroid_ablation_profile", spy)
    sets = ["toy.n_templates=6", "toy.per_template=3", "toy.num_layers=2",
            "extraction.last_n=2", "extraction.layers=[1,2]", "extraction.batch_tokens=0",
            "analysis.k=2", "analysis.imbalance_resamples=3", "analysis.centering=pooled"]
    res = run("synsem", "evaluate", overrides=sets, out=tmp_path, show_progress=False)
    assert res.status == "ok"
    want = build_config(EvaluateConfig, {}, sets)
    assert seen == {"extraction": want.extraction, "analysis": want.analysis}
    assert res.metrics["n_queries"] > 0


def test_no_api_function_repeats_a_setting_default():
    """The API functions take the option objects; none has a keyword default of its own for a
    setting (the mirrors of 0.2.4: ``last_n=3``, ``k=3``, ``batch_size=64``, ...)."""
    settings = {f for cls in (ExtractionOptions, AnalysisOptions)
                for f in cls.__dataclass_fields__}
    for fn in (representations.extract_sentence_reps, protocol.sentence_reps,
               protocol.analyse_reps, protocol.centroid_ablation_profile,
               representations.tokenize, representations.length_batches,
               protocol.select_queries):
        own = {n for n, p in inspect.signature(fn).parameters.items()
               if p.default is not p.empty}
        assert not own & settings, (fn.__name__, own & settings)


def test_bad_values_are_refused_by_the_options_from_python_too():
    with pytest.raises(ConfigError, match=r"extraction\.last_n"):
        ExtractionOptions(last_n=0)
    with pytest.raises(ConfigError, match=r"extraction\.clip_low"):
        ExtractionOptions(clip_low=0.9, clip_high=0.5)
    with pytest.raises(ConfigError, match=r"analysis\.centering"):
        AnalysisOptions(centering="median")
    with pytest.raises(ConfigError, match=r"analysis\.n_boot"):
        AnalysisOptions(n_boot=50)
    with pytest.raises(ConfigError, match="last_n"):  # the flat pre-0.2.5 keys are gone
        build_config(EvaluateConfig, {}, ["last_n=2"])
