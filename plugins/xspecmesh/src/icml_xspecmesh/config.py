"""Typed configs, one per capability. Field names are the CLI's --set keys.

:class:`DecodeConfig` is the decoder's own settings: what
:func:`icml_xspecmesh.speculative.speculative_generate` and its
:class:`~icml_xspecmesh.speculative.Sampler` take, and the jobs' ``decode`` section
(``--set decode.top_k=5``). Each default is written once, here.
"""

from __future__ import annotations

from dataclasses import dataclass

from icml import ConfigError, option
from icml.config import check_bounds

RULES = ("topk", "greedy", "exact")


@dataclass(frozen=True)
class DecodeConfig:
    """How the backbone samples and what the ``topk`` rule accepts (the acceptance rule itself
    is chosen per call: the jobs compare several)."""

    temperature: float = option(1.0, help="sampling temperature (also the distillation "
                                "temperature of the jobs' heads)", gt=0)
    top_k: int = option(5, help="top-k of sampling (0 = off) and of the topk acceptance set "
                        "when accept_top_k is none", ge=0)
    top_p: float = option(1.0, help="top-p of sampling and of the topk acceptance set when "
                          "accept_top_p is none", gt=0, le=1)
    accept_top_k: int | None = option(1, help="top-k acceptance set of the topk rule (the "
                                      "quality criterion; smaller = stricter; 1 = accept only "
                                      "the backbone's argmax); none = top_k", ge=0)
    accept_top_p: float | None = option(None, help="top-p acceptance set of the topk rule; "
                                        "none = top_p", gt=0, le=1)
    tree_width: int = option(1, help="alternative first drafts verified per call (1 = chain; "
                             "greedy and topk only)", ge=1)
    batch_rows: bool = option(False, help="decode the rows of a batch together: one backbone "
                              "call per iteration for every row, each row accepting its own "
                              "drafts (chain only; false = rows one after another)")

    def __post_init__(self) -> None:
        check_bounds(self, "DecodeConfig.")
        if self.batch_rows and self.tree_width > 1:
            raise ConfigError("config key 'decode.batch_rows': rows decoded together verify "
                              "a chain; use decode.tree_width=1 or decode.batch_rows=false")

    @property
    def acceptance_top_k(self) -> int:
        """The topk rule's k (``accept_top_k``, or ``top_k`` when that is none)."""
        return self.top_k if self.accept_top_k is None else self.accept_top_k

    @property
    def acceptance_top_p(self) -> float:
        """The topk rule's p (``accept_top_p``, or ``top_p`` when that is none)."""
        return self.top_p if self.accept_top_p is None else self.accept_top_p


@dataclass
class _Common:
    # data
    n_train: int = option(2000, help="synthetic primitive meshes to train on", ge=16)
    n_bins: int = option(32, help="quantisation levels per axis", ge=4, le=256)
    axis_tokens: bool = option(True, help="one token range per axis (false = one shared range, "
                               "the MeshAnything vocabulary)")
    rotate: bool = option(False, help="random rotation about z in the data (harder: a tiny "
                          "backbone then needs far more training to emit valid meshes)")
    # backbone
    model: str = option("", help="the target backbone: packaged name | local HF folder | "
                        "previous run folder (icml.compose.load_model), a causal LM over this "
                        "mesh vocabulary, used as is (not trained); empty = build and train "
                        "the tiny backbone")
    arch: str = option("llama", help="backbone architecture", choices=("llama", "qwen2"))
    hidden_size: int = option(64, help="backbone hidden size", ge=8)
    num_layers: int = option(3, help="backbone blocks", ge=1)
    backbone_steps: int = option(300, help="next-token training steps of the backbone", ge=0)
    backbone_lr: float = option(5e-3, help="backbone learning rate", gt=0)
    batch_size: int = option(16, help="batch size of backbone and head training", ge=1)
    # heads
    num_heads: int = option(3, help="speculative heads K (tokens drafted per call)", ge=1)
    head_layers: int = option(1, help="residual SiLU blocks per head", ge=1)
    cross_attention: bool = option(False, help="heads cross-attend to the condition (the "
                                   "prompt's hidden states)")
    distill_steps: int = option(200, help="head training steps", ge=0)
    distill_lr: float = option(1e-2, help="head learning rate", gt=0)
    decay: float = option(0.8, help="weight decay^k of head k in the loss", gt=0, le=1)
    source: str = option("data", help="distil on dataset sequences or on the backbone's own "
                         "samples", choices=("data", "samples"))
    # decoding
    decode: DecodeConfig = option(default_factory=DecodeConfig, help="the decoder's settings "
                                  "(what speculative_generate takes)")
    max_new_tokens: int = option(200, help="generation budget per mesh", ge=1)
    # evaluation
    num_meshes: int = option(18, help="meshes generated per decoding arm", ge=1)
    chamfer_points: int = option(512, help="surface samples per mesh for Chamfer", ge=16)
    n_refs: int = option(8, help="posed references per class (Chamfer to the nearest)", ge=1)

    def __post_init__(self) -> None:
        from icml.compose import is_model_spec

        if self.model and not is_model_spec(self.model):
            raise ConfigError(f"config key 'model': {self.model!r} is neither a packaged model "
                              "name nor an existing folder (a local HF folder or a previous "
                              "run folder)")
        if self.hidden_size % 4:
            raise ConfigError(f"config key 'hidden_size': {self.hidden_size} must be a "
                              "multiple of 4 (4 attention heads)")
        if self.num_heads >= self.max_new_tokens:
            raise ConfigError(f"config key 'num_heads': {self.num_heads} heads draft more "
                              f"tokens than max_new_tokens ({self.max_new_tokens}) allows; "
                              "lower num_heads or raise max_new_tokens")


@dataclass
class InferConfig(_Common):
    acceptance: list[str] = option(list(RULES), help="acceptance rules to run (topk, greedy, "
                                   "exact), each next to its autoregressive baseline")
    loss: str = option("kl", help="head objective: kl distillation (the paper) or ce "
                       "(Medusa-1 ablation)", choices=("kl", "ce"))

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_rules(self.acceptance, self.decode.tree_width)


@dataclass
class TrainConfig(_Common):
    losses: list[str] = option(["kl", "ce"], help="head objectives to train and compare")

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [x for x in self.losses if x not in ("kl", "ce")]
        if bad or not self.losses:
            raise ConfigError(f"config key 'losses': {bad or '[]'} not allowed; use a "
                              "non-empty list of kl, ce")


@dataclass
class EvaluateConfig(_Common):
    acceptance: list[str] = option(list(RULES), help="acceptance rules to run")
    losses: list[str] = option(["kl", "ce"], help="head objectives to compare")

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_rules(self.acceptance, self.decode.tree_width)
        bad = [x for x in self.losses if x not in ("kl", "ce")]
        if bad or not self.losses:
            raise ConfigError(f"config key 'losses': {bad or '[]'} not allowed; use a "
                              "non-empty list of kl, ce")


def _check_rules(rules: list[str], tree_width: int) -> None:
    bad = [r for r in rules if r not in RULES]
    if bad or not rules:
        raise ConfigError(f"config key 'acceptance': {bad or '[]'} not allowed; use a "
                          f"non-empty list of {', '.join(RULES)}")
    if tree_width > 1 and "exact" in rules:
        raise ConfigError("config key 'decode.tree_width': trees need greedy or topk "
                          "acceptance; drop exact from 'acceptance' or use decode.tree_width=1")
