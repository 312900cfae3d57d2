"""Typed configs, one per capability. Field names are the CLI's --set keys and the Python API's
argument names."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option
from icml_beyond_nll.objectives import parse_objectives

NORMALIZE = ("kept", "valid", "num_items", "sum")
ALL_OBJECTIVES = ("logp,p,GeneralFamily-10,OnlyTopP-0.1,OnlyBottomP-0.5,OnlyTopLogP-0.1,"
                  "OnlyBottomLogP-0.5")


@dataclass(kw_only=True)
class LossSettings:
    """The objective's settings: what :class:`~icml_beyond_nll.loss.ProbObjectiveLoss` (a
    subclass) takes, and the ``loss.*`` section of the train config."""

    normalize: str = option("kept", help="loss normaliser: kept (paper: per micro-batch over the "
                            "tokens the threshold keeps), valid, num_items (HF's "
                            "accumulation-correct token mean), sum", choices=NORMALIZE)
    chunk_size: int | None = option(None, help="compute the loss over this many positions at "
                                    "a time (saves memory for large vocabularies); none = all "
                                    "at once", ge=1)

    def __post_init__(self) -> None:
        if self.normalize not in NORMALIZE:
            raise ValueError(f"normalize={self.normalize!r} is unknown: use one of "
                             f"{', '.join(NORMALIZE)} ('kept' is the paper's)")
        if self.chunk_size is not None and self.chunk_size < 1:
            raise ValueError(f"chunk_size={self.chunk_size!r}: use an integer >= 1 or none")


@dataclass
class TrainConfig:
    model: str = option("", help="model to start from: packaged name | local HF folder | "
                        "previous run folder (icml.compose.load_model); empty = a tiny "
                        "built-in Qwen2-style model pretrained here on the rule task")
    objectives: str = option("logp,p,GeneralFamily-10,OnlyTopP-0.1",
                             help="comma-separated official objective keys to compare "
                             "(logp/original, p, GeneralFamily-a, OnlyTopP-q, OnlyBottomP-q, "
                             "OnlyTopLogP-q, OnlyBottomLogP-q)")
    regimes: str = option("strong,weak", help="comma-separated regimes: strong (noisy SFT on "
                          "the prior's task), weak (a cipher the prior does not know)")
    seeds: int = option(1, help="number of fine-tuning seeds per cell (seed, seed+1, ...)",
                        ge=1)
    loss: LossSettings = option(default_factory=LossSettings,
                                help="the objective's settings (ProbObjectiveLoss)")
    pretrain_steps: int = option(100, help="NLL pretraining steps on the rule task (built-in "
                                 "model; 0 to skip)", ge=0)
    pretrain_lr: float = option(3e-3, help="pretraining learning rate", gt=0)
    steps: int = option(60, help="fine-tuning optimizer steps per objective and regime", ge=1)
    lr: float = option(3e-3, help="fine-tuning peak learning rate (cosine, 10% warmup)", gt=0)
    batch_size: int = option(64, help="micro-batch size", ge=1)
    grad_accum: int = option(1, help="gradient accumulation steps", ge=1)
    noise: float = option(0.3, help="strong regime: probability an answer digit is replaced "
                          "by a random one", ge=0, le=1)
    tail: int = option(0, help="strong regime: random digits appended to each response", ge=0)
    n_strong: int = option(128, help="strong regime: training examples", ge=1)
    n_weak: int = option(1000, help="weak regime: training examples", ge=1)
    n_test: int = option(500, help="clean test examples per regime", ge=1)
    hidden_size: int = option(64, help="built-in model width", ge=8)
    num_layers: int = option(2, help="built-in model depth", ge=1)

    def __post_init__(self) -> None:
        _check_model(self.model)
        _check_objectives(self.objectives)
        items = [s.strip() for s in self.regimes.split(",") if s.strip()]
        if not items or any(s not in ("strong", "weak") for s in items):
            raise ValueError(f"regimes={self.regimes!r}: use a comma-separated subset of "
                             "strong, weak")


@dataclass
class EvaluateConfig:
    model: str = option("", help="model to diagnose: packaged name | local HF folder | "
                        "previous run folder; empty = the built-in tiny model pretrained here "
                        "on the rule task")
    data: str = option("", help="JSONL file with 'prompt' and 'response' fields to diagnose; "
                       "empty = the synthetic strong and weak regimes")
    n: int = option(256, help="examples per synthetic regime (or first n lines of data)", ge=1)
    pretrain_steps: int = option(100, help="NLL pretraining steps for the built-in model", ge=0)
    pretrain_lr: float = option(3e-3, help="pretraining learning rate", gt=0)
    batch_size: int = option(64, help="evaluation batch size", ge=1)
    confident_at: float = option(0.5, help="a token is confident when p >= this", gt=0, le=1)
    strong_at: float = option(0.6, help="mean p at or above this = model-strong", ge=0, le=1)
    weak_at: float = option(0.3, help="mean p at or below this = model-weak", ge=0, le=1)
    noise: float = option(0.3, help="strong regime label noise (as in train)", ge=0, le=1)
    tail: int = option(0, help="strong regime random tail length (as in train)", ge=0)

    def __post_init__(self) -> None:
        _check_model(self.model)
        if self.weak_at > self.strong_at:
            raise ValueError(f"weak_at ({self.weak_at}) must be <= strong_at ({self.strong_at})")


@dataclass
class DifferentiateConfig:
    objectives: str = option(ALL_OBJECTIVES, help="comma-separated official objective keys")
    vocab: int = option(50, help="vocabulary size of the random logits", ge=2)
    n_tokens: int = option(256, help="random tokens for the closed-form vs autograd check",
                           ge=1)
    scale: float = option(4.0, help="std of the random logits (spreads p over (0, 1))", gt=0)
    grid: int = option(200, help="points of the W(p) curve plot", ge=2)

    def __post_init__(self) -> None:
        _check_objectives(self.objectives)


def _check_objectives(text: str) -> None:
    try:
        parse_objectives(text)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"objectives: {exc}") from None

def _check_model(model: str) -> None:
    """``model`` names a packaged model, a local folder or a run folder (cheap: no loading)."""
    from icml.compose import is_model_spec

    if model and not is_model_spec(model):
        from icml.pretrained import PACKAGED_MODELS

        raise ValueError(f"model={model!r} is not a packaged model name "
                         f"({', '.join(sorted(PACKAGED_MODELS))}), a local transformers folder "
                         "or a previous run folder")
