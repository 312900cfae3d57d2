"""Issue 47: every number in a plugin README's tables is rendered from a committed results file,
every results file is well formed and names the command that made it, and `icml.stats` is the
only bootstrap in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from icml import results as R

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())

@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_readme_tables_are_rendered_from_results_files(plugin: Path) -> None:
    """Typed tables are allowed only under `<!-- pending: WHY -->` (listed by
    `icml render SLUG --check`), with visible prose saying the table awaits its rerun."""
    readme = plugin / "README.md"
    pending: list[str] = []
    problems = R.readme_problems(readme, plugin / "results", pending=pending)
    assert not problems, "\n".join(problems) + \
        f"\nfix: `icml render {plugin.name}` re-renders blocks; put numeric tables in blocks"
    text = readme.read_text(encoding="utf-8")
    if pending:
        assert re.search(r"\*\*(Pending|Not yet rerun|Historical)", text), \
            f"{plugin.name}: pending tables need visible prose (**Pending**: ...) beside them"


def test_root_readme_tables_are_rendered_from_the_core_benchmarks() -> None:
    """The root README's measured tables come from benchmarks/results (`icml render core`)."""
    rdir = ROOT / "benchmarks" / "results"
    problems = R.readme_problems(ROOT / "README.md", rdir)
    assert not problems, "\n".join(problems) + "\nfix: `icml render core`"
    blocks = set(re.findall(r"<!-- results: ([\w.\-/]+)", (ROOT / "README.md").read_text()))
    for path in sorted(rdir.glob("*.json")):
        cmd = R.load(path)["command"]
        assert cmd.startswith(("icml ", "python ", "python3 ")), path
        assert path.name in blocks, f"{path.name} is not shown in the root README"


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_results_files_are_well_formed(plugin: Path) -> None:
    rdir = plugin / "results"
    paths = sorted(rdir.glob("*.json"))
    assert (rdir / "default.json").is_file(), \
        f"{plugin.name}: no results/default.json (icml run {plugin.name} --save-results ...)"
    blocks = set(re.findall(r"<!-- results: ([\w.\-/]+)", (plugin / "README.md").read_text()))
    for path in paths:
        data = R.load(path)
        assert data["plugin"] in (plugin.name, None), path
        # leading environment assignments (`OMP_NUM_THREADS=1 python ...`): reproduce runs
        # the command through the shell, so they apply
        cmd = re.sub(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+", "", data["command"])
        assert cmd.startswith(("icml ", "python ", "python3 ", "nox ")), \
            f"{path}: command {cmd!r} must be runnable from the repository root"
        if cmd.startswith(("python ", "python3 ")):
            script = cmd.split()[1]
            assert (ROOT / script).is_file(), f"{path}: {script} does not exist"
        assert path.name in blocks, f"{path.name} is not shown in {plugin.name}'s README"
    assert R.load(rdir / "default.json")["quick"], "the default-run table must be quick"


_BOOT_DEF = re.compile(r"def \w*bootstrap\w*\(", re.I)
_USES_STATS = re.compile(r"from icml(\.stats)? import|import icml\.stats|icml\.stats\.")


def _sources() -> list[Path]:
    out = []
    for base in (ROOT / "plugins", ROOT / "core" / "src", ROOT / "benchmarks"):
        out += [p for p in base.rglob("*.py") if "tests" not in p.parts]
    return [p for p in out if p != ROOT / "core" / "src" / "icml" / "stats.py"]


def test_icml_stats_is_the_only_bootstrap() -> None:
    offenders = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        if _BOOT_DEF.search(text) and not (_USES_STATS.search(text) and "stats" in text):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, "bootstraps outside icml.stats (call icml.stats instead): " + \
        ", ".join(offenders)


def test_machine_reference_copies_belong_to_their_main_files() -> None:
    """A reference copy (results/machines/KEY/NAME.json, icml-core 0.1.10) is the main file's
    command rerun on another machine: same command and plugin, made on the machine its folder
    names, a machine other than the main file's, and not older than the main file."""
    copies = sorted((ROOT / "plugins").glob("*/results/machines/*/*.json"))
    for copy in copies:
        main = copy.parents[2] / copy.name
        assert main.is_file(), f"{copy}: no main file {main.name}"
        c, m = R.load(copy), R.load(main)
        again = ("record it again on that machine (icml reproduce --record-machine) or delete it;"
                 " a rerun there then compares with the main file")
        assert (c["command"], c.get("plugin")) == (m["command"], m.get("plugin")), \
            f"{copy}: not its main file's command: {again}"
        assert R.machine_key(c) == copy.parent.name != R.machine_key(m), copy
        assert str(c.get("created", "")) >= str(m.get("created", "")), \
            f"{copy}: older than its main file: {again}"
