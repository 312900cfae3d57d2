from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "bioagent-bench"
    smoke = {"evaluate": {"tasks": ["deseq", "variant-calling"], "trials": 2,
                          "conditions": ["clean", "decoy", "corrupt"]},
             "infer": {"task": "deseq", "agent": "robust", "condition": "decoy"}}
