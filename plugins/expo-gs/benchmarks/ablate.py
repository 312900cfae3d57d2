"""Expo-GS ablations at the default config (run from the repository root):

    OMP_NUM_THREADS=1 python plugins/expo-gs/benchmarks/ablate.py

Per seed: Expo-GS without the geometric loss on the Gaussians (lambda_geo=0), without SDF-guided
pruning (sdf_prune_tau=0) and with uniform instead of Mertens reliability.
"""

from __future__ import annotations

import json

import torch
from icml_expo_gs import (
    ExpoGSConfig,
    ExpoGSTrainer,
    evaluate_hdr_nvs,
    floater_fraction,
    make_synthetic_hdr_scene,
)

ARMS = [("lambda_geo=0", {"lambda_geo": 0.0}), ("no SDF prune", {"sdf_prune_tau": 0.0}),
        ("uniform reliability", {"reliability": "uniform"})]


def main(seeds: tuple[int, ...] = (0, 1)) -> None:
    torch.set_num_threads(1)
    for seed in seeds:
        scene = make_synthetic_hdr_scene(32, 12, 3, seed=seed)
        for name, kw in ARMS:
            m = ExpoGSTrainer(ExpoGSConfig(**kw), seed=seed).fit(scene)
            ev = evaluate_hdr_nvs(m, scene.test)
            ev["floater_fraction"] = floater_fraction(m.gaussians.means,
                                                      m.gaussians.opacity.detach(), scene.sdf)
            print(json.dumps({"seed": seed, "arm": name, **{k: round(v, 3) for k, v in ev.items()},
                              "n": len(m.gaussians)}), flush=True)


if __name__ == "__main__":
    main()
