"""Typed configs, one per capability. Field names are the CLI's --set keys."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option


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
    # LED
    depth: int = option(4, help="LED depth d (official 8 on 28-64-layer models; 4 suits the "
                        "8-layer tiny model)", ge=1)
    top_k: int = option(8, help="LED final-layer candidates k (official 8)", ge=1)
    use_final_norm: bool = option(False, help="apply the final norm to intermediate layers "
                                  "(official: false)")
    exploit_by_confidence: bool = option(True, help="explore with probability 1 - top-1 "
                                         "confidence (official do_exploit=1)")
    think_only: bool = option(True, help="explore only inside the thinking span (official)")
    layer_set: str = option("official", help="official = {L, L-2..L-d}; figure = "
                            "{L, L-1..L-d+1}", choices=("official", "figure"))
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
        limit = self.num_layers if self.layer_set == "official" else self.num_layers + 1
        if not self.model and self.depth > limit:
            raise ValueError(f"depth={self.depth} is larger than the built-in model allows "
                             f"({self.num_layers} layers, layer_set={self.layer_set!r}): use "
                             f"depth <= {limit} or raise num_layers")


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
