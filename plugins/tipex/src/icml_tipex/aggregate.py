"""Replica aggregation: GAIA-style answer normalisation, plurality vote, first-finish, quorum
agreement and the closed-form majority-vote accuracy."""

from __future__ import annotations

import functools
import math
import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

AGGREGATORS = ("plurality", "judge", "first")
_DROP = str.maketrans("", "", string.punctuation + string.whitespace)


@dataclass(frozen=True)
class Candidate:
    """A finished replica as the aggregator sees it."""

    replica: int
    answer: str | None
    finish: float


def _number(s: str) -> float | None:
    t = s.replace(",", "").replace("$", "").replace("%", "").strip()
    try:
        return float(t)
    except ValueError:
        return None


def normalize_answer(answer: str | None) -> str | None:
    """GAIA quasi-exact-match key: numbers compare by value (commas, $ and % dropped), lists
    (comma or semicolon separated) element by element, strings lowercased without whitespace or
    punctuation. None or empty stays None."""
    if answer is None:
        return None
    if type(answer) is str:  # the common case, memoised (aggregation asks again and again)
        return _normalize_str(answer)
    return _normalize(answer)


@functools.lru_cache(maxsize=8192)
def _normalize_str(answer: str) -> str | None:
    return _normalize(answer)


def _normalize(answer: object) -> str | None:
    s = str(answer).strip()
    if not s:
        return None
    num = _number(s)
    if num is not None and math.isfinite(num):
        return repr(float(num))
    if any(c in s for c in ",;"):
        parts = [normalize_answer(p) or "" for p in re.split(r"[,;]", s)]
        return "[" + "|".join(parts) + "]"
    return s.lower().translate(_DROP) or None


def answers_match(a: str | None, b: str | None) -> bool:
    """Quasi-exact match of two answers (None never matches)."""
    ka = normalize_answer(a)
    return ka is not None and ka == normalize_answer(b)


def vote_counts(cands: Sequence[Candidate]) -> Counter[str]:
    return Counter(k for k in (normalize_answer(c.answer) for c in cands) if k is not None)


def max_agreement(cands: Sequence[Candidate]) -> int:
    """The size of the largest group of replicas with the same normalised answer."""
    counts = vote_counts(cands)
    return max(counts.values(), default=0)


def _representative(cands: Sequence[Candidate], key: str) -> Candidate:
    group = [c for c in cands if normalize_answer(c.answer) == key]
    return min(group, key=lambda c: (c.finish, c.replica))


def ranked(cands: Sequence[Candidate]) -> list[tuple[str, int, Candidate]]:
    """Distinct answers as (key, votes, earliest replica), most votes first; ties go to the
    earliest finish, then the lower replica index (never to list order)."""
    counts = vote_counts(cands)
    reps = {k: _representative(cands, k) for k in counts}
    return sorted(((k, n, reps[k]) for k, n in counts.items()),
                  key=lambda x: (-x[1], x[2].finish, x[2].replica))


def plurality(cands: Sequence[Candidate]) -> str | None:
    """The most voted normalised answer's text; None if no replica answered."""
    r = ranked(cands)
    return r[0][2].answer if r else None


def first_finish(cands: Sequence[Candidate]) -> str | None:
    """The answer of the replica that finished first with an answer."""
    done = [c for c in cands if normalize_answer(c.answer) is not None]
    return min(done, key=lambda c: (c.finish, c.replica)).answer if done else None


def majority_vote_accuracy(p: float, n: int) -> float:
    """P(strict majority of n i.i.d. replicas, each right with probability p, is right)."""
    if not 0 <= p <= 1 or n < 1:
        raise ValueError(f"need 0 <= p <= 1 and n >= 1, got p={p}, n={n}")
    return sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n // 2 + 1, n + 1))
