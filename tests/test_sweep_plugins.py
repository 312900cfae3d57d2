"""Issue 51: `icml sweep` works on every installed plugin: a 1 x 2 sweep (one grid point, seeds 0
and 1) of each plugin's primary job through the local pool with two workers, aggregated with
`icml.stats`, and a rerun that reuses both cells (which also checks that each plugin's config
reads back from its result.json unchanged).

Each plugin's job is swept at the `smoke` scale its own conformance test declares for that
capability (`plugins/<slug>/tests/test_conformance.py`; the default job where it declares none),
so the whole test stays a few minutes: the sweep machinery is what is under test here, and the
settings are the plugin's own, not copies that go stale. Default runs at full size take 2.5 to
58 CPU s each (dxpp 2.5, sng 7.6, cage 8.6, bioagent-bench 10, fptquant 13, tipex 14, cal-grpo
16, modality-pairing 18, expo-gs 19, capkv 21, led 23, lalm-judge 28, dr-mmsearch 29, sarsteer
30, smart 30, synsem 31, het-cpflora 41; measured 2026-12-05), and `benchmarks/sweep_bench.py`
sweeps a full default job.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from icml import stats
from icml.loader import load_plugins
from icml.sweep import sweep
from icml.testing import load_script
from icml.testing.conformance import _to_set_args

ROOT = Path(__file__).resolve().parents[1]
SLUGS = sorted(r.slug for r in load_plugins().all_records if r.ok)



def smoke_overrides(slug: str, capability: str) -> list[str]:
    """The ``smoke`` overrides of ``capability`` that the plugin's conformance test declares."""
    path = ROOT / "plugins" / slug / "tests" / "test_conformance.py"
    if not path.is_file():
        pytest.skip(f"{slug}: no {path.relative_to(ROOT)} (installed without its tests)")
    module = load_script(path, f"_sweep_conformance_{slug.replace('-', '_')}")
    for obj in vars(module).values():
        if isinstance(obj, type) and getattr(obj, "slug", None) == slug and \
                isinstance(getattr(obj, "smoke", None), dict):
            return _to_set_args(obj.smoke.get(capability, {}))
    return []


@pytest.mark.parametrize("slug", SLUGS)
def test_every_config_reads_back_from_result_json_unchanged(slug: str) -> None:
    """What resuming relies on: a finished cell is reused only when the config in its
    result.json equals the one asked for, so every capability's config must survive JSON."""
    from icml import jsonio
    from icml.config import build_config, to_dict
    from icml.sweep import _same

    info = load_plugins(only=[slug]).loaded(slug).info
    for cap, schema in info.configs.items():
        data = to_dict(build_config(schema, {}))
        assert _same(data, jsonio.loads(jsonio.dumps(data, strict=False))), cap


@pytest.mark.slow  # two smoke-scale runs per plugin through a fresh process pool
@pytest.mark.parametrize("slug", SLUGS)
def test_a_1x2_sweep_of_every_plugin(slug: str, tmp_path: Path) -> None:
    primary = load_plugins(only=[slug]).loaded(slug).info.primary
    overrides = smoke_overrides(slug, primary)
    res = sweep(slug, seeds=[0, 1], out=tmp_path, workers=2, overrides=overrides, plot=False)
    assert res.ok, [(c.name, c.status, c.error) for c in res.cells if c.status != "ok"]
    assert [c.name for c in res.cells] == ["seed=0", "seed=1"]
    (point,) = res.points
    assert point["seeds_ok"] == [0, 1]
    assert point["metrics"], f"{slug}: no numeric metric to aggregate"
    for name, agg in point["metrics"].items():
        if agg["ci"] is not None:
            rows = [[v] for v in agg["values"]] if not name.startswith("items/") else None
            if rows is not None:
                assert agg["ci"] == stats.hierarchical_ci(rows).to_dict(), name
    assert (tmp_path / "sweep.json").is_file() and (tmp_path / "report.md").is_file()
    again = sweep(slug, seeds=[0, 1], out=tmp_path, workers=2, overrides=overrides,
                  plot=False)
    assert all(c.reused for c in again.cells) and again.points == res.points
