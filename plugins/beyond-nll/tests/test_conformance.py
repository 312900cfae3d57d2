from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "beyond-nll"
    api = {"train:loss": "icml_beyond_nll.loss:ProbObjectiveLoss"}
    api_runtime = {"train:loss": {"objective": "p", "ignore_index": -100}}
    probe_values = {"objectives": "logp,p", "model": ""}
    shape_checks = True
    smoke = {
        "train": {"pretrain_steps": 5, "steps": 2, "n_strong": 16, "n_weak": 16, "n_test": 8,
                  "objectives": "logp,p", "batch_size": 8},
        "evaluate": {"pretrain_steps": 2, "n": 8, "batch_size": 8},
        "differentiate": {"n_tokens": 16, "grid": 5, "objectives": "logp,p,OnlyTopP-0.1"},
    }
