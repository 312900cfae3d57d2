"""Running one plugin: a fresh run folder, result files, failures recorded, one plugin answers
while wrappers of other plugins still run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from icml import Paper, PluginInfo
from icml.config import ConfigError
from icml.loader import load_plugins
from icml.runner import RunFailed, load_result, run

FIXTURES = Path(__file__).parent / "fixtures"
RIVAL = '''
import icml
from dataclasses import dataclass

@dataclass
class Cfg:
    n: int = icml.option(1, help="n")

@icml.hookimpl
def icml_plugin_info():
    return icml.PluginInfo(name="rival", title="t", summary="s",
                           paper=icml.Paper(title="p", url="https://x.org"),
                           capabilities=("evaluate",), configs={"evaluate": Cfg})

@icml.hookimpl
def icml_evaluate(ctx, config):
    return icml.RunResult(metrics={"who": 2.0})
'''
TRACER = '''
import icml
CALLS = []

@icml.hookimpl(wrapper=True)
def icml_evaluate(ctx, config):
    CALLS.append("before")
    result = yield
    CALLS.append("after")
    result.metrics["traced"] = 1.0
    return result
'''


def test_run_writes_result_report_and_log_in_a_fresh_folder(site, tmp_path: Path) -> None:
    site.add_example()
    r1 = run("example", out=tmp_path / "runs", seed=3, show_progress=False)
    r2 = run("example", out=tmp_path / "runs", seed=3, show_progress=False)
    assert r1.run_dir != r2.run_dir and r1.metrics == r2.metrics  # seeded, never overwritten
    d = Path(r1.run_dir)
    data = json.loads((d / "result.json").read_text())
    assert data["plugin"] == "example" and data["capability"] == "evaluate"
    assert data["seed"] == 3 and data["config"]["n"] == 1000
    assert data["versions"]["icml-core"] and data["timings"]["total_s"] >= 0
    assert "| n | mean |" in (d / "report.md").read_text()
    assert (d / "samples.txt").exists() and "run example evaluate" in (d / "run.log").read_text()
    assert load_result(d).metrics == r1.metrics


def test_capability_and_nested_overrides(site, tmp_path: Path) -> None:
    site.add_example()
    out = tmp_path / "runs"
    res = run("example", "train", overrides=["schedule.steps=200", "schedule.lr=0.2"],
              out=out, show_progress=False)
    assert res.metrics["w"] == pytest.approx(3.0, abs=1e-6)
    with pytest.raises(ConfigError, match="has no capability 'quantize': it offers evaluate"):
        run("example", "quantize", out=out)
    with pytest.raises(ConfigError, match="must be <= 1"):
        run("example", "train", overrides=["schedule.lr=2"], out=out)
    assert [p.name for p in out.iterdir()] == [Path(res.run_dir).name]  # nothing written


def test_failed_run_keeps_its_folder_and_says_why(site, tmp_path: Path) -> None:
    site.add_example()
    with pytest.raises(RunFailed, match="RuntimeError: asked to fail") as exc:
        run("example", overrides=["fail=true"], out=tmp_path, show_progress=False)
    d = Path(exc.value.result.run_dir)
    data = json.loads((d / "result.json").read_text())
    assert data["status"] == "failed" and "asked to fail" in data["error"]
    assert "Traceback" in (d / "run.log").read_text()


def test_only_the_chosen_plugin_answers_but_wrappers_run(site, tmp_path: Path) -> None:
    site.add_example()
    site.add("icml-rival", {"rival": "icml_rival"}, modules={"icml_rival": RIVAL})
    (site.root / "icml_tracer.py").write_text(TRACER)
    host = load_plugins(modules=[])
    import icml_tracer

    host.pm.register(icml_tracer, name="tracer")
    res = run("example", out=tmp_path, host=host, show_progress=False)
    assert "who" not in res.metrics and "mean" in res.metrics and res.metrics["traced"] == 1.0
    res = run("rival", out=tmp_path, host=host, show_progress=False)
    assert res.metrics["who"] == 2.0 and res.metrics["traced"] == 1.0
    assert icml_tracer.CALLS == ["before", "after"] * 2


def test_invalid_result_is_a_failed_run(site, tmp_path: Path) -> None:
    bad = RIVAL.replace('return icml.RunResult(metrics={"who": 2.0})',
                        'return icml.RunResult(metrics={"who": "two"})')
    site.add("icml-rival", {"rival": "icml_rival"}, modules={"icml_rival": bad})
    with pytest.raises(RunFailed, match="metric 'who' is str, not a number"):
        run("rival", out=tmp_path, show_progress=False)


def test_config_instance_from_python(site, tmp_path: Path) -> None:
    site.add_example()
    from icml_example import EvaluateConfig

    res = run("example", config=EvaluateConfig(n=10), out=tmp_path, show_progress=False)
    assert res.config["n"] == 10
    with pytest.raises(ConfigError, match="must be >= 1"):
        run("example", config=EvaluateConfig(n=0), out=tmp_path)


@pytest.mark.parametrize(("device", "dtype", "message"), [
    ("gpu", "float32", "device 'gpu' is not valid"),
    ("cpu", "float8", "dtype 'float8' is not supported"),
])
def test_bad_device_or_dtype_is_a_config_error(site, tmp_path: Path, device, dtype,
                                               message) -> None:
    site.add_example()
    with pytest.raises(ConfigError, match=message):
        run("example", out=tmp_path / "o", device=device, dtype=dtype)
    assert not (tmp_path / "o").exists()


def test_cuda_without_a_gpu_is_a_config_error(site, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    site.add_example()
    with pytest.raises(ConfigError, match="torch sees no CUDA device: use --device cpu"):
        run("example", out=tmp_path, device="cuda")


def test_threads_apply_during_the_run_and_are_restored(site, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    seen = []
    bad = RIVAL.replace('return icml.RunResult(metrics={"who": 2.0})',
                        'import torch\n    return icml.RunResult(metrics={"threads": '
                        'float(torch.get_num_threads())})')
    site.add("icml-rival", {"rival": "icml_rival"}, modules={"icml_rival": bad})
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    res = run("rival", out=tmp_path, threads=target, show_progress=False)
    seen.append(res.metrics["threads"])
    assert seen == [float(target)] and torch.get_num_threads() == before
    with pytest.raises(ConfigError, match="threads must be >= 1"):
        run("rival", out=tmp_path, threads=0)
    site.add_example()
    with pytest.raises(RunFailed):  # restored when the hook fails too
        run("example", overrides=["fail=true"], out=tmp_path, threads=target,
            show_progress=False)
    assert torch.get_num_threads() == before


def test_plugin_default_threads_apply_unless_the_user_sets_threads(site, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    default = 1 if before != 1 else 2
    body = RIVAL.replace('configs={"evaluate": Cfg})',
                         f'configs={{"evaluate": Cfg}}, default_threads={default})')
    body = body.replace('return icml.RunResult(metrics={"who": 2.0})',
                        'import torch\n    return icml.RunResult(metrics={"threads": '
                        'float(torch.get_num_threads())})')
    assert "default_threads" in body and "get_num_threads" in body
    site.add("icml-rival", {"rival": "icml_rival"}, modules={"icml_rival": body})
    res = run("rival", out=tmp_path, show_progress=False)
    assert res.metrics["threads"] == float(default) and res.threads == default
    assert f"threads: {default}" in (Path(res.run_dir) / "report.md").read_text()
    user = default + 1
    res = run("rival", out=tmp_path, threads=user, show_progress=False)
    assert res.metrics["threads"] == float(user) and res.threads == user
    assert torch.get_num_threads() == before


def test_default_threads_must_be_a_positive_int() -> None:
    info = PluginInfo(name="x", title="t", summary="s", paper=Paper(title="p", url="https://x"),
                      capabilities=(), default_threads=0)
    assert any("default_threads is 0" in p for p in info.problems())
    for ok in (None, 1, 8):
        info = dataclasses.replace(info, default_threads=ok)
        assert not any("default_threads" in p for p in info.problems())
    for bad in (-1, True, 1.5):
        info = dataclasses.replace(info, default_threads=bad)
        assert any("default_threads" in p for p in info.problems())
