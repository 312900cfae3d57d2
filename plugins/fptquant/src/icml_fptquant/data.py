"""Offline text (docstrings shipped with the Python standard library), tokenization, and the
tiny model's few-second pre-training."""

from __future__ import annotations

import importlib
import inspect
import warnings
from typing import Any

import torch

STDLIB_MODULES = ("collections", "json", "argparse", "textwrap", "string", "re", "functools",
                  "itertools", "pathlib", "dataclasses", "typing", "logging", "difflib",
                  "calendar", "fractions", "decimal", "statistics", "heapq", "bisect",
                  "contextlib", "inspect", "csv", "zipfile", "tarfile", "subprocess",
                  "threading", "shutil", "tempfile", "random", "unittest")


def stdlib_text(max_chars: int = 400_000) -> str:
    """Deterministic English-ish text: docstrings of stdlib modules and their public members."""
    parts: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _collect(parts)
    return "\n\n".join(parts)[:max_chars]


def _collect(parts: list[str]) -> None:
    for name in STDLIB_MODULES:
        mod = importlib.import_module(name)
        parts.append(inspect.getdoc(mod) or "")
        for attr in sorted(dir(mod)):
            if attr.startswith("_"):
                continue
            doc = inspect.getdoc(getattr(mod, attr, None))
            if doc and len(doc) > 40:
                parts.append(doc)


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
