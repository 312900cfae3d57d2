from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "dxpp"
    smoke = {
        "differentiate": {"sizes": [8], "problems": 1, "betas": [1e-4], "repeats": 1},
        "evaluate": {"random_sizes": [8], "simplex_sizes": [100], "chain_dims": [2],
                     "portfolio_steps": 2, "repeats": 1},
    }
    # the config is the API (issue 48): dXPP's backward takes the `penalty` section itself
    # (dxpp_backward(..., opts=PenaltyOptions), LayerOptions.penalty, compare_backwards)
    api = {"penalty": "icml_dxpp.penalty:PenaltyOptions",
           "differentiate:": "icml_dxpp.config:DifferentiateConfig",
           "evaluate:": "icml_dxpp.config:EvaluateConfig"}
    probe_values = {"solver": "clarabel"}
    shape_checks = True
