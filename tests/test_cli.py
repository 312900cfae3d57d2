"""The `icml` command line, in-process (typer's runner) and as the installed console script in a
subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from icml import __version__
from icml.cli import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_version_and_help(cli) -> None:
    assert invoke("--version").output.strip() == f"icml-core {__version__}"
    proc = cli("--help")
    assert proc.returncode == 0
    for command in ("list", "info", "run", "new", "doctor"):
        assert command in proc.stdout


def test_list_in_process_and_subprocess(site, cli) -> None:
    site.add_example()
    site.add("icml-boom", {"boom": "icml_boom"}, modules={"icml_boom": "raise ValueError('x')"})
    res = invoke("list", "--json")
    rows = {r["slug"]: r for r in json.loads(res.output)}
    assert rows["example"]["capabilities"] == ["evaluate", "train"]
    assert rows["boom"]["status"] == "error" and "ValueError" in rows["boom"]["error"]
    proc = cli("list")
    assert proc.returncode == 0, proc.stderr
    assert "example" in proc.stdout and "evaluate, train" in proc.stdout
    assert "boom" in proc.stdout and "error" in proc.stdout


def test_info_shows_every_key(site, cli) -> None:
    site.add_example()
    res = invoke("info", "example", "--json")
    data = json.loads(res.output)
    keys = {r["key"] for r in data["config"]["train"]}
    assert keys == {"target", "schedule.lr", "schedule.steps", "tags"}
    proc = cli("info", "example")
    assert proc.returncode == 0
    for text in ("Example plugin", "https://example.org/paper", "schedule.lr", "learning rate",
                 "> 0, <= 1", "primary: evaluate"):
        assert text in proc.stdout


def test_unknown_slug_is_one_line_with_closest_names(site, cli) -> None:
    site.add_example()
    proc = cli("run", "exampel")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "unknown plugin 'exampel': did you mean 'example'?" in proc.stderr
    assert invoke("info", "nope").exit_code == 2


def test_run_writes_results_and_prints_summary(site, cli, tmp_path: Path) -> None:
    site.add_example()
    tmp_path = tmp_path / "out"
    proc = cli("run", "example", "--out", str(tmp_path), "--seed", "1", "--set", "n=50",
               "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert "Estimate" in proc.stdout and "example evaluate: ok" in proc.stdout
    (run_dir,) = tmp_path.iterdir()
    data = json.loads((run_dir / "result.json").read_text())
    assert data["config"]["n"] == 50 and data["seed"] == 1 and data["device"] == "cpu"
    res = invoke("run", "example", "train", "--out", str(tmp_path), "-s", "schedule.steps=3")
    assert res.exit_code == 0 and len(list(tmp_path.iterdir())) == 2


def test_run_with_config_file(site, tmp_path: Path) -> None:
    site.add_example()
    cfg = tmp_path / "c.toml"
    cfg.write_text("target = 2.0\n[schedule]\nsteps = 300\n")
    res = invoke("run", "example", "train", "--config", str(cfg), "--out", str(tmp_path / "o"))
    assert res.exit_code == 0, res.output
    (run_dir,) = (tmp_path / "o").iterdir()
    assert json.loads((run_dir / "result.json").read_text())["metrics"]["w"] == \
        pytest.approx(2.0, abs=1e-6)


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "n=-1"], "error: config key 'n': got -1, must be >= 1"),
    (["--set", "nn=3"], "error: unknown config key 'nn': did you mean 'n'?"),
    (["quantize"], "has no capability 'quantize'"),
    (["--config", "missing.toml"], "does not exist"),
    (["--set", "n=13"], "error: config key 'n': 13 is unlucky"),  # raised inside the hook
])
def test_bad_config_exits_2_with_one_line(site, cli, tmp_path: Path, args, message) -> None:
    site.add_example()
    proc = cli("run", "example", *args, "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert message in last
    if "unlucky" in message:  # the hook ran (and logged): its failed result is kept
        (run_dir,) = (tmp_path / "o").iterdir()
        assert json.loads((run_dir / "result.json").read_text())["status"] == "failed"
    else:
        assert proc.stderr.strip() == last
        assert not (tmp_path / "o").exists()


def test_failed_run_exits_1_short_error_and_debug_traceback(site, cli, tmp_path: Path) -> None:
    site.add_example()
    tmp_path = tmp_path / "out"
    proc = cli("run", "example", "--set", "fail=true", "--out", str(tmp_path))
    assert proc.returncode == 1
    assert "RuntimeError: asked to fail" in proc.stderr and "Traceback" not in proc.stderr
    (run_dir,) = tmp_path.iterdir()
    assert json.loads((run_dir / "result.json").read_text())["status"] == "failed"
    proc = cli("run", "example", "--set", "fail=true", "--out", str(tmp_path), "--debug")
    assert proc.returncode == 1 and "Traceback" in proc.stderr


def test_development_module_option(site, cli, tmp_path: Path) -> None:
    src = (Path(__file__).parent / "fixtures" / "icml_example.py").read_text()
    (site.root / "icml_devmod.py").write_text(src.replace('name="example"', 'name="devmod"'))
    proc = cli("-p", "icml_devmod", "run", "devmod", "--set", "n=5", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "devmod evaluate: ok" in proc.stdout


def test_doctor_reports_environment_and_broken_plugins(site, cli) -> None:
    site.add_example()
    proc = cli("doctor", ICML_PLUGINS="example")  # only this test's plugin counts
    assert proc.returncode == 0, proc.stdout
    assert "python:" in proc.stdout and "[ok] example 0.1.0" in proc.stdout
    site.add("icml-boom", {"boom": "icml_boom"}, modules={"icml_boom": "raise ValueError('x')"})
    res = invoke("doctor", "--json")
    data = json.loads(res.output)
    assert res.exit_code == 1 and data["healthy"] is False
    boom = next(p for p in data["plugins"] if p["slug"] == "boom")
    assert "Traceback" in boom["traceback"] and boom["fix"]


def test_strict_mode_cli(site, cli) -> None:
    site.add("icml-boom", {"boom": "icml_boom"}, modules={"icml_boom": "raise ValueError('x')"})
    proc = cli("list", ICML_STRICT_PLUGINS="1", ICML_PLUGINS="boom")
    assert proc.returncode == 1 and "plugin 'boom'" in proc.stderr


def test_new_in_process_and_refuses_to_overwrite(tmp_path: Path) -> None:
    res = invoke("new", "my-method", "--dir", str(tmp_path))
    assert res.exit_code == 0 and (tmp_path / "my-method" / "pyproject.toml").is_file()
    assert 'my-method = "icml_my_method.plugin"' in \
        (tmp_path / "my-method" / "pyproject.toml").read_text()
    res = invoke("new", "my-method", "--dir", str(tmp_path))
    assert res.exit_code == 2 and "already exists" in res.output
    assert invoke("new", "Bad_Slug", "--dir", str(tmp_path)).exit_code == 2


def test_reproduce_refuses_write_with_record_machine() -> None:
    """--write accepts a rerun as the main file; --record-machine keeps the main file and writes
    another machine's copy: asking for both is a usage error, before anything reruns."""
    res = invoke("reproduce", "dxpp", "--write", "--record-machine")
    assert res.exit_code == 2 and "exclude each other" in res.output
