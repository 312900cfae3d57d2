from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "tipex"
    smoke = {"evaluate": {"num_tasks": 3, "replicas": [1, 3], "widths": [1, 2],
                          "granularities": [2], "inflight_limits": [0]},
             "infer": {"num_tasks": 3, "n_replicas": 3}}
    # no `api` yet: job.execution_config copies the shared keys into the runner's
    # ExecutionConfig (a second dataclass with the same fields); see the report
    shape_checks = True
