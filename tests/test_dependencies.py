"""Each plugin's imports are covered by its declared dependencies; no plugin imports another;
`icml-core` comes from this repository, never from an index."""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())
STDLIB = set(sys.stdlib_module_names)


# import names of optional peers that differ from their distribution's name (used when the
# peer is not installed here, so importlib.metadata cannot say)
IMPORT_TO_DIST = {"neuralop": "neuraloperator"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imports(src: Path) -> set[str]:
    names = set()
    for path in src.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _declared(pyproject: dict) -> set[str]:
    project = pyproject["project"]
    reqs = list(project.get("dependencies", []))
    for group in project.get("optional-dependencies", {}).values():
        reqs += group
    return {_norm(Requirement(r).name) for r in reqs}


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_imports_are_declared_and_no_plugin_imports_another(plugin: Path) -> None:
    meta = tomllib.loads((plugin / "pyproject.toml").read_text())
    own = "icml_" + plugin.name.replace("-", "_")
    declared = _declared(meta) | {"icml-core"}
    providers = md.packages_distributions()
    missing, cross = [], []
    for name in sorted(_imports(plugin / "src") - STDLIB - {own, "__future__"}):
        if name.startswith("icml_"):
            cross.append(name)
            continue
        dists = {_norm(d) for d in providers.get(name, [IMPORT_TO_DIST.get(name, name)])}
        if not dists & declared:
            missing.append(f"{name} (from {', '.join(sorted(dists))})")
    assert not cross, f"{plugin.name} imports other plugins: {cross}"
    assert not missing, f"{plugin.name} imports undeclared packages: {missing}"
    for dep in meta["project"].get("dependencies", []):
        assert not re.match(r"icml-(?!core)", _norm(Requirement(dep).name)), dep


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_packaging_policy(plugin: Path) -> None:
    project = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]
    slug = plugin.name
    assert project["name"] == f"icml-{slug}"
    assert (plugin / "src" / f"icml_{slug.replace('-', '_')}").is_dir()
    eps = project["entry-points"]["icml.plugins"]
    assert list(eps) == [slug] and eps[slug].startswith(f"icml_{slug.replace('-', '_')}.")
    core = [Requirement(d) for d in project["dependencies"] if _norm(Requirement(d).name)
            == "icml-core"]
    assert core and core[0].specifier, "declare a range on icml-core, e.g. icml-core>=0.1,<0.2"
    pinned = [d for d in project["dependencies"] if "==" in d]
    assert not pinned, f"plugins declare ranges, not pins: {pinned}"


# core features and the icml-core release that brought them: a plugin that uses one must not
# accept an older core (pip would install a core without it)
CORE_FEATURES = {"icml.compose": "0.1.6", "from icml import compose": "0.1.6",
                 "check_bounds": "0.1.6", "finite=True": "0.1.6",
                 "require_original_heads": "0.1.6", "changes_head_bases": "0.1.6"}


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_icml_core_floor_covers_the_core_features_used(plugin: Path) -> None:
    from packaging.version import Version

    project = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]
    (core,) = [Requirement(d) for d in project["dependencies"]
               if _norm(Requirement(d).name) == "icml-core"]
    floors = [Version(s.version) for s in core.specifier if s.operator in (">=", "==", "~=")]
    floor = max(floors, default=Version("0"))
    text = "\n".join(p.read_text() for p in (plugin / "src").rglob("*.py"))
    short = {f"{feature} (icml-core {need})" for feature, need in CORE_FEATURES.items()
             if feature in text and floor < Version(need)}
    assert not short, f"{plugin.name} declares {core} but uses {sorted(short)}"


def test_icml_core_is_this_repository_and_pypi_icml_is_absent() -> None:
    dist = md.distribution("icml-core")
    direct = dist.read_text("direct_url.json")
    assert direct, "icml-core was installed from an index; install ./core from this repository"
    url = json.loads(direct)["url"]
    assert url.startswith("file://") and url.rstrip("/").endswith("/core"), url
    with pytest.raises(md.PackageNotFoundError):
        md.distribution("icml")
