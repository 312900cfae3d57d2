"""The 3-D case: SMART vs PointNet-MLP vs the free stream on exact flows past spheres (one seed).

    python plugins/smart/benchmarks/bench_sphere.py
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import torch
from icml_smart.config import SMARTSettings
from icml_smart.job import build_arm, free_stream_predictor, make_data
from icml_smart.training import evaluate_surrogate, train_surrogate


def main() -> None:
    torch.set_num_threads(1)
    cfg = SimpleNamespace(case="sphere", n_train=512, n_test=128, n_boundary=64, n_queries=256,
                          min_aspect=0.4, max_circulation=0.2,
                          model=SMARTSettings(dim=48, depth=3, heads=4, num_supernodes=32,
                                              num_neighbors=8, supernode_radius=None,
                                              fourier_features=16, max_freq=4.0,
                                              param_conditioning="both"))
    train, test = make_data(cfg, 0)
    print("free", json.dumps(evaluate_surrogate(free_stream_predictor(3), test)))
    for name in ("smart", "pointnet"):
        model = build_arm(name, cfg, train, 0)
        st = train_surrogate(model, train, steps=500, batch_size=16, lr=2e-3,
                             query_subsample=128, surface_weight=0.1, seed=0)
        print(name, round(st.seconds), json.dumps(evaluate_surrogate(model, test)), flush=True)


if __name__ == "__main__":
    main()
