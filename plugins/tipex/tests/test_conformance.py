from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "tipex"
    smoke = {"evaluate": {"n": 100}}
