"""Typed configs, one per capability. Field names are the CLI's --set keys and match the Python
API's argument names (RecallTask, train_recall_model, tensor_benchmark); the ``press`` section
*is* the presses' API: every press subclasses :class:`PressConfig`."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option

ALL_POLICIES = ("capkv", "greedy_logdet", "leverage", "snapkv", "h2o", "streaming", "knorm",
                "random")

# icml_capkv.longctx.TASKS (kept here too so the CLI's config needs no torch import)
LONG_TASKS = ("niah_single", "niah_multikey", "niah_multivalue", "vartrack", "docqa")


def _check_policies(policies: list[str]) -> None:
    bad = [p for p in policies if p not in ALL_POLICIES]
    if bad or not policies:
        raise ValueError(f"policies {bad or '[]'} not allowed: choose from "
                         f"{', '.join(ALL_POLICIES)}")


def _check_ratios(ratios: list[float]) -> None:
    bad = [r for r in ratios if not 0.0 <= r < 1.0]
    if bad or not ratios:
        raise ValueError(f"ratios {bad or '[]'} not allowed: give compression ratios in [0, 1)")


@dataclass(kw_only=True)
class PressConfig:
    """Press parameters shared by the policies (each reads the ones it knows: a press's
    ``press_keys``). This is the API, not a copy of it: every press subclasses it
    (``class KVPress(PressConfig)``, ``CapKVPress(0.5, tau=2.0)``), so these are the only
    defaults and this is the only validation. Keyword-only, so that a press's first positional
    argument stays its compression ratio."""

    n_sink: int = option(4, help="first tokens always kept (attention sinks)", ge=0)
    tau: float = option(5.0, help="CapKV relevance sharpness (0 = pure leverage)", ge=0)
    ridge: float = option(1.0, help="ridge / noise variance of the capacity objective", gt=0,
                          finite=True)
    normalize: bool = option(True, help="cosine relevance (authors' code) instead of raw logits")
    n_future_positions: int = option(512, help="future positions averaged into the RoPE of the "
                                     "query anchor (0 = unrotated)", ge=0)
    capacity_vectors: str = option("values", help="capacity vectors u",
                                   choices=("values", "keys"))
    window: int = option(16, help="SnapKV observation window", ge=1)

    def __post_init__(self) -> None:
        import math

        from icml.config import check_bounds

        if not (isinstance(self.tau, (int, float)) and math.isfinite(self.tau)
                and self.tau >= 0):
            raise ValueError(f"press.tau must be a finite number >= 0 (0 = pure leverage), "
                             f"got {self.tau}")
        check_bounds(self, "press.")


@dataclass
class InferConfig:
    model: str = option("", help="packaged name | local HF folder | previous run folder "
                        "(icml.compose.load_model; empty = train the built-in tiny model on "
                        "associative recall in-process; a packaged pretrained model such as "
                        "smollm2-135m-instruct, or a model a producer saved from one, runs the "
                        "long-context needle table instead)")
    arch: str = option("llama", help="built-in tiny model architecture",
                       choices=("llama", "qwen2"))
    policies: list[str] = option(list(ALL_POLICIES), help="eviction policies to compare")
    ratios: list[float] = option([0.25, 0.5, 0.75, 0.9], help="compression ratios (fraction "
                                 "of the context evicted)")
    context_len: int = option(64, help="context tokens (BOS + pairs among fillers)", ge=8)
    layout: str = option("fused", help="a pair in the context: one token (fused, learned in "
                         "the CPU budget) or two tokens k v (split, needs induction; not learned "
                         "in the default budget)", choices=("fused", "split"))
    n_pairs: int = option(8, help="key/value pairs planted in the context", ge=1)
    n_keys: int = option(8, help="distinct key tokens", ge=1)
    n_values: int = option(8, help="distinct value tokens", ge=1)
    n_fillers: int = option(4, help="distinct filler tokens (the planted redundancy)", ge=1)
    n_queries: int = option(16, help="questions per training sequence", ge=1)
    eval_samples: int = option(128, help="questions asked per policy and ratio", ge=1)
    train_steps: int = option(400, help="training steps of the built-in tiny model", ge=0)
    batch_size: int = option(16, help="training batch size", ge=1)
    lr: float = option(3e-3, help="training learning rate", gt=0)
    hidden_size: int = option(64, help="hidden size of the built-in tiny model", ge=16)
    long_tasks: list[str] = option(["niah_single"], help="long-context tasks for a packaged "
                                   "pretrained model (niah_single, niah_multikey, "
                                   "niah_multivalue, vartrack, docqa)")
    long_context_len: int = option(1024, help="context tokens of the long-context tasks", ge=128)
    long_items: int = option(3, help="items per long-context task", ge=1)
    question_aware: str = option("both", help="long-context setting: compress the context only "
                                 "(agnostic), context + question (aware), or both",
                                 choices=("agnostic", "aware", "both"))
    press: PressConfig = option(default_factory=PressConfig, help="press parameters")

    def __post_init__(self) -> None:
        from icml.compose import is_model_spec

        if self.model and not is_model_spec(self.model):
            raise ValueError(f"model={self.model!r} is neither a packaged model name nor an "
                             "existing folder (a local HF folder or a previous run folder)")
        _check_policies(self.policies)
        _check_ratios(self.ratios)
        bad = [t for t in self.long_tasks if t not in LONG_TASKS]
        if bad or not self.long_tasks:
            raise ValueError(f"long_tasks {bad or '[]'} not allowed: choose from "
                             f"{', '.join(LONG_TASKS)}")


@dataclass
class EvaluateConfig:
    policies: list[str] = option(list(ALL_POLICIES), help="eviction policies to compare")
    ratios: list[float] = option([0.25, 0.5, 0.75, 0.9], help="compression ratios")
    query_mode: str = option("retrieval", help="future-query law of the synthetic state",
                             choices=("retrieval", "diffuse", "both"))
    T: int = option(256, help="tokens in the synthetic KV state", ge=8)
    d: int = option(16, help="head dimension", ge=2)
    heads: int = option(4, help="KV heads", ge=1)
    n_unique: int = option(24, help="distinct prototypes the tokens copy (redundancy)", ge=1)
    seeds: list[int] = option([0, 1, 2], help="seeds averaged over")
    press: PressConfig = option(default_factory=PressConfig, help="press parameters")

    def __post_init__(self) -> None:
        _check_policies(self.policies)
        _check_ratios(self.ratios)
        if not self.seeds:
            raise ValueError("seeds is empty: give at least one seed")
