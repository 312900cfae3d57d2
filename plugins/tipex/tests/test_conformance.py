from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "tipex"
    smoke = {"evaluate": {"num_tasks": 3, "replicas": [1, 3], "widths": [1, 2],
                          "granularities": [2], "inflight_limits": [0]},
             "infer": {"num_tasks": 3, "n_replicas": 3}}
    # the execution.* section is ExecutionSettings, which the runner's ExecutionConfig
    # subclasses; N, w, the planner and the seed are the design point each job sets or sweeps
    api = {"execution": "icml_tipex.runner:ExecutionConfig"}
    api_runtime = {"execution": {"n_replicas": 9, "width": 2, "planner": "dag", "seed": 3}}
    shape_checks = True
