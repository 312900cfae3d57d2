"""Issue 16 for this plugin: bad values are one-line config errors (exit 2), diverged arms are
results, finished arms survive a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from icml.testing import icml_cli, one_line_error


@pytest.mark.parametrize(("args", "key"), [(["--set", "sizes=[0]"], "'sizes'"),
                                           (["--set", "beta=inf"], "'beta'"),
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
