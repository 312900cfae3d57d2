"""Structural causal models of the scenes: a linear chain X1 -> X2 -> ... -> Xn of binary
variables with exogenous enablers U2..Un.

Mechanisms: ``X1 = U1`` (the trigger: the first domino is pushed, the switch is up, the ball is
released) and ``Xi = X(i-1) AND Ui`` for i > 1 (the gap is closed, the wire is intact, the gate is
open). Interventions ``do(Xk = v)`` replace a mechanism by a constant; interventions on an
enabler set ``Uk``.

One enabler, ``hidden``, may be under a cover in the picture: its value is not shown, only what
happened (every node state is drawn). Its prior ``P(U_hidden = 1) = prior`` is stated with the
question. The rungs then ask different things:

* rung 2, :meth:`ChainSCM.interventional`: ``P(X | do(a))`` for a scene set up like this one,
  the hidden enabler drawn from its prior (the visible enablers are pre-treatment and fixed);
* rung 3, :meth:`ChainSCM.counterfactual`: this very run. Abduction infers the hidden enabler
  from the drawn node states (:meth:`ChainSCM.abduce`), then action, then prediction.

The two differ exactly when the abduced value is not the prior's likelier value and the hidden
enabler matters under the change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Node:
    """One endogenous variable with the words used to talk about it."""

    name: str
    on: str  # phrase for state True, e.g. "is lit"
    off: str  # phrase for state False, e.g. "is dark"
    enabler: str = ""  # what U_i means when True, e.g. "the wire is intact"
    enabler_off: str = ""  # what U_i means when False, e.g. "the wire is cut"

    def phrase(self, state: bool) -> str:
        return self.on if state else self.off


@dataclass(frozen=True)
class ChainSCM:
    """A linear causal chain with its exogenous values (``exogenous[0]`` is the trigger U1)."""

    nodes: tuple[Node, ...]
    exogenous: tuple[bool, ...]
    family: str = ""
    meta: Mapping[str, object] = field(default_factory=dict)
    hidden: int | None = None  # the covered enabler's index (1..n-1), if any
    prior: float = 0.75  # P(U_hidden = 1): how often a covered part works
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.hidden is not None and not 1 <= self.hidden < len(self.nodes):
            raise ValueError(f"hidden must index an enabler (1..{len(self.nodes) - 1}), got "
                             f"{self.hidden}")
        if not 0.0 < self.prior < 1.0 or self.prior == 0.5:
            raise ValueError(f"prior must be in (0, 1) and not 0.5 (rung-2 answers would tie), "
                             f"got {self.prior}")
        if len(self.nodes) < 2:
            raise ValueError(f"a chain needs at least 2 nodes, got {len(self.nodes)}")
        if len(self.exogenous) != len(self.nodes):
            raise ValueError(f"need one exogenous value per node ({len(self.nodes)}), got "
                             f"{len(self.exogenous)}")

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"no node {name!r} in this scene: nodes are {self.names}") from None

    def solve(self, do: Mapping[int, bool] | None = None,
              exogenous: Mapping[int, bool] | None = None) -> list[bool]:
        """Node states under interventions ``do`` (node index -> value) and exogenous
        overrides (index -> value)."""
        u = list(self.exogenous)
        for i, v in (exogenous or {}).items():
            u[i] = v
        do = do or {}
        states: list[bool] = []
        prev = False
        for i, ui in enumerate(u):
            prev = bool(do[i]) if i in do else (ui if i == 0 else prev and ui)
            states.append(prev)
        return states

    def factual(self) -> list[bool]:
        cached = self._cache.get("factual")
        if cached is None:
            cached = self._cache["factual"] = self.solve()
        return list(cached)

    def visible_exogenous(self) -> dict[int, bool]:
        """The enablers the picture shows (all but the hidden one)."""
        return {i: u for i, u in enumerate(self.exogenous) if i != self.hidden}

    def abduce(self) -> tuple[bool, ...]:
        """Abduction: the exogenous values implied by the visible enablers and the drawn node
        states. Under ``X_h = X_(h-1) AND U_h`` the hidden ``U_h`` equals ``X_h`` when
        ``X_(h-1)`` is true and is not identified otherwise (a ValueError)."""
        if self.hidden is None:
            return self.exogenous
        f, h = self.factual(), self.hidden
        if not f[h - 1]:
            raise ValueError(f"the hidden enabler {h} is not identified: node {h - 1} is off in "
                             "the picture, so nothing shows whether the covered part works")
        return tuple(f[h] if i == h else u for i, u in enumerate(self.exogenous))

    def counterfactual(self, do: Mapping[int, bool] | None = None,
                       exogenous: Mapping[int, bool] | None = None) -> list[bool]:
        """Rung 3: abduction (:meth:`abduce`), action (``do``, ``exogenous``), prediction."""
        u = self.abduce()
        ex = {**dict(enumerate(u)), **dict(exogenous or {})}
        return self.solve(do=do, exogenous=ex)

    def interventional(self, do: Mapping[int, bool] | None = None,
                       exogenous: Mapping[int, bool] | None = None) -> list[float]:
        """Rung 2: ``P(X_i = 1 | do(...))`` per node for a scene set up like this one (visible
        enablers fixed, the hidden one drawn from ``prior``); nothing about what happened in
        the picture is used."""
        ex = dict(exogenous or {})
        if self.hidden is None or self.hidden in ex:
            return [float(x) for x in self.solve(do=do, exogenous=ex)]
        on = self.solve(do=do, exogenous={**ex, self.hidden: True})
        off = self.solve(do=do, exogenous={**ex, self.hidden: False})
        return [self.prior * a + (1 - self.prior) * b for a, b in zip(on, off)]

    def depends(self, cause: int, effect: int) -> bool:
        """Whether, in this context (the observed U), changing ``cause`` changes ``effect``."""
        if effect <= cause:
            return False
        return self.solve(do={cause: True})[effect] != self.solve(do={cause: False})[effect]

    def path(self, start: int, end: int) -> list[str]:
        """The node names from ``start`` to ``end`` along the chain (the gold causal chain)."""
        if not 0 <= start <= end < len(self.nodes):
            raise ValueError(f"no causal path from node {start} to node {end}")
        return self.names[start:end + 1]

    def to_dict(self) -> dict[str, object]:
        return {"family": self.family, "exogenous": list(self.exogenous),
                "nodes": [n.__dict__ for n in self.nodes], "meta": dict(self.meta),
                "hidden": self.hidden, "prior": self.prior}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> ChainSCM:
        return cls(nodes=tuple(Node(**n) for n in d["nodes"]),  # type: ignore[union-attr]
                   exogenous=tuple(bool(x) for x in d["exogenous"]),  # type: ignore[union-attr]
                   family=str(d.get("family", "")), meta=dict(d.get("meta", {})),  # type: ignore[arg-type]
                   hidden=None if d.get("hidden") is None else int(d["hidden"]),  # type: ignore[call-overload]
                   prior=float(d.get("prior", 0.75)))  # type: ignore[arg-type]
