"""A small seeded training loop for tiny language models (and other small torch models).

The loop every plugin that trains a tiny model writes: AdamW, gradient clipping, an optional
warm-up and decay schedule, batches drawn with a seeded generator, next-token cross-entropy
unless the caller gives a loss. Its settings are a config dataclass, so a plugin nests them in
its own config and ``--set train.lr=1e-3`` reaches the loop unchanged::

    from icml.training import TrainSettings, train_lm

    @dataclass
    class TrainConfig:                       # the plugin's config.py
        train: TrainSettings = option(default_factory=TrainSettings, help="the training loop")

    log = train_lm(model, token_ids, config.train)    # token_ids: LongTensor [N, T]
    log.losses[-1], log.seconds

``data`` is a tensor of token ids ``[N, T]`` (``batch_size`` rows drawn per step), a dict of
tensors sharing the first dimension (``input_ids``, ``attention_mask``, ``labels``, ...; rows drawn
the same way), or a callable ``data(step) -> batch`` where a batch is a tensor of ids, an
``(input_ids, labels)`` pair or a dict of model inputs. Deterministic under ``seed``: the same
call gives bit-identical losses and weights, at one or two CPU threads alike.

Importing this module loads no torch; :func:`train_lm` imports it when called.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from icml.config import option

__all__ = ["SCHEDULES", "TrainLog", "TrainSettings", "lr_factor", "next_token_loss",
           "train_lm", "warmup_steps"]

SCHEDULES = ("constant", "cosine", "linear", "one-cycle")
DTYPES = (None, "float32", "float64", "bfloat16", "float16")


@dataclass
class TrainSettings:
    """The loop's settings; every field is a ``--set`` key where a plugin nests this class."""

    steps: int = option(100, help="optimizer steps", ge=0)
    lr: float = option(3e-3, help="peak learning rate (AdamW)", gt=0)
    weight_decay: float = option(0.01, help="AdamW weight decay (torch's default 0.01)", ge=0)
    betas: tuple[float, ...] = option((0.9, 0.999), help="AdamW (beta1, beta2)")
    max_grad_norm: float = option(1.0, help="clip the global gradient norm to this; 0 = no "
                                  "clipping", ge=0)
    schedule: str = option("constant", help="learning-rate schedule after the warm-up: "
                           "constant, cosine or linear decay to min_lr_ratio * lr, or torch's "
                           "OneCycleLR (its own warm-up; also cycles beta1)", choices=SCHEDULES)
    warmup: float = option(0.0, help="linear warm-up: a fraction of steps when < 1, else a "
                           "number of steps", ge=0)
    min_lr_ratio: float = option(0.0, help="cosine and linear: the final learning rate as a "
                                 "fraction of lr", ge=0, le=1)
    batch_size: int = option(16, help="rows drawn per step when the data is a tensor or a "
                             "dict of tensors", ge=1)
    seed: int = option(0, help="seeds the batch draws and torch's RNG (dropout) while training")
    device: str | None = option(None, help="device to train on; none = the model's device")
    dtype: str | None = option(None, help="cast the model to this dtype first; none = keep it",
                               choices=DTYPES)
    skip_nonfinite: bool = option(False, help="skip an update whose loss or gradient norm is "
                                  "not finite, instead of stopping with an error")

    def __post_init__(self) -> None:
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas {list(self.betas)}: give two values in [0, 1), "
                             "e.g. [0.9, 0.999]")
        self.betas = tuple(float(b) for b in self.betas)
        if self.schedule == "one-cycle" and self.warmup <= 0:
            raise ValueError("schedule 'one-cycle' needs warmup > 0 (its rising phase), "
                             "e.g. warmup=0.1")
        if self.schedule == "one-cycle" and self.steps > 0:
            rise = self.warmup * self.steps if self.warmup < 1 else self.warmup
            # torch's OneCycleLR divides by rise - 1 (phase 1) and by steps - rise (phase 2);
            # a rise below one step is legal there (the run starts on the falling phase), and
            # short runs that rely on that keep working
            if rise == 1 or rise >= self.steps:
                raise ValueError(f"one-cycle with steps={self.steps}, warmup={self.warmup:g}: "
                                 f"the warm-up must not span exactly one step and must end "
                                 f"before the last (it spans {rise:g}; torch's OneCycleLR "
                                 f"would divide by zero)")


@dataclass
class TrainLog:
    """What :func:`train_lm` measured: the loss and learning rate at every step (a skipped
    update's loss is recorded too), gradient norms before clipping (when clipping is on),
    how many updates were skipped, and the wall time."""

    losses: list[float] = dataclasses.field(default_factory=list)
    lrs: list[float] = dataclasses.field(default_factory=list)
    grad_norms: list[float] = dataclasses.field(default_factory=list)
    skipped: int = 0
    seconds: float = 0.0

    @property
    def final_loss(self) -> float:
        return self.losses[-1] if self.losses else float("nan")


def warmup_steps(settings: TrainSettings) -> int:
    """The warm-up length in steps (``warmup`` < 1 is a fraction of ``steps``)."""
    w = settings.warmup
    return int(round(w * settings.steps)) if w < 1 else int(w)


def lr_factor(settings: TrainSettings, step: int) -> float:
    """The learning rate at 0-based ``step`` as a fraction of ``lr`` (not for one-cycle):
    ``(step + 1) / W`` during a warm-up of ``W`` steps, then constant, or a cosine or linear
    decay from 1 to ``min_lr_ratio`` over the remaining steps."""
    w, total = warmup_steps(settings), settings.steps
    if step < w:
        return (step + 1) / w
    if settings.schedule == "constant":
        return 1.0
    p = min(1.0, (step - w) / max(1, total - w))
    m = settings.min_lr_ratio
    if settings.schedule == "cosine":
        return m + (1 - m) * 0.5 * (1 + math.cos(math.pi * p))
    if settings.schedule == "linear":
        return m + (1 - m) * (1 - p)
    raise ValueError(f"lr_factor does not cover schedule {settings.schedule!r}")


def _accepts(model: Any, name: str) -> bool:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def next_token_loss(model: Any, batch: Mapping[str, Any]) -> Any:
    """Mean next-token cross-entropy of ``model`` on ``batch`` (a dict with ``input_ids`` and
    ``labels``; label -100 is ignored). A model that takes ``labels`` (transformers' causal
    LMs) computes it itself, exactly as a hand-written ``model(**batch).loss`` loop did; for
    any other model the logits (``.logits``, the first element of a tuple, or the output
    itself) at position t are scored against the label at t + 1, in float32."""
    import torch

    inputs = dict(batch)
    if _accepts(model, "labels"):
        if "use_cache" not in inputs and _accepts(model, "use_cache"):
            inputs["use_cache"] = False
        out = model(**inputs)
        loss = getattr(out, "loss", None)
        if loss is not None:
            return loss
    else:
        labels = inputs.pop("labels")
        out = model(**inputs)
        inputs["labels"] = labels
    logits = getattr(out, "logits", out)
    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    labels = inputs["labels"]
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
        ignore_index=-100)


def _as_inputs(batch: Any, device: Any, dtype: Any) -> dict[str, Any]:
    import torch

    if isinstance(batch, torch.Tensor):
        out: dict[str, Any] = {"input_ids": batch, "labels": batch}
    elif isinstance(batch, (tuple, list)) and len(batch) == 2:
        out = {"input_ids": batch[0], "labels": batch[1]}
    elif isinstance(batch, Mapping):
        out = dict(batch)
        if "labels" not in out and isinstance(out.get("input_ids"), torch.Tensor):
            ids, att = out["input_ids"], out.get("attention_mask")
            out["labels"] = ids if att is None else ids.masked_fill(att == 0, -100)
    else:
        raise TypeError(f"a batch is a tensor of token ids, an (input_ids, labels) pair or a "
                        f"dict of model inputs, not {type(batch).__name__}")
    for k, v in out.items():
        if isinstance(v, torch.Tensor):
            cast = dtype if dtype is not None and v.is_floating_point() else None
            out[k] = v.to(device=device, dtype=cast) if cast is not None else v.to(device)
    return out


def _sampler(data: Any, batch_size: int, seed: int) -> Callable[[int], Any]:
    import torch

    if callable(data) and not isinstance(data, torch.Tensor):
        return data
    if isinstance(data, torch.Tensor):
        n = data.shape[0] if data.dim() > 0 else 0
    elif isinstance(data, Mapping):
        sizes = {v.shape[0] for v in data.values() if isinstance(v, torch.Tensor)}
        if len(sizes) != 1:
            raise ValueError(f"the data dict's tensors must share their first dimension, "
                             f"got sizes {sorted(sizes)}")
        n = sizes.pop()
    else:
        raise TypeError(f"data is a tensor of token ids [N, T], a dict of tensors or a "
                        f"callable step -> batch, not {type(data).__name__}")
    if n == 0:
        raise ValueError("the training data is empty: nothing to draw batches from")
    gen = torch.Generator().manual_seed(seed)

    def draw(step: int) -> Any:
        idx = torch.randint(n, (batch_size,), generator=gen)
        if isinstance(data, torch.Tensor):
            return data[idx]
        return {k: v[idx] if isinstance(v, torch.Tensor) else v for k, v in data.items()}

    return draw


def train_lm(model: Any, data: Any, settings: TrainSettings | None = None, *,
             loss_fn: Callable[[Any, dict[str, Any]], Any] | None = None,
             params: Iterable[Any] | None = None,
             progress: Callable[..., Iterable[int]] | None = None,
             desc: str = "training") -> TrainLog:
    """Train ``model`` in place for ``settings.steps`` AdamW steps on ``data`` (see the module
    docstring for its forms) and return the :class:`TrainLog`.

    ``loss_fn(model, batch) -> scalar tensor`` replaces :func:`next_token_loss` (``batch`` is a
    dict on the training device); ``params`` restricts training to some parameters (default:
    all that require grad); ``progress`` wraps the step range as ``progress(range(steps),
    desc=desc)`` (pass ``ctx.progress``). The model is left in eval mode. A non-finite loss or
    gradient norm raises ``FloatingPointError`` naming the step, unless
    ``settings.skip_nonfinite``."""
    import torch

    s = settings if settings is not None else TrainSettings()
    log = TrainLog()
    if s.steps == 0:
        return log
    if s.dtype is not None:
        model.to(getattr(torch, s.dtype))
    if s.device is not None:
        model.to(s.device)
    first = next(iter(model.parameters()), None)
    if first is None:
        raise ValueError("the model has no parameters to train")
    device = first.device
    dtype = getattr(torch, s.dtype) if s.dtype is not None else None
    trainable = list(params) if params is not None else [p for p in model.parameters()
                                                         if p.requires_grad]
    if not trainable:
        raise ValueError("no trainable parameters: every parameter has requires_grad=False")
    loss_fn = loss_fn or next_token_loss
    draw = _sampler(data, s.batch_size, s.seed)
    opt = torch.optim.AdamW(trainable, lr=s.lr, betas=s.betas, weight_decay=s.weight_decay)
    if s.schedule == "one-cycle":
        pct = s.warmup if s.warmup < 1 else s.warmup / s.steps
        sched: Any = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=s.lr, total_steps=s.steps,
                                                         pct_start=pct)
    elif s.schedule == "constant" and warmup_steps(s) == 0:
        sched = None
    else:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(s, step))
    steps: Iterable[int] = range(s.steps)
    if progress is not None:
        steps = progress(steps, desc=desc)
    cuda = [device] if device.type == "cuda" else []
    model.train()
    t0 = time.perf_counter()
    try:
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(s.seed)
            for step in steps:
                batch = _as_inputs(draw(step), device, dtype)
                log.lrs.append(float(opt.param_groups[0]["lr"]))
                loss = loss_fn(model, batch)
                value = float(loss.detach())
                log.losses.append(value)
                opt.zero_grad(set_to_none=True)
                ok = math.isfinite(value)
                if ok:
                    loss.backward()
                    if s.max_grad_norm > 0:
                        norm = float(torch.nn.utils.clip_grad_norm_(trainable, s.max_grad_norm))
                        log.grad_norms.append(norm)
                        ok = math.isfinite(norm)
                if ok:
                    opt.step()
                elif s.skip_nonfinite:
                    opt.zero_grad(set_to_none=True)
                    log.skipped += 1
                else:
                    what = "loss" if not math.isfinite(value) else "gradient norm"
                    raise FloatingPointError(
                        f"step {step}: the {what} is not finite (loss {value}); lower lr "
                        f"({s.lr:g}), keep max_grad_norm > 0, or set skip_nonfinite=true")
                if sched is not None:
                    sched.step()
    finally:
        log.seconds = time.perf_counter() - t0
        model.eval()
    return log
