from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "dr-mmsearch"
    smoke = {
        "train": {"steps": 1, "warm": {"steps": 5}, "arms": ["baseline", "both"],
                  "hidden_size": 16, "grpo": {"prompts_per_step": 2}, "eval_generations": 1,
                  "world": {"n_entities": 12}},
        "infer": {"warm": {"steps": 3}, "num_questions": 2, "num_generations": 1,
                  "world": {"n_entities": 12}},
        "evaluate": {"warm": {"steps": 3}, "num_generations": 1, "world": {"n_entities": 12}},
    }
    # the config is the API (issue 48): each section is what the method takes
    api = {
        "reward": "icml_dr_mmsearch.grpo:TrajectoryReward",
        "advantage": "icml_dr_mmsearch.grpo:AdvantageConfig",
        "grpo": "icml_dr_mmsearch.grpo:GRPOConfig",
        "rollout": "icml_dr_mmsearch.rollout:RolloutConfig",
        "warm": "icml_dr_mmsearch.config:WarmStartConfig",
        "world": "icml_dr_mmsearch.config:WorldConfig",
        "train:": "icml_dr_mmsearch.config:TrainConfig",
    }
    probe_values = {"arms": ["baseline"], "save_model": "both"}
    shape_checks = True
