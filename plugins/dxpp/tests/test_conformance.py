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


def test_layer_takes_the_penalty_section_and_declares_no_default_of_its_own() -> None:
    """issue 48: the layer's backward settings are the config's ``penalty`` section; the
    layer's signature writes none of PenaltyOptions' defaults a second time."""
    import dataclasses
    import inspect

    from icml_dxpp import DXPPQPLayer, PenaltyOptions, differentiate, dxpp_solve

    pen_fields = {f.name for f in dataclasses.fields(PenaltyOptions)}
    for fn in (DXPPQPLayer, dxpp_solve, differentiate):
        assert not pen_fields & set(inspect.signature(fn).parameters), fn
    pen = PenaltyOptions(beta=1e-4, zero_dual_guard=None)
    assert DXPPQPLayer(penalty=pen).options.penalty == pen
    assert DXPPQPLayer(penalty=pen, beta=1e-3).options.penalty == \
        dataclasses.replace(pen, beta=1e-3)
    assert DXPPQPLayer().options.penalty == PenaltyOptions()
