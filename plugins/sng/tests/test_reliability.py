"""Issue 16 for this plugin: bad values are one-line config errors (exit 2), diverged arms are
results, finished arms survive a failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from icml.testing import icml_cli

TINY = ["eval_every=1", "n_interior=8", "hidden=[4]", "batch_size=4", "sng.line_search=2",
        "spring.line_search=2"]


def test_infinite_time_limit_and_diverged_method_are_results(tmp_path: Path) -> None:
    proc = icml_cli("run", "sng", *(f"--set={s}" for s in TINY), "--set", "time_limit=inf",
                    "--set", "steps=30", "--set", "sgd_lr=1e6", "--set", "methods=[sgd,adam]",
                    "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = tmp_path.iterdir()
    raw = json.loads((run_dir / "result.json").read_text())
    assert raw["config"]["time_limit"] == {"$float": "inf"}
    assert raw["metrics"]["sgd_rel_l2"] in ({"$float": "nan"}, {"$float": "inf"})  # diverged
    assert isinstance(raw["metrics"]["adam_rel_l2"], float)  # the other arm's number survives


def test_default_budget_is_reproducible(tmp_path: Path, monkeypatch) -> None:
    """steps=0 uses STEP_BUDGET (an iteration budget): the same seed gives the same numbers."""
    from icml_sng import config

    from icml.runner import run

    monkeypatch.setattr(config, "STEP_BUDGET", {**config.STEP_BUDGET, "adam": 15, "sng": 4})
    runs = [run("sng", overrides=[*TINY, "methods=adam,sng"], out=tmp_path / str(i),
                show_progress=False, device="cpu") for i in range(2)]
    for r in runs:
        assert r.metrics["adam_steps"] == 15 and r.metrics["sng_steps"] == 4
    errs = [{k: v for k, v in r.metrics.items() if k.endswith("rel_l2")} for r in runs]
    assert errs[0] == errs[1]


def test_failure_keeps_the_finished_methods(tmp_path: Path, monkeypatch) -> None:
    import icml_sng.train

    from icml.runner import RunFailed, load_result, run

    real = icml_sng.train.fit_pinn

    def flaky(problem, method, **kw):
        if method == "sng":
            raise RuntimeError("singular system")
        return real(problem, method, **kw)

    monkeypatch.setattr(icml_sng.train, "fit_pinn", flaky)
    with pytest.raises(RunFailed) as exc:
        run("sng", overrides=[*TINY, "steps=5", "methods=adam,sng"], out=tmp_path,
            show_progress=False, device="cpu")
    res = load_result(exc.value.result.run_dir)
    assert res.partial and "adam_rel_l2" in res.metrics and "sng_rel_l2" not in res.metrics
    assert [row[0] for row in res.tables[0].rows] == ["adam"]
