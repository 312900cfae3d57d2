"""Typed configs for the `evaluate` and `train` hooks; field names are the --set keys.

The config is the API (issue 48): each section is the settings object of one component and that
component takes it whole --

* ``scenes`` (:class:`SceneConfig`): the scene generator, ``generate_benchmark(n, seed, scenes)``;
* ``responder`` (:class:`ResponderConfig`): the responders the job builds (graded references,
  VLMs, the caption LM) and how they generate;
* ``probes`` (:class:`ProbeConfig`): the two probe templates (``probes.text_probe()``,
  ``probes.chain_probe()``);
* ``judge`` (:class:`JudgeConfig`): which judge scores, on how many items, and ``judge.rule``
  (:class:`RuleConfig`), the rubric that :class:`icml_cage.judges.RuleJudge` *is* (it subclasses
  it);
* ``gap`` (:class:`GapConfig`): the Abstraction Gap's normaliser and bootstrap
  (``CageReport.summary(gap=...)``).

Every default is written once, here; validation happens once, here (``__post_init__``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from icml import option
from icml_cage.probes import CHAIN_PROMPT, TEXT_PROMPT

RESPONDERS = ("oracle", "graded", "unfaithful", "tiny-llava", "tiny-qwen2vl", "tiny-llava-sft",
              "caption-lm", "question-lm", "model")
JUDGES = ("rule", "llm", "both")
LLM_JUDGES = ("checks", "digit")
DTYPES = ("float32", "bfloat16")
NORMS = ("relative", "max", "range")
CHAIN_METRICS = ("edge_f1", "edit")
MIN_SIDE = 32  # pixels: the smallest scene the families draw legibly


@dataclass
class SceneConfig:
    """What the scene generator draws (``generate_benchmark(n_images, seed, scenes)``)."""

    families: list[str] = option(["domino", "lamp", "ramp"],
                                 help="scene families, in turn (names in "
                                      "icml_cage.scenes.FAMILIES, or Family objects from Python)")
    size: int = option(128, help="image side in pixels", ge=MIN_SIDE, le=1024)

    def __post_init__(self) -> None:
        if self.size < MIN_SIDE:
            raise ValueError(f"size must be >= {MIN_SIDE} pixels, got {self.size}")
        if not self.families:
            raise ValueError("scenes.families is empty: name at least one of domino, lamp, ramp")


@dataclass
class ResponderConfig:
    """How the job's responders are built and generate."""

    graded_levels: list[float] = option([0.0, 0.25, 0.5, 0.75, 1.0],
                                        help="chain-edge corruption rates of the graded "
                                             "responders (one responder per rate, each in [0, 1])")
    graded_accuracy: float = option(0.8, help="answer accuracy of the graded responders "
                                              "(drawn independently of the chain)", ge=0, le=1)
    model: str = option("", help="a transformers VLM folder or hub name (responder 'model')")
    vlm_items: int = option(36, help="items the VLM responders answer (0 = all)", ge=0)
    lm_items: int = option(36, help="items the caption-lm and question-lm responders answer "
                                    "(0 = all)", ge=0)
    sft_steps: int = option(150, help="chain-SFT steps of the tiny-llava-sft responder", ge=1)
    sft_images: int = option(60, help="scenes in its training split (other seed)", ge=1)
    max_new_tokens: int = option(0, help="tokens a model may generate per answer; 0 = the "
                                         "probe's budget (64 text, 128 chain)", ge=0)
    batch_size: int = option(16, help="prompts per model batch (responders and the llm judge)",
                             ge=1)

    def __post_init__(self) -> None:
        bad = [c for c in self.graded_levels if not 0.0 <= c <= 1.0]
        if bad:
            raise ValueError(f"config key 'responder.graded_levels': {bad[0]} is not a "
                             "corruption rate in [0, 1]")


@dataclass
class ProbeConfig:
    """The Text-Only and Chain-Text probe templates (``{question}`` is filled in)."""

    text_prompt: str = option(TEXT_PROMPT, help="Text-Only Probe template ({question})")
    chain_prompt: str = option(CHAIN_PROMPT, help="Chain-Text Probe template ({question})")

    def text_probe(self) -> Any:
        from icml_cage.probes import text_only_probe

        return text_only_probe(self.text_prompt)

    def chain_probe(self) -> Any:
        from icml_cage.probes import chain_text_probe

        return chain_text_probe(self.chain_prompt)


@dataclass
class RuleConfig:
    """The rubric of the rule judge; :class:`icml_cage.judges.RuleJudge` subclasses it."""

    chain_metric: str = option("edge_f1", help="chain similarity", choices=CHAIN_METRICS)
    chain_weight: float = option(0.8, help="weight of chain similarity vs answer in the chain "
                                           "score", ge=0, le=1)
    inconsistency_penalty: float = option(0.5, help="share of the chain score lost when the "
                                                    "answer contradicts the effect state the "
                                                    "chain states", ge=0, le=1)

    def __post_init__(self) -> None:
        if not 0.0 <= self.inconsistency_penalty <= 1.0:
            raise ValueError("inconsistency_penalty must be in [0, 1], got "
                             f"{self.inconsistency_penalty}")
        if self.chain_metric not in CHAIN_METRICS:
            raise ValueError(f"chain_metric {self.chain_metric!r}: use 'edge_f1' or 'edit'")
        if not 0.0 <= self.chain_weight <= 1.0:
            raise ValueError(f"chain_weight must be in [0, 1], got {self.chain_weight}")


@dataclass
class JudgeConfig:
    """Who judges the responses, on how many items, and the rule judge's rubric."""

    kind: str = option("rule", help="rule, llm (the packaged SmolLM2-135M-Instruct) or both "
                                    "(agreement reported)", choices=JUDGES)
    items: int = option(36, help="items per responder the llm judge scores (0 = all; with "
                                 "kind=llm, the items answered)", ge=0)
    llm: str = option("checks", help="how the llm judge grades: checks (the rubric as yes/no "
                                     "checks, P(' yes') vs P(' no'); CheckJudge) or digit (one "
                                     "0-9 score digit; PretrainedJudge)", choices=LLM_JUDGES)
    rule: RuleConfig = option(default_factory=RuleConfig, help="the rule judge's rubric")

    def __post_init__(self) -> None:
        if self.kind not in JUDGES:
            raise ValueError(f"kind {self.kind!r}: use {', '.join(JUDGES)}")
        if self.llm not in LLM_JUDGES:
            raise ValueError(f"config key 'judge.llm' is {self.llm!r}: use "
                             f"{', '.join(LLM_JUDGES)}")


@dataclass
class GapConfig:
    """The Abstraction Gap's normaliser and its bootstrap interval."""

    norm: str = option("relative", help="AG normaliser", choices=NORMS)
    n_bootstrap: int = option(1000, help="bootstrap resamples for AG intervals (0 = none, else "
                                         ">= 100)", ge=0)
    floor: float = option(1.0, help="AG is undefined (flagged, not 0) when S_text and S_chain "
                                    "are both below this score (0-10); 0 turns the flag off",
                          ge=0, le=10)

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise ValueError(f"norm {self.norm!r}: use {', '.join(NORMS)}")
        if not 0.0 <= self.floor <= 10.0:
            raise ValueError(f"config key 'gap.floor' is {self.floor}: use a score in [0, 10]")
        if 0 < self.n_bootstrap < 100:
            raise ValueError(f"config key 'gap.n_bootstrap' is {self.n_bootstrap}: use 0 "
                             "(no interval) or at least 100 resamples")


@dataclass
class EvaluateConfig:
    n_images: int = option(60, help="scenes to generate (9 questions each)", ge=1)
    responders: list[str] = option(["oracle", "graded", "unfaithful", "tiny-llava"],
                                   help="who answers: oracle, graded (one per "
                                        "responder.graded_levels), unfaithful, tiny-llava, "
                                        "tiny-qwen2vl, tiny-llava-sft (chain-SFT first), "
                                        "caption-lm (the packaged SmolLM2-135M-Instruct from a "
                                        "caption), question-lm (the same model, no caption), "
                                        "model (the --set responder.model=... VLM)")
    dtype: str = option("float32", help="dtype of the packaged SmolLM2 (caption-lm, "
                                        "question-lm, the llm judge)", choices=DTYPES)
    scenes: SceneConfig = option(default_factory=SceneConfig, help="the scene generator")
    responder: ResponderConfig = option(default_factory=ResponderConfig,
                                        help="how the responders are built and generate")
    probes: ProbeConfig = option(default_factory=ProbeConfig, help="the two probe templates")
    judge: JudgeConfig = option(default_factory=JudgeConfig, help="the judge")
    gap: GapConfig = option(default_factory=GapConfig, help="the Abstraction Gap statistics")
    save_benchmark: bool = option(False, help="also write the benchmark as JSONL + PNG")

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"config key 'dtype' is {self.dtype!r}: use {', '.join(DTYPES)}")
        unknown = [r for r in self.responders if r not in RESPONDERS]
        if unknown or not self.responders:
            raise ValueError(f"config key 'responders': unknown responder(s) "
                             f"{unknown or self.responders}: use "
                             f"{', '.join(RESPONDERS)}")


@dataclass
class TrainConfig:
    n_images: int = option(100, help="scenes to generate (9 questions each)", ge=1)
    scenes: SceneConfig = option(default_factory=SceneConfig, help="the scene generator")
    chain_prompt: str = option(CHAIN_PROMPT, help="prompt template of the exported examples")
