"""HF ``Trainer`` and TRL ``SFTTrainer`` subclasses that train with a probability-based objective.

``compute_loss_func=ProbObjectiveLoss(...)`` already works with both trainers when the loss is
``normalize="num_items"`` (HF's gradient-accumulation-correct token mean). The subclasses add what
a loss function alone cannot: the paper's per-micro-batch ``"kept"`` mean combined with gradient
accumulation (each micro-batch loss divided by the accumulation steps, as the official code does)
and multi-process scaling (``num_items_in_batch`` is counted over every process, so only that
normalisation is multiplied back by the number of processes; a per-micro-batch mean is left to
DDP's gradient average).

The objective goes through the parent's own ``compute_loss`` as its ``compute_loss_func``, so
whatever the parent logs survives (TRL's ``SFTTrainer`` logs entropy and mean token accuracy).
The subclass always returns a loss already scaled for accumulation: it says so to transformers
>= 5.19 (``loss_is_scaled_for_ga = True``), and older transformers (>= 4.56) never divide a
``compute_loss_func`` loss, so both behave the same.

Importing this module imports transformers; the package's ``__init__`` loads it lazily.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import transformers

from icml_beyond_nll.loss import ProbObjectiveLoss
from icml_beyond_nll.objectives import ProbObjective

_CLASSES: dict[type, type] = {}
_LOSS_KEYS = ("normalize", "chunk_size", "ignore_index")  # ProbObjectiveLoss's settings


def _accepts_compute_loss_func(cls: type) -> bool:
    try:
        return "compute_loss_func" in inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return False


class ProbObjectiveMixin:
    """Mixin over a ``transformers.Trainer`` subclass; takes ``objective``, ``normalize``,
    ``ignore_index``, ``chunk_size`` and ``parent_metrics`` keyword arguments and passes the
    rest on. ``parent_metrics=True`` (default) routes the objective through the parent's
    ``compute_loss`` (as its ``compute_loss_func``) so the parent's metrics are logged; ``False``
    computes the loss here from the logits (one forward, no parent metrics: TRL's metric path
    costs an extra no-grad forward per micro-batch)."""

    # transformers >= 5.19 reads this: the loss returned below is already scaled for accumulation
    loss_is_scaled_for_ga = True

    def __init__(self, *args: Any, objective: str | ProbObjective | ProbObjectiveLoss = "logp",
                 parent_metrics: bool = True, **kwargs: Any) -> None:
        if kwargs.get("compute_loss_func") is not None:
            raise ValueError("this trainer computes the objective itself: pass objective=..., "
                             "not compute_loss_func")
        kwargs.pop("compute_loss_func", None)
        # the loss's own settings (normalize, chunk_size, ignore_index), defaults in one place
        own = {k: kwargs.pop(k) for k in _LOSS_KEYS if k in kwargs}
        if isinstance(objective, ProbObjectiveLoss):
            if own:
                raise ValueError(f"objective is a ProbObjectiveLoss: set {sorted(own)} on it, "
                                 "not here")
            self.prob_loss = objective
        else:
            self.prob_loss = ProbObjectiveLoss(objective, **own)
        self._route = bool(parent_metrics) and _accepts_compute_loss_func(self._parent())
        self._in_training_step = False
        self._pending_shift_labels: Any = None
        self._loss_calls = 0
        if self._route:
            kwargs["compute_loss_func"] = self._objective_loss
            with warnings.catch_warnings():  # TRL 1.x: "compute_loss_func is deprecated"
                warnings.filterwarnings("ignore", message=".*compute_loss_func.*")
                super().__init__(*args, **kwargs)
        else:
            super().__init__(*args, **kwargs)

    def _parent(self) -> type:
        mro = type(self).__mro__
        return mro[mro.index(ProbObjectiveMixin) + 1]

    def _ga_steps(self) -> int:
        return int(getattr(self, "current_gradient_accumulation_steps", None)
                   or self.args.gradient_accumulation_steps)

    def _objective_loss(self, outputs: Any, labels: Any, num_items_in_batch: Any = None,
                        **_: Any) -> Any:
        self._loss_calls += 1
        loss = self.prob_loss(outputs, labels, num_items_in_batch=num_items_in_batch,
                              shift_labels=self._pending_shift_labels)
        if num_items_in_batch is None and self._in_training_step:
            # a per-micro-batch mean: average over the accumulation steps like the official code
            loss = loss / self._ga_steps()
        return loss

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        self._in_training_step = True
        try:
            return super().training_step(*args, **kwargs)
        finally:
            self._in_training_step = False

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        inputs = dict(inputs)
        if inputs.get("labels") is None and inputs.get("shift_labels") is None:
            raise ValueError("the batch has no 'labels': use a collator that sets labels "
                             "(-100 on prompt and padding), e.g. DataCollatorForLanguageModeling")
        self._pending_shift_labels = inputs.pop("shift_labels", None)
        # only "num_items" uses the token count summed over micro-batches and processes; for a
        # per-micro-batch mean it is hidden from the parent so that it does not scale by processes
        per_item = self.prob_loss.normalize == "num_items" and num_items_in_batch is not None
        n_items = num_items_in_batch if per_item else None
        try:
            if self._route:
                calls = self._loss_calls
                out = super().compute_loss(model, inputs, return_outputs=return_outputs,
                                           num_items_in_batch=n_items)
                if self._loss_calls == calls:
                    raise RuntimeError(f"{self._parent().__name__}.compute_loss did not call "
                                       "compute_loss_func: pass parent_metrics=False")
                return out
            return self._own_compute_loss(model, inputs, return_outputs, n_items)
        finally:
            self._pending_shift_labels = None

    def _own_compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool,
                          num_items_in_batch: Any) -> Any:
        labels = inputs.pop("labels", None)
        inputs.setdefault("use_cache", False)
        outputs = model(**inputs)
        loss = self._objective_loss(outputs, labels, num_items_in_batch=num_items_in_batch)
        if num_items_in_batch is not None and self.args.average_tokens_across_devices:
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


def make_trainer(objective: str | ProbObjective | ProbObjectiveLoss = "logp", *,
                 base: type | None = None, **trainer_kwargs: Any) -> Any:
    """Build a trainer of class ``base`` (default ``transformers.Trainer``, or
    ``trl.SFTTrainer``) that minimises ``objective`` (``normalize=``, ``chunk_size=``,
    ``ignore_index=`` go to :class:`ProbObjectiveLoss`)."""
    cls = prob_objective_trainer_class(base)
    return cls(objective=objective, **trainer_kwargs)


def sft_trainer_class() -> type:
    """The TRL ``SFTTrainer`` subclass (imports trl; ``pip install trl``)."""
    try:
        from trl import SFTTrainer
    except ImportError:
        raise ImportError("TRL is not installed: pip install trl (or 'icml-beyond-nll[trl]')") \
            from None
    return prob_objective_trainer_class(SFTTrainer)
