"""The paper's baselines behind the same interface as :class:`SARSteer` (``fit``,
``transform_instruction``, ``apply``): no defense, the prompt defense (refusal text appended at
inference), plain refusal steering (``lam=0``) and LLM-derived steering (the direction from
text-only inputs)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from icml_sarsteer.config import SteerConfig
from icml_sarsteer.layers import find_decoder_layers, resolve_layers
from icml_sarsteer.refusal import DEFAULT_INSTRUCTION, refusal_text, with_refusal
from icml_sarsteer.steering import SARSteer

CONTRASTS = ("refusal_suffix", "harmful_harmless")


@dataclass
class NoDefense:
    """The undefended model."""

    name: str = "none"

    def fit(self, *args: Any, **kwargs: Any) -> NoDefense:
        return self

    def transform_instruction(self, instruction: str) -> str:
        return instruction

    def apply(self, model: Any) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


@dataclass
class PromptDefense:
    """Append the refusal text R (variant ``exp``) to the instruction at inference, as the
    official refusal prompts 1-3 are used as prompt defenses. Nothing is fitted."""

    exp: int = 0
    refusal: str | None = None
    separator: str = ""
    name: str = "prompt"

    def __post_init__(self) -> None:
        if self.refusal is None:
            self.refusal = refusal_text(self.exp)

    def fit(self, *args: Any, **kwargs: Any) -> PromptDefense:
        return self

    def transform_instruction(self, instruction: str) -> str:
        return with_refusal(instruction, self.refusal or "", self.separator)

    def apply(self, model: Any) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


@dataclass
class PlainSteering(SARSteer):
    """Text-derived refusal steering without the safe-space ablation (``lam=0``: v = d)."""

    lam: float = 0.0
    name: str = field(default="plain", init=False)


@dataclass
class LLMSteering(SARSteer):
    """LLM-based steering: the refusal direction computed on text-only inputs (the queries'
    transcripts, no audio), then applied to audio inputs.

    ``contrast="refusal_suffix"`` (default): d = mean[h(text, T0 + R) - h(text, T0)], the same
    recipe as SARSteer on text. ``contrast="harmful_harmless"``: d = mean h(harmful text) -
    mean h(benign text), the difference-of-means refusal direction of text LLM work. ``lam=0``
    (plain) by default; ``lam > 0`` ablates the text benign subspace.
    """

    lam: float = 0.0
    contrast: str = "refusal_suffix"
    name: str = field(default="llm", init=False)
    _SETTINGS = SARSteer._SETTINGS + ("contrast",)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.contrast not in CONTRASTS:
            raise ValueError(f"contrast={self.contrast!r}: use one of {CONTRASTS}")

    def fit(self, model: Any, harmful: Iterable[Any], benign: Iterable[Any],
            prompt: Callable[[Any, str], dict[str, Any]] | None = None, *,
            text_prompt: Callable[[Any, str], dict[str, Any]] | None = None,
            text_harmful: Iterable[Any] | None = None,
            text_benign: Iterable[Any] | None = None,
            progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
            **_: Any) -> LLMSteering:
        """Fit on the text versions of the queries: ``text_harmful``/``text_benign`` (default:
        ``harmful``/``benign`` themselves) through ``text_prompt`` (default ``prompt``)."""
        from icml_sarsteer.activations import collect_activations

        tp = text_prompt or prompt
        if tp is None:
            raise ValueError("LLMSteering.fit needs text_prompt (or prompt) to build text-only "
                             "inputs")
        th = list(text_harmful) if text_harmful is not None else list(harmful)
        tb = list(text_benign) if text_benign is not None else list(benign)
        if not th or not tb:
            raise ValueError("the harmful or benign set is empty: LLMSteering.fit needs both")
        _, mods = find_decoder_layers(model, self.layer_path)
        ids = resolve_layers(self.layers, len(mods))
        kw = dict(layers=ids, layer_path=self.layer_path, progress=progress)
        if self.contrast == "refusal_suffix":
            base = collect_activations(model, tp, th, self.instruction, **kw)
            refused = collect_activations(model, tp, th, self.refusal_instruction, **kw)
            ben = collect_activations(model, tp, tb, self.instruction, **kw)
            return self.fit_hidden(base, refused, ben, layer_ids=ids, num_layers=len(mods))
        harm = collect_activations(model, tp, th, self.instruction, **kw)
        ben = collect_activations(model, tp, tb, self.instruction, **kw)
        return self.fit_contrast(harm, ben, layer_ids=ids, num_layers=len(mods))

    def fit_contrast(self, harmful: Any, benign: Any, *, layer_ids: list[int],
                     num_layers: int) -> LLMSteering:
        """Difference of means: treat mean(benign) as the 'base' and harmful as 'refused'."""
        n = min(harmful.shape[0], benign.shape[0])
        mean_b = benign.float().mean(0, keepdim=True).expand(n, -1, -1)
        shift = harmful.float().mean(0, keepdim=True).expand(n, -1, -1)
        self.fit_hidden(mean_b.clone(), shift.clone(), benign, layer_ids=layer_ids,
                        num_layers=num_layers)
        self.n_harmful = int(harmful.shape[0])
        return self


DEFENSES = ("none", "prompt", "plain", "llm", "sarsteer")


def make_defense(name: str, steer: SteerConfig | None = None, *,
                 contrast: str = "refusal_suffix") -> Any:
    """A defense by name (``none``, ``prompt``, ``plain``, ``llm`` or ``sarsteer``) with the
    settings of ``steer`` (the jobs' ``steer`` section; default ``SteerConfig()``): plain
    steering is SARSteer with ``lam=0``, the prompt defense takes the refusal text settings
    (``exp``, ``refusal``, ``separator``), LLM steering also ``contrast``."""
    if name not in DEFENSES:
        raise ValueError(f"unknown defense {name!r}: use one of {', '.join(DEFENSES)}")
    steer = steer if steer is not None else SteerConfig()
    if name == "none":
        return NoDefense()
    if name == "prompt":
        return PromptDefense(exp=steer.exp, refusal=steer.refusal, separator=steer.separator)
    if name == "plain":
        return PlainSteering.from_config(steer, lam=0.0)
    if name == "llm":
        return LLMSteering.from_config(steer, contrast=contrast)
    return SARSteer.from_config(steer)


__all__ = ["CONTRASTS", "DEFENSES", "DEFAULT_INSTRUCTION", "LLMSteering", "NoDefense",
           "PlainSteering", "PromptDefense", "make_defense"]
