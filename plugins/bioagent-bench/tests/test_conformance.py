from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "bioagent-bench"
    # limits.time_s: the runs are bounded by their work, not by this machine's speed
    smoke = {"evaluate": {"tasks": ["deseq", "variant-calling"], "trials": 2,
                          "conditions": ["clean", "decoy", "corrupt"], "limits": {"time_s": 1e6}},
             "infer": {"task": "deseq", "agent": "robust", "condition": "decoy",
                       "limits": {"time_s": 1e6}}}
    # the config is the API: run_agent / evaluate_suite take the limits section as it is, the
    # tool agent the llm section
    api = {"limits": "icml_bioagent_bench.config:Limits",
           "llm": "icml_bioagent_bench.llm_agent:TransformersToolAgent"}
    # a stand-in model and tokenizer: the agent then keeps its config without loading one
    api_runtime = {"llm": {"model": object(), "tokenizer": object()}}
    shape_checks = True
