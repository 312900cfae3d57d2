from icml.testing import PluginConformance


class TestConformance(PluginConformance):
    slug = "xspecmesh"
    smoke = {"evaluate": {"n": 100}}
