"""The two training objectives of the transforms.

* :func:`optimize_local` -- data-free: minimise ``sum_layers (mean |W~|^p)^(1/p)`` over the
  merged weights ``W~(phi)`` of every transformed linear (AIMET defaults p = 4, AdamW lr 1e-2,
  200 steps). Shrinks weight outliers.
* :func:`optimize_e2e` -- end-to-end (reconstructed): the fake-quantized model (static ranges,
  STE through rounding) is trained so its next-token distribution matches the full-precision
  model's, ``KL(p_FP || p_quant)`` (or logit MSE). As every transform is function-preserving,
  the teacher is the same model with quantization switched off.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

from icml_fptquant.apply import transform_parameters
from icml_fptquant.config import FPTQuantConfig
from icml_fptquant.qlinear import decoder_linears
from icml_fptquant.transforms import cached_rotation, pinned_threads  # noqa: F401 (API)


@contextmanager
def only_trainable(model: Any, params: list[torch.nn.Parameter]) -> Iterator[None]:
    """Inside the block, of ``model``'s parameters only ``params`` require gradients; each
    parameter's own setting is put back afterwards. The gradients of ``params`` are the same
    (measured bit for bit on SmolLM2-135M), but backward no longer computes (and accumulates
    into ``.grad``) the gradients of the frozen model weights: of ``W Q^T`` it computes only
    the part for ``Q``, and none for the embedding and LM head."""
    keep = {id(p) for p in params}
    frozen = [p for p in model.parameters() if id(p) not in keep and p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in frozen:
            p.requires_grad_(True)


def _rows_of_merged(lin: Any, k: int, gen: torch.Generator) -> torch.Tensor:
    """``k`` random rows of ``lin``'s merged weight. The residual rotation is always the last
    parametrization of a linear (see ``apply``); it runs on those rows only. Readers:
    ``(T W)[rows] Q^T`` (T = the cheap row transforms before it). Writers (o_proj, down_proj):
    every other transform of theirs acts on columns and so commutes with ``Q[rows] @``, which
    therefore runs first on the original weight."""
    from torch.nn.utils import parametrize

    from icml_fptquant.transforms import ReaderRotation, WriterRotation

    if not parametrize.is_parametrized(lin, "weight"):
        w = lin.weight
        return w[torch.randperm(w.shape[0], generator=gen)[:k].to(w.device)]
    chain = lin.parametrizations.weight
    mods = list(chain)
    last = mods[-1]
    w = chain.original
    rows = torch.randperm(w.shape[0], generator=gen)[:k].to(w.device)
    if isinstance(last, ReaderRotation):
        for m in mods[:-1]:
            w = m(w)
        return w[rows] @ last.rot.matrix().to(w.dtype).T
    if isinstance(last, WriterRotation):
        w = last.rot.matrix().to(w.dtype)[rows] @ w
        for m in mods[:-1]:
            w = m(w)
        return w
    return lin.weight[rows]


def outlier_norm(model: Any, p: float = 4.0, row_fraction: float = 1.0,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """``sum (mean |W|^p)^(1/p)`` over the decoder linears' (merged) weights. With
    ``row_fraction < 1`` each mean runs over that fraction of random rows (a stochastic
    estimate that costs about ``row_fraction`` of the residual-rotation products)."""
    if not 0 < row_fraction <= 1:
        raise ValueError(f"row_fraction={row_fraction} must be in (0, 1]")
    total = 0.0
    gen = generator or torch.Generator().manual_seed(0)
    for lin in decoder_linears(model).values():
        if row_fraction >= 1:
            w = lin.weight
        else:
            rows = (lin.parametrizations.weight.original if hasattr(lin, "parametrizations")
                    else lin.weight).shape[0]
            k = max(1, round(row_fraction * rows))
            w = _rows_of_merged(lin, k, gen)
        total = total + w.abs().pow(p).mean().pow(1.0 / p)
    return total


def max_abs_weight(model: Any) -> float:
    return max(float(lin.weight.detach().abs().max()) for lin in decoder_linears(model).values())


def optimize_local(model: Any, config: FPTQuantConfig | None = None,
                   progress: Any = None) -> list[float]:
    """Run the local, data-free objective on the transform parameters; returns the loss
    history (first entry = before training). Runs at ``training.threads`` torch threads."""
    cfg = config or getattr(model, "fpt_config", None) or FPTQuantConfig()
    with pinned_threads(cfg.training.threads):
        return _optimize_local(model, cfg, progress)


def _optimize_local(model: Any, cfg: FPTQuantConfig, progress: Any) -> list[float]:
    opts = cfg.training
    params = transform_parameters(model)
    history = []
    if opts.local_steps == 0:
        with torch.no_grad():
            return [float(outlier_norm(model, opts.local_p))]
    opt = torch.optim.AdamW(params, lr=opts.local_lr, weight_decay=0.0)
    steps = range(opts.local_steps)
    rot = model.fpt_transforms.rotation
    gen = torch.Generator().manual_seed(0)
    with only_trainable(model, params):
        for _ in (progress(steps, desc="local objective") if progress else steps):
            with cached_rotation(rot):
                loss = outlier_norm(model, opts.local_p, opts.local_row_fraction, gen)
                history.append(float(loss.detach()))
                opt.zero_grad(set_to_none=True)
                loss.backward()
            opt.step()
    with torch.no_grad(), cached_rotation(rot):
        history.append(float(outlier_norm(model, opts.local_p)))
    _remark(model)
    return history


def _remark(model: Any) -> None:
    """The mark again after training: the trained pre-RoPE/value transforms are no longer the
    identity (``Transform.changes_head_bases``)."""
    from icml_fptquant.interop import mark_fpt

    mark_fpt(model, "transformed")


def e2e_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
             kind: str) -> torch.Tensor:
    """KL(teacher || student) averaged over tokens (``kind="kl"``), or mean squared logit
    error (``"mse"``); ``TrainingOptions.e2e_loss`` picks it."""
    dt = torch.promote_types(student_logits.dtype, torch.float32)  # float64 stays float64
    if kind == "kl":
        t = F.log_softmax(teacher_logits.to(dt), -1)
        s = F.log_softmax(student_logits.to(dt), -1)
        return (t.exp() * (t - s)).sum(-1).mean()
    if kind == "mse":
        return (student_logits.to(dt) - teacher_logits.to(dt)).pow(2).mean()
    raise ValueError(f"e2e_loss {kind!r} unknown: use 'kl' or 'mse'")


def optimize_e2e(model: Any, calibration_data: Any, config: FPTQuantConfig | None = None,
                 seed: int = 0, progress: Any = None,
                 teacher_logits: Any = None) -> dict[str, list[float]]:
    """End-to-end training of the transforms through the fake-quantized model (STE). Attaches
    quantizers (static ranges recalibrated every ``e2e_recalibrate_every`` steps). Returns
    ``{"loss": [...], "value_cond": [...]}`` (max condition number of the value transforms).

    ``teacher_logits``: optional callable ``ids -> logits`` of the FP teacher (e.g. the
    untransformed FP model, shared by several runs). By default the teacher is this model
    with quantization off, whose logits equal the FP model's up to float rounding, since
    every transform preserves the function. Runs at ``training.threads`` torch threads."""
    cfg = config or getattr(model, "fpt_config", None) or FPTQuantConfig()
    with pinned_threads(cfg.training.threads):
        return _optimize_e2e(model, calibration_data, cfg, seed, progress, teacher_logits)


def _optimize_e2e(model: Any, calibration_data: Any, cfg: FPTQuantConfig, seed: int,
                  progress: Any, teacher_logits: Any) -> dict[str, list[float]]:
    from torch.nn.utils import parametrize

    from icml_fptquant.quantize import as_batches, attach_quantizers, calibrate, quant_disabled

    opts = cfg.training
    batches = as_batches(calibration_data, opts.e2e_batch_size)
    params = transform_parameters(model)
    attach_quantizers(model, cfg, seed)
    ops = model.fpt_transforms
    out: dict[str, list[float]] = {"loss": [], "value_cond": []}
    if opts.e2e_steps == 0:
        return out
    opt = torch.optim.AdamW(params, lr=opts.e2e_lr, weight_decay=0.0)
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    steps = range(opts.e2e_steps)
    teachers: dict[int, torch.Tensor] = {}
    with only_trainable(model, params):
        for step in (progress(steps, desc="end-to-end") if progress else steps):
            if step % opts.e2e_recalibrate_every == 0:
                with torch.no_grad(), cached_rotation(ops.rotation):
                    calibrate(model, batches)
            k = int(torch.randint(len(batches), (1,), generator=gen))
            ids = batches[k].to(device)
            if k not in teachers and teacher_logits is not None:
                with torch.no_grad():
                    teachers[k] = teacher_logits(ids)
            # one computation of the transformed weights for the student and, the first time a
            # batch is drawn, the teacher: the transforms preserve the function, so the FP
            # teacher is this model with quantization off, whose logits never change
            with cached_rotation(ops.rotation), parametrize.cached():
                student = model(ids, use_cache=False).logits
                if k not in teachers:
                    with torch.no_grad(), quant_disabled(model):
                        teachers[k] = model(ids, use_cache=False).logits
                loss = e2e_loss(student, teachers[k], opts.e2e_loss)
                opt.zero_grad(set_to_none=True)
                loss.backward()
            opt.step()
            out["loss"].append(float(loss.detach()))
            conds = [float(v.condition_numbers().max()) for v in ops.value]
            out["value_cond"].append(max(conds) if conds else 1.0)
    _remark(model)
    return out
