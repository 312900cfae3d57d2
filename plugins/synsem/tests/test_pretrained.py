"""The protocol on the real pretrained SmolLM2-135M-Instruct (Llama, 30 blocks), small: the
cross-layer profiles have the loose shape that the full run (README) shows."""


import pytest
from icml_synsem.config import AnalysisOptions, ExtractionOptions


@pytest.fixture(scope="module")
def smollm():
    from icml.testing import pretrained_or_skip

    return pretrained_or_skip("smollm2-135m-instruct")


@pytest.mark.pretrained
def test_profiles_on_smollm(smollm):
    import torch
    from icml_synsem import centroid_ablation_profile, make_english_data

    torch.manual_seed(0)
    model, tok = smollm
    data = make_english_data(per_template=3, n_templates=24, languages=["es"], rewordings=1,
                             seed=0)
    res = centroid_ablation_profile(model, tok, data, ExtractionOptions(layers=[1, 16, 30]),
                                    AnalysisOptions(imbalance_resamples=20, n_boot=200))
    n = res.n_queries
    assert n == 72 and res.layers == [1, 16, 30]
    syn, sem = res.syntactic, res.semantic
    chance_syn = 1 - (1 - 3 / n) ** 3  # about 0.12
    # syntax: same-template twins are found well above chance in the middle of the network,
    # and removing the syntactic centroid costs far more than removing another sentence's
    assert syn["none"][1] > 2 * chance_syn
    assert syn["none"][1] - syn["syn"][1] > 0.1
    assert syn["none"][1] - syn["syn"][1] > 2 * (syn["none"][1] - syn["syn_perm"][1])
    # semantics: paraphrase retrieval grows with depth (weak at block 1, clearly above
    # chance 3/72 at the last block)
    assert sem["none"][2] > sem["none"][0] + 0.1 and sem["none"][2] > 0.2
    # every interval contains its estimate
    for vals, cis in ((syn, res.syntactic_ci), (sem, res.semantic_ci)):
        for cond in vals:
            assert all(lo <= v <= hi for v, (lo, hi) in zip(vals[cond], cis[cond], strict=True))
    assert set(res.translation_recall) == {"es", "en1"}


@pytest.mark.pretrained
def test_cli_real_model_english_data(smollm, tmp_path):
    """``icml run synsem --set model=smollm2-135m-instruct --set data=english``: the packaged
    model by name, the controlled English data, intervals and the translation table."""
    from icml.runner import run

    res = run("synsem", "evaluate", overrides=[
        "model=smollm2-135m-instruct", "data=english", "english.per_template=2",
        "english.languages=[es]", "extraction.layers=[1,30]", "analysis.imbalance_resamples=5",
        "analysis.n_boot=100"],
        out=tmp_path / "run", device="cpu", show_progress=False)
    assert res.status == "ok" and res.metrics["n_queries"] == 96
    assert "[" in res.tables[1].rows[0][1]  # "recall [low, high]" cells (after the headline)
    assert res.tables[-1].columns == ["layer", "es"]
    assert res.artifacts["syntax profile"] == "profile_syntax.png"
    assert any(p.name == "profile_syntax.png" for p in (tmp_path / "run").rglob("*.png"))
