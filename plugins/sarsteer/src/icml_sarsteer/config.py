"""Typed configs, one per capability. Field names are the CLI's --set keys.

:class:`SteerConfig` is the method's own settings: :class:`icml_sarsteer.steering.SARSteer`
subclasses it (``SARSteer(alpha=0.1, k=10)`` or ``SARSteer.from_config(config)``), and the jobs
nest it as their ``steer`` section (``--set steer.k=2``). Each default is written once, here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from icml import option
from icml.config import check_bounds
from icml_sarsteer.refusal import DEFAULT_INSTRUCTION, refusal_text

DEFENSE_NAMES = ("none", "prompt", "plain", "llm", "sarsteer")
POSITIONS = ("last", "all")


@dataclass
class SteerConfig:
    """SARSteer's settings; every default is the official code's (``main.py``, ``defense.py``):
    ``alpha=0.1``, ``k=10``, ``lam=1.0``, every layer, the last position, ``beta_l = 1``,
    refusal text variant ``exp=0``, the T0 instruction, ``center=True``."""

    alpha: float = option(0.1, help="steering strength alpha (official default 0.1)", ge=0)
    k: int = option(10, help="benign principal directions U_k removed (official 10)", ge=0)
    lam: float = option(1.0, help="safe-space ablation strength lambda: v = d - lambda U_k "
                        "U_k^T d (official 1.0; 0 = plain steering)", ge=0)
    layers: str = option("all", help="steered layers: all, an index, a comma list or a:b "
                         "(official: all; Python also takes an int or a list of ints)")
    exp: int = option(0, help="refusal text variant R (official --exp, 0-3)", ge=0, le=3)
    position: str = option("last", help="where v is added: the last position of every "
                           "forward (official) or every position", choices=POSITIONS)
    beta: float = option(1.0, help="per-layer factor beta_l on alpha (official 1; Python also "
                         "takes one value per steered layer)")
    center: bool = option(True, help="center the benign activations before their PCA U_k "
                          "(official)")
    instruction: str = option(DEFAULT_INSTRUCTION, help="the text instruction T0 sent with "
                              "every query (official TEXT_PROMPT)")
    refusal: str | None = option(None, help="the refusal text R appended to T0 when fitting; "
                                 "none = the official variant exp")
    separator: str = option("", help="text between T0 and R (official: none)")
    layer_path: str | None = option(None, help="attribute path of the decoder layers (e.g. "
                                    "model.layers); none = found automatically")

    def __post_init__(self) -> None:
        for key in ("alpha", "lam"):
            value = getattr(self, key)
            if isinstance(value, (int, float)) and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"config key {key!r}: {key}={value} must be a finite number "
                                 ">= 0")
        if self.refusal is None:
            refusal_text(self.exp)           # an unknown variant fails here, by name
        check_bounds(self)


@dataclass
class _Data:
    n_fit: int = option(40, help="harmful/benign query pairs used to fit the steering vectors "
                        "(and to train the toy audio-LM); official N=100", ge=1, le=150)
    n_eval: int = option(40, help="held-out harmful/benign pairs the defenses are scored on",
                         ge=1, le=150)
    audio_backend: str = option("tones", help="speech renderer: the pure-numpy tone codec "
                                "(default: the same audio on every machine), espeak-ng "
                                "(Debian package) or auto (espeak-ng when installed, so the "
                                "numbers depend on what is installed)",
                                choices=("auto", "espeak", "tones"))


@dataclass
class _Model:
    model: str = option("", help="text decoder of the toy audio-LM: packaged name | local HF "
                        "folder | previous run folder (icml.compose.load_model; its tokenizer "
                        "is used, and it is trained with the audio tower as configured); "
                        "empty = a tiny decoder from arch/hidden_size/num_layers")
    arch: str = option("qwen2", help="text decoder family of the toy Qwen2-Audio-style model",
                       choices=("qwen2", "llama"))
    hidden_size: int = option(64, help="text decoder width", ge=8)
    num_layers: int = option(4, help="text decoder layers", ge=1)
    train_steps: int = option(300, help="training steps of the toy audio-LM (icml.training."
                              "train_lm; at least 11: the one-cycle schedule's 10% warm-up must "
                              "span more than one step)", ge=11)
    train_lr: float = option(3e-3, help="peak learning rate (AdamW, one-cycle)", gt=0)
    train_batch: int = option(32, help="examples per training step", ge=1)
    audio_safety_frac: float = option(0.25, help="fraction of the fit split's harmful audio "
                                      "the toy model sees with a refusal target (the rest of "
                                      "its safety training is text-only)", ge=0, le=1)
    audio_refusal_suffix: bool = option(True, help="also train speech + T0 + R -> refusal "
                                        "(R acts as a refusal instruction on speech too, the "
                                        "notes' plan); false: R is taught on text only")


@dataclass
class _Steer:
    steer: SteerConfig = option(default_factory=SteerConfig, help="SARSteer's settings (what "
                                "SARSteer takes; plain steering is the same with lam=0)")
    llm_contrast: str = option("refusal_suffix", help="direction of the LLM-steering "
                               "baseline on text-only inputs: refusal_suffix (h(T0+R) - "
                               "h(T0)) or harmful_harmless (difference of means)",
                               choices=("refusal_suffix", "harmful_harmless"))


@dataclass
class _Eval:
    defenses: list[str] = option(list(DEFENSE_NAMES), help="defenses to compare: none, "
                                 "prompt (R appended), plain (lambda=0), llm (text-only "
                                 "direction), sarsteer")
    alphas: list[float] = option([0.1, 0.25, 0.5, 1.0, 2.0], help="alpha sweep of the "
                                 "steering defenses (trade-off curve); empty: none")
    max_new_tokens: int = option(12, help="greedy tokens generated per response", ge=1)
    batch_size: int = option(40, help="queries per generate call", ge=1)
    n_boot: int = option(1000, help="bootstrap resamples of the confidence intervals "
                         "(icml.stats.mean_ci)", ge=100)

    def _check_defenses(self) -> None:
        bad = [d for d in self.defenses if d not in DEFENSE_NAMES]
        if bad or not self.defenses:
            raise ValueError(f"defenses={self.defenses}: each must be one of "
                             f"{', '.join(DEFENSE_NAMES)}")
        if any(not (math.isfinite(a) and a >= 0) for a in self.alphas):
            raise ValueError(f"alphas={self.alphas}: every alpha must be a finite number >= 0")


def _check_layers(cfg: _Steer) -> None:
    """Checks that need no model: k against the fit split, the model spec and the layer spec
    (before any rendering or training)."""
    from icml.compose import is_model_spec
    from icml_sarsteer.layers import resolve_layers

    model = getattr(cfg, "model", "")
    if model and not is_model_spec(model):
        raise ValueError(f"model={model!r} is neither a packaged model name nor an existing "
                         "folder (a local HF folder or a previous run folder)")
    steer = cfg.steer
    n_fit = getattr(cfg, "n_fit", None)
    if n_fit is not None and steer.lam != 0 and steer.k > n_fit:
        raise ValueError(f"config key 'steer.k': k={steer.k} exceeds n_fit={n_fit} benign "
                         "samples (U_k needs k <= n_fit); lower steer.k or raise n_fit")
    # a loaded model's depth is checked once it is loaded (fit_defenses)
    try:
        resolve_layers(steer.layers, 10**6 if model else getattr(cfg, "num_layers", 10**6))
    except ValueError as exc:
        raise ValueError(f"config key 'steer.layers': {exc}") from None


@dataclass
class EvaluateConfig(_Data, _Model, _Steer, _Eval):
    """The defenses table on the offline audio benchmark."""

    def __post_init__(self) -> None:
        self._check_defenses()
        _check_layers(self)


@dataclass
class TrainConfig(_Data, _Model, _Steer):
    """Train the toy audio-LM, fit the SARSteer vectors, save both."""

    def __post_init__(self) -> None:
        _check_layers(self)


@dataclass
class InferConfig(_Data, _Model, _Steer):
    """Steered generation on held-out queries, with and without the steering."""

    vectors_path: str = option("", help="a vectors file written by SARSteer.save (train "
                               "writes sarsteer_vectors.pt); empty: fit first")
    model_path: str = option("", help="the toy model folder written by train "
                             "(toy_lalm/); empty: train first")
    n_show: int = option(6, help="queries whose responses are printed", ge=1)
    max_new_tokens: int = option(12, help="greedy tokens generated per response", ge=1)

    def __post_init__(self) -> None:
        _check_layers(self)
