"""The plugin-shape checks (issue 48) catch each drift the review found, on a scaffolded plugin."""

from __future__ import annotations

from pathlib import Path

import pytest

from icml.scaffold import scaffold
from icml.testing.shape import (
    changelog_problems,
    citation_problems,
    find_plugin_root,
    plugin_shape_problems,
    readme_shape_problems,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return scaffold("shape-x", tmp_path)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def test_template_conforms_and_root_is_found(root: Path) -> None:
    assert readme_shape_problems(root) == []
    assert plugin_shape_problems(root) == []
    assert find_plugin_root(root / "tests" / "test_conformance.py") == root


def test_release_notes_in_readme_and_section_order(root: Path) -> None:
    readme = root / "README.md"
    _edit(readme, "## Components", "## Changes in 0.2.0\n\n- moved things\n\n## Components")
    _edit(readme, "## CLI", "## Command line")  # renamed: the CLI section is gone
    problems = readme_shape_problems(root)
    assert any("'## Changes in 0.2.0': release notes go in CHANGELOG.md" in p for p in problems)
    assert "README.md has no '## Cli' section (CLI)" in problems


def test_out_of_order_empty_and_no_claim(root: Path) -> None:
    readme = root / "README.md"
    text = readme.read_text()
    claim = text.split("\n## ", 1)[0].split("\n", 1)[1]
    text = text.replace(claim, "\n\n", 1)
    limits = text[text.index("## Known limits"):text.index("## Citation")]
    text = text.replace(limits, "").replace("## Install", "## Known limits\n\n## Install", 1)
    readme.write_text(text)
    problems = readme_shape_problems(root)
    assert any("has no claim" in p for p in problems), problems
    assert any("section '## Known limits' is empty" in p for p in problems), problems
    assert any(p.startswith("README.md: 'known limits' comes before 'benchmark'")
               for p in problems), problems


def test_benchmark_needs_a_results_block_and_its_file(root: Path) -> None:
    (root / "results" / "default.json").unlink()
    assert any("names results/default.json, which does not exist" in p
               for p in readme_shape_problems(root))
    readme = root / "README.md"
    text = readme.read_text()
    start, end = text.index("<!-- results:"), text.index("<!-- /results -->")
    readme.write_text(text[:start] + "| a | b |\n|---|---|\n| 1 | 2 |\n" + text[end + 17:])
    assert any("no table rendered from a results file" in p for p in readme_shape_problems(root))


def test_changelog_and_citation(root: Path) -> None:
    _edit(root / "pyproject.toml", 'version = "0.1.0"', 'version = "0.2.0"')
    assert changelog_problems(root) == [
        "CHANGELOG.md has no '## 0.2.0' entry for the version in pyproject.toml"]
    (root / "CHANGELOG.md").unlink()
    assert "CHANGELOG.md does not exist" in changelog_problems(root)[0]
    _edit(root / "CITATION.cff", "preferred-citation:", "references:")
    assert citation_problems(root) == ["CITATION.cff has no top-level preferred-citation"]
    (root / "CITATION.cff").unlink()
    assert "CITATION.cff does not exist" in citation_problems(root)[0]


def test_fat_plugin_py_and_untyped_job(root: Path) -> None:
    pkg = root / "src" / "icml_shape_x"
    plugin = pkg / "plugin.py"
    _edit(plugin, "capabilities=tuple(CONFIGS),", 'capabilities=("evaluate",),')
    body = "\n".join(f"    x{i} = {i}" for i in range(14))
    plugin.write_text(plugin.read_text() + f"\n\ndef _row(x):\n    return x\n\n\n"
                      f"@icml.hookimpl\ndef icml_train(ctx, config):\n{body}\n")
    _edit(pkg / "job.py", "def evaluate(ctx: icml.RunContext, config: EvaluateConfig)",
          "def evaluate(ctx: icml.RunContext, config: Any, extra)")
    problems = plugin_shape_problems(root)
    assert "plugin.py lists the capabilities a second time: derive them from the configs " \
           "(capabilities=tuple(CONFIGS), primary first)" in problems
    assert any("plugin.py defines _row(), which is not a hook" in p for p in problems)
    assert any("icml_train has 14 statements" in p for p in problems)
    assert any("job.py: evaluate() is not fully typed (annotate ['extra'])" in p
               for p in problems)
    assert any("job.py: evaluate() takes ['config'] as Any" in p for p in problems)
    (pkg / "job.py").unlink()
    assert any("job.py does not exist: move the default jobs" in p
               for p in plugin_shape_problems(root))
