"""Discovery: each plugin loaded in isolation; broken, duplicate, typo'd, incompatible and
disabled plugins reported with a fix; strict mode; development modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from icml.loader import PluginLoadError, UnknownPluginError, load_plugins

FIXTURES = Path(__file__).parent / "fixtures"
GOOD = (FIXTURES / "icml_example.py").read_text()
INFO = '''
import icml
from dataclasses import dataclass

@dataclass
class Cfg:
    n: int = icml.option(1, help="n")

@icml.hookimpl
def icml_plugin_info():
    return icml.PluginInfo(name="{slug}", title="t", summary="s",
                           paper=icml.Paper(title="p", url="https://x.org"),
                           capabilities=("evaluate",), configs={{"evaluate": Cfg}})
'''


def test_example_loads_with_version_from_distribution(site) -> None:
    site.add_example()
    rec = load_plugins().get("example")
    assert rec.ok, rec.error
    assert rec.info.version == "0.1.0" and rec.distribution == "icml-example"
    assert rec.info.capabilities == ("evaluate", "train") and rec.info.primary == "evaluate"


def test_broken_import_is_isolated_and_reported(site) -> None:
    site.add_example()
    site.add("icml-boom", {"boom": "icml_boom"},
             modules={"icml_boom": "raise RuntimeError('kaput')"})
    site.add("icml-needs", {"needs": "icml_needs"},
             modules={"icml_needs": "import not_a_real_module_xyz"})
    host = load_plugins()
    assert host.get("example").ok
    boom, needs = host.get("boom"), host.get("needs")
    assert boom.status == "error" and "RuntimeError: kaput" in boom.error
    assert "icml-boom" in boom.describe_problem() and "ICML_DISABLE_PLUGINS=boom" in boom.fix
    assert needs.status == "missing-dependency" and "not_a_real_module_xyz" in needs.fix
    assert "Traceback" in boom.traceback


def test_missing_declared_dependency_is_caught_before_import(site) -> None:
    site.add("icml-dep", {"dep": "icml_dep"}, requires=("surely-not-installed-pkg>=1",),
             modules={"icml_dep": "raise AssertionError('must not be imported')"})
    rec = load_plugins().get("dep")
    assert rec.status == "missing-dependency"
    assert rec.fix == "pip install 'surely-not-installed-pkg>=1'"


def test_incompatible_core_range_and_api_version(site) -> None:
    site.add("icml-old", {"old": "icml_old"}, requires=("icml-core<0.1",),
             modules={"icml_old": "raise AssertionError('must not be imported')"})
    site.add("icml-future", {"future": "icml_future"}, modules={"icml_future": INFO.format(
        slug="future").replace('configs={"evaluate": Cfg})', 'configs={"evaluate": Cfg}, '
                                                              'api_version=99)')
        + "\n@icml.hookimpl\ndef icml_evaluate(ctx, config):\n    return icml.RunResult()\n"})
    host = load_plugins()
    assert host.get("old").status == "incompatible" and "icml-core<0.1" in host.get("old").error
    assert host.get("future").status == "incompatible"
    assert "API 99" in host.get("future").error


def test_duplicate_slug_names_both_distributions(site) -> None:
    site.add_example("icml-example")
    site.add_example("icml-example-fork")
    host = load_plugins()
    dups = [r for r in host.all_records if r.slug == "example"]
    assert len(dups) == 2 and all(r.status == "duplicate" for r in dups)
    assert "icml-example 0.1.0" in dups[0].error and "icml-example-fork 0.1.0" in dups[0].error
    with pytest.raises(PluginLoadError, match="two distributions"):
        host.loaded("example")


def test_typo_hook_and_unmarked_hook_are_errors(site) -> None:
    typo = INFO.format(slug="typo") + "\n@icml.hookimpl\ndef icml_evalute(ctx, config):\n    pass\n"
    unmarked = INFO.format(slug="unmarked") + "\ndef icml_evaluate(ctx, config):\n    pass\n"
    site.add("icml-typo", {"typo": "icml_typo"}, modules={"icml_typo": typo})
    site.add("icml-unmarked", {"unmarked": "icml_unmarked"}, modules={"icml_unmarked": unmarked})
    host = load_plugins()
    assert "icml_evalute matches no hook spec (did you mean icml_evaluate?)" in \
        host.get("typo").error
    assert "not marked with @icml.hookimpl" in host.get("unmarked").error


def test_declared_capability_without_hook_and_bad_metadata(site) -> None:
    site.add("icml-nohook", {"nohook": "icml_nohook"}, modules={"icml_nohook": INFO.format(
        slug="nohook")})
    site.add("icml-wrongname", {"wrongname": "icml_wrongname"}, modules={
        "icml_wrongname": INFO.format(slug="other")
        + "\n@icml.hookimpl\ndef icml_evaluate(ctx, config):\n    return icml.RunResult()\n"})
    host = load_plugins()
    assert "declares evaluate but implements no icml_evaluate hook" in host.get("nohook").error
    assert "PluginInfo.name is 'other' but the entry point is 'wrongname'" in \
        host.get("wrongname").error


def test_strict_mode_raises(site, monkeypatch) -> None:
    site.add("icml-boom", {"boom": "icml_boom"}, modules={"icml_boom": "raise ValueError('x')"})
    monkeypatch.setenv("ICML_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match="plugin 'boom' \\(icml-boom 0.1.0\\)"):
        load_plugins()


def test_allow_and_deny_lists_never_import_blocked_plugins(site, monkeypatch) -> None:
    site.add_example()
    site.add("icml-boom", {"boom": "icml_boom"}, modules={"icml_boom": "raise ValueError('x')"})
    monkeypatch.setenv("ICML_DISABLE_PLUGINS", "boom")
    monkeypatch.setenv("ICML_STRICT_PLUGINS", "1")
    host = load_plugins()
    assert host.get("boom").status == "disabled" and host.get("example").ok
    monkeypatch.delenv("ICML_DISABLE_PLUGINS")
    monkeypatch.setenv("ICML_PLUGINS", "example")
    assert load_plugins().get("boom").status == "disabled"
    monkeypatch.setenv("ICML_PLUGINS", "")
    assert load_plugins().get("example").status == "disabled"


def test_only_loads_the_requested_plugin(site) -> None:
    site.add_example()
    site.add("icml-boom", {"boom": "icml_boom"}, modules={"icml_boom": "raise ValueError('x')"})
    host = load_plugins(only=["example"])
    assert host.get("example").ok and host.get("boom").status == "not-loaded"


def test_development_module_loads_like_pytest_p(site, monkeypatch) -> None:
    (site.root / "icml_devmod.py").write_text(GOOD.replace('name="example"', 'name="devmod"'))
    host = load_plugins(modules=["icml_devmod"])
    rec = host.get("devmod")
    assert rec.ok and rec.distribution == "(development)"
    monkeypatch.setenv("ICML_PLUGIN_MODULES", "icml_devmod")
    assert load_plugins().get("devmod").ok


def test_unknown_slug_suggests_closest(site) -> None:
    site.add_example()
    with pytest.raises(UnknownPluginError, match="did you mean 'example'"):
        load_plugins().get("exampel")


def test_heavy_module_level_import_is_warned(site) -> None:
    site.add("icml-heavy", {"heavy": "icml_heavy"}, modules={
        "icml_heavy": "import numpy\nimport scipy.linalg\n" + INFO.format(slug="heavy")
        + "\n@icml.hookimpl\ndef icml_evaluate(ctx, config):\n    return icml.RunResult()\n"})
    import sys

    if "scipy" in sys.modules:
        pytest.skip("scipy already imported in this process")
    rec = load_plugins().get("heavy")
    assert rec.ok and any("scipy" in w for w in rec.warnings)


def test_missing_extra_of_a_dependency_is_reported(site) -> None:
    site.add("fakedep", {}, requires=("surely-missing-gpu-pkg>=2; extra == 'gpu'",))
    site.add("icml-extra", {"extra": "icml_extra"}, requires=("fakedep[gpu]>=0.1",),
             modules={"icml_extra": "raise AssertionError('must not be imported')"})
    site.add("icml-fine", {"fine": "icml_fine"}, requires=("fakedep>=0.1",),
             modules={"icml_fine": GOOD.replace('name="example"', 'name="fine"')})
    host = load_plugins()
    rec = host.get("extra")
    assert rec.status == "missing-dependency"
    assert rec.fix == "pip install 'surely-missing-gpu-pkg>=2'"
    assert host.get("fine").ok


def test_development_module_with_an_installed_slug_is_a_duplicate(site) -> None:
    site.add_example()
    (site.root / "icml_devcopy.py").write_text(GOOD)  # also calls itself "example"
    host = load_plugins(modules=["icml_devcopy"])
    dups = [r for r in host.all_records if r.slug == "example"]
    assert len(dups) == 2 and all(r.status == "duplicate" and r.module is None for r in dups)
    assert not [i for i in host.pm.hook.icml_evaluate.get_hookimpls()
                if i.plugin_name != "icml.builtins"]
