from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "cage"
    smoke = {"evaluate": {"n_images": 3, "responders": ["oracle", "unfaithful"],
                          "gap.n_bootstrap": 100},
             "train": {"n_images": 3}}
    # The config is the API (issue 48): each section is what its component takes whole --
    # the rule judge *is* its rubric (RuleJudge subclasses RuleConfig); the scene generator,
    # the probes and the AG statistics take their section objects (generate_benchmark(n, seed,
    # scenes), ProbeConfig.text_probe()/chain_probe(), evaluate(..., gap=...)).
    api = {"evaluate:judge.rule": "icml_cage.judges:RuleJudge",
           "scenes": "icml_cage.config:SceneConfig",
           "evaluate:probes": "icml_cage.config:ProbeConfig",
           "evaluate:gap": "icml_cage.config:GapConfig",
           "evaluate:responder": "icml_cage.config:ResponderConfig",
           "evaluate:judge": "icml_cage.config:JudgeConfig"}
    probe_values = {"scenes.families": ["domino"], "responders": ["oracle"]}
    shape_checks = True
