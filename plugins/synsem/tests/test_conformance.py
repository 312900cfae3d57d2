from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "synsem"
    shape_checks = True
    smoke = {"evaluate": {"toy": {"n_templates": 6, "per_template": 3, "num_layers": 2},
                          "analysis": {"imbalance_resamples": 5}}}
    # The config is the API (issue 48): the job's `extraction` and `analysis` sections are the
    # option objects extract_sentence_reps / sentence_reps and analyse_reps take as they are
    # (centroid_ablation_profile takes both); tests/test_config.py checks the job hands them on.
    api = {"evaluate:extraction": "icml_synsem.config:ExtractionOptions",
           "evaluate:analysis": "icml_synsem.config:AnalysisOptions"}
    probe_values = {"analysis.n_boot": 200}  # 0 or at least 100



def test_package_import_is_light():
    """``import icml_synsem`` re-exports the API lazily: no torch/transformers at import, nor
    when the pure-Python data classes are used."""
    import subprocess
    import sys

    code = ("import sys, icml_synsem; icml_synsem.SynSemData; icml_synsem.make_toy_data; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip().splitlines()[-1] == "[]"
