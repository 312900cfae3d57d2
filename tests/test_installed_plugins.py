"""Every installed plugin through the conformance kit.

Plugins from this repository run the full kit in their own tests (plugins/<slug>/tests), so here
their smoke runs are skipped to keep the suite fast; third-party plugins installed beside them run
everything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from icml.loader import discover
from icml.testing import PluginConformance

REPO_PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
SLUGS = sorted({r.slug for r in discover()})


def _has_own_kit(slug: str) -> bool:
    return (REPO_PLUGINS / slug / "tests" / "test_conformance.py").is_file()


@pytest.fixture(params=SLUGS or [pytest.param(None, marks=pytest.mark.skip("no plugins"))])
def kit(request: pytest.FixtureRequest) -> PluginConformance:
    kit_cls = type(f"Kit_{request.param}", (PluginConformance,), {"slug": request.param})
    return kit_cls()


def test_entry_point(kit: PluginConformance) -> None:
    kit.test_entry_point_resolves()


def test_loads_and_metadata(kit: PluginConformance) -> None:
    kit.test_loads_cleanly()
    kit.test_metadata_valid()
    kit.test_capabilities_match_hooks()


def test_configs(kit: PluginConformance) -> None:
    kit.test_config_defaults_valid()
    kit.test_config_rejects_unknown_keys()


def test_light_entry_module(kit: PluginConformance) -> None:
    kit.test_entry_module_is_light()


def test_smoke_run_of_third_party_plugins(kit: PluginConformance, tmp_path: Path) -> None:
    if _has_own_kit(kit.slug):
        pytest.skip(f"{kit.slug} runs its smoke test in plugins/{kit.slug}/tests")
    kit.test_smoke_runs(tmp_path)


def test_every_repo_plugin_runs_the_kit_itself() -> None:
    for folder in sorted(p for p in REPO_PLUGINS.iterdir() if p.is_dir()):
        text = (folder / "tests" / "test_conformance.py").read_text()
        assert "PluginConformance" in text and f'"{folder.name}"' in text, folder.name
