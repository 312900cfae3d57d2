"""Every plugin README's install lines work on their own from the repository root (the nox
session ``readme_install`` runs them in fresh environments; this is the fast static check)."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted(p.parent.name for p in (ROOT / "plugins").glob("*/pyproject.toml"))


def install_lines(slug: str) -> list[str]:
    text = (ROOT / "plugins" / slug / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Install\b(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, f"{slug}: README has no '## Install' section"
    return [ln.split(" #", 1)[0].strip() for ln in section.group(1).splitlines()
            if ln.strip().startswith("pip install")]


def pulls_torch(slug: str, extras: list[str]) -> bool:
    """Whether installing the plugin with these extras installs torch (then the line must pin
    the CPU build, or pip fetches a multi-GB CUDA one)."""
    project = tomllib.loads((ROOT / "plugins" / slug / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    reqs = list(project.get("dependencies", [])) + [r for e in extras for r in optional[e]]
    return any(re.match(r"torch\b(?!\w)", r) for r in reqs)


@pytest.mark.parametrize("slug", PLUGINS)
def test_install_lines_stand_alone(slug: str) -> None:
    lines = install_lines(slug)
    assert lines, f"{slug}: no pip install line in its Install section"
    optional = tomllib.loads((ROOT / "plugins" / slug / "pyproject.toml").read_text())[
        "project"].get("optional-dependencies", {})
    for line in lines:
        args = shlex.split(line)
        assert any(re.fullmatch(r"\./core(\[[\w,-]+\])?", a) for a in args), \
            f"{slug}: {line!r} does not install ./core in the same command"
        targets = [a for a in args if a.startswith(f"./plugins/{slug}")]
        assert targets, f"{slug}: {line!r} does not install ./plugins/{slug}"
        extra = re.fullmatch(rf"\./plugins/{re.escape(slug)}(\[([\w,-]+)\])?", targets[0])
        assert extra, f"{slug}: {targets[0]!r} is not ./plugins/{slug}[extra]"
        extras = extra.group(2).split(",") if extra.group(2) else []
        for name in extras:
            assert name in optional, f"{slug}: extra {name!r} is not defined in its pyproject.toml"
        if pulls_torch(slug, extras):
            assert "torch==2.13.0" in args, f"{slug}: {line!r} installs torch without pinning it"
