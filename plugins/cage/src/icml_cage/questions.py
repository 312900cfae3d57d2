"""Question templates on Pearl's three rungs, with gold answers and gold causal chains computed
from the scene's SCM. Three templates per rung, so nine questions per image.

Every answer is yes/no; every gold chain is the ordered node path from the cause the question
names to the queried effect. Interventions on a node cut the chain there (it starts at the
intervened node); a change to an enabler U_j starts the chain at X_(j-1), the link U_j governs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from icml_cage.scm import ChainSCM

RUNGS = ("association", "intervention", "counterfactual")


@dataclass
class Question:
    rung: str
    template: str
    question: str
    answer: str  # "yes" | "no"
    gold_chain: list[str]
    cause: str
    effect: str
    extra: dict[str, Any] = field(default_factory=dict)


def _yn(v: bool) -> str:
    return "yes" if v else "no"


def _that(scm: ChainSCM, i: int, state: bool = True) -> str:
    node = scm.nodes[i]
    article = "" if node.name[-1].isdigit() else "the "  # "domino 3", "the lamp"
    return f"{article}{node.name} {node.phrase(state)}"


def association(scm: ChainSCM, rng: random.Random) -> list[Question]:
    n, f = len(scm.nodes), scm.factual()
    last, k = n - 1, rng.randint(1, max(1, n - 2))  # a middle node: k = last repeats q0
    return [
        Question("association", "observe_effect",
                 f"In the picture, is it true that {_that(scm, last)}?", _yn(f[last]),
                 scm.path(0, last), scm.names[0], scm.names[last]),
        Question("association", "observe_node",
                 f"In the picture, is it true that {_that(scm, k)}?", _yn(f[k]),
                 scm.path(0, k), scm.names[0], scm.names[k]),
        Question("association", "dependence",
                 f"In this scene, does whether {_that(scm, 0)} go together with whether "
                 f"{_that(scm, last)}?", _yn(scm.depends(0, last)),
                 scm.path(0, last), scm.names[0], scm.names[last]),
    ]


def intervention(scm: ChainSCM, rng: random.Random) -> list[Question]:
    n, f = len(scm.nodes), scm.factual()
    last = n - 1
    k = rng.randint(1, max(1, n - 2))
    v = rng.random() < 0.5
    j = rng.randint(1, last)
    u_new = not scm.exogenous[j]
    enabler = scm.nodes[j].enabler if u_new else scm.nodes[j].enabler_off
    return [
        Question("intervention", "do_node",
                 f"If someone forces it so that {_that(scm, k, v)}, is it true that "
                 f"{_that(scm, last)}?", _yn(scm.solve(do={k: v})[last]),
                 scm.path(k, last), scm.names[k], scm.names[last], {"do": {k: v}}),
        Question("intervention", "do_enabler",
                 f"If we change the scene so that {enabler}, is it true that "
                 f"{_that(scm, last)}?", _yn(scm.solve(exogenous={j: u_new})[last]),
                 scm.path(j - 1, last), scm.names[j - 1], scm.names[last],
                 {"exogenous": {j: u_new}}),
        Question("intervention", "do_trigger",
                 f"If someone makes it so that {_that(scm, 0, not f[0])}, is it true that "
                 f"{_that(scm, last)}?", _yn(scm.solve(do={0: not f[0]})[last]),
                 scm.path(0, last), scm.names[0], scm.names[last], {"do": {0: not f[0]}}),
    ]


def counterfactual(scm: ChainSCM, rng: random.Random) -> list[Question]:
    n, f = len(scm.nodes), scm.factual()
    last = n - 1
    j = rng.randint(1, last)
    u_new = not scm.exogenous[j]
    enabler = scm.nodes[j].enabler if u_new else scm.nodes[j].enabler_off
    k = rng.randint(0, last - 1)
    return [
        Question("counterfactual", "cf_trigger",
                 f"In the picture, {_that(scm, last, f[last])}. Suppose, contrary to the "
                 f"picture, that {_that(scm, 0, not f[0])}. Would it then be true that "
                 f"{_that(scm, last)}?", _yn(scm.counterfactual(do={0: not f[0]})[last]),
                 scm.path(0, last), scm.names[0], scm.names[last], {"do": {0: not f[0]}}),
        Question("counterfactual", "cf_enabler",
                 f"In the picture, {_that(scm, last, f[last])}. Suppose, contrary to the "
                 f"picture, that {enabler}. Would it then be true that {_that(scm, last)}?",
                 _yn(scm.counterfactual(exogenous={j: u_new})[last]),
                 scm.path(j - 1, last), scm.names[j - 1], scm.names[last],
                 {"exogenous": {j: u_new}}),
        Question("counterfactual", "cf_consistency",
                 f"Suppose that {_that(scm, k, f[k])}, just as in the picture. Would it then be "
                 f"true that {_that(scm, last)}?", _yn(scm.counterfactual(do={k: f[k]})[last]),
                 scm.path(k, last), scm.names[k], scm.names[last], {"do": {k: f[k]}}),
    ]


def make_questions(scm: ChainSCM, rng: random.Random) -> list[Question]:
    """The nine questions of one scene, rung by rung."""
    if len(scm.nodes) < 3:
        raise ValueError(f"the question templates need a chain of at least 3 nodes (a middle "
                         f"node to observe and intervene on); this {scm.family or 'custom'} "
                         f"scene has {len(scm.nodes)}: add a node to the scene family")
    return association(scm, rng) + intervention(scm, rng) + counterfactual(scm, rng)
