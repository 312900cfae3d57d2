"""benchmarks/bench.py method runs its (method, seed) cells as an icml sweep (issue 51): the
same numbers, bit for bit, as one process training them in turn (the loop it replaced)."""

from pathlib import Path

from icml_expo_gs.config import ExpoGSConfig, TrainConfig
from icml_expo_gs.metrics import evaluate_hdr_nvs, floater_fraction
from icml_expo_gs.scene import make_synthetic_hdr_scene
from icml_expo_gs.trainer import ExpoGSTrainer

from icml.config import build_config
from icml.testing import load_script

TINY = ["resolution=8", "n_views=2", "n_test=1", "n_points=16", "n_floaters=4",
        "iters_irradiance=3", "iters_geometry=2", "iters_joint=3", "rays_per_step=16",
        "densify_from=1", "densify_until=3", "densify_every=1"]


def _bench():
    path = Path(__file__).parents[1] / "benchmarks" / "bench.py"
    mod = load_script(path, "expo_gs_bench")
    return mod


def test_method_sweep_gives_the_sequential_loops_numbers():
    bench = _bench()
    got = bench.method_runs([0, 1], TINY, workers=2, threads=1)
    cfg = build_config(TrainConfig, {}, TINY)
    base = {f: getattr(cfg, f) for f in ExpoGSConfig.__dataclass_fields__}
    for s in (0, 1):
        scene = make_synthetic_hdr_scene(cfg.resolution, cfg.n_views, cfg.n_test, seed=s,
                                         n_points=cfg.n_points)
        for m in bench.METHODS:
            model = ExpoGSTrainer(ExpoGSConfig(**{**base, "method": m}), seed=s).fit(scene)
            ev = evaluate_hdr_nvs(model, scene.test)
            g = model.gaussians
            ev["floater_fraction"] = floater_fraction(g.means, g.opacity.detach(), scene.sdf)
            want = {k: ev[k] for k, _ in bench.METHOD_KEYS}
            assert {k: got[m][s][k] for k in want} == want, (m, s)
            assert got[m][s]["n"] == len(g)
