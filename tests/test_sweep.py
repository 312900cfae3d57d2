"""Issue 51: `icml sweep` -- grid expansion and names, validation before any cell, aggregate CIs
equal to `icml.stats` on the collected numbers, failure isolation, per-item results, resume
after a kill and after Ctrl-C, two sweeps into one folder, and the Ray backend giving the same
aggregate as the local one. No wall-clock assertions: tests wait on files, with deadlines only
against hangs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icml import jsonio, stats
from icml.config import ConfigError
from icml.sweep import (
    CLAIM,
    Claims,
    SweepInterrupted,
    cell_name,
    expand,
    finished_run,
    parse_grid,
    parse_seeds,
    point_name,
    sweep,
)

_SCRIPT = Path(sys.executable).parent / "icml"
ICML = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "icml.cli"]

# A plugin for these tests: seeds >= gate_from wait (inside the hook) until $SWEEP_GATE/open
# exists, after touching $SWEEP_GATE/started-<seed>; `items` reports per-item scores.
GATE = '''
import os
import time
from dataclasses import dataclass

import icml
from icml.sweep import write_items


@dataclass
class EvaluateConfig:
    x: float = icml.option(1.0, help="scale of the value")
    gate_from: int = icml.option(-1, help="seeds >= this wait for $SWEEP_GATE/open")
    delay: float = icml.option(0.0, help="seconds to sleep in the hook", ge=0)
    items: int = icml.option(0, help="per-item scores to report", ge=0)


@icml.hookimpl
def icml_plugin_info():
    return icml.PluginInfo(
        name="gate", title="Gate", summary="Waits on a file (sweep tests).",
        paper=icml.Paper(title="None", url="https://example.org/gate"),
        capabilities=("evaluate",), configs={"evaluate": EvaluateConfig})


@icml.hookimpl
def icml_evaluate(ctx, config):
    gate = os.environ.get("SWEEP_GATE", "")
    if gate and 0 <= config.gate_from <= ctx.seed:
        open(os.path.join(gate, f"started-{ctx.seed}"), "w").close()
        while not os.path.exists(os.path.join(gate, "open")):
            time.sleep(0.05)
    time.sleep(config.delay)
    arts = {}
    if config.items:
        scores = [((ctx.seed * 7 + i * 3) % 5) / 4 for i in range(config.items)]
        arts["items"] = write_items(ctx.out_dir, {"score": scores})
    return icml.RunResult(metrics={"value": config.x * (ctx.seed + 1) ** 0.5},
                          artifacts=arts)
'''

DEADLINE = 240  # seconds: only against a hang; the machine may be very busy


@pytest.fixture
def gate(site):  # noqa: ANN001, ANN201
    site.add("icml-gate", {"gate": "icml_gate"}, modules={"icml_gate": GATE})
    return site


def _wait_for(predicate, proc: subprocess.Popen | None = None, what: str = "") -> None:  # noqa: ANN001
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"sweep exited early ({what}): {proc.communicate()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _status(path: Path) -> str | None:
    try:
        return json.loads(path.read_text()).get("status")
    except (OSError, ValueError):
        return None


# -- grid, seeds, names -------------------------------------------------------------------------
def test_grid_expansion_and_cell_names() -> None:
    grid = parse_grid(["schedule.lr=0.1,0.2", "steps=20", "tags=[a,b],[c]"])
    assert grid == {"schedule.lr": ["0.1", "0.2"], "steps": ["20"], "tags": ["[a,b]", "[c]"]}
    assert parse_seeds("0-2,7") == [0, 1, 2, 7]
    assert parse_seeds([3, 1]) == [3, 1]
    cells = expand({"lr": ["0.1", "0.2"], "steps": ["20"]}, [0, 3])
    assert [c.name for c in cells] == ["lr=0.1,steps=20,seed=0", "lr=0.1,steps=20,seed=3",
                                       "lr=0.2,steps=20,seed=0", "lr=0.2,steps=20,seed=3"]
    assert cells[0].overrides() == ["lr=0.1", "steps=20"]
    assert [c.name for c in expand({}, [0, 1])] == ["seed=0", "seed=1"]
    assert point_name({}) == "all"
    # the same inputs always give the same names; unsafe characters are replaced and tagged
    odd = cell_name({"path": "a/b c", "tags": "[a,b]"}, 1)
    assert odd == cell_name({"path": "a/b c", "tags": "[a,b]"}, 1)
    assert "/" not in odd and " " not in odd and odd.endswith(",seed=1")
    assert cell_name({"path": "a/b"}, 0) != cell_name({"path": "a_b"}, 0)
    long = cell_name({"k": "x" * 500}, 2)
    assert len(long) < 255 and long.endswith(",seed=2")
    assert parse_grid({"lr": [0.1, 1e-3], "flag": True}) == {"lr": ["0.1", "0.001"],
                                                             "flag": ["true"]}


@pytest.mark.parametrize("spec, message", [
    (["lr"], "expected key=v1,v2"), (["seed=1,2"], "--seeds"), (["lr=1", "lr=2"], "twice"),
    (["lr=1,1"], "repeats"), (["lr=1,"], "empty value"), (["a b=1"], "not a config key")])
def test_bad_grid_is_one_line(spec: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_grid(spec)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("spec", ["", "3-1", "a", "0,0", "-1", str(2**32)])
def test_bad_seeds(spec: str) -> None:
    with pytest.raises(ConfigError, match="--seeds"):
        parse_seeds(spec)


def test_every_cell_is_validated_before_any_starts(site, tmp_path: Path) -> None:  # noqa: ANN001
    site.add_example()
    out = tmp_path / "sw"
    with pytest.raises(ConfigError, match=r"grid point n=0: config key 'n'.*>= 1"):
        sweep("example", grid={"n": [10, 0]}, seeds=[0, 1], out=out)
    with pytest.raises(ConfigError, match="unknown config key"):
        sweep("example", grid={"nn": [10]}, out=out)
    with pytest.raises(ConfigError, match="--backend"):
        sweep("example", out=out, backend="slurm")
    with pytest.raises(ConfigError, match="--workers"):
        sweep("example", out=out, workers=0)
    assert not out.exists() or not any(out.iterdir())


# -- claims -------------------------------------------------------------------------------------
def test_claims_are_exclusive_and_stale_ones_are_broken(tmp_path: Path) -> None:
    a, b = Claims(tmp_path), Claims(tmp_path)
    assert a.acquire("c1") and not b.acquire("c1")
    a.release("c1")
    assert b.acquire("c1")
    b.release_all()
    assert not (tmp_path / "c1" / CLAIM).exists()
    # a claim left by a process that is gone (same host) is broken
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    (tmp_path / "c2").mkdir()
    (tmp_path / "c2" / CLAIM).write_text(json.dumps(
        {"host": __import__("socket").gethostname(), "pid": int(dead.stdout), "token": "x"}))
    assert a.acquire("c2")
    # a live claim on another host is respected
    (tmp_path / "c3").mkdir()
    (tmp_path / "c3" / CLAIM).write_text(json.dumps({"host": "elsewhere", "pid": 1}))
    assert not a.acquire("c3")


# -- running, aggregating -----------------------------------------------------------------------
def test_sweep_runs_cells_and_aggregate_equals_icml_stats(site, tmp_path: Path) -> None:  # noqa: ANN001
    site.add_example()
    out = tmp_path / "sw"
    seen = []
    res = sweep("example", grid={"n": [10, 40]}, seeds="0-2", out=out, workers=2,
                on_cell=lambda c, done, total: seen.append((c.name, done, total)))
    assert res.complete and res.ok and len(res.cells) == 6 and len(seen) == 6
    assert sorted(n for n, _, _ in seen) == sorted(c.name for c in res.cells)
    data = jsonio.loads((out / "sweep.json").read_text())
    assert data["schema"] == "icml.sweep/1" and data["complete"] and data["counts"]["ok"] == 6
    assert data["threads"] == 1 or data["threads"] >= 1
    for pt in data["points"]:
        n = int(pt["params"]["n"])
        assert pt["seeds_ok"] == [0, 1, 2]
        for metric in ("mean", "abs_error"):
            values = []
            for seed in (0, 1, 2):  # the numbers of each cell's ordinary result.json
                run_dir, result = finished_run(out / f"n={n},seed={seed}")
                assert result["status"] == "ok" and result["seed"] == seed
                assert result["config"]["n"] == n and result["plugin"] == "example"
                values.append(result["metrics"][metric])
            agg = pt["metrics"][metric]
            assert agg["values"] == values and agg["seeds"] == [0, 1, 2]
            assert agg["ci"] == stats.hierarchical_ci([[v] for v in values]).to_dict()
            plain = stats.mean_ci(values)  # one value per seed: a bootstrap over seeds
            assert (agg["ci"]["value"], agg["ci"]["lo"], agg["ci"]["hi"]) == \
                (plain.value, plain.lo, plain.hi)
    report = (out / "report.md").read_text()
    assert "| n=10 | mean |" in report and "| n=40 | abs_error |" in report
    # rerunning is a no-op that reuses every cell
    again = sweep("example", grid={"n": [10, 40]}, seeds="0-2", out=out, workers=2)
    assert all(c.reused for c in again.cells) and again.points == res.points


def test_per_item_results_aggregate_over_seeds_and_items(gate, tmp_path: Path) -> None:  # noqa: ANN001
    out = tmp_path / "sw"
    res = sweep("gate", seeds=[0, 1, 2], out=out, workers=1, overrides=["items=6"],
                plot=False)
    (pt,) = res.points
    rows = [[((s * 7 + i * 3) % 5) / 4 for i in range(6)] for s in (0, 1, 2)]
    agg = pt["metrics"]["items/score"]
    assert agg["items"] == [6, 6, 6]
    assert agg["ci"] == stats.hierarchical_ci(rows).to_dict()
    assert "crossed" in agg["ci"]["method"]
    assert pt["metrics"]["value"]["ci"] == stats.hierarchical_ci(
        [[(s + 1) ** 0.5] for s in (0, 1, 2)]).to_dict()


def test_a_failed_cell_is_recorded_and_the_sweep_goes_on(site, tmp_path: Path) -> None:  # noqa: ANN001
    site.add("icml-flaky", {"flaky": "icml_flaky"}, modules={
        "icml_flaky": (Path(__file__).parent / "fixtures" / "icml_flaky.py").read_text()})
    out = tmp_path / "sw"
    res = sweep("flaky", grid={"mode": ["ok", "fail"]}, seeds=[0, 1], out=out, workers=2)
    assert res.complete and not res.ok
    status = {c.name: c.status for c in res.cells}
    assert status == {"mode=ok,seed=0": "ok", "mode=ok,seed=1": "ok",
                      "mode=fail,seed=0": "failed", "mode=fail,seed=1": "failed"}
    failed = res.cell("mode=fail,seed=0")
    assert "arm 2 broke" in failed.error
    assert (out / failed.run_dir / "run.log").is_file()
    ok_pt, fail_pt = res.points
    assert ok_pt["seeds_ok"] == [0, 1] and set(ok_pt["metrics"]) == {"arm0", "arm1", "arm2"}
    assert fail_pt["seeds_failed"] == [0, 1] and fail_pt["metrics"] == {}
    assert "Failed cells" in (out / "report.md").read_text()
    # failed cells are finished: a rerun does not run them again
    mtime = (out / failed.run_dir / "result.json").stat().st_mtime_ns
    again = sweep("flaky", grid={"mode": ["ok", "fail"]}, seeds=[0, 1], out=out, workers=2)
    assert all(c.reused for c in again.cells)
    assert (out / failed.run_dir / "result.json").stat().st_mtime_ns == mtime


def test_a_resumed_sweep_keeps_its_thread_count(site, tmp_path: Path) -> None:  # noqa: ANN001
    site.add_example()
    out = tmp_path / "sw"
    first = sweep("example", seeds=[0], out=out, workers=1, plot=False)
    threads = jsonio.loads((out / "sweep.json").read_text())["threads"]
    more = sweep("example", seeds=[0, 1], out=out, workers=2, plot=False)  # other --workers
    assert first.cell("seed=0").status == more.cell("seed=1").status == "ok"
    _, result = finished_run(out / "seed=1")
    assert result["threads"] == threads


def test_a_finished_cell_with_another_config_is_an_error(site, tmp_path: Path) -> None:  # noqa: ANN001
    site.add_example()
    out = tmp_path / "sw"
    sweep("example", seeds=[0], out=out, workers=1, overrides=["n=10"], plot=False)
    with pytest.raises(ConfigError, match="another plugin, capability, seed or config"):
        sweep("example", seeds=[0], out=out, workers=1, overrides=["n=11"])


def test_cli_sweep(cli, site, tmp_path: Path) -> None:  # noqa: ANN001
    site.add_example()
    out = tmp_path / "sw"
    proc = cli("sweep", "example", "train", "--grid", "schedule.lr=0.1,0.2", "--seeds", "0-1",
               "--out", str(out), "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert "4 of 4 cells ok" in proc.stdout
    assert (out / "schedule.lr=0.1,seed=1").is_dir()
    assert jsonio.loads((out / "sweep.json").read_text())["capability"] == "train"
    bad = cli("sweep", "example", "--grid", "n=0", "--out", str(tmp_path / "b"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "n=0" in bad.stderr


# -- interruption, resume, concurrency (real processes) -----------------------------------------
def _popen(site, args: list[str], gate_dir: Path) -> subprocess.Popen:  # noqa: ANN001
    return subprocess.Popen([*ICML, "sweep", "gate", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=site.env(SWEEP_GATE=str(gate_dir)),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_resume_after_kill_does_not_rerun_finished_cells(gate, tmp_path: Path) -> None:  # noqa: ANN001
    out, gate_dir = tmp_path / "sw", tmp_path / "gate"
    gate_dir.mkdir()
    args = ["--seeds", "0-2", "--set", "gate_from=1", "--out", str(out), "--workers", "1", "-q"]
    proc = _popen(gate, args, gate_dir)
    first = out / "seed=0"
    _wait_for(lambda: finished_run(first) is not None, proc, "the first cell's result")
    _wait_for(lambda: (gate_dir / "started-1").exists(), proc, "the second cell to start")
    run_dir, _ = finished_run(first)
    before = ((run_dir / "result.json").read_bytes(), (run_dir / "result.json").stat().st_mtime_ns)
    proc.kill()  # SIGKILL: no cleanup at all, its claim stays behind
    proc.communicate()
    assert (out / "seed=1" / CLAIM).exists()
    if sys.platform.startswith("linux"):  # the orphaned worker is told (SIGTERM) and stops
        _wait_for(lambda: any(_status(p) == "interrupted"
                              for p in (out / "seed=1").glob("*/result.json")),
                  what="the orphaned cell to record its interruption")
    (gate_dir / "open").touch()
    proc = _popen(gate, args, gate_dir)
    stdout, stderr = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, stderr
    after = ((run_dir / "result.json").read_bytes(), (run_dir / "result.json").stat().st_mtime_ns)
    assert after == before
    assert [p.name for p in first.iterdir() if p.is_dir()] == [run_dir.name]  # not rerun
    data = jsonio.loads((out / "sweep.json").read_text())
    assert data["complete"] and data["counts"]["ok"] == 3
    reused = {c["name"]: c["reused"] for c in data["cells"]}
    assert reused == {"seed=0": True, "seed=1": False, "seed=2": False}
    assert not list(out.glob(f"*/{CLAIM}"))


def test_ctrl_c_keeps_finished_cells_and_says_how_to_resume(gate, tmp_path: Path) -> None:  # noqa: ANN001
    out, gate_dir = tmp_path / "sw", tmp_path / "gate"
    gate_dir.mkdir()
    args = ["--seeds", "0-1", "--set", "gate_from=1", "--out", str(out), "--workers", "1"]
    proc = _popen(gate, args, gate_dir)
    _wait_for(lambda: (gate_dir / "started-1").exists(), proc, "the second cell to start")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 130, stderr
    assert "1 of 2 cells finished and kept" in stderr and "icml sweep gate" in stderr
    data = jsonio.loads((out / "sweep.json").read_text())
    assert not data["complete"]
    assert {c["name"]: c["status"] for c in data["cells"]} == {"seed=0": "ok",
                                                               "seed=1": "interrupted"}
    assert any(_status(p) == "interrupted" for p in (out / "seed=1").glob("*/result.json"))
    assert not list(out.glob(f"*/{CLAIM}"))


def test_api_ctrl_c_raises_sweep_interrupted(gate, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    import threading

    out, gate_dir = tmp_path / "sw", tmp_path / "gate"
    gate_dir.mkdir()
    monkeypatch.setenv("SWEEP_GATE", str(gate_dir))
    # A process started in the background by a non-interactive shell (`cmd &`, nohup) inherits
    # SIGINT ignored, and Python then leaves it ignored: the raise below would do nothing and
    # the gated cell would wait for ever. Ctrl-C's own handler, as in a terminal:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def interrupt() -> None:
        _wait_for(lambda: (gate_dir / "started-1").exists(), what="the second cell")
        signal.raise_signal(signal.SIGINT)  # delivered to the main thread: the sweep's

    t = threading.Thread(target=interrupt, daemon=True)
    t.start()
    try:
        with pytest.raises(SweepInterrupted) as info:
            sweep("gate", seeds=[0, 1], out=out, workers=1, overrides=["gate_from=1"])
        t.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert info.value.result.cell("seed=0").status == "ok"
    assert not info.value.result.complete


def test_ctrl_c_between_submit_and_bookkeeping_does_not_hang(gate, tmp_path: Path,
                                                            monkeypatch) -> None:  # noqa: ANN001
    """Ctrl-C can land after a cell was submitted but before the sweep recorded its handle; the
    sweep must still interrupt that cell, not wait for it for ever in the pool's shutdown."""
    import icml.sweep as sw

    out, gate_dir = tmp_path / "sw", tmp_path / "gate"
    gate_dir.mkdir()
    monkeypatch.setenv("SWEEP_GATE", str(gate_dir))
    submit = sw._Local.submit

    def submit_then_ctrl_c(self, task):  # noqa: ANN001, ANN202
        handle = submit(self, task)
        if task["seed"] == 1:
            _wait_for(lambda: (gate_dir / "started-1").exists(), what="the second cell")
            raise KeyboardInterrupt  # before `in_flight[handle] = cell`
        return handle

    monkeypatch.setattr(sw._Local, "submit", submit_then_ctrl_c)
    with pytest.raises(SweepInterrupted) as info:
        sweep("gate", seeds=[0, 1], out=out, workers=1, overrides=["gate_from=1"])
    assert info.value.result.cell("seed=0").status == "ok"
    assert not info.value.result.complete


def test_two_sweeps_into_one_folder_do_not_collide(gate, tmp_path: Path) -> None:  # noqa: ANN001
    out, gate_dir = tmp_path / "sw", tmp_path / "gate"
    gate_dir.mkdir()
    args = ["--grid", "x=1,2", "--seeds", "0-3", "--set", "delay=0.2", "--out", str(out),
            "--workers", "1", "-q"]
    procs = [_popen(gate, args, gate_dir) for _ in range(2)]
    results = [p.communicate(timeout=DEADLINE) for p in procs]
    for p, (_, stderr) in zip(procs, results):
        assert p.returncode == 0, stderr
    for cell in out.iterdir():
        if cell.is_dir():
            runs = [p for p in cell.iterdir() if p.is_dir()]
            assert len(runs) == 1, f"{cell.name} ran {len(runs)} times"
            assert _status(runs[0] / "result.json") == "ok"
    data = jsonio.loads((out / "sweep.json").read_text())
    assert data["complete"] and data["counts"]["ok"] == 8
    assert not list(out.glob(f"*/{CLAIM}")) and not list(out.glob(".*.tmp"))


# -- ray ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ray_backend_gives_the_local_aggregate_bit_for_bit(site, tmp_path: Path) -> None:  # noqa: ANN001
    ray = pytest.importorskip("ray")
    site.add_example()
    kw = dict(grid={"n": [10, 30]}, seeds=[0, 1], workers=2, threads=1, plot=False)
    local = sweep("example", out=tmp_path / "local", **kw)
    try:
        remote = sweep("example", out=tmp_path / "ray", backend="ray", **kw)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    assert remote.ok and local.ok
    a = jsonio.loads((tmp_path / "local" / "sweep.json").read_text())
    b = jsonio.loads((tmp_path / "ray" / "sweep.json").read_text())
    assert b["backend"] == "ray"
    assert jsonio.dumps(a["points"]) == jsonio.dumps(b["points"])


def test_sweep_module_is_light() -> None:
    code = ("import sys, icml.sweep; heavy = {'numpy', 'torch', 'ray'} & set(sys.modules); "
            "print(','.join(sorted(heavy)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ})
    assert proc.returncode == 0, proc.stderr
    assert "torch" not in proc.stdout and "ray" not in proc.stdout
