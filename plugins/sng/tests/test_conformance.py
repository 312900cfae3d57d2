import torch

from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "sng"
    smoke = {
        "train": {"steps": 3, "eval_every": 1, "n_interior": 12, "hidden": [6],
                  "time_limit": 0, "batch_size": 6, "sng.line_search": 2,
                  "spring.line_search": 2},
        "evaluate": {"decays": [0.0, 1.0], "n": 40, "p": 10, "batch_size": 5, "steps": 20,
                     "sgd_lr_grid": [1.0, 2.0]},
    }
    # The config is the API (issue 48): the job's `sng` / `spring` sections are the option
    # objects the optimizers take and keep (`SNG.options`).
    api = {"train:sng": "icml_sng.optim:SNGFromOptions",
           "train:spring": "icml_sng.optim:SPRINGFromOptions"}
    api_runtime = {"train:sng": {"params": [torch.zeros(3, requires_grad=True)]},
                   "train:spring": {"params": [torch.zeros(3, requires_grad=True)]}}
    shape_checks = True
