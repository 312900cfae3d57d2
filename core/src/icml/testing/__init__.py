"""The conformance kit: pytest tests every plugin inherits, and the helpers plugin tests share.

In your plugin's ``tests/test_conformance.py``::

    from icml.testing import PluginConformance

    class TestConformance(PluginConformance):
        slug = "my-method"
        smoke = {"train": {"steps": 2}}   # per capability: --set style overrides, tiny and fast

Each inherited test's docstring has a *Troubleshooting* section saying what to fix.

Installing icml-core also registers :mod:`icml.testing.pytest_plugin` with pytest (entry point
``pytest11``): every test runs with one torch thread unless ``OMP_NUM_THREADS`` says otherwise.

Names load lazily (:func:`icml.lazy.lazy_exports`), so pytest loading the plugin costs nothing.
"""

from __future__ import annotations

from icml.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    # conformance.py: the base class and test helpers
    "PluginConformance": "conformance", "assert_light_import": "conformance",
    "icml_cli": "conformance", "one_line_error": "conformance",
    "pretrained_or_skip": "conformance", "load_script": "conformance",
    # configs.py: the config-tree checks (the config is the API)
    "default_problems": "configs", "set_key_problems": "configs", "api_problems": "configs",
    "mirror_problems": "configs",
    # shape.py: the one plugin shape
    "readme_shape_problems": "shape", "plugin_shape_problems": "shape",
    "changelog_problems": "shape", "citation_problems": "shape",
    # compose.py: a third party's basis-changing transform, for consumers' tests (issue 50)
    "rotated_copy": "compose",
    # pytest_plugin.py: the one-thread fixture
    "torch_threads": "pytest_plugin",
})
