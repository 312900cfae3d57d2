"""Question templates on Pearl's three rungs, with gold answers and gold causal chains computed
from the scene's SCM. Three templates per rung, so nine questions per image.

Every scene shows one run: the trigger acted (the first domino was pushed, the switch turned on,
the ball released), every node state is drawn, and a grey cover hides one enabler ``U_h`` whose
prior is stated in the question ("works in 3 of 4 scenes like this one"). The rungs:

* association (seeing): what the picture shows, and what it implies about the covered part
  (``observe_effect``, ``observe_node``, ``abduce_hidden``);
* intervention (doing): ``P(effect | do(a)) > 1/2`` in a scene *set up like this one*, the
  covered part drawn from its prior (``do_node``, ``do_enabler``, ``do_hidden``);
* counterfactual (imagining): the effect had ``a`` held *in this very run*: abduction of the
  covered part from what the picture shows, then action, then prediction (``cf_node``,
  ``cf_enabler``, ``cf_hidden``, the same changes ``a`` as the rung-2 templates).

Rung-2 and rung-3 answers to the same change differ exactly when the covered part's abduced
value is not the prior's likelier value and it matters under the change (``*_hidden`` fixes the
covered part, so those pairs always agree). Every answer is yes/no; templates choose their
parameters to meet a target answer when they can, which balances yes and no per template.

Gold chains run from the node the question acts on to the effect; a change to an enabler
``U_j`` starts the chain at ``X_(j-1)``, the link ``U_j`` governs; ``abduce_hidden`` reads the
covered link ``X_(h-1) -> X_h``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from icml_cage.scm import ChainSCM

RUNGS = ("association", "intervention", "counterfactual")
TEMPLATES = {"association": ("observe_effect", "observe_node", "abduce_hidden"),
             "intervention": ("do_node", "do_enabler", "do_hidden"),
             "counterfactual": ("cf_node", "cf_enabler", "cf_hidden")}
PAIRS = {"do_node": "cf_node", "do_enabler": "cf_enabler", "do_hidden": "cf_hidden"}


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


def _enabler(scm: ChainSCM, j: int, value: bool) -> str:
    node = scm.nodes[j]
    return node.enabler if value else node.enabler_off


@lru_cache(maxsize=64)
def _odds(prior: float) -> str:
    from fractions import Fraction

    f = Fraction(prior).limit_denominator(20)
    return f"{f.numerator} in {f.denominator}"


def _pick(rng: random.Random, options: list[Any], score: Any) -> Any:
    """A random option among those that best meet the targets (``score``: higher is better)."""
    best = max(score(o) for o in options)
    return rng.choice([o for o in options if score(o) == best])


def _hidden(scm: ChainSCM) -> int:
    if scm.hidden is None:
        raise ValueError(f"this {scm.family or 'custom'} scene has no covered enabler: the "
                         "rung-2/3 templates need one (set ChainSCM.hidden)")
    return scm.hidden


def changes(scm: ChainSCM, kind: str) -> list[dict[str, dict[int, bool]]]:
    """The changes ``a`` a ``do_<kind>``/``cf_<kind>`` pair may ask about."""
    n, h = len(scm.nodes), _hidden(scm)
    if kind == "node":  # force a middle node on
        return [{"do": {k: True}} for k in range(1, n - 1)]
    if kind == "enabler":  # set a visible enabler (a change, or a check of consistency)
        return [{"exogenous": {j: v}} for j in range(1, n) if j != h for v in (True, False)]
    return [{"exogenous": {h: v}} for v in (True, False)]  # fix or break the covered part


def rung2_answer(scm: ChainSCM, change: Mapping[str, Mapping[int, bool]]) -> bool:
    return scm.interventional(**change)[-1] > 0.5


def rung3_answer(scm: ChainSCM, change: Mapping[str, Mapping[int, bool]]) -> bool:
    return scm.counterfactual(**change)[-1]


def _change_text(scm: ChainSCM, change: Mapping[str, Mapping[int, bool]], run: bool) -> str:
    if "do" in change:
        (k, v), = change["do"].items()
        return (f"someone forced it so that {_that(scm, k, v)}" if run else
                f"someone forces it so that {_that(scm, k, v)}")
    (j, u), = change["exogenous"].items()
    return _enabler(scm, j, u) if not run else f"it been so that {_enabler(scm, j, u)}"


def _chain_start(change: Mapping[str, Mapping[int, bool]]) -> int:
    if "do" in change:
        return next(iter(change["do"]))
    return next(iter(change["exogenous"])) - 1


def association(scm: ChainSCM, rng: random.Random, targets: Mapping[str, bool]) -> list[Question]:
    n, f, h = len(scm.nodes), scm.factual(), _hidden(scm)
    last = n - 1
    k = _pick(rng, list(range(1, n - 1)), lambda k: f[k] == targets.get("observe_node", f[k]))
    u_h = scm.abduce()[h]
    return [
        Question("association", "observe_effect",
                 f"In the picture, is it true that {_that(scm, last)}?", _yn(f[last]),
                 scm.path(0, last), scm.names[0], scm.names[last]),
        Question("association", "observe_node",
                 f"In the picture, is it true that {_that(scm, k)}?", _yn(f[k]),
                 scm.path(0, k), scm.names[0], scm.names[k]),
        Question("association", "abduce_hidden",
                 f"A grey cover hides part of the scene. Judging from what happened in the "
                 f"picture, is it true that {_enabler(scm, h, True)}?", _yn(u_h),
                 scm.path(h - 1, h), scm.names[h - 1], scm.names[h], {"hidden": h}),
    ]


def _pair(scm: ChainSCM, rng: random.Random, kind: str,
          targets: Mapping[str, bool]) -> tuple[Question, Question]:
    f, last = scm.factual(), len(scm.nodes) - 1
    t2, t3 = targets.get(f"do_{kind}"), targets.get(f"cf_{kind}")
    change = _pick(rng, changes(scm, kind),
                   lambda c: (rung2_answer(scm, c) == t2) + (rung3_answer(scm, c) == t3))
    start = _chain_start(change)
    odds = _odds(scm.prior)
    extra = {"change": {key: [[i, v] for i, v in val.items()] for key, val in change.items()},
             "prior": scm.prior, "hidden": scm.hidden}
    q2 = Question("intervention", f"do_{kind}",
                  f"Think of scenes set up just like this one; the part under the grey cover "
                  f"works in {odds} of them. If {_change_text(scm, change, run=False)} in such "
                  f"a scene, is it more likely than not that {_that(scm, last)}?",
                  _yn(rung2_answer(scm, change)), scm.path(start, last), scm.names[start],
                  scm.names[last], extra)
    q3 = Question("counterfactual", f"cf_{kind}",
                  f"In the picture, {_that(scm, last, f[last])}; the part under the grey cover "
                  f"works in {odds} scenes like this one. Had "
                  f"{_change_text(scm, change, run=True)} in this very run, would it be true "
                  f"that {_that(scm, last)}?",
                  _yn(rung3_answer(scm, change)), scm.path(start, last), scm.names[start],
                  scm.names[last], extra)
    return q2, q3


def make_questions(scm: ChainSCM, rng: random.Random,
                   targets: Mapping[str, bool] | None = None) -> list[Question]:
    """The nine questions of one scene, rung by rung; ``targets`` (template -> wanted answer)
    steer the parameter choices towards balanced answers."""
    if len(scm.nodes) < 3:
        raise ValueError(f"the question templates need a chain of at least 3 nodes (a middle "
                         f"node to observe and intervene on); this {scm.family or 'custom'} "
                         f"scene has {len(scm.nodes)}: add a node to the scene family")
    targets = targets or {}
    pairs = [_pair(scm, rng, kind, targets) for kind in ("node", "enabler", "hidden")]
    return (association(scm, rng, targets) + [p[0] for p in pairs] + [p[1] for p in pairs])
