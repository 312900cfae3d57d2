"""Quiet two offline-mode warnings that read like network or security failures.

With the Hub offline (as here: nothing is downloaded at run time), importing peft imports
bitsandbytes, which asks the ``kernels`` package for an optional CPU 4-bit kernel from the Hub.
Both then log a warning: kernels' "Skipping publisher trust check ... offline mode" and
bitsandbytes' "Failed to load CPU gemm_4bit_forward from kernels-community ...". Neither is a
failure: bitsandbytes uses its own bundled CPU library instead, and no plugin here depends on that
Hub kernel. These filters lower exactly those two messages to DEBUG (visible with
``logging.DEBUG``); every other message of both libraries passes unchanged. Only ``logging`` is
imported, so the CLI stays fast.
"""

from __future__ import annotations

import logging

_OFFLINE_NOISE = {
    "kernels._internals.hf_hub": "Hugging Face Hub is in offline mode",
    "bitsandbytes.backends.cpu.ops": "from kernels-community",
}


class _OfflineNoise(logging.Filter):
    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and self.marker in record.getMessage():
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def install() -> None:
    """Attach the filters (idempotent)."""
    for name, marker in _OFFLINE_NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _OfflineNoise) for f in logger.filters):
            logger.addFilter(_OfflineNoise(marker))
