"""Typed configs, one per capability. Field names are the CLI's --set keys."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option


@dataclass
class EvaluateConfig:
    n: int = option(10_000, help="number of random samples", ge=1)
    distribution: str = option("uniform", help="sampling distribution",
                               choices=("uniform", "gauss"))
