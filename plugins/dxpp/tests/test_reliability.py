"""Issue 16 for this plugin: bad values are one-line config errors (exit 2), diverged arms are
results, finished arms survive a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from icml.testing import icml_cli, one_line_error


@pytest.mark.parametrize(("args", "key"), [(["--set", "sizes=[0]"], "'sizes'"),
                                           (["--set", "penalty.beta=inf"], "'penalty.beta'"),
                                           (["--set", "betas=[nan]"], "'betas'")])
def test_bad_values_exit_2_before_any_run_folder(tmp_path: Path, args, key) -> None:
    proc = icml_cli("run", "dxpp", *args, "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and key in one_line_error(proc)
    assert not (tmp_path / "o").exists()


def test_failure_keeps_the_finished_problems(tmp_path: Path, monkeypatch) -> None:
    import icml_dxpp.benchmark as bench

    from icml.runner import RunFailed, load_result, run

    real, calls = bench.compare_backwards, []

    def flaky(*a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("solver crashed")
        return real(*a, **kw)

    monkeypatch.setattr(bench, "compare_backwards", flaky)
    with pytest.raises(RunFailed, match="solver crashed") as exc:
        run("dxpp", overrides=["sizes=[5,6]", "problems=1", "betas=[]", "repeats=1"],
            out=tmp_path, show_progress=False, device="cpu")
    res = load_result(exc.value.result.run_dir)
    assert res.status == "failed" and res.partial
    (table,) = res.tables
    assert [row[2] for row in table.rows] == [5]  # the first size's row survived


def test_unknown_solver_is_a_config_error_listing_the_solvers(tmp_path: Path) -> None:
    """issue 49: ``solver=nosuch`` is a one-line ConfigError naming the key and listing the
    solvers, raised before any run folder (no ``pip install nosuch``)."""
    for cap in ("differentiate", "evaluate"):
        proc = icml_cli("run", "dxpp", cap, "--set", "solver=nosuch", "--out",
                        str(tmp_path / cap))
        line = one_line_error(proc)
        assert proc.returncode == 2, line
        assert "solver" in line and "nosuch" in line and "clarabel" in line and "auto" in line
        assert "pip install" not in line
        assert not (tmp_path / cap).exists()


def test_each_problem_reports_its_stages(tmp_path: Path) -> None:
    """issue 49: a large problem (``sizes=[3000]`` ran 150 s silently) reports the forward
    solve and every backward as steps, so the log shows where the time goes; checked on a
    small size through the run log (the same lines a long run writes)."""
    from icml.runner import run

    res = run("dxpp", overrides=["sizes=[7]", "problems=1", "betas=[1e-4]", "repeats=1"],
              out=tmp_path, show_progress=False, device="cpu")
    log = (Path(res.run_dir) / "run.log").read_text()
    for stage in ("n=7: forward solve", "n=7: dxpp backward", "n=7: kkt-reduced backward",
                  "n=7: kkt-full backward", "beta sweep (n = 7", "torch layer"):
        assert f"{stage}" in log and "done in" in log.split(stage, 1)[1].split("\n", 1)[0], \
            (stage, log)
