"""``benchmarks/bench.py raster --out-results`` writes the rasterizer table as a results file
(issue 47), checked at the tiny grid."""

import subprocess
import sys
from pathlib import Path

import pytest

from icml.testing import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench.py"


def test_raster_writes_a_results_file(tmp_path):
    from icml import results

    out = tmp_path / "raster.json"
    args = ["raster", "--grid", "tiny", "--repeats", "1", "--out-results", str(out)]
    subprocess.run([sys.executable, str(BENCH), *args], check=True, capture_output=True,
                   text=True)
    data = results.load(out)
    assert data["command"] == ("OMP_NUM_THREADS=1 python plugins/expo-gs/benchmarks/bench.py "
                               f"raster --grid tiny --repeats 1 --out-results {out}")
    (table,) = data["tables"]
    assert table["columns"][:2] == ["image", "Gaussians"]
    ((image, n, tiled, dense, naive, ratio, rss_t, rss_d),) = table["rows"]
    assert (image, n) == ("16²", 16)
    assert min(tiled, dense, naive) > 0 and abs(ratio - tiled / dense) < 1e-9
    assert rss_t > 0 and rss_d > 0
    for col in ("tiled ms", "dense ms", "naive ms", "tiled / dense time"):
        assert data["tolerance"][col]["timing"] is True
    assert data["tolerance"]["tiled peak RSS MB"]["rel"] == 0.25
    assert "| 16² | 16 |" in results.render_table(table)


def test_profile_writes_a_results_file(tmp_path):
    from icml import results

    out = tmp_path / "profile.json"
    subprocess.run([sys.executable, str(BENCH), "profile", "--grid", "tiny", "--repeats", "1",
                    "--out-results", str(out)], check=True, capture_output=True, text=True)
    data = results.load(out)
    ((image, n, proj, fwd, bwd, total, tiles, mean, mx),) = data["tables"][0]["rows"]
    assert (image, n, tiles) == ("16²", 16, 1) and abs(total - fwd - bwd) < 1e-9
    assert 0 < mean <= mx <= 16 and data["tolerance"]["fwd+bwd ms"]["timing"] is True


def test_converge_table_at_a_tiny_scale(tmp_path, monkeypatch):
    """The converge benchmark's results file: both arms, paired differences with an MDE, the
    sub-claim columns, and the settings it ran with (a tiny PRESET here)."""
    from icml import results

    conv = load_script(BENCH.with_name("converge.py"), "expo_gs_converge")
    monkeypatch.setattr(conv, "PRESET", {**conv.PRESET, "resolution": 12, "n_views": 2,
                                         "n_test": 1, "n_points": 32, "iters_irradiance": 4,
                                         "iters_geometry": 2, "iters_joint": 4,
                                         "densify_until": 40, "rays_per_step": 16})
    out = tmp_path / "converge.json"
    monkeypatch.setattr(sys, "argv", ["converge.py", "--seeds", "2", "--out-results", str(out)])
    conv.main()
    data = results.load(out)
    methods, diff = data["tables"]
    assert [r[0] for r in methods["rows"]] == ["hdrgs", "expo-gs"]
    assert "CRF error" in methods["columns"] and "floater fraction" in methods["columns"]
    assert [r[0] for r in diff["rows"]][:3] == ["train-view LDR PSNR", "LDR-OE PSNR",
                                                "LDR-NE PSNR"]
    assert data["metrics"]["preset"]["n_floaters"] == 0
    assert data["metrics"]["preset"]["plane_extent"] == 1.2
    monkeypatch.setattr(sys, "argv", ["converge.py", "--set", "resolution=16",
                                      "--out-results", str(out)])
    with pytest.raises(SystemExit, match="PRESET"):
        conv.main()
