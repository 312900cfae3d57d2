"""Typed configs for the `evaluate` and `train` hooks; field names are the --set keys."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option
from icml_cage.probes import CHAIN_PROMPT, TEXT_PROMPT

RESPONDERS = ("oracle", "graded", "unfaithful", "tiny-llava", "tiny-qwen2vl", "tiny-llava-sft",
              "caption-lm", "model")
JUDGES = ("rule", "llm", "both")


@dataclass
class EvaluateConfig:
    n_images: int = option(60, help="scenes to generate (9 questions each)", ge=1)
    families: list[str] = option(["domino", "lamp", "ramp"], help="scene families, in turn",
                                 choices=None)
    size: int = option(128, help="image side in pixels", ge=32, le=1024)
    responders: list[str] = option(["oracle", "graded", "unfaithful", "tiny-llava"],
                                   help="who answers: oracle, graded (one per graded_levels), "
                                        "unfaithful, tiny-llava, tiny-qwen2vl, tiny-llava-sft "
                                        "(chain-SFT first), caption-lm (the packaged "
                                        "SmolLM2-135M-Instruct from a caption), model (the "
                                        "--set model=... VLM)")
    graded_levels: list[float] = option([0.0, 0.25, 0.5, 0.75, 1.0],
                                        help="chain-edge corruption rates of the graded "
                                             "responders")
    graded_accuracy: float = option(0.8, help="answer accuracy of the graded responders "
                                              "(drawn independently of the chain)", ge=0, le=1)
    judge: str = option("rule", help="rule, llm (the packaged SmolLM2-135M-Instruct) or both "
                                     "(agreement reported)", choices=JUDGES)
    judge_items: int = option(36, help="items per responder the llm judge scores (0 = all; "
                                       "with judge=llm, the items answered)", ge=0)
    lm_items: int = option(36, help="items the caption-lm responder answers (0 = all)", ge=0)
    model: str = option("", help="a transformers VLM folder or hub name (responder 'model')")
    vlm_items: int = option(36, help="items the VLM responders answer (0 = all)", ge=0)
    sft_steps: int = option(150, help="chain-SFT steps of the tiny-llava-sft responder", ge=1)
    sft_images: int = option(60, help="scenes in its training split (other seed)", ge=1)
    max_new_tokens: int = option(0, help="tokens a model may generate per answer; 0 = the "
                                         "probe's budget (64 text, 128 chain)", ge=0)
    batch_size: int = option(16, help="prompts per VLM batch", ge=1)
    norm: str = option("relative", help="AG normaliser", choices=("relative", "max", "range"))
    chain_metric: str = option("edge_f1", help="chain similarity", choices=("edge_f1", "edit"))
    inconsistency_penalty: float = option(0.5, help="share of the chain score lost when the "
                                                    "answer contradicts the effect state the "
                                                    "chain states", ge=0, le=1)
    chain_weight: float = option(0.8, help="weight of chain similarity vs answer in the chain "
                                           "score", ge=0, le=1)
    n_bootstrap: int = option(1000, help="bootstrap resamples for AG intervals (0 = none, "
                                                  "else >= 100)", ge=0)
    text_prompt: str = option(TEXT_PROMPT, help="Text-Only Probe template ({question})")
    chain_prompt: str = option(CHAIN_PROMPT, help="Chain-Text Probe template ({question})")
    save_benchmark: bool = option(False, help="also write the benchmark as JSONL + PNG")


@dataclass
class TrainConfig:
    n_images: int = option(100, help="scenes to generate (9 questions each)", ge=1)
    families: list[str] = option(["domino", "lamp", "ramp"], help="scene families, in turn")
    size: int = option(128, help="image side in pixels", ge=32, le=1024)
    chain_prompt: str = option(CHAIN_PROMPT, help="prompt template of the exported examples")
