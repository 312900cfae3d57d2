"""Rewards: MMSearch-R1's (as its ``mmsearch_r1_score.py`` computes it) and DR-MMSearchAgent's
differentiated Gaussian turn reward (reconstructed from the abstract).

MMSearch-R1::

    acc = EM(normalize(last <answer> of the last turn), gold)      # or SubEM
    if acc and searched: acc *= (1 - search_penalty)               # or ** number of searches
    R = (1 - format_weight) * acc + format_weight * format_ok

Differentiated Gaussian turn reward (reconstructed), with ``G(T; mu, s) = exp(-(T-mu)^2/2s^2)``::

    R = (1-fw) * acc * ((1-gamma) + gamma * G(T; mu, sigma_pos)) + fw * format_ok
        + (1 - acc) * gamma_neg * G(T; mu, sigma_neg)

It replaces the flat search penalty (optionally kept on top: ``search_penalty``); ``mu`` is set
per item by a :class:`TurnTarget` (read from the question's text, an EMA of the turns of correct
trajectories, the item's annotated hop count, or fixed).
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from icml_dr_mmsearch.config import FORMAT_MODES, MATCH_MODES, MU_MODES
from icml_dr_mmsearch.env import IMAGE_CALL

_DIRECT = re.compile(r"^<reason>.*</reason>.*<answer>.*</answer>$", re.DOTALL)
_IMAGE = re.compile(r"^<reason>.*</reason>.*" + re.escape(IMAGE_CALL) + r"$", re.DOTALL)
_TEXT = re.compile(r"^<reason>.*</reason>.*<text_search>.*</text_search>$", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


# ---- answer matching ------------------------------------------------------------------------
def normalize_answer(s: str) -> str:
    """Lower-case, drop punctuation, drop articles (a/an/the), collapse white space (the
    SQuAD/Search-R1 normalisation MMSearch-R1 uses). Idempotent."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _golds(gold: str | Sequence[str]) -> list[str]:
    return [gold] if isinstance(gold, str) else list(gold)


def em_check(prediction: str, gold: str | Sequence[str]) -> bool:
    """Exact match after :func:`normalize_answer` against any gold answer."""
    p = normalize_answer(prediction)
    return any(normalize_answer(g) == p for g in _golds(gold))


def subem_check(prediction: str, gold: str | Sequence[str]) -> bool:
    """Some normalised gold answer is a substring of the normalised prediction."""
    p = normalize_answer(prediction)
    return any(normalize_answer(g) in p for g in _golds(gold))


def extract_answer(text: str) -> str | None:
    """The content of the *last* ``<answer>...</answer>`` (stripped), or ``None``."""
    found = _ANSWER.findall(text)
    return found[-1].strip() if found else None


# ---- format ---------------------------------------------------------------------------------
def _has_search(r: str) -> bool:
    return IMAGE_CALL in r or ("<text_search>" in r and "</text_search>" in r)


def _valid_direct(r: str) -> bool:
    return (bool(_DIRECT.match(r)) and r.count("<reason>") == 1 and r.count("</reason>") == 1
            and r.count("<answer>") == 1 and r.count("</answer>") == 1
            and IMAGE_CALL not in r and "<text_search>" not in r and "</text_search>" not in r)


def _valid_image(r: str) -> bool:
    return (bool(_IMAGE.match(r)) and r.count("<reason>") == 1 and r.count("</reason>") == 1
            and r.count(IMAGE_CALL) == 1 and "<answer>" not in r and "</answer>" not in r
            and "<text_search>" not in r and "</text_search>" not in r)


def _valid_text(r: str) -> bool:
    return (bool(_TEXT.match(r)) and r.count("<reason>") == 1 and r.count("</reason>") == 1
            and r.count("<text_search>") == 1 and r.count("</text_search>") == 1
            and "<answer>" not in r and "</answer>" not in r and IMAGE_CALL not in r)


def format_check(responses: Sequence[str], *, mode: str = "general",
                 tool_limits: dict[str, int] | None = None) -> tuple[int, int]:
    """``(format_ok, search_count)`` of a trajectory's model turns.

    ``mode="official"``: MMSearch-R1's table -- 1 turn: direct answer; 2 turns: image or text
    search, then answer; 3 turns: image search, text search, answer; more turns raise.
    ``mode="general"``: any number of turns -- image searches, then text searches, then a direct
    answer, within ``tool_limits`` (default 1 image, 2 text). It agrees with ``official`` on
    every trajectory of at most 3 turns except ``text, text, answer`` (official: 0).
    ``search_count`` counts the turns before the last that contain a search call (the only turn
    of a 1-turn trajectory), as the baseline does."""
    if mode not in FORMAT_MODES:
        raise ValueError(f"format mode {mode!r} is not known: use one of {', '.join(FORMAT_MODES)}")
    rs = [r.strip() for r in responses]
    n = len(rs)
    if n == 0:
        raise ValueError("a trajectory needs at least one model turn")
    counted = rs if n == 1 else rs[:-1]
    searches = sum(_has_search(r) for r in counted)
    if mode == "official":
        if n == 1:
            ok = _valid_direct(rs[0])
        elif n == 2:
            ok = (_valid_image(rs[0]) or _valid_text(rs[0])) and _valid_direct(rs[1])
        elif n == 3:
            ok = _valid_image(rs[0]) and _valid_text(rs[1]) and _valid_direct(rs[2])
        else:
            raise ValueError(f"the official MMSearch-R1 format check supports 1-3 turns, got {n}"
                             ": use format_mode='general' for longer trajectories")
        return int(ok), searches
    limits = {"image": 1, "text": 2, **(tool_limits or {})}
    if not _valid_direct(rs[-1]):
        return 0, searches
    kinds = []
    for r in rs[:-1]:
        if _valid_image(r):
            kinds.append("I")
        elif _valid_text(r):
            kinds.append("T")
        else:
            return 0, searches
    ordered = kinds == sorted(kinds)           # "I" < "T": all image searches first
    ok = ordered and kinds.count("I") <= limits["image"] and kinds.count("T") <= limits["text"]
    return int(ok), searches


def _responses(traj: Any) -> list[str]:
    if isinstance(traj, str):
        return [traj]
    rs = getattr(traj, "responses", traj)
    return list(rs)


def answer_correct(traj: Any, gold: str | Sequence[str], match: str = "EM") -> bool:
    """Whether the last ``<answer>`` of the last turn matches ``gold`` (EM or SubEM)."""
    if match not in MATCH_MODES:
        raise ValueError(f"match {match!r} is not known: use one of {', '.join(MATCH_MODES)}")
    rs = _responses(traj)
    if not rs:
        raise ValueError("a trajectory needs at least one model turn")
    ans = extract_answer(rs[-1])
    if ans is None:
        return False
    return em_check(ans, gold) if match == "EM" else subem_check(ans, gold)


# ---- rewards --------------------------------------------------------------------------------
def mmsearch_r1_reward(traj: Any, gold: str | Sequence[str], *, search_penalty: float = 0.1,
                       format_weight: float = 0.1, per_call_penalty: bool = False,
                       match: str = "EM", format_mode: str = "general",
                       tool_limits: dict[str, int] | None = None) -> float:
    """MMSearch-R1's reward of one trajectory (its model turns: a list of strings, a single
    string, or an object with ``.responses``). See the module docstring; ``per_call_penalty``
    is the baseline's ``use_search_count_penalty``."""
    if not 0 <= search_penalty <= 1 or not 0 <= format_weight <= 1:
        raise ValueError("search_penalty and format_weight must lie in [0, 1]")
    rs = _responses(traj)
    score = float(answer_correct(rs, gold, match))
    fmt, searches = format_check(rs, mode=format_mode, tool_limits=tool_limits)
    if searches > 0 and score > 0.99:
        score *= (1 - search_penalty) ** (searches if per_call_penalty else 1)
    return (1 - format_weight) * score + format_weight * fmt


def gaussian(t: float, mu: float, sigma: float) -> float:
    """``exp(-(t - mu)^2 / (2 sigma^2))``; 1 for ``sigma = inf``."""
    if sigma <= 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    if math.isinf(sigma):
        return 1.0
    return math.exp(-((t - mu) ** 2) / (2 * sigma * sigma))


def gaussian_turn_reward(traj: Any, gold: str | Sequence[str], *, mu: float,
                         sigma_pos: float = 1.0, sigma_neg: float = 0.5, gamma: float = 0.3,
                         gamma_neg: float = 0.1, format_weight: float = 0.1,
                         match: str = "EM", format_mode: str = "general",
                         tool_limits: dict[str, int] | None = None,
                         search_penalty: float = 0.0, per_call_penalty: bool = False) -> float:
    """The differentiated Gaussian turn reward (reconstructed; see the module docstring).

    ``T`` is the number of model turns; ``mu`` the target turn count (a number; see
    :class:`TurnTarget` for the dynamic choice). ``sigma_pos`` is the tolerance for correct
    trajectories, ``sigma_neg`` (smaller) for wrong ones; ``gamma`` the share of the correct
    reward that depends on ``T``; ``gamma_neg`` the most a wrong trajectory can earn for a
    well-calibrated length. ``search_penalty`` > 0 keeps the baseline's search penalty on top
    (once, or per call with ``per_call_penalty``; default 0: the Gaussian replaces it)."""
    if not 0 <= gamma <= 1 or not 0 <= gamma_neg <= 1 or not 0 <= format_weight <= 1:
        raise ValueError("gamma, gamma_neg and format_weight must lie in [0, 1]")
    rs = _responses(traj)
    acc = float(answer_correct(rs, gold, match))
    fmt, searches = format_check(rs, mode=format_mode, tool_limits=tool_limits)
    if search_penalty and searches and acc:
        acc *= (1 - search_penalty) ** (searches if per_call_penalty else 1)
    t = len(rs)
    pos = (1 - gamma) + gamma * gaussian(t, mu, sigma_pos)
    neg = gamma_neg * gaussian(t, mu, sigma_neg)
    correct = 1.0 if acc > 0 else 0.0
    return (1 - format_weight) * acc * pos + format_weight * fmt + (1 - correct) * neg


RELATION_CUES = ("found", "born", "locat", "capital")
"""Word prefixes of the graph's relations (founded_by/founder, born_in, located_in,
capital_of) that ``mu="question"`` counts in a question's text."""


def question_turns(text: str) -> float:
    """The turn count a question's *text* asks for, read from its words alone: one turn per
    ``<image>`` to identify, one per relation word (:data:`RELATION_CUES`), plus the answer
    turn. It never reads an item's annotation (``hops``/``required_searches``): on this world's
    image questions it equals the annotated depth (3 and 4), on the 1-hop questions it is 2 where
    the annotation says 1 (those are memorised and answered directly)."""
    words = text.lower().split()
    images = sum(w == "<image>" for w in words)
    relations = sum(any(w.startswith(c) for c in RELATION_CUES) for w in words)
    return float(1 + images + relations)


@dataclass
class TurnTarget:
    """The Gaussian reward's dynamic ``mu`` (reconstructed).

    ``mode="question"`` (default since 0.3.0): :func:`question_turns` of the question's text
    (what the policy sees; never the item's annotation).
    ``mode="hop"``: the item's annotated depth, ``required_searches + 1`` turns (a label: the
    gold depth; kept for comparison, not the default since 0.3.0).
    ``mode="ema"``: one running value, ``mu <- momentum * mu + (1 - momentum) * mean turns of
    this batch's correct trajectories`` (unchanged when none is correct), starting at ``init``.
    ``mode="fixed"``: always ``init``.

    With questions of mixed depth, one running average of correct turns sits near the turns of
    the easy questions (direct answers to 1-hop questions are most of the correct
    trajectories), so ``ema`` *penalises* the long trajectories deep questions need (README)."""

    mode: str = "question"
    init: float = 3.0
    momentum: float = 0.9

    def __post_init__(self) -> None:
        if self.mode not in MU_MODES:
            raise ValueError(f"mu mode {self.mode!r} is not known: use one of "
                             f"{', '.join(MU_MODES)} (or a number via mode='fixed', init=...)")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must lie in [0, 1), got {self.momentum}")
        self.value = float(self.init)

    def mu(self, question: Any = None) -> float:
        """``mu`` for one item (``question`` needs ``text`` in ``question`` mode,
        ``required_searches`` in ``hop`` mode)."""
        if self.mode == "question":
            if question is None or not hasattr(question, "text"):
                raise ValueError("mu mode 'question' needs the question (with its text)")
            return question_turns(question.text)
        if self.mode == "hop":
            if question is None or not hasattr(question, "required_searches"):
                raise ValueError("mu mode 'hop' needs the question (with required_searches)")
            return float(question.required_searches + 1)
        return self.value

    def update(self, turns: Sequence[float], correct: Sequence[bool]) -> float:
        """Feed one batch (EMA mode); returns the new ``mu``."""
        if self.mode == "ema":
            ts = [float(t) for t, c in zip(turns, correct, strict=True) if c]
            if ts:
                self.value = self.momentum * self.value + (1 - self.momentum) * (sum(ts) / len(ts))
        return self.value
