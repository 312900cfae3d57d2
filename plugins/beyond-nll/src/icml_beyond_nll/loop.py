"""A plain SFT loop on ``accelerate``: one CPU, several processes or GPUs, same code.

It follows the paper's trainer: AdamW (betas 0.9/0.95, weight decay 0.01), cosine schedule with
10% warmup, gradient clipping at 1.0, an update with a non-finite gradient norm skipped, each
micro-batch's loss (``"kept"`` mean by default) divided by the number of accumulation steps,
gradients averaged across processes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from icml_beyond_nll.loss import ProbObjectiveLoss, prob_objective_loss
from icml_beyond_nll.objectives import ProbObjective


@dataclass
class LoopResult:
    losses: list[float] = field(default_factory=list)
    mean_p: list[float] = field(default_factory=list)
    steps: int = 0
    skipped: int = 0  # updates skipped because the gradient norm was not finite


def cosine_with_warmup(step: int, total: int, warmup_ratio: float) -> float:
    """LR multiplier: linear warmup over ``warmup_ratio * total`` steps, then cosine to 0."""
    warm = int(round(warmup_ratio * total))
    if step < warm:
        return (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _cycle(loader: Iterable[Any]) -> Any:
    while True:
        yielded = False
        for batch in loader:
            yielded = True
            yield batch
        if not yielded:
            raise ValueError("the dataloader is empty: give it at least one batch")


def train_loop(model: Any, batches: Iterable[Any],
               objective: str | ProbObjective | ProbObjectiveLoss = "logp", *,
               steps: int = 100, lr: float = 5e-5, weight_decay: float = 0.01,
               betas: tuple[float, float] = (0.9, 0.95), warmup_ratio: float = 0.1,
               clip_grad: float = 1.0, grad_accum: int = 1, normalize: str | None = None,
               ignore_index: int | None = None, accelerator: Any = None, cpu: bool | None = None,
               on_step: Callable[[int, float], None] | None = None,
               progress: Callable[[Iterable[int]], Iterable[int]] | None = None) -> LoopResult:
    """Fine-tune ``model`` for ``steps`` optimizer steps on ``batches`` (an iterable of dicts
    with ``input_ids``, ``attention_mask``, ``labels``; cycled) minimising ``objective`` (a key,
    a :class:`ProbObjective`, or a :class:`ProbObjectiveLoss` carrying its settings;
    ``normalize``/``ignore_index`` given here build one with those, else its defaults).

    ``accelerator`` defaults to ``accelerate.Accelerator(cpu=cpu)``; under ``accelerate
    launch`` each process gets its own shard when ``batches`` is a ``DataLoader``.
    Returns the per-step losses (averaged over processes) and mean target probabilities.
    """
    import torch
    from accelerate import Accelerator

    own = {k: v for k, v in (("normalize", normalize), ("ignore_index", ignore_index))
           if v is not None}
    if isinstance(objective, ProbObjectiveLoss):
        if own:
            raise ValueError(f"objective is a ProbObjectiveLoss: set {sorted(own)} on it, "
                             "not here")
        loss = objective
    else:
        loss = ProbObjectiveLoss(objective, **own)
    if steps < 1 or grad_accum < 1:
        raise ValueError("steps and grad_accum must be >= 1")
    acc = accelerator or Accelerator(cpu=bool(cpu))
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    opt = torch.optim.AdamW(params, lr=lr, betas=tuple(betas), weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: cosine_with_warmup(s, steps, warmup_ratio))
    if isinstance(batches, torch.utils.data.DataLoader):
        model, opt, batches = acc.prepare(model, opt, batches)
    else:
        model, opt = acc.prepare(model, opt)
    model.train()
    it = _cycle(batches)
    out = LoopResult()
    rng = progress(range(steps)) if progress else range(steps)
    for step in rng:
        opt.zero_grad(set_to_none=True)
        step_loss, step_p = 0.0, 0.0
        for micro in range(grad_accum):
            batch = next(it)
            batch = {k: v.to(acc.device) for k, v in batch.items() if hasattr(v, "to")}
            sync = micro == grad_accum - 1
            ctx = acc.no_sync(model) if not sync and acc.num_processes > 1 else nullcontext()
            with ctx:
                logits = model(input_ids=batch["input_ids"],
                               attention_mask=batch.get("attention_mask")).logits
                st = prob_objective_loss(logits, batch["labels"], loss.objective,
                                         normalize=loss.normalize,
                                         ignore_index=loss.ignore_index,
                                         chunk_size=loss.chunk_size, return_stats=True)
                acc.backward(st.loss / grad_accum)
            step_loss += float(st.loss.detach()) / grad_accum
            step_p += st.mean_p / grad_accum
        # clip (or just measure) the norm; like the official trainer, skip a non-finite update
        norm = acc.clip_grad_norm_(model.parameters(),
                                   clip_grad if clip_grad and clip_grad > 0 else math.inf)
        if torch.isfinite(torch.as_tensor(norm)).all():
            opt.step()
        else:
            opt.zero_grad(set_to_none=True)
            out.skipped += 1
        sched.step()
        stats = torch.tensor([step_loss, step_p], device=acc.device)
        stats = acc.reduce(stats, reduction="mean") if acc.num_processes > 1 else stats
        out.losses.append(float(stats[0]))
        out.mean_p.append(float(stats[1]))
        out.steps += 1
        if on_step:
            on_step(step, out.losses[-1])
    return out


def batch_iterator(data: dict[str, Any], batch_size: int, *, seed: int = 0,
                   keys: tuple[str, ...] = ("input_ids", "attention_mask", "labels")) -> Any:
    """Endless shuffled mini-batches of a dict of equal-length tensors (seeded)."""
    import torch

    n = data["input_ids"].shape[0]
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    g = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(n, generator=g)
        for i in range(0, n - min(batch_size, n) + 1, min(batch_size, n)):
            idx = perm[i:i + batch_size]
            yield {k: data[k][idx.to(data[k].device)] for k in keys}
