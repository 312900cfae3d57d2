from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "het-cpflora"
    smoke = {"evaluate": {"n": 100}}
