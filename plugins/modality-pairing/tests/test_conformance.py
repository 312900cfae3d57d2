from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "modality-pairing"
    smoke = {"evaluate": {"n": 100}}
