"""CAL-GRPO: calibrated attempt-level GRPO for multi-attempt reasoning.

The public API. Nothing heavy is imported here: torch is loaded by the functions that need it.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "attempt_advantages": "advantages",
    "token_advantages": "advantages",
    "derive_reached": "advantages",
    "active_attempts": "advantages",
    "verification_reward": "advantages",
    "MODES": "advantages",
    "SCALES": "advantages",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"icml_cal_grpo.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'icml_cal_grpo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
