"""Issue 16: no finished result lost, every bad input a clean error. Each case runs through the
installed console script (a fresh interpreter, as a user runs it) unless it is about the Python
API."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icml.runner import load_result

FIXTURES = Path(__file__).parent / "fixtures"
_SCRIPT = Path(sys.executable).parent / "icml"
ICML = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "icml.cli"]


@pytest.fixture
def flaky(site):
    site.add("icml-flaky", {"flaky": "icml_flaky"},
             modules={"icml_flaky": (FIXTURES / "icml_flaky.py").read_text()})
    return site


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def _run_dir(out: Path) -> Path:
    (run_dir,) = out.iterdir()
    return run_dir


# -- 1. non-finite values anywhere ----------------------------------------------------------
def test_inf_in_config_and_nan_in_tables_keep_the_run(flaky, cli, tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = cli("run", "flaky", "--set", "scale=inf", "--set", "mode=diverge", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    run_dir = _run_dir(out)
    text = (run_dir / "result.json").read_text()
    raw = json.loads(text)  # standard JSON: no NaN / Infinity tokens
    assert "Infinity" not in text and "NaN" not in text
    assert raw["config"]["scale"] == {"$float": "inf"}
    assert raw["metrics"]["arm1"] == {"$float": "nan"}
    back = load_result(run_dir)
    assert back.config["scale"] == math.inf and math.isnan(back.metrics["arm1"])
    assert back.tables[0].rows[0][1] == math.inf and math.isnan(back.tables[0].rows[1][1])
    assert (run_dir / "report.md").is_file()


# -- 2. a diverged arm is a result; a failure keeps the finished arms ------------------------
def test_failure_keeps_recorded_arms(flaky, cli, tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = cli("run", "flaky", "--set", "mode=fail", "--out", str(out))
    assert proc.returncode == 1
    assert "kept 2 metric(s) and 2 table row(s)" in _one_line_error(proc)
    res = load_result(_run_dir(out))
    assert res.status == "failed" and res.partial and "arm 2 broke" in res.error
    assert res.metrics == {"arm0": 1.0, "arm1": 2.0}
    assert res.tables[0].rows == [["arm0", 1.0], ["arm1", 2.0]]
    assert "arm0" in (_run_dir(out) / "report.md").read_text()


def test_invalid_returned_result_is_kept_and_marked_failed(flaky, cli, tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = cli("run", "flaky", "--set", "mode=invalid", "--out", str(out))
    assert proc.returncode == 1 and "metric 'label' is str" in _one_line_error(proc)
    res = load_result(_run_dir(out))
    assert res.status == "failed" and res.metrics["arm2"] == 3.0 and res.tables


# -- 3. path errors ---------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["file", "under-file", "read-only"])
def test_out_path_errors_are_one_line(flaky, cli, tmp_path: Path, where: str) -> None:
    afile = tmp_path / "afile.txt"
    afile.write_text("x")
    if where == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        target, expected = ro / "runs", "cannot be created"
    else:
        target = afile if where == "file" else afile / "runs"
        expected = "is a file" if where == "file" else "which is a file"
    proc = cli("run", "flaky", "--out", str(target))
    assert proc.returncode == 2
    assert expected in _one_line_error(proc) and "--out" in proc.stderr


def test_out_not_writable_is_one_line(flaky, cli, tmp_path: Path) -> None:
    """Works as root too: /proc refuses everyone."""
    proc = cli("run", "flaky", "--out", "/proc/icml-runs")
    assert proc.returncode == 2 and "--out" in _one_line_error(proc)


def test_new_dir_that_is_a_file(cli, tmp_path: Path) -> None:
    afile = tmp_path / "afile.txt"
    afile.write_text("x")
    proc = cli("new", "foo", "--dir", str(afile))
    assert proc.returncode == 2 and "is a file" in _one_line_error(proc)
    proc = cli("new", "foo", "--dir", str(afile / "sub"))
    assert proc.returncode == 2 and "is a file" in _one_line_error(proc)


def test_config_that_is_a_directory(flaky, cli, tmp_path: Path) -> None:
    proc = cli("run", "flaky", "--config", str(tmp_path), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "is a folder" in _one_line_error(proc)


# -- 4. sys.exit at import or in a hook --------------------------------------------------------
def test_plugin_calling_sys_exit_at_import_is_isolated(flaky, cli) -> None:
    flaky.add("icml-quitter", {"quitter": "icml_quitter"},
              modules={"icml_quitter": "import sys\nsys.exit(3)\n"})
    proc = cli("list")
    assert proc.returncode == 0, proc.stderr
    assert "flaky" in proc.stdout and "quitter" in proc.stdout
    assert "sys.exit(3)" in proc.stdout + proc.stderr
    proc = cli("doctor")
    assert proc.returncode == 1 and "sys.exit(3)" in proc.stdout
    assert "[ok] flaky" in proc.stdout


def test_sys_exit_inside_a_hook_is_a_failure_that_keeps_arms(flaky, cli, tmp_path) -> None:
    out = tmp_path / "o"
    proc = cli("run", "flaky", "--set", "mode=exit", "--out", str(out))
    assert proc.returncode == 1 and "sys.exit(3)" in _one_line_error(proc)
    res = load_result(_run_dir(out))
    assert res.status == "failed" and res.metrics == {"arm0": 1.0, "arm1": 2.0}


# -- 5. Ctrl-C (and SIGTERM, handled the same) keeps the finished arms; run folder first -------
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_interrupt_writes_partial_results(flaky, tmp_path: Path, sig: str) -> None:
    out = tmp_path / "o"
    # A shell's background job (`cmd &` without job control, as in many CI runners) starts with
    # SIGINT ignored, and Python then installs no KeyboardInterrupt handler: restore the
    # terminal's default in the child, as a user pressing Ctrl-C has it.
    proc = subprocess.Popen([*ICML, "run", "flaky", "--set", "mode=wait", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=flaky.env(),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # waits for the plugin's own signal that it is inside the hook, not for a time
    while not list(out.glob("*/waiting")):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    run_dir = _run_dir(out)
    running = load_result(run_dir)  # already on disk while the run goes on
    assert running.status == "running" and running.metrics["arm2"] == 3.0
    proc.send_signal(getattr(signal, sig))
    _, stderr = proc.communicate()
    assert proc.returncode == 130, stderr
    assert stderr.splitlines()[0] == f"run folder: {run_dir}"
    assert "Traceback" not in stderr and "interrupted; kept 3 metric(s)" in stderr
    res = load_result(run_dir)
    assert res.status == "interrupted" and res.partial
    assert (sig == "SIGTERM") == ("SIGTERM" in res.error), res.error
    assert [r[0] for r in res.tables[0].rows] == ["arm0", "arm1", "arm2"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_second_sigterm_does_not_kill_the_result_write() -> None:
    """A dying sweep's kernel may send its workers the parent-death SIGTERM more than once; only
    the first interrupts, later ones wait until the interrupted result is on disk."""
    from icml.runner import Terminated, _sigterm_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with _sigterm_as_interrupt() as state:
        with pytest.raises(Terminated):
            signal.raise_signal(signal.SIGTERM)
            time.sleep(5)  # not reached: the handler raises at once
        signal.raise_signal(signal.SIGTERM)  # the second one: noted, not raised
        assert state.pending
    assert signal.getsignal(signal.SIGTERM) is before


# -- 6. the seed is checked once, in the core ------------------------------------------------
@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_bad_seed_names_the_option(flaky, cli, tmp_path: Path, seed: str) -> None:
    proc = cli("run", "flaky", "--seed", seed, "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "--seed" in _one_line_error(proc)
    assert not (tmp_path / "o").exists()


# -- 7. plugin-detected bad values exit 2 ------------------------------------------------------
def test_plugin_config_error_exits_2(flaky, cli, tmp_path: Path) -> None:
    proc = cli("run", "flaky", "--set", "mode=config", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert "plugin-detected error" in _one_line_error(proc)


# -- 8. bare words in lists; info shows list[int] -----------------------------------------------
@pytest.mark.parametrize(("value", "expected"), [
    ("[x, y]", ["x", "y"]), ('["x", "y"]', ["x", "y"]), ("x,y", ["x", "y"]), ("[x]", ["x"]),
    ("[inf]", ["inf"]), ("[]", []),
])
def test_bare_words_in_list_values(flaky, cli, tmp_path: Path, value, expected) -> None:
    out = tmp_path / "o"
    proc = cli("run", "flaky", "--set", f"names={value}", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert load_result(_run_dir(out)).config["names"] == expected


def test_info_shows_list_item_types(flaky, cli) -> None:
    proc = cli("info", "flaky")
    assert proc.returncode == 0 and "list[int]" in proc.stdout and "list[str]" in proc.stdout


# -- 9. issue 49: interrupts in disguise, SIGTERM, parse errors, -p, devices -------------------
def test_wrapped_ctrl_c_is_an_interruption(flaky, cli, tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = cli("run", "flaky", "--set", "mode=wrapped", "--out", str(out))
    assert proc.returncode == 130, proc.stderr
    assert "interrupted; kept 2 metric(s)" in _one_line_error(proc)
    res = load_result(_run_dir(out))
    assert res.status == "interrupted" and res.metrics == {"arm0": 1.0, "arm1": 2.0}


@pytest.mark.parametrize("args", [("run", "flaky", "--seed", "abc"),
                                  ("run", "flaky", "--threads", "abc"),
                                  ("runn", "flaky"), ("run",), ("run", "flaky", "--nope")])
def test_usage_errors_are_one_line(flaky, cli, tmp_path: Path, args) -> None:
    proc = cli(*args, "--out", str(tmp_path / "o"))
    assert proc.returncode == 2, proc.stderr
    line = _one_line_error(proc)
    assert "╭" not in proc.stderr and "Usage" not in proc.stderr, proc.stderr
    assert not (tmp_path / "o").exists(), line


def test_unloadable_dev_module_is_an_error(flaky, cli, tmp_path: Path) -> None:
    proc = cli("-p", "no.such.module", "run", "flaky", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert "no.such.module" in _one_line_error(proc)
    assert not (tmp_path / "o").exists()


def test_mps_without_mps_is_refused_before_the_run(flaky, cli, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    proc = cli("run", "flaky", "--device", "mps", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "mps" in _one_line_error(proc)
    assert not (tmp_path / "o").exists()


def test_a_run_whose_every_call_failed_is_failed(flaky, cli, tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = cli("run", "flaky", "--set", "mode=calls", "--out", str(out))
    assert proc.returncode == 1
    assert "every one of the 3 call(s)" in _one_line_error(proc)
    assert "connection refused" in proc.stderr
    res = load_result(_run_dir(out))
    assert res.status == "failed" and res.metrics  # what was measured is still kept
    proc = cli("run", "flaky", "--set", "mode=calls_some", "--out", str(tmp_path / "p"))
    assert proc.returncode == 0, proc.stderr  # some calls worked: a measurement


def test_progress_logs_lines_when_stderr_is_not_a_terminal(tmp_path, monkeypatch, caplog):
    import logging

    import icml.types as T

    monkeypatch.setattr(T, "LOG_EVERY_S", 0.0)
    ctx = T.RunContext(out_dir=tmp_path, logger=logging.getLogger("icml.test.progress"))
    with caplog.at_level(logging.INFO, logger="icml.test.progress"):
        assert list(ctx.progress(range(3), desc="arms")) == [0, 1, 2]
    lines = [r.getMessage() for r in caplog.records]
    assert "arms: 1/3 (33%) after 0 s" in lines and lines[-1].startswith("arms done in")


def test_offline_kernel_warnings_of_peft_are_quiet() -> None:
    pytest.importorskip("peft")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", "import icml, peft"], capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0 and "kernels-community" not in proc.stderr, proc.stderr
    assert "publisher trust" not in proc.stderr


def test_other_warnings_of_those_loggers_still_show(caplog) -> None:
    import logging

    from icml import _quiet

    _quiet.install()
    log = logging.getLogger("kernels._internals.hf_hub")
    with caplog.at_level(logging.WARNING):
        log.warning("Skipping publisher trust check because Hugging Face Hub is in offline mode")
        log.warning("a real problem")
    assert [r.getMessage() for r in caplog.records] == ["a real problem"]
