"""The paper's claim at small scale, where it could lose: Het-CPFLoRA (fixed weights) beats
FedIT on personalization and local-only on generalization, on the synthetic federated task."""

import logging
import tempfile
from pathlib import Path

from icml_het_cpflora.config import TrainConfig
from icml_het_cpflora.job import _setup, run_strategy

import icml


def test_personalization_beats_fedit_and_generalization_beats_local():
    cfg = TrainConfig()  # the default job's setting (4 clients, 5 rounds), three arms only
    ctx = icml.RunContext(out_dir=Path(tempfile.mkdtemp()), seed=0, show_progress=False,
                          logger=logging.getLogger("test"))
    env = _setup(ctx, cfg)
    acc = {}
    for name in ("het-cpflora", "fedit", "local"):
        for arm, vals in run_strategy(ctx, cfg, env, name)["arms"].items():
            acc[arm] = (sum(a for a, _ in vals) / len(vals), sum(g for _, g in vals) / len(vals))
    het = acc["het-cpflora (fixed)"]
    assert het[0] > acc["fedit"][0] + 0.1
    assert het[1] > acc["local"][1]
