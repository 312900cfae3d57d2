"""Structural causal models of the scenes: a linear chain X1 -> X2 -> ... -> Xn of binary
variables with exogenous enablers U2..Un drawn in the image.

Mechanisms: ``X1 = U1`` (the trigger: the first domino is pushed, the switch is up, the ball is
released) and ``Xi = X(i-1) AND Ui`` for i > 1 (the gap is closed, the wire is intact, the gate is
open). Interventions ``do(Xk = v)`` replace a mechanism by a constant; interventions on an
enabler set ``Uk``. Counterfactuals follow Pearl's three steps: abduction (the exogenous values
are read off the image, so they are known exactly), action, prediction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


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

    def __post_init__(self) -> None:
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
        do, ex = dict(do or {}), dict(exogenous or {})
        u = [ex.get(i, v) for i, v in enumerate(self.exogenous)]
        states: list[bool] = []
        for i in range(len(self.nodes)):
            if i in do:
                states.append(bool(do[i]))
            elif i == 0:
                states.append(u[0])
            else:
                states.append(states[i - 1] and u[i])
        return states

    def factual(self) -> list[bool]:
        return self.solve()

    def counterfactual(self, do: Mapping[int, bool] | None = None,
                       exogenous: Mapping[int, bool] | None = None) -> list[bool]:
        """Abduction is exact here (U is observed in the image), so a counterfactual is the
        model solved with the observed U under the hypothetical change."""
        return self.solve(do=do, exogenous=exogenous)

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
                "nodes": [n.__dict__ for n in self.nodes], "meta": dict(self.meta)}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> ChainSCM:
        return cls(nodes=tuple(Node(**n) for n in d["nodes"]),  # type: ignore[union-attr]
                   exogenous=tuple(bool(x) for x in d["exogenous"]),  # type: ignore[union-attr]
                   family=str(d.get("family", "")), meta=dict(d.get("meta", {})))  # type: ignore[arg-type]
