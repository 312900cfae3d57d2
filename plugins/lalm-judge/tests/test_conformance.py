from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "lalm-judge"
    smoke = {"evaluate": {"n_base": 1, "judge.n_train_base": 1, "judge.cnn_steps": 3,
                          "stats.n_boot": 100, "dialogues.max_turns": 4}}
    # The config is the API (issue 48): each section is what its component takes whole --
    # make_dialogues(n, seed=, dialogues=DialogueConfig), synthesize_benchmark(bench,
    # SpeechConfig), evaluate_judge(..., stats=StatsConfig), text_judge(JudgeSettings, ...).
    api = {"dialogues": "icml_lalm_judge.config:DialogueConfig",
           "speech": "icml_lalm_judge.config:SpeechConfig",
           "judge": "icml_lalm_judge.config:JudgeSettings",
           "stats": "icml_lalm_judge.config:StatsConfig"}
    probe_values = {"judges": ["oracle"], "modalities": ["T"]}
    shape_checks = True
