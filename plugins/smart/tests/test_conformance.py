from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "smart"
    smoke = {"evaluate": {"n": 100}}
