"""Issue 52, round 3: the anti-aliased scene option, the lr decay option, the >= 30 dB converge
benchmark (three arms, equal iterations and equal wall time) and the speed grid, each at a tiny
scale."""

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from icml.testing import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_supersample_one_is_the_default_scene_and_s_averages_subpixel_rays():
    from icml_expo_gs.rasterizer import look_at
    from icml_expo_gs.scene import make_synthetic_hdr_scene, sphere_trace

    kw = {"n_views": 2, "n_test": 1, "n_points": 16, "plane_extent": 1.2, "seed": 3}
    a = make_synthetic_hdr_scene(8, **kw)
    b = make_synthetic_hdr_scene(8, supersample=1, **kw)
    c = make_synthetic_hdr_scene(8, supersample=2, **kw)
    for va, vb, vc in zip(a.train, b.train, c.train, strict=True):
        assert torch.equal(va.hdr, vb.hdr) and torch.equal(va.depth, vc.depth)
    assert torch.equal(a.points, c.points)  # init points: one ray per pixel centre either way
    # supersample=2: each pixel is the mean of the 2 x 2 rays of a 16² camera of the same view
    v = c.train[0]
    a0 = 0.3  # view 0's angle in make_synthetic_hdr_scene's camera ring
    eye = torch.tensor([2.6 * math.sin(a0), 1.2 + 0.3 * math.sin(3 * a0), -2.6 * math.cos(a0)])
    hi = look_at(eye, torch.tensor([0.0, -0.15, 0.0]), torch.tensor([0.0, -1.0, 0.0]),
                 fov_deg=45, width=16, height=16)
    h16, _ = sphere_trace(hi, plane_extent=1.2)
    want = h16.reshape(8, 2, 8, 2, 3).mean((1, 3))
    assert torch.allclose(v.hdr, want, atol=1e-6)
    assert not torch.equal(v.hdr, a.train[0].hdr)  # edges differ from one ray per pixel
    with pytest.raises(ValueError, match="supersample"):
        make_synthetic_hdr_scene(8, supersample=0, **kw)


def test_lr_decay_one_is_bit_equal_and_below_one_changes_training():
    from icml_expo_gs.config import ExpoGSConfig
    from icml_expo_gs.scene import make_synthetic_hdr_scene
    from icml_expo_gs.trainer import ExpoGSTrainer

    scene = make_synthetic_hdr_scene(12, n_views=2, n_test=1, n_points=24, seed=0)
    kw = {"method": "hdrgs", "iters_irradiance": 6, "iters_joint": 6, "n_floaters": 4,
          "densify_until": 40}
    ref = ExpoGSTrainer(ExpoGSConfig(**kw), seed=0).fit(scene).gaussians
    same = ExpoGSTrainer(ExpoGSConfig(**kw, lr_decay=1.0), seed=0).fit(scene).gaussians
    other = ExpoGSTrainer(ExpoGSConfig(**kw, lr_decay=0.1), seed=0).fit(scene).gaussians
    assert torch.equal(ref.log_irr, same.log_irr) and torch.equal(ref.means, same.means)
    assert not torch.equal(ref.log_irr, other.log_irr)


def test_converge30_table_at_a_tiny_scale(tmp_path, monkeypatch):
    """Three arms per seed, the equal-wall-time arm's iterations from the measured time ratio,
    paired differences with MDEs at equal iterations and at equal wall time, tolerances."""
    from icml import results

    conv = load_script(BENCH / "converge30.py", "expo_gs_converge30")
    monkeypatch.setattr(conv, "PRESET", {**conv.PRESET, "resolution": 12, "n_views": 2,
                                         "n_test": 1, "n_points": 32, "supersample": 2,
                                         "iters_irradiance": 4, "iters_geometry": 2,
                                         "iters_joint": 4, "densify_until": 40,
                                         "rays_per_step": 16})
    out = tmp_path / "converge30.json"
    monkeypatch.setattr(sys, "argv", ["converge30.py", "--seeds", "2", "--out-results",
                                      str(out)])
    conv.main()
    data = results.load(out)
    arms, diff = data["tables"]
    assert [r[0] for r in arms["rows"]] == ["HDR-GS", "Expo-GS", "HDR-GS at Expo-GS's time"]
    assert "CRF error" in arms["columns"] and "GS iterations" in arms["columns"]
    its = data["metrics"]["iters_equal_time_per_seed"]
    fit = data["metrics"]["fit_cpu_s_per_seed"]
    for i, n in enumerate(its):
        assert n == max(1, round(8 * fit["expo-gs"][i] / fit["hdrgs"][i]))
    assert [r[0] for r in diff["rows"]][0].startswith("Expo-GS - HDR-GS, equal GS iterations")
    assert any("equal time" in r[0] for r in diff["rows"])
    assert data["tolerance"]["train s"]["timing"] is True
    assert data["tolerance"]["LDR-OE PSNR"]["abs"] >= 0
    assert data["metrics"]["preset"]["supersample"] == 2
    # two shards (seed 0, seed 1) merged give the same equal-iteration numbers as one run
    parts = []
    for first in (1, 0):
        part = tmp_path / f"part{first}.json"
        monkeypatch.setattr(sys, "argv", ["converge30.py", "--seeds", "1", "--first-seed",
                                          str(first), "--cells-out", str(part)])
        conv.main()
        parts.append(str(part))
    merged = tmp_path / "merged.json"
    monkeypatch.setattr(sys, "argv", ["converge30.py", "--from-cells", *parts,
                                      "--out-results", str(merged)])
    conv.main()
    mdata = results.load(merged)
    assert mdata["command"] == data["command"].replace(str(out), str(merged))
    for a, b in zip(mdata["tables"][0]["rows"][:2], arms["rows"][:2], strict=True):
        assert a[:8] == b[:8]  # arm, then the seven metrics (Gaussians, time: not compared)
    assert [s["seeds"] for s in mdata["metrics"]["shards"]] == [[0], [1]]


def test_speed_grid_writes_a_results_file_and_skips_by_memory(tmp_path):
    from icml import results

    out = tmp_path / "speed.json"
    subprocess.run([sys.executable, str(BENCH / "bench.py"), "speed", "--grid", "tiny",
                    "--repeats", "1", "--out-results", str(out)], check=True,
                   capture_output=True, text=True)
    data = results.load(out)
    (table,) = data["tables"]
    ((row),) = table["rows"]
    cell = dict(zip(table["columns"], row, strict=True))
    assert (cell["image"], cell["Gaussians"]) == ("16²", 100)
    parts = cell["tiled project ms"] + cell["tiled composite fwd ms"] + cell["tiled backward ms"]
    assert abs(cell["tiled fwd+bwd ms"] - parts) < 1e-6 and cell["dense fwd+bwd ms"] > 0
    assert data["tolerance"]["tiled fwd+bwd ms"]["timing"] is True
    bench = load_script(BENCH / "bench.py", "expo_gs_bench_speed")
    tiled, dense = bench._pairs(100, 16)
    assert dense == 16 * 16 * 100 and 0 < tiled <= dense
    # a cap below torch's own footprint skips both arms, naming the estimate
    out2 = tmp_path / "skip.json"
    subprocess.run([sys.executable, str(BENCH / "bench.py"), "speed", "--grid", "tiny",
                    "--repeats", "1", "--mem-cap-gb", "0.1", "--out-results", str(out2)],
                   check=True, capture_output=True, text=True)
    ((row2),) = results.load(out2)["tables"][0]["rows"]
    assert row2[7] is None and "tiled skipped: est." in row2[-1]
