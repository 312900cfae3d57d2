"""Typed configs, one per capability. Field names are the CLI's --set keys.

:class:`LEDConfig` is the method's own settings: what :class:`icml_led.generate.LEDDecoding`
and :func:`icml_led.led.led_step` take, and the jobs' ``led`` section (``--set led.depth=6``).
Each default is written once, here.
"""

from __future__ import annotations

from dataclasses import dataclass

from icml import option
from icml.config import check_bounds


@dataclass(frozen=True)
class LEDConfig:
    """LED hyper-parameters; every default is the official code's (AlbertTan404/LED).

    ``depth``: number of posteriors (final + ``depth - 1`` intermediate). ``top_k``: final-layer
    candidates. ``use_final_norm``: apply the final norm to intermediate states (official: no).
    ``exploit_by_confidence``: explore with probability ``1 - p_top1`` (official ``do_exploit=1``).
    ``think_only``: explore only inside the thinking span delimited by ``think_start_id`` /
    ``think_end_id`` (with neither id given, the whole generation counts as thinking; with only the
    end id, thinking runs from the start until it appears). ``skip_penultimate``: the official
    layer set ``{L, L-2..L-depth}``; ``False`` gives the figure's ``{L, L-1..L-depth+1}``.
    ``layers``: explicit intermediate hidden-state indices (top down), overriding ``depth``.
    ``eps``: floor of the candidates' probabilities before aggregation (official: ``1e-6``).
    ``greedy_gate``: the gate in greedy mode. ``None`` (official): the same Bernoulli draw
    ``explore ~ Bernoulli(1 - p_top1)`` as when sampling, so greedy LED is still random. A float
    makes it deterministic: explore when ``1 - p_top1`` exceeds it (0.5 = the Bernoulli's mode),
    which gives reproducible, batch-invariant greedy decoding.
    """

    depth: int = option(8, help="LED depth d: the final layer plus d - 1 intermediate ones "
                        "(official 8; on the job's 8-layer tiny model the official layer set "
                        "then reaches the embedding output)", ge=1)
    top_k: int = option(8, help="final-layer candidates k (official 8)", ge=1)
    use_final_norm: bool = option(False, help="apply the final norm to intermediate layers "
                                  "(official: false, ln=0)")
    exploit_by_confidence: bool = option(True, help="explore with probability 1 - top-1 "
                                         "confidence (official do_exploit=1)")
    think_only: bool = option(True, help="explore only inside the thinking span (official)")
    think_start_id: int | None = option(None, help="token id that opens the thinking span; "
                                        "none: no start marker (the jobs use their task "
                                        "tokenizer's)", ge=0)
    think_end_id: int | None = option(None, help="token id that closes the thinking span; "
                                      "none: no end marker (the jobs use their task "
                                      "tokenizer's)", ge=0)
    skip_penultimate: bool = option(True, help="official layer set {L, L-2..L-d}; false = the "
                                    "paper figure's {L, L-1..L-d+1}")
    layers: tuple[int, ...] | None = option(None, help="explicit intermediate hidden-state "
                                            "indices, top down (overrides depth); none = from "
                                            "depth", ge=0)
    eps: float = option(1e-6, help="floor of the candidates' probabilities before "
                        "aggregation (official 1e-6)", gt=0, lt=1)
    greedy_gate: float | None = option(None, help="greedy mode's gate: none = the official "
                                       "Bernoulli(1 - p_top1) draw; a value = explore when "
                                       "1 - p_top1 exceeds it (deterministic)", ge=0, le=1)

    def __post_init__(self) -> None:
        for name in ("depth", "top_k"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"LEDConfig.{name} must be an integer >= 1, got {v!r}")
        check_bounds(self, "LEDConfig.")
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(int(i) for i in self.layers))


@dataclass
class _Common:
    # model
    model: str = option("", help="a causal LM: packaged name | local HF folder | previous run "
                        "folder (icml.compose.load_model); empty = built-in tiny model trained "
                        "on the task")
    arch: str = option("llama", help="built-in model architecture", choices=("llama", "qwen2"))
    hidden_size: int = option(64, help="built-in model hidden size", ge=8)
    num_layers: int = option(8, help="built-in model number of blocks", ge=2)
    # task
    num_terms: int = option(5, help="most digits per problem (length of the thinking span)",
                            ge=1)
    min_terms: int = option(2, help="fewest digits per problem (lengths are uniform in "
                            "min_terms..num_terms, so difficulty varies)", ge=1)
    base: int = option(5, help="running sums are taken modulo this base", ge=2, le=10)
    # training (applies to any model; set both to 0 to evaluate a given model as is)
    sft_steps: int = option(300, help="supervised steps on gold traces", ge=0)
    sft_lr: float = option(3e-3, help="SFT learning rate", gt=0)
    batch_size: int = option(32, help="SFT batch size", ge=1)
    post_steps: int = option(30, help="post-training steps (rejection sampling + entropy "
                             "minimisation)", ge=0)
    post_lr: float = option(3e-4, help="post-training learning rate", gt=0)
    entropy_coef: float = option(1.0, help="weight of final-layer entropy minimisation in "
                                 "post-training", ge=0)
    # evaluation
    profile_final_norm: bool = option(False, help="main entropy profile read through the final "
                                      "norm (standard logit lens); false = un-normed, what LED "
                                      "reads (official ln=0); the other read-out is printed too")
    num_problems: int = option(32, help="held-out problems", ge=1)
    num_samples: int = option(16, help="samples per problem (n of pass@k)", ge=1)
    ks: list[int] = option([1, 16], help="k values of pass@k (each <= num_samples)")
    # LED: the method's own settings (--set led.depth=6)
    led: LEDConfig = option(default_factory=LEDConfig, help="LED's settings (what LEDDecoding "
                            "takes); the think ids default to the task tokenizer's")
    # baselines
    sampling_top_k: int = option(20, help="top-k of the temperature-sampling and DoLa "
                                 "baselines (official config 20)", ge=0)
    sampling_top_p: float = option(0.95, help="top-p of the baselines (official 0.95)", gt=0,
                                   le=1)
    dola_layers: str = option("high", help="DoLa premature layers", choices=("low", "high"))
    relative_top: float = option(0.1, help="DoLa relative-top threshold", gt=0, le=1)

    def __post_init__(self) -> None:
        from icml.compose import is_model_spec

        if self.model and not is_model_spec(self.model):
            raise ValueError(f"model={self.model!r} is neither a packaged model name nor an "
                             "existing folder (a local HF folder or a previous run folder)")
        if self.min_terms > self.num_terms:
            raise ValueError(f"min_terms={self.min_terms} exceeds num_terms={self.num_terms}")
        bad = [k for k in self.ks if not 1 <= k <= self.num_samples]
        if bad or not self.ks:
            raise ValueError(f"ks={list(self.ks)} must be non-empty with every k in "
                             f"1..num_samples ({self.num_samples}): raise num_samples or lower ks")
        led = self.led
        limit = self.num_layers if led.skip_penultimate else self.num_layers + 1
        if not self.model and led.layers is None and led.depth > limit:
            raise ValueError(f"led.depth={led.depth} is larger than the built-in model allows "
                             f"({self.num_layers} layers, led.skip_penultimate="
                             f"{str(led.skip_penultimate).lower()}): use led.depth <= {limit} "
                             "or raise num_layers")


@dataclass
class InferConfig(_Common):
    temperature: float = option(0.6, help="sampling temperature of every method (official "
                                "0.6)", gt=0)


@dataclass
class EvaluateConfig(_Common):
    temperatures: list[float] = option([0.6, 1.0, 1.4], help="temperatures of the pass@k "
                                       "curves", gt=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.temperatures:
            raise ValueError("temperatures must be a non-empty list of values > 0")
