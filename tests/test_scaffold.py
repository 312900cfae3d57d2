"""`icml new` renders a plugin that installs and passes the conformance kit unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from icml.scaffold import ScaffoldError, scaffold


def test_scaffolded_plugin_installs_and_passes_its_tests(tmp_path: Path, cli) -> None:
    proc = cli("new", "demo-method", "--dir", str(tmp_path), "--title", "A demo")
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "demo-method"
    assert (root / "src" / "icml_demo_method" / "plugin.py").is_file()
    target = tmp_path / "site-demo"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                          "--no-build-isolation", "--target", str(target), str(root)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICML_")}
    env["PYTHONPATH"] = os.pathsep.join([str(target), env.get("PYTHONPATH", "")])
    env["ICML_STRICT_PLUGINS"] = "1"
    env["ICML_PLUGINS"] = "demo-method"
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "--rootdir", str(root), str(root / "tests")],
                           capture_output=True, text=True, timeout=300, env=env, cwd=root)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    # the conformance kit in full (config is the API, shape checks on) plus the method's tests
    assert "18 passed" in tests.stdout and "skipped" not in tests.stdout, tests.stdout
    rerun = tmp_path / "rerun.json"
    run = subprocess.run([sys.executable, "-m", "icml.cli", "run", "demo-method", "--out",
                          str(tmp_path / "runs"), "--save-results", str(rerun)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    # the evidence the template ships is what its default job gives, and the README shows it
    from icml import results

    shipped = results.load(root / "results" / "default.json")
    assert shipped["plugin"] == "demo-method" and "demo-method" in shipped["command"]
    assert results.compare(shipped, results.load(rerun), raw=True) == []
    assert results.readme_problems(root / "README.md") == []


def test_template_has_the_one_plugin_shape(tmp_path: Path) -> None:
    from icml.testing.shape import (
        changelog_problems,
        citation_problems,
        plugin_shape_problems,
        readme_shape_problems,
    )

    root = scaffold("shape-demo", tmp_path, title="Shape demo")
    pkg = root / "src" / "icml_shape_demo"
    for rel in ("plugin.py", "job.py", "config.py", "method.py", "__init__.py"):
        assert (pkg / rel).is_file(), rel
    for rel in ("CHANGELOG.md", "CITATION.cff", "results/default.json",
                "tests/test_conformance.py", "README.md"):
        assert (root / rel).is_file(), rel
    assert readme_shape_problems(root) == []
    assert changelog_problems(root) == []
    assert citation_problems(root) == []
    assert plugin_shape_problems(root) == []
    assert not list(root.rglob("*.tmpl")) and "{{" not in (root / "README.md").read_text()


def test_rendered_python_is_ruff_clean(tmp_path: Path) -> None:
    ruff = pytest.importorskip("ruff")
    root = scaffold("lint-me", tmp_path)
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated",
                           "--line-length", "100", "--select", "E,F,W,B,UP", str(root)],
                          capture_output=True, text=True)
    assert ruff and proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("slug", ["Bad", "1abc", "a--b", "a_b", ""])
def test_bad_slug_is_rejected(tmp_path: Path, slug: str) -> None:
    with pytest.raises(ScaffoldError, match="is not valid"):
        scaffold(slug, tmp_path)


def test_existing_folder_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    with pytest.raises(ScaffoldError, match="already exists"):
        scaffold("taken", tmp_path)
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"
