"""The objective as a loss over causal-LM logits, with the official normalisation and the
alternatives, HF label conventions and a ``compute_loss_func`` for ``transformers.Trainer`` and
TRL's ``SFTTrainer``.

Normalisation (``normalize=``), for the sum S = sum over kept tokens of f(p_t):

* ``"kept"`` (official): S / (number of tokens that survive the threshold + 1e-8), per
  micro-batch. Dropped tokens leave the denominator, exactly like the paper's code (it overwrites
  the loss mask before counting). Ignores ``num_items_in_batch``.
* ``"valid"``: S / number of non-ignored tokens (dropped tokens count as zeros).
* ``"num_items"``: S / ``num_items_in_batch`` (HF's gradient-accumulation-correct token mean;
  falls back to the valid count when it is not given).
* ``"sum"``: S.

An all-masked batch gives a loss of exactly 0 (never NaN) and a zero gradient.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from icml_beyond_nll.config import NORMALIZE, LossSettings
from icml_beyond_nll.objectives import ProbObjective

EPS = 1e-8  # the official code's denominator guard


@dataclass
class LossStats:
    """What one loss call saw: token counts and the mean target probability."""

    loss: Any
    n_valid: int
    n_kept: int
    mean_p: float


def _check_normalize(normalize: str) -> None:
    if normalize not in NORMALIZE:
        raise ValueError(f"normalize={normalize!r} is unknown: use one of {', '.join(NORMALIZE)} "
                         "('kept' is the paper's)")


def shift_for_causal_lm(labels: Any, ignore_index: int = -100) -> Any:
    """HF's causal-LM shift without copying logits: position t predicts ``labels[t + 1]``; the
    last position gets ``ignore_index``."""
    import torch.nn.functional as F

    return F.pad(labels, (0, 1), value=ignore_index)[..., 1:]


def prob_objective_loss(logits: Any, labels: Any, objective: str | ProbObjective = "logp", *,
                        ignore_index: int = -100, normalize: str = "kept",
                        num_items_in_batch: Any = None, shift_labels: Any = None,
                        shift: bool = True, chunk_size: int | None = None,
                        return_stats: bool = False) -> Any:
    """The objective's loss for causal-LM ``logits`` ``[..., T, V]`` and ``labels`` ``[..., T]``.

    ``labels`` follow HF conventions: unshifted (the function shifts them, ``shift=True``) with
    ``ignore_index`` on prompt and padding positions. Pass ``shift_labels`` (already aligned with
    the logits, as HF's padding-free collators do) to skip the shift, or ``shift=False`` when
    ``labels`` are already aligned. Returns a float32 scalar, or :class:`LossStats` with
    ``return_stats=True``.
    """
    import torch

    obj = ProbObjective.parse(objective)
    _check_normalize(normalize)
    if not torch.is_tensor(logits) or not torch.is_floating_point(logits):
        raise TypeError("logits must be a floating-point torch tensor [..., T, V]")
    if shift_labels is None and labels is None:
        raise ValueError("labels are None: pass labels (with ignore_index on prompt/padding) or "
                         "shift_labels")
    target = shift_labels if shift_labels is not None else labels
    if not torch.is_tensor(target) or torch.is_floating_point(target) or \
            torch.is_complex(target) or target.dtype == torch.bool:
        raise TypeError("labels must be an integer torch tensor (token ids, ignore_index on "
                        f"prompt and padding), got {getattr(target, 'dtype', type(target))}: "
                        "convert with torch.as_tensor(labels).long()")
    if shift_labels is None and shift:
        target = shift_for_causal_lm(labels, ignore_index)
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"logits {tuple(logits.shape)} and labels {tuple(target.shape)} do not "
                         "match: labels must have the logits' shape without the vocabulary axis")
    from icml_beyond_nll.logprobs import token_logprobs

    flat = target.reshape(-1)
    logp = token_logprobs(logits.reshape(-1, logits.shape[-1]), flat, ignore_index=ignore_index,
                          chunk_size=chunk_size)
    valid = flat.to(logp.device) != ignore_index
    with torch.no_grad():
        p = logp.detach().exp()
        # a NaN p (diverged logits) fails every comparison; keep it so the loss turns NaN like
        # cross-entropy's instead of silently dropping the token
        kept = valid & (obj.keep(p) | torch.isnan(p))
    per_tok = torch.where(kept, obj.per_token(logp), torch.zeros_like(logp))
    total = per_tok.sum()
    n_kept = kept.sum()
    n_valid = valid.sum()
    if normalize == "kept":
        loss = total / (n_kept.to(total.dtype) + EPS)
    elif normalize == "valid":
        loss = total / n_valid.clamp(min=1).to(total.dtype)
    elif normalize == "num_items":
        denom = n_valid if num_items_in_batch is None else num_items_in_batch
        denom = torch.as_tensor(denom, device=total.device, dtype=total.dtype).clamp(min=1)
        loss = total / denom
    else:
        loss = total
    if return_stats:
        nv = int(n_valid)
        mean_p = float((p * valid).sum() / max(nv, 1))
        return LossStats(loss, nv, int(n_kept), mean_p)
    return loss


def _logits_of(outputs: Any) -> Any:
    if isinstance(outputs, dict) or hasattr(outputs, "keys"):
        if "logits" not in outputs:
            raise ValueError("model outputs have no 'logits': call the model without a fused "
                             "loss head (TRL: pass compute_loss_func, not loss_type)")
        return outputs["logits"]
    if hasattr(outputs, "logits"):
        return outputs.logits
    return outputs[0] if isinstance(outputs, (tuple, list)) else outputs


@dataclass(repr=False)
class ProbObjectiveLoss(LossSettings):
    """A ``compute_loss_func`` for ``transformers.Trainer`` / TRL's ``SFTTrainer``::

        Trainer(model=..., args=..., train_dataset=...,
                compute_loss_func=ProbObjectiveLoss("GeneralFamily-10"))

    Called as ``fn(outputs, labels, num_items_in_batch=None)`` with HF's unshifted labels.
    It is a :class:`~icml_beyond_nll.config.LossSettings` (``normalize``, ``chunk_size``,
    keyword-only) plus the ``objective`` and the labels' ``ignore_index``; build it from a
    config section with :meth:`from_config`.

    Gradient accumulation: ``Trainer`` treats a ``compute_loss_func`` loss as already scaled for
    accumulation. That holds for ``normalize="num_items"``; with the paper's per-micro-batch
    ``"kept"`` mean and ``gradient_accumulation_steps > 1`` use :class:`ProbObjectiveTrainer`
    (or :func:`make_trainer`), which divides by the accumulation steps like the official code.
    Likewise on several processes: with ``average_tokens_across_devices=True`` ``Trainer``
    multiplies a ``compute_loss_func`` loss by the number of processes, right only for
    ``"num_items"``; the subclass scales only that case.
    """

    objective: str | ProbObjective = "logp"
    ignore_index: int = field(default=-100, kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.objective = ProbObjective.parse(self.objective)

    @classmethod
    def from_config(cls, settings: LossSettings, objective: str | ProbObjective = "logp",
                    **kwargs: Any) -> ProbObjectiveLoss:
        """The loss for ``objective`` with the settings of ``settings`` (a ``loss.*`` section)."""
        own = {f: getattr(settings, f) for f in LossSettings.__dataclass_fields__}
        return cls(objective, **own, **kwargs)

    def __call__(self, outputs: Any, labels: Any, num_items_in_batch: Any = None,
                 shift_labels: Any = None, **_: Any) -> Any:
        return prob_objective_loss(_logits_of(outputs), labels, self.objective,
                                   ignore_index=self.ignore_index, normalize=self.normalize,
                                   num_items_in_batch=num_items_in_batch,
                                   shift_labels=shift_labels, chunk_size=self.chunk_size)

    def __repr__(self) -> str:
        return f"ProbObjectiveLoss({self.objective.name!r}, normalize={self.normalize!r})"


def make_compute_loss_func(objective: str | ProbObjective = "logp", **kwargs: Any) -> Any:
    """Shorthand for :class:`ProbObjectiveLoss` (``compute_loss_func=`` of HF / TRL trainers)."""
    return ProbObjectiveLoss(objective, **kwargs)
