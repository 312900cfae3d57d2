"""An offline evaluation text for perplexity-style measurements, and perplexity itself.

The text is The Jargon File 4.4.7 (public domain; Eric S. Raymond et al., 29 Dec 2003), taken
from Debian's ``dict-jargon`` package by ``core/scripts/make_eval_text.py``: 2,270-odd lexicon
entries of natural English prose (about 196k words, ASCII art and code removed), one
``headword: definition`` paragraph a line. It ships inside icml-core, so nothing is downloaded.
torch is imported only by :func:`perplexity`.
"""

from __future__ import annotations

import gzip
from functools import lru_cache
from importlib import resources
from typing import Any

EVAL_TEXT_NAME = "jargon-4.4.7"
EVAL_TEXT_LICENCE = "public domain (The Jargon File 4.4.7)"


@lru_cache(maxsize=1)
def eval_text() -> str:
    """The whole evaluation text (about 1.2M characters), one paragraph a line."""
    raw = resources.files("icml").joinpath("data", f"{EVAL_TEXT_NAME}.txt.gz").read_bytes()
    return gzip.decompress(raw).decode("utf-8")


def eval_token_ids(tokenizer: Any, n_tokens: int | None = None, *, offset: int = 0) -> list[int]:
    """The evaluation text tokenised with ``tokenizer`` (no special tokens), from token
    ``offset``, at most ``n_tokens`` of them (all when ``None``). Raises ``ValueError`` when the
    text is shorter than asked."""
    if (n_tokens is not None and n_tokens < 1) or offset < 0:
        raise ValueError(f"n_tokens must be >= 1 and offset >= 0 (got {n_tokens}, {offset})")
    ids = tokenizer(eval_text(), add_special_tokens=False)["input_ids"]
    end = len(ids) if n_tokens is None else offset + n_tokens
    if end > len(ids):
        raise ValueError(f"the evaluation text has {len(ids)} tokens with this tokenizer; "
                         f"asked for tokens {offset}..{end}")
    return list(ids[offset:end])


def perplexity(model: Any, token_ids: Any, *, window: int = 1024, batch_size: int = 1) -> float:
    """exp of the mean next-token negative log-likelihood of ``token_ids`` under ``model``,
    scored in non-overlapping windows of ``window`` tokens (the last partial window dropped;
    each window's first token is context only). Runs under ``torch.no_grad`` on the model's
    device; the model should be in eval mode."""
    import torch

    ids = torch.as_tensor(token_ids, dtype=torch.long).flatten()
    if window < 2:
        raise ValueError(f"window must be >= 2 tokens (got {window})")
    n = ids.numel() // window
    if n == 0:
        raise ValueError(f"{ids.numel()} tokens is less than one window of {window}")
    device = next(model.parameters()).device
    windows = ids[: n * window].view(n, window)
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in windows.split(batch_size):
            batch = batch.to(device)
            logits = model(input_ids=batch).logits[:, :-1].float()
            nll = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum")
            total += nll.item()
            count += batch[:, 1:].numel()
    return float(torch.exp(torch.tensor(total / count)))
