from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "dxpp"
    smoke = {
        "differentiate": {"sizes": [8], "problems": 1, "betas": [1e-4], "repeats": 1},
        "evaluate": {"random_sizes": [8], "simplex_sizes": [100], "chain_dims": [2],
                     "portfolio_steps": 2, "repeats": 1},
    }
