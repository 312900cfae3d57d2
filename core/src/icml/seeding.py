"""Seed every random number generator a run may touch."""

from __future__ import annotations

import importlib.util
import random
import sys


def seed_everything(seed: int, *, deterministic: bool = False) -> None:
    """Seed Python's ``random``, NumPy and torch (CPU and CUDA) when they are installed.

    ``deterministic=True`` also asks torch for deterministic kernels (slower on CUDA).
    """
    random.seed(seed)
    if "numpy" in sys.modules or importlib.util.find_spec("numpy") is not None:
        import numpy as np

        np.random.seed(seed % 2**32)
    if "torch" in sys.modules or importlib.util.find_spec("torch") is not None:
        import torch

        torch.manual_seed(seed)
        if deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
