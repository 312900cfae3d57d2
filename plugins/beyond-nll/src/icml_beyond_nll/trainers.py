"""HF ``Trainer`` and TRL ``SFTTrainer`` subclasses that train with a probability-based objective.

``compute_loss_func=ProbObjectiveLoss(...)`` already works with both trainers; these subclasses
add what a loss function alone cannot: the paper's per-micro-batch ``"kept"`` mean combined with
gradient accumulation (the trainer divides by the accumulation steps, as the official code
does) and multi-process scaling (``num_items_in_batch`` is multiplied back by the number of
processes only when it was gathered across them, as ``Trainer`` does).

Importing this module imports transformers; the package's ``__init__`` loads it lazily.
"""

from __future__ import annotations

from typing import Any

import transformers

from icml_beyond_nll.loss import ProbObjectiveLoss
from icml_beyond_nll.objectives import ProbObjective

_CLASSES: dict[type, type] = {}


class ProbObjectiveMixin:
    """Mixin over a ``transformers.Trainer`` subclass; takes ``objective``, ``normalize``,
    ``ignore_index`` and ``chunk_size`` keyword arguments and passes the rest on."""

    def __init__(self, *args: Any, objective: str | ProbObjective = "logp",
                 normalize: str = "kept", ignore_index: int = -100,
                 chunk_size: int | None = None, **kwargs: Any) -> None:
        self.prob_loss = ProbObjectiveLoss(objective, normalize=normalize,
                                           ignore_index=ignore_index, chunk_size=chunk_size)
        super().__init__(*args, **kwargs)

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        inputs = dict(inputs)
        labels = inputs.pop("labels", None)
        shift_labels = inputs.pop("shift_labels", None)
        if labels is None and shift_labels is None:
            raise ValueError("the batch has no 'labels': use a collator that sets labels "
                             "(-100 on prompt and padding), e.g. DataCollatorForLanguageModeling")
        inputs.setdefault("use_cache", False)
        outputs = model(**inputs)
        loss = self.prob_loss(outputs, labels, num_items_in_batch=num_items_in_batch,
                              shift_labels=shift_labels)
        scaled = self.prob_loss.normalize == "num_items" and num_items_in_batch is not None
        # Trainer.training_step divides by the accumulation steps unless told the loss is scaled
        self.loss_is_scaled_for_ga = scaled
        if scaled and self.args.average_tokens_across_devices:
            loss = loss * self.accelerator.num_processes
        return (loss, outputs) if return_outputs else loss


def prob_objective_trainer_class(base: type | None = None) -> type:
    """The subclass of ``base`` (default ``transformers.Trainer``; e.g. ``trl.SFTTrainer``) that
    trains with a probability-based objective. Cached per base class."""
    base = base or transformers.Trainer
    if not (isinstance(base, type) and issubclass(base, transformers.Trainer)):
        raise TypeError(f"base must be a transformers.Trainer subclass, got {base!r}")
    if base not in _CLASSES:
        _CLASSES[base] = type(f"ProbObjective{base.__name__}", (ProbObjectiveMixin, base), {})
    return _CLASSES[base]


ProbObjectiveTrainer = prob_objective_trainer_class(transformers.Trainer)


def make_trainer(objective: str | ProbObjective = "logp", *, base: type | None = None,
                 normalize: str = "kept", **trainer_kwargs: Any) -> Any:
    """Build a trainer of class ``base`` (default ``transformers.Trainer``, or
    ``trl.SFTTrainer``) that minimises ``objective``."""
    cls = prob_objective_trainer_class(base)
    return cls(objective=objective, normalize=normalize, **trainer_kwargs)


def sft_trainer_class() -> type:
    """The TRL ``SFTTrainer`` subclass (imports trl; ``pip install trl``)."""
    try:
        from trl import SFTTrainer
    except ImportError:
        raise ImportError("TRL is not installed: pip install trl (or 'icml-beyond-nll[trl]')") \
            from None
    return prob_objective_trainer_class(SFTTrainer)
