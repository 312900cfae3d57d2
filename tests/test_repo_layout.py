"""The repository's promises: a two-command quickstart that CI runs, plugins/ holding papers
only, the template where discovery and tooling ignore it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quickstart() -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = re.search(r"^## Quickstart$", text, re.M)
    block = re.search(r"```bash\n(.*?)```", text[start.end():], re.S)
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip()]


def test_quickstart_is_two_commands_and_ci_runs_the_second() -> None:
    commands = quickstart()
    assert len(commands) == 2
    assert "icml run" in commands[0] and "./core" in commands[0]
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    parts = [p.strip() for p in commands[1].split("&&")]
    assert parts == [ln for ln in ci if ln in parts], "CI runs the test command, in order"


def test_test_requirements_cover_core_and_every_plugin() -> None:
    lines = (ROOT / "requirements-test.txt").read_text().splitlines()
    assert any(ln.startswith("-e ./core") for ln in lines)
    for folder in (ROOT / "plugins").iterdir():
        assert any(ln.startswith(f"-e ./plugins/{folder.name}[") for ln in lines), folder.name


def test_plugins_folder_holds_papers_only() -> None:
    for folder in (ROOT / "plugins").iterdir():
        assert folder.is_dir() and not folder.name.startswith(("_", ".")), folder
        assert (folder / "pyproject.toml").is_file(), f"{folder} is not a plugin distribution"
    assert (ROOT / "core" / "src" / "icml" / "_template" / "pyproject.toml.tmpl").is_file()


def test_every_plugin_here_checks_the_one_plugin_shape() -> None:
    """Issue 48: the shape checks (README sections, CHANGELOG.md, CITATION.cff, thin plugin.py,
    typed job.py) are opt-in for third-party plugins and on for every plugin of this repo."""
    missing = [p.name for p in sorted((ROOT / "plugins").iterdir())
               if (p / "pyproject.toml").is_file()
               and "shape_checks = True" not in (p / "tests" / "test_conformance.py").read_text()]
    assert not missing, f"set shape_checks = True in tests/test_conformance.py of {missing}"


def test_every_plugin_here_declares_its_api() -> None:
    """Issue 48: the config is the API in every plugin of this repo: each conformance class
    declares ``api`` (config sections -> the classes that take them), so the kit's
    ``test_set_keys_reach_the_api`` and default-once checks run instead of skipping."""
    import re

    missing = [p.name for p in sorted((ROOT / "plugins").iterdir())
               if (p / "pyproject.toml").is_file()
               and not re.search(r"^\s+api = \{", (p / "tests" / "test_conformance.py")
                                 .read_text(), re.M)]
    assert not missing, f"declare `api = {{...}}` in tests/test_conformance.py of {missing}"
