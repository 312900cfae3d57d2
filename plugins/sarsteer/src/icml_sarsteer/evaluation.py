"""Score defenses: refusal rate on harmful queries, over-refusal on benign ones (judge of your
choice), bootstrap CIs; works with any model, prompt builder and defense object exposing
``transform_instruction`` and ``apply``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from icml_sarsteer.metrics import KeywordJudge, rate_with_ci
from icml_sarsteer.prompts import generate_responses, question_of
from icml_sarsteer.refusal import DEFAULT_INSTRUCTION


def _steer_ctx(defense: Any, model: Any, alpha: float | None) -> Any:
    if alpha is not None and getattr(defense, "vectors", None) is not None:
        return defense.apply(model, alpha=alpha)
    return defense.apply(model) if hasattr(defense, "apply") else contextlib.nullcontext()


def evaluate_defense(model: Any, prompt: Any, defense: Any, harmful: Sequence[Any],
                     benign: Sequence[Any], *, instruction: str = DEFAULT_INSTRUCTION,
                     judge: Callable[[Sequence[str], Sequence[str]], list[bool]] | None = None,
                     alpha: float | None = None, max_new_tokens: int = 12,
                     batch_size: int = 16, n_boot: int = 1000, seed: int = 0,
                     canonical: Sequence[str] = ()) -> dict[str, Any]:
    """Generate greedy responses to the harmful and benign queries under ``defense`` and judge
    them (default :class:`KeywordJudge`). Returns ``refusal_harmful`` and
    ``over_refusal_benign`` (each ``{"rate", "lo", "hi", "n"}``), the responses and, with
    ``canonical`` responses given, the fraction of responses equal to one of them."""
    if not harmful or not benign:
        raise ValueError("evaluate_defense needs non-empty harmful and benign query lists")
    judge = judge or KeywordJudge()
    text = defense.transform_instruction(instruction) if hasattr(
        defense, "transform_instruction") else instruction
    out: dict[str, Any] = {"defense": getattr(defense, "name", type(defense).__name__),
                           "alpha": alpha if alpha is not None else getattr(defense, "alpha",
                                                                            None)}
    for key, queries in (("harmful", harmful), ("benign", benign)):
        with _steer_ctx(defense, model, alpha):
            responses = generate_responses(model, prompt, list(queries), text,
                                           max_new_tokens=max_new_tokens,
                                           batch_size=batch_size)
        flags = judge([question_of(q) for q in queries], responses)
        name = "refusal_harmful" if key == "harmful" else "over_refusal_benign"
        out[name] = rate_with_ci(flags, n_boot=n_boot, seed=seed)
        out[f"responses_{key}"] = responses
        if canonical:
            canon = {c.strip() for c in canonical}
            out[f"well_formed_{key}"] = sum(r.strip() in canon for r in responses) / len(
                responses)
    return out


def compare_defenses(model: Any, prompt: Any, defenses: dict[str, Any],
                     harmful: Sequence[Any], benign: Sequence[Any], **kw: Any
                     ) -> dict[str, dict[str, Any]]:
    """:func:`evaluate_defense` for each named defense."""
    return {name: evaluate_defense(model, prompt, d, harmful, benign, **kw)
            for name, d in defenses.items()}
