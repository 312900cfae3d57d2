"""``benchmarks/bench.py raster --out-results`` writes the rasterizer table as a results file
(issue 47), checked at the tiny grid."""

import subprocess
import sys
from pathlib import Path

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
