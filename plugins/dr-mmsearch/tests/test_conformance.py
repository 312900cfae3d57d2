from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "dr-mmsearch"
    smoke = {
        "train": {"steps": 1, "warm_steps": 5, "arms": ["baseline", "both"],
                  "hidden_size": 16, "prompts_per_step": 2, "eval_generations": 1,
                  "world": {"n_entities": 12}},
        "infer": {"warm_steps": 3, "num_questions": 2, "num_generations": 1,
                  "world": {"n_entities": 12}},
        "evaluate": {"warm_steps": 3, "num_generations": 1, "world": {"n_entities": 12}},
    }
