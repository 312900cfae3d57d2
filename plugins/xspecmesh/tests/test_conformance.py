from icml.testing import PluginConformance

_SMOKE = {"n_train": 64, "hidden_size": 16, "num_layers": 1, "backbone_steps": 2,
          "distill_steps": 2, "batch_size": 4, "num_meshes": 2, "max_new_tokens": 24,
          "n_refs": 1, "chamfer_points": 32}


class TestConformance(PluginConformance):
    slug = "xspecmesh"
    shape_checks = True
    smoke = {"infer": dict(_SMOKE), "train": dict(_SMOKE), "evaluate": dict(_SMOKE)}
    # The config is the API (issue 48): every job's `decode` section is the DecodeConfig that
    # speculative_generate's Sampler takes and keeps (`Sampler(config).config`); the greedy
    # rule is the one that accepts every probed setting (topk refuses an all-accepting set).
    api = {"infer:decode": "icml_xspecmesh.speculative:Sampler",
           "train:decode": "icml_xspecmesh.speculative:Sampler",
           "evaluate:decode": "icml_xspecmesh.speculative:Sampler"}
    api_runtime = {key: {"acceptance": "greedy"} for key in api}
