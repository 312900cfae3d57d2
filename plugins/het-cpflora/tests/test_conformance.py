from icml.testing import PluginConformance

_SMOKE = {"federation": {"rounds": 1, "local_steps": 2}, "pretrain_steps": 2,
          "train_size": 8, "test_size": 4, "hidden_size": 32,
          "strategies": ["het-cpflora", "fedit"]}
_S = "icml_het_cpflora.strategies"


class TestConformance(PluginConformance):
    slug = "het-cpflora"
    smoke = {"train": _SMOKE, "evaluate": _SMOKE,
             "infer": {**_SMOKE, "strategies": ["het-cpflora"]}}
    # the config is the API (issue 48): each section is what the code takes, unchanged
    api = {"federation": "icml_het_cpflora.config:FederationConfig",   # simulate, FlowerRun
           "lora": "icml_het_cpflora.config:LoRAConfig",               # simulate, FlowerRun
           "strategy": "icml_het_cpflora.config:StrategyConfig",       # make_strategy, FlowerRun
           "strategy.het_cpflora": f"{_S}:HetCPFLoRA",
           "strategy.flexlora": f"{_S}:FlexLoRA",
           "strategy.hetlora": f"{_S}:HetLoRA",
           "strategy.homogeneous": f"{_S}:FedIT"}
    api_runtime = {"strategy.het_cpflora": {"alpha": 16.0}}
    shape_checks = True
