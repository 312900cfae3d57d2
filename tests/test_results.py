"""Results files, README blocks and `icml reproduce` (icml.results, icml.reproduce)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from icml import results as R
from icml.reproduce import rerun_file

TABLE = R.make_table("accuracy by arm", ["arm", "acc", "ms"],
                     [["base", 0.5, 3.2], ["ours", {"value": 0.75, "lo": 0.6, "hi": 0.9}, 4.0]],
                     formats={"acc": ".2f"})


def test_render_cells_and_table() -> None:
    assert R.render_cell(None) == "-"
    assert R.render_cell(3) == "3"
    assert R.render_cell(0.123456) == "0.1235"
    assert R.render_cell(20410.3) == "20410" and R.render_cell(1.5e-7) == "1.5e-07"
    assert R.render_cell(2.5e16) == "2.5e+16" and R.render_cell(1234.5, ".1f") == "1234.5"
    assert R.render_cell({"value": 1.0, "lo": 0.5, "hi": 2.0}, ".1f") == "1.0 [0.5, 2.0]"
    assert R.render_cell("a|b") == "a\\|b"
    assert R.render_cell(float("nan")) == "nan"
    assert R.render_table(TABLE).splitlines() == [
        "| arm | acc | ms |", "|---|---|---|", "| base | 0.50 | 3.2 |",
        "| ours | 0.75 [0.60, 0.90] | 4 |"]
    with pytest.raises(R.ResultsError, match="row 0 has 1 cells"):
        R.make_table("t", ["a", "b"], [[1]])
    with pytest.raises(R.ResultsError, match="unknown columns"):
        R.make_table("t", ["a"], [[1]], formats={"b": ".1f"})


def test_write_records_the_run_and_keeps_the_declared_tolerance(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(R.RESULTS_DIR_ENV, raising=False)
    path = tmp_path / "res.json"
    clock = R.Clock()
    R.write(path, [TABLE], command="python make.py", plugin="demo", seeds=[0, 1], clock=clock)
    data = R.load(path)
    assert data["command"] == "python make.py" and data["seeds"] == [0, 1]
    assert data["cpu"] and data["versions"]["python"] and data["wall_s"] >= 0
    assert data["cpu_s"] >= 0 and data["created"].endswith("+00:00")
    tol = {"acc": {"abs": 0.05, "why": "seed spread 0.04"}}
    raw = json.loads(path.read_text())
    raw["tolerance"] = tol
    path.write_text(json.dumps(raw))
    R.write(path, [TABLE], command="python make.py")  # rewritten by its command
    assert R.load(path)["tolerance"] == tol
    # ICML_RESULTS_DIR redirects the write (and the tolerance still comes from the original)
    monkeypatch.setenv(R.RESULTS_DIR_ENV, str(tmp_path / "elsewhere"))
    out = R.write(path, [TABLE], command="python make.py")
    assert out == tmp_path / "elsewhere" / "res.json" and R.load(out)["tolerance"] == tol


@pytest.mark.parametrize("tol", [{"acc": {"abs": 0.1}}, {"acc": {"why": "x"}},
                                 {"acc": {"abs": -1, "why": "x"}},
                                 {"acc": {"timing": 1, "why": "x"}}])
def test_bad_tolerances_are_refused(tol) -> None:
    with pytest.raises(R.ResultsError, match="tolerance"):
        R.check_tolerance(tol)


def _file(rows, tolerance=None) -> dict:
    table = R.make_table("accuracy by arm", ["arm", "acc", "ms"], rows, formats={"acc": ".2f"})
    return {"tables": [table], "tolerance": tolerance or {}}


def test_compare_exact_as_shown_tolerance_timing_and_raw() -> None:
    a = _file([["base", 0.5012, 3.0]])
    assert R.compare(a, _file([["base", 0.5049, 3.0]])) == []  # same at 2 decimals
    diffs = R.compare(a, _file([["base", 0.52, 3.0]]))
    assert [(d.column, d.committed, d.rerun) for d in diffs] == [("acc", "0.50", "0.52")]
    assert R.compare(a, _file([["base", 0.5012, 3.0]]), raw=True) == []
    assert len(R.compare(a, _file([["base", 0.5049, 3.0]]), raw=True)) == 1
    tol = {"acc": {"abs": 0.03, "why": "seeds"}, "ms": {"timing": True, "why": "clock"}}
    b = _file([["base", {"value": 0.5, "lo": 0.4, "hi": 0.6}, 3.0]], tol)
    ok = _file([["base", {"value": 0.52, "lo": 0.42, "hi": 0.62}, 99.0]])
    assert R.compare(b, ok) == []
    assert [d.column for d in R.compare(b, ok, raw=True)] == ["acc"]  # raw: timing still skipped
    bad = _file([["base", {"value": 0.52, "lo": 0.35, "hi": 0.62}, 99.0]])
    assert [d.column for d in R.compare(b, bad)] == ["acc"]
    assert R.compare(a, _file([]))[0].column == "rows"
    assert R.compare(a, {"tables": []})[0].rerun == "missing"


def test_readme_blocks_render_and_check(tmp_path) -> None:
    rdir = tmp_path / "results"
    R.write(rdir / "main.json", [TABLE], command="python make.py")
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Benchmark\n\n<!-- results: main.json -->\n| old |\n"
                      "<!-- /results -->\n\nprose\n")
    assert len(R.render_readme(readme, check=True)) == 1
    assert "| old |" in readme.read_text()  # check only reports
    R.render_readme(readme)
    text = readme.read_text()
    assert "| ours | 0.75 [0.60, 0.90] | 4 |" in text and "Made by `python make.py`" in text
    assert R.readme_problems(readme) == []
    readme.write_text(text.replace("0.75 [", "0.76 ["))  # a hand edit is caught
    assert "differs" in R.readme_problems(readme)[0]
    readme.write_text(text + "\n## Results\n\n| arm | acc |\n|---|---|\n| a | 0.51 |\n")
    assert "numeric table outside a results block" in R.readme_problems(readme)[0]
    readme.write_text(text + "\n## Config keys\n\n| key | default |\n|---|---|\n| lr | 0.1 |\n")
    assert R.readme_problems(readme) == []  # settings, not results
    readme.write_text(text + "\n## Results\n\n<!-- pending: needs 2 h -->\n| arm | acc |\n"
                      "|---|---|\n| a | 0.51 |\n")
    pending: list[str] = []
    assert R.readme_problems(readme, pending=pending) == []
    assert len(pending) == 1 and "pending: needs 2 h" in pending[0]
    readme.write_text(text.replace("main.json -->", "main.json table=nope -->"))
    assert "no table 'nope'" in R.readme_problems(readme)[0]


MAKER = """
import sys
from icml import results as R
value = float(sys.argv[1])
R.write("plugins/demo/results/main.json", [R.make_table("t", ["arm", "acc"], [["a", value]])],
        command="unused", plugin="demo", threads=R.env_threads())
"""


def _demo_repo(tmp_path: Path, value: str) -> Path:
    root = tmp_path / "repo"
    rdir = root / "plugins" / "demo" / "results"
    rdir.mkdir(parents=True)
    (root / "make.py").write_text(MAKER)
    command = f"{shlex.quote(sys.executable)} make.py {value}"
    path = R.write(rdir / "main.json", [R.make_table("t", ["arm", "acc"], [["a", 0.5]])],
                   command=command, plugin="demo")
    (rdir.parent / "README.md").write_text("<!-- results: main.json -->\n<!-- /results -->\n")
    R.render_readme(rdir.parent / "README.md")
    return path


def test_reproduce_reruns_without_touching_the_committed_file(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(R.RESULTS_DIR_ENV, raising=False)
    path = _demo_repo(tmp_path, "0.5")
    before = path.read_text()
    out = rerun_file("demo", path, threads=2)
    assert out.status == "ok", out
    assert path.read_text() == before
    # a command that now gives another number differs, shown as in the README
    data = json.loads(before)
    data["command"] = data["command"].replace("make.py 0.5", "make.py 0.75")
    path.write_text(json.dumps(data))
    out = rerun_file("demo", path)
    assert out.status == "differs"
    assert [(d.committed, d.rerun) for d in out.diffs] == [("0.5", "0.75")]
    out = rerun_file("demo", path, write=True)  # accept: file and README follow
    assert R.load(path)["tables"][0]["rows"] == [["a", 0.75]]
    assert "| a | 0.75 |" in (path.parent.parent / "README.md").read_text()


def test_reproduce_reports_a_failing_command(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(R.RESULTS_DIR_ENV, raising=False)
    path = _demo_repo(tmp_path, "0.5")
    data = json.loads(path.read_text())
    data["command"] = f"{shlex.quote(sys.executable)} -c 'raise SystemExit(3)'"
    path.write_text(json.dumps(data))
    out = rerun_file("demo", path)
    assert out.status == "failed" and "exit 3" in out.message


def test_files_selects_by_name_and_quick(tmp_path) -> None:
    R.write(tmp_path / "a.json", [TABLE], command="x", quick=True)
    R.write(tmp_path / "b.json", [TABLE], command="y")
    assert [p.name for p in R.files(tmp_path)] == ["a.json", "b.json"]
    assert [p.name for p in R.files(tmp_path, quick=True)] == ["a.json"]
    assert [p.name for p in R.files(tmp_path, ["b"])] == ["b.json"]
    with pytest.raises(R.ResultsError, match="no results file c.json"):
        R.files(tmp_path, ["c"])


def test_run_save_results_and_icml_threads(site, cli, tmp_path) -> None:
    site.add_example()
    path = tmp_path / "res" / "default.json"
    proc = cli("run", "example", "--out", str(tmp_path / "runs"), "--save-results", str(path),
               ICML_THREADS="2")
    assert proc.returncode == 0, proc.stderr
    data = R.load(path)
    assert data["command"].startswith("icml run example --out ")
    assert data["quick"] is True and data["seeds"] == [0] and data["threads"] == 2
    assert data["tables"] and data["tables"][0]["rows"]
    proc = cli("run", "example", "--out", str(tmp_path / "runs"),
               ICML_THREADS="zero")
    assert proc.returncode == 2 and "ICML_THREADS" in proc.stderr


def test_core_names_the_repositorys_own_benchmarks(tmp_path, monkeypatch) -> None:
    """`icml render core` / `icml reproduce core`: benchmarks/results feeds the root README and
    its commands run from the repository root."""
    root = Path(__file__).resolve().parents[1]
    rdir = R.results_dir(R.CORE_SLUG)
    assert rdir == root / "benchmarks" / "results"
    assert R.repo_root(rdir) == root and R.readme_of(rdir) == root / "README.md"
    plugin_rdir = root / "plugins" / "dxpp" / "results"
    assert R.repo_root(plugin_rdir) == root
    assert R.readme_of(plugin_rdir) == root / "plugins" / "dxpp" / "README.md"


def test_versions_of_editable_installs_come_from_their_source_tree() -> None:
    """A results file written after a version bump records the bumped version even before the
    editable install is refreshed (the installed metadata keeps the last install's version)."""
    import importlib.metadata as md
    import json
    import tomllib
    from pathlib import Path

    from icml.results import _version_of

    dist = md.distribution("icml-core")
    info = json.loads(dist.read_text("direct_url.json") or "null")
    if not (info and (info.get("dir_info") or {}).get("editable")):
        pytest.skip("icml-core is not an editable install here")
    root = Path(__file__).resolve().parents[1]
    declared = tomllib.loads((root / "core" / "pyproject.toml").read_text())["project"]["version"]
    assert _version_of("icml-core") == declared
    assert _version_of("numpy") == md.version("numpy")  # not editable: the metadata


def test_files_record_the_load_and_captions_show_it(tmp_path) -> None:
    from icml import results

    clock = results.Clock()
    table = results.make_table("t", ["a"], [[1]], name="t")
    path = results.write(tmp_path / "x.json", [table], command="cmd", clock=clock)
    data = results.load(path)
    if data["load"]["start"] is None:
        pytest.skip("no load average on this platform")
    assert data["load"]["end"] is not None
    assert " · load " in results.caption(data, "x.json")
    data.pop("load")  # files written before the field render as before
    assert "load" not in results.caption(data, "x.json")


def test_files_record_the_cpus_kernel_flags_and_reruns_name_a_changed_machine(
        tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(R.RESULTS_DIR_ENV, raising=False)
    flags = R.cpu_flags()
    assert flags == sorted(flags) and set(flags) <= R.KERNEL_FLAGS
    path = _demo_repo(tmp_path, "0.5")
    assert R.load(path)["cpu_flags"] == flags
    same = {"cpu": "X", "cpu_flags": ["avx2"]}
    assert R.machine_note(same, dict(same)) == ""
    note = R.machine_note({"cpu": "X", "cpu_flags": ["avx2", "avx512_bf16"]},
                          {"cpu": "Y", "cpu_flags": ["avx2", "amx_bf16"]})
    assert "'X' then, 'Y' now" in note and "+amx_bf16 -avx512_bf16" in note
    assert R.machine_note({"cpu": "X"}, {"cpu": "X", "cpu_flags": []}) == ""  # older files
    assert "torch kernels AVX512 then, AVX2 now" in R.machine_note(
        {"cpu_capability": "AVX512"}, {"cpu_capability": "AVX2"})
    import torch  # the capability is recorded once the writing process has torch
    assert R.cpu_capability() == torch.backends.cpu.get_cpu_capability()
    # a rerun that differs on another machine says so beside the cells
    data = json.loads(path.read_text())
    data["command"] = data["command"].replace("make.py 0.5", "make.py 0.75")
    data["cpu"], data["cpu_flags"] = "Some Other CPU", ["sse4_2"]
    path.write_text(json.dumps(data))
    out = rerun_file("demo", path)
    assert out.status == "differs" and "Some Other CPU" in out.message
    data["command"] = data["command"].replace("make.py 0.75", "make.py 0.5")
    path.write_text(json.dumps(data))
    assert rerun_file("demo", path).message == ""  # equal cells: no note


def test_a_machine_reference_copy_is_recorded_and_then_checked(tmp_path, monkeypatch) -> None:
    """On another CPU a rerun may differ from the main file (float kernels): --record-machine
    writes it as this machine's reference copy (main file and README untouched), later reruns
    here compare with the copy, a copy whose command is not the main file's says so, and a
    copy that the rerun no longer needs (equal to the main file) is removed."""
    monkeypatch.delenv(R.RESULTS_DIR_ENV, raising=False)
    path = _demo_repo(tmp_path, "0.5")
    readme = path.parent.parent / "README.md"
    data = json.loads(path.read_text())
    data["command"] = data["command"].replace("make.py 0.5", "make.py 0.75")  # "this machine"
    data["cpu"], data["cpu_flags"] = "Some Other CPU", ["sse4_2"]
    path.write_text(json.dumps(data))
    main_before, readme_before = path.read_text(), readme.read_text()
    assert R.machine_key(data) != R.machine_key()
    assert R.machine_key() == R.machine_key({"cpu": R.cpu_model(), "cpu_flags": R.cpu_flags()})
    copy = R.machine_copy(path, R.machine_key())
    assert copy.parent.parent == path.parent / R.MACHINES_DIR
    assert rerun_file("demo", path).status == "differs"
    out = rerun_file("demo", path, record_machine=True)
    assert out.status == "ok" and "recorded machines/" in out.message, out
    assert "Some Other CPU" in out.message
    assert copy.is_file() and R.load(copy)["tables"][0]["rows"] == [["a", 0.75]]
    assert path.read_text() == main_before and readme.read_text() == readme_before
    assert R.files(path.parent) == [path]  # copies are not results files of their own
    out = rerun_file("demo", path)
    assert out.status == "ok" and "reference copy machines/" in out.message, out
    # the copy is checked like a main file: another number differs from it
    data["command"] = data["command"].replace("make.py 0.75", "make.py 0.9")
    path.write_text(json.dumps(data))
    out = rerun_file("demo", path)
    assert out.status == "differs" and "record it again" in out.message
    assert [(d.committed, d.rerun) for d in out.diffs] == [("0.75", "0.9")]
    # a rerun equal to the main file needs no copy: recording removes it
    data["command"] = data["command"].replace("make.py 0.9", "make.py 0.5")
    path.write_text(json.dumps(data))
    out = rerun_file("demo", path, record_machine=True)
    assert out.status == "ok" and "removed" in out.message and not copy.exists()


@pytest.mark.parametrize(("heading", "exempt"), [
    ("Configuration", True), ("Options", True), ("Using the CLI", True),
    ("Exit statuses of the CLI", True), ("The hostile trial's cases (tests)", True),
    ("Real language task: SmolLM2 + LoRA, additions with 4 options", False),
    ("Information Imbalance vs dadapy (k=1, Euclidean)", False),
    ("continuation; 1k niah_multikey", False), ("Tensor level (unchanged method)", False)])
def test_only_a_heading_that_names_a_settings_section_exempts_its_tables(heading, exempt) -> None:
    text = f"## {heading}\n\n| arm | acc |\n|---|---|\n| a | 0.5 |\n"
    assert (R.unrendered_tables(text) == []) is exempt


def test_quick_none_keeps_the_files_flag_else_follows_the_wall_time(tmp_path, monkeypatch) -> None:
    """`icml run --save-results` passes quick=None: a long job's file is not quick."""
    monkeypatch.delenv(R.RESULTS_DIR_ENV, raising=False)
    clock = R.Clock()
    path = R.write(tmp_path / "a.json", [TABLE], command="x", quick=None, clock=clock)
    assert R.load(path)["quick"] is True  # took well under QUICK_WALL_S
    monkeypatch.setattr(R, "QUICK_WALL_S", -1.0)
    assert R.load(R.write(tmp_path / "b.json", [TABLE], command="x", quick=None,
                          clock=clock))["quick"] is False
    assert R.load(R.write(path, [TABLE], command="x", quick=None, clock=clock))["quick"] is True
    assert R.load(R.write(tmp_path / "c.json", [TABLE], command="x", quick=None))["quick"] is False
