"""Every plugin README's Python example (the first ``python`` block under "## Example") runs as
written: no undefined names, no stale API. Examples must stay tiny (seconds on a CPU)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READMES = sorted((ROOT / "plugins").glob("*/README.md"))


def example_of(readme: Path) -> str:
    """The first fenced ``python`` block after the "## Example" heading."""
    text = readme.read_text(encoding="utf-8")
    section = re.search(r"^## Example\b(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, f"{readme}: no '## Example' section"
    block = re.search(r"```python\n(.*?)```", section.group(1), re.S)
    assert block, f"{readme}: its Example section has no ```python block"
    return block.group(1)


def test_every_plugin_has_an_example() -> None:
    assert READMES, "no plugin READMEs found"
    for readme in READMES:
        assert example_of(readme).strip()


@pytest.mark.parametrize("readme", READMES, ids=lambda p: p.parent.name)
def test_readme_example_runs(readme: Path, tmp_path: Path, monkeypatch) -> None:
    module = "icml_" + readme.parent.name.replace("-", "_")
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.chdir(tmp_path)  # anything an example writes lands here
    code = compile(example_of(readme), f"{readme.parent.name}/README.md example", "exec")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(code, {"__name__": "__readme_example__"})  # noqa: S102 - our own README
    finally:
        torch.set_num_threads(previous)
