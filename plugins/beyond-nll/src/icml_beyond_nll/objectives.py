"""The probability-based objective family f(p) of "Beyond Log Likelihood".

Every objective is a function of the target-token probability p = softmax(z)_y. Its gradient with
respect to the logits is

    df/dz = f'(p) * p * (e_y - softmax(z)) = -W(p) * (e_y - softmax(z)),

so an objective is fully described, for training, by its *gradient weight* W(p) = -f'(p) p
relative to NLL (W = 1). The official objective keys (``trainer.objective_trans`` in the paper's
code) and their W:

=====================  ===============================  ==================
key                    f(p)                             W(p)
=====================  ===============================  ==================
``original``/``logp``  -log p                           1
``p``                  1 - p                            p
``GeneralFamily-a``    (1 - p^a) / a                    p^a
``OnlyTopP-q``         (1 - p) 1[p >= q]                p 1[p >= q]
``OnlyBottomP-q``      (1 - p) 1[p <= q]                p 1[p <= q]
``OnlyTopLogP-q``      -log p 1[p >= q]                 1[p >= q]
``OnlyBottomLogP-q``   -log p 1[p <= q]                 1[p <= q]
=====================  ===============================  ==================

The indicators are computed from p without gradient, and tokens they drop also leave the
normaliser (see :mod:`icml_beyond_nll.loss`). This module needs torch only for tensor inputs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

KINDS = ("nll", "p", "power", "threshold")
OFFICIAL_KEYS = ("original", "logp", "p", "GeneralFamily-<alpha>", "OnlyTopP-<q>",
                 "OnlyBottomP-<q>", "OnlyTopLogP-<q>", "OnlyBottomLogP-<q>")
ALIASES = {"nll": "logp", "-logp": "logp", "-p": "p", "neg_p": "p", "dft": "p"}
_THRESH = re.compile(r"^Only(Top|Bottom)(P|LogP)-(.+)$")
_POWER = re.compile(r"^GeneralFamily-(.+)$")


def _fmt(x: float) -> str:
    return f"{x:g}"


def _number(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"objective {name!r}: {text!r} is not a number; write e.g. "
                         "'GeneralFamily-10' or 'OnlyTopP-0.1'") from None
    if not math.isfinite(value):
        raise ValueError(f"objective {name!r}: the parameter must be finite")
    return value


@dataclass(frozen=True)
class ProbObjective:
    """One member of the family. Build it from typed parameters::

        ProbObjective.nll()                       # -log p
        ProbObjective.neg_p()                     # 1 - p
        ProbObjective.power(10)                   # (1 - p^10)/10 == "GeneralFamily-10"
        ProbObjective.threshold("p", "top", 0.1)  # "OnlyTopP-0.1"

    or from an official key with :meth:`parse`. ``name`` gives the official key back.
    """

    kind: str = "nll"
    alpha: float | None = None
    base: str | None = None
    side: str | None = None
    q: float | None = None
    original: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"ProbObjective kind {self.kind!r} is unknown: use one of "
                             f"{', '.join(KINDS)}")
        if self.kind == "power":
            if self.alpha is None or not isinstance(self.alpha, (int, float)) or \
                    isinstance(self.alpha, bool) or not math.isfinite(self.alpha):
                raise ValueError("power objective needs a finite alpha, e.g. "
                                 "ProbObjective.power(10)")
            if self.alpha <= 0:
                raise ValueError(f"GeneralFamily alpha must be > 0, got {self.alpha}: alpha -> 0 "
                                 "is NLL, use 'logp' for it")
        elif self.alpha is not None:
            raise ValueError(f"alpha is only used by kind='power', not {self.kind!r}")
        if self.kind == "threshold":
            if self.base not in ("p", "logp"):
                raise ValueError(f"threshold base must be 'p' or 'logp', got {self.base!r}")
            if self.side not in ("top", "bottom"):
                raise ValueError(f"threshold side must be 'top' or 'bottom', got {self.side!r}")
            if self.q is None or isinstance(self.q, bool) or not isinstance(self.q, (int, float)) \
                    or not (0.0 <= self.q <= 1.0):
                raise ValueError(f"threshold q must be a probability in [0, 1], got {self.q!r}")
        elif self.base is not None or self.side is not None or self.q is not None:
            raise ValueError("base/side/q are only used by kind='threshold'")
        if self.original and self.kind != "nll":
            raise ValueError("original=True only marks the NLL key 'original'")

    # -- constructors ------------------------------------------------------------------------
    @classmethod
    def nll(cls) -> ProbObjective:
        return cls("nll")

    @classmethod
    def neg_p(cls) -> ProbObjective:
        return cls("p")

    @classmethod
    def power(cls, alpha: float) -> ProbObjective:
        return cls("power", alpha=float(alpha))

    @classmethod
    def threshold(cls, base: str, side: str, q: float) -> ProbObjective:
        return cls("threshold", base=base, side=side, q=float(q))

    @classmethod
    def parse(cls, name: str | ProbObjective) -> ProbObjective:
        """Parse an official key (``original``, ``logp``, ``p``, ``GeneralFamily-10``,
        ``OnlyTopP-0.1``, ...) or an alias (``nll``, ``-p``, ``dft``)."""
        if isinstance(name, ProbObjective):
            return name
        if not isinstance(name, str):
            raise TypeError(f"objective must be a str or ProbObjective, got {type(name).__name__}")
        key = ALIASES.get(name.strip(), name.strip())
        if key == "original":
            return cls("nll", original=True)
        if key == "logp":
            return cls.nll()
        if key == "p":
            return cls.neg_p()
        m = _POWER.match(key)
        if m:
            return cls.power(_number(m.group(1), name))
        m = _THRESH.match(key)
        if m:
            side, base, q = m.groups()
            value = _number(q, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"objective {name!r}: threshold {value:g} is outside [0, 1]")
            return cls.threshold("p" if base == "P" else "logp", side.lower(), value)
        raise ValueError(f"unknown objective {name!r}: valid keys are {', '.join(OFFICIAL_KEYS)} "
                         f"(aliases: {', '.join(ALIASES)})")

    # -- description --------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The official key (round-trips through :meth:`parse`)."""
        if self.kind == "nll":
            return "original" if self.original else "logp"
        if self.kind == "p":
            return "p"
        if self.kind == "power":
            return f"GeneralFamily-{_fmt(self.alpha)}"
        return (f"Only{self.side.capitalize()}{'P' if self.base == 'p' else 'LogP'}-"
                f"{_fmt(self.q)}")

    @property
    def formula(self) -> str:
        if self.kind == "nll":
            return "-log p"
        if self.kind == "p":
            return "1 - p"
        if self.kind == "power":
            return f"(1 - p^{_fmt(self.alpha)})/{_fmt(self.alpha)}"
        op = ">=" if self.side == "top" else "<="
        body = "(1 - p)" if self.base == "p" else "-log p"
        return f"{body} * 1(p {op} {_fmt(self.q)})"

    @property
    def prior_leaning(self) -> bool:
        """True when W(p) shrinks low-probability tokens relative to NLL (the paper's
        "prior-leaning" side): -p, the power family, top thresholds."""
        return self.kind in ("p", "power") or (self.kind == "threshold" and self.side == "top")

    def __str__(self) -> str:
        return self.name

    # -- math ----------------------------------------------------------------------------------
    def keep(self, p: Any) -> Any:
        """The threshold indicator (bool, no gradient); all-true for unthresholded kinds."""
        if self.kind != "threshold":
            return p >= 0
        return (p >= self.q) if self.side == "top" else (p <= self.q)

    def per_token(self, logp: Any) -> Any:
        """f as a function of log p (a float tensor), *before* thresholding. Working in log p
        keeps every branch finite (-log p never sees p = 0) and the power family exact for
        small alpha: the value is ``-expm1(alpha log p)/alpha`` and its gradient ``-p^alpha`` is
        computed directly (autograd through ``expm1`` would form ``expm1(x) + 1``, which is
        exactly 0 in float32 once p^alpha < 6e-8, and inexact above that)."""

        if self.kind == "nll" or (self.kind == "threshold" and self.base == "logp"):
            return -logp
        return _one_minus_pow(logp, self.alpha if self.kind == "power" else 1.0)

    def value(self, p: float) -> float:
        """f(p) for a scalar probability, thresholds included (closed form)."""
        if not 0.0 < p <= 1.0:
            raise ValueError(f"p must be in (0, 1], got {p}")
        if not self.keep(p):
            return 0.0
        if self.kind == "nll" or (self.kind == "threshold" and self.base == "logp"):
            return -math.log(p)
        if self.kind == "power":
            return -math.expm1(self.alpha * math.log(p)) / self.alpha
        return 1.0 - p

    def grad_weight(self, p: Any) -> Any:
        """W(p) = -f'(p) p: the per-token factor multiplying NLL's logit gradient
        (``df/dz = -W(p) (e_y - softmax z)``). Accepts floats, NumPy arrays or tensors."""
        if self.kind == "nll" or (self.kind == "threshold" and self.base == "logp"):
            w = p * 0 + 1
        elif self.kind == "power":
            w = p ** self.alpha
        else:
            w = p
        if self.kind == "threshold":
            k = self.keep(p)
            w = w * (k.to(w.dtype) if hasattr(k, "to") else k * 1.0)
        return w


_POW_FN: Any = None


def _one_minus_pow(logp: Any, alpha: float) -> Any:
    """(1 - p^alpha)/alpha from log p, with the exact gradient -p^alpha = -exp(alpha log p)."""
    global _POW_FN
    if _POW_FN is None:
        import torch

        class _OneMinusPow(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, logp: Any, alpha: float) -> Any:
                ctx.save_for_backward(logp)
                ctx.alpha = alpha
                return -torch.expm1(alpha * logp) / alpha

            @staticmethod
            def backward(ctx: Any, grad: Any) -> Any:
                (logp,) = ctx.saved_tensors
                return -grad * torch.exp(ctx.alpha * logp), None

        _POW_FN = _OneMinusPow
    return _POW_FN.apply(logp, float(alpha))


def parse_objectives(names: str | list[str] | tuple[str, ...]) -> list[ProbObjective]:
    """A comma-separated string or a list of keys -> objectives (order kept, duplicates
    rejected)."""
    items = [s.strip() for s in names.split(",")] if isinstance(names, str) else list(names)
    items = [s for s in items if (s.strip() if isinstance(s, str) else s)]
    if not items:
        raise ValueError("no objective given: name at least one, e.g. 'logp,p'")
    objs = [ProbObjective.parse(s) for s in items]
    seen = [o.name for o in objs]
    dup = {n for n in seen if seen.count(n) > 1}
    if dup:
        raise ValueError(f"objective(s) listed twice: {', '.join(sorted(dup))}")
    return objs
