"""Offline text, tokenization, and the tiny model's few-second pre-training.

The tiny model trains on :func:`training_text`: a fixed slice of the text that ships inside
icml-core (The Jargon File 4.4.7, ``icml.data.eval_text``), so the training data is the same
bytes on every Python version, platform and import order. Until 0.3.0 it was built from the
docstrings of 30 standard-library modules (:func:`stdlib_text`, still available), which change
with the Python version.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import subprocess
import sys
import warnings
from typing import Any

import torch

STDLIB_MODULES = ("collections", "json", "argparse", "textwrap", "string", "re", "functools",
                  "itertools", "pathlib", "dataclasses", "typing", "logging", "difflib",
                  "calendar", "fractions", "decimal", "statistics", "heapq", "bisect",
                  "contextlib", "inspect", "csv", "zipfile", "tarfile", "subprocess",
                  "threading", "shutil", "tempfile", "random", "unittest")


# Runs in a fresh interpreter (``python -I -S``): what the calling process has imported or
# patched (a library importing ``logging.handlers`` adds ``logging.handlers``'s docstring; Ray
# replaces ``inspect.isgenerator``; ``tempfile.gettempdir()`` sets ``tempfile.tempdir``) must not
# change the text, or the training data would depend on import order (it did: ``import flwr``
# before the pipeline changed the tiny model's FP perplexity from 19.09 to 23.52).
_COLLECTOR = """
import importlib, inspect, json, sys, warnings
parts = []
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for name in json.loads(sys.argv[1]):
        mod = importlib.import_module(name)
        parts.append(inspect.getdoc(mod) or "")
        for attr in sorted(dir(mod)):
            if attr.startswith("_"):
                continue
            doc = inspect.getdoc(getattr(mod, attr, None))
            if doc and len(doc) > 40:
                parts.append(doc)
sys.stdout.write(json.dumps(parts))
"""


TRAINING_TEXT_OFFSET = 600_000  # characters into the Jargon File (of about 1.2M)


def training_text(max_chars: int = 400_000) -> str:
    """The tiny model's training/calibration/evaluation text: ``max_chars`` characters of the
    core's shipped Jargon File from the first entry after character ``TRAINING_TEXT_OFFSET``
    (a file read from the
    installed package: independent of the Python version, hash seed and the ``random``
    module)."""
    from icml.data import eval_text

    text = eval_text()
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1 (got {max_chars})")
    start = text.find("\n", min(TRAINING_TEXT_OFFSET, max(0, len(text) - max_chars))) + 1
    return text[start:start + max_chars]


def stdlib_text(max_chars: int = 400_000) -> str:
    """Docstrings of stdlib modules and their public members, collected in a fresh interpreter
    so that they depend only on the Python version (the tiny model's text until 0.2.x; it now
    trains on :func:`training_text`, which does not depend on the Python version either)."""
    return "\n\n".join(_stdlib_parts())[:max_chars]


@functools.lru_cache(maxsize=1)
def _stdlib_parts() -> tuple[str, ...]:
    cmd = [sys.executable, "-I", "-S", "-c", _COLLECTOR, json.dumps(STDLIB_MODULES)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120)
        return tuple(json.loads(out.stdout))
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        warnings.warn(f"could not start a fresh interpreter ({sys.executable!r}: {exc}); the "
                      "stdlib text is collected in this process, so it may depend on what was "
                      "imported before it (results can then differ from a plain run)",
                      RuntimeWarning, stacklevel=3)
        return tuple(_collect_here())


def _collect_here() -> list[str]:
    scope: dict[str, Any] = {}
    argv = sys.argv
    sys.argv = ["-c", json.dumps(STDLIB_MODULES)]
    try:
        with contextlib.redirect_stdout(io.StringIO()) as buf:
            exec(_COLLECTOR, scope)  # noqa: S102 - our own constant, the same code as the child's
    finally:
        sys.argv = argv
    return json.loads(buf.getvalue())


def token_chunks(text: str, tokenizer: Any, seq_len: int) -> torch.Tensor:
    """Tokenize ``text`` and cut it into ``(n, seq_len)`` chunks."""
    ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)
    n = ids.numel() // seq_len
    if n == 0:
        raise ValueError(f"text too short for one sequence of {seq_len} tokens")
    return ids[: n * seq_len].reshape(n, seq_len)


def split_data(chunks: torch.Tensor, calib: int, evaluation: int,
               seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train, calibration, evaluation) from a seeded permutation of the chunks."""
    if chunks.shape[0] < calib + evaluation + 1:
        raise ValueError(f"only {chunks.shape[0]} sequences: need more than calib_samples + "
                         "eval_samples; lower them or seq_len")
    perm = torch.randperm(chunks.shape[0], generator=torch.Generator().manual_seed(seed))
    c = chunks[perm]
    return c[calib + evaluation:], c[:calib], c[calib:calib + evaluation]


def pretrain(model: Any, train: torch.Tensor, steps: int, lr: float = 3e-3,
             batch_size: int = 16, seed: int = 0, progress: Any = None) -> list[float]:
    """A few seconds of next-token training of a tiny model (AdamW, cosine decay)."""
    if steps == 0:
        return []
    device = next(model.parameters()).device
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    rng = range(steps)
    for _ in (progress(rng, desc="pre-training tiny model") if progress else rng):
        idx = torch.randint(train.shape[0], (batch_size,), generator=gen)
        ids = train[idx].to(device)
        loss = model(ids, labels=ids, use_cache=False).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses
