from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "bioagent-bench"
    # time_limit_s: the runs are bounded by their work, not by this machine's speed
    smoke = {"evaluate": {"tasks": ["deseq", "variant-calling"], "trials": 2,
                          "conditions": ["clean", "decoy", "corrupt"], "time_limit_s": 1e6},
             "infer": {"task": "deseq", "agent": "robust", "condition": "decoy",
                       "time_limit_s": 1e6}}
