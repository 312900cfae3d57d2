"""SCM semantics: interventions cut upstream dependence, counterfactual consistency, and
non-ancestor interventions change nothing."""

from __future__ import annotations

import itertools
import random

import pytest
from icml_cage.dataset import caption
from icml_cage.scenes import FAMILIES
from icml_cage.scm import ChainSCM, Node


def chain(n: int, exo: tuple[bool, ...]) -> ChainSCM:
    return ChainSCM(tuple(Node(f"x{i}", "on", "off") for i in range(n)), exo)


ALL_4 = [chain(4, exo) for exo in itertools.product([False, True], repeat=4)]


@pytest.mark.parametrize("scm", ALL_4)
def test_intervention_cuts_upstream_dependence(scm: ChainSCM) -> None:
    for k, v in itertools.product(range(1, 4), [False, True]):
        effects = {scm.solve(do={k: v}, exogenous={i: u for i, u in enumerate(up)})[3]
                   for up in itertools.product([False, True], repeat=k)}
        assert len(effects) == 1  # X_1..X_(k-1) and their U no longer matter


@pytest.mark.parametrize("scm", ALL_4)
def test_counterfactual_with_factual_antecedent_is_factual(scm: ChainSCM) -> None:
    f = scm.factual()
    for k in range(4):
        assert scm.counterfactual(do={k: f[k]}) == f


@pytest.mark.parametrize("scm", ALL_4)
def test_intervening_on_a_non_ancestor_changes_nothing(scm: ChainSCM) -> None:
    f = scm.factual()
    for k, v in itertools.product(range(4), [False, True]):
        states = scm.solve(do={k: v})
        assert states[:k] == f[:k]  # downstream interventions never touch ancestors


def test_mechanism_is_and_of_parent_and_enabler() -> None:
    assert chain(3, (True, True, True)).factual() == [True, True, True]
    assert chain(3, (True, False, True)).factual() == [True, False, False]
    assert chain(3, (False, True, True)).factual() == [False, False, False]
    assert chain(3, (True, False, True)).depends(0, 2) is False
    assert chain(3, (False, True, True)).depends(0, 2) is True


def test_round_trip_and_bad_input() -> None:
    scm = chain(3, (True, False, True))
    assert ChainSCM.from_dict(scm.to_dict()) == scm
    with pytest.raises(ValueError, match="one exogenous value per node"):
        chain(3, (True,))
    with pytest.raises(ValueError, match="at least 2 nodes"):
        chain(1, (True,))
    with pytest.raises(KeyError, match="no node 'lamp'"):
        scm.index("lamp")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_draws_its_states_and_hides_the_covered_enabler(family: str) -> None:
    """Two scenes that differ only in the covered enabler's value, with the same node states
    (the link before it off, so nothing shows), give identical pictures: the cover hides it."""
    fam = FAMILIES[family]
    rng = random.Random(0)
    for _ in range(10):
        nodes = fam.build(rng)
        n = len(nodes)
        for h in fam.coverable(nodes):
            exo = [True] * n
            exo[h - 1] = h - 1 == 0  # break the link before h (for h > 1): X_(h-1) off
            if h == 1:
                exo[0] = False  # the trigger off: only possible in this test
            a = ChainSCM(tuple(nodes), tuple(exo), family=family, hidden=h)
            b = ChainSCM(tuple(nodes), tuple(not u if i == h else u for i, u in enumerate(exo)),
                         family=family, hidden=h)
            assert a.factual() == b.factual()
            ia, ib = fam.draw(a, 128), fam.draw(b, 128)
            assert ia.size == (128, 128) and ia.mode == "RGB"
            assert ia.tobytes() == ib.tobytes(), (family, h)
            assert caption(a) == caption(b)  # the text-only view hides it too
            shown = ChainSCM(tuple(nodes), tuple(exo), family=family)
            vis = ChainSCM(tuple(nodes), tuple(not u if i == h else u for i, u in enumerate(exo)),
                           family=family)
            if h > 1 or family != "domino":  # an uncovered enabler shows in the picture
                assert fam.draw(shown, 128).tobytes() != fam.draw(vis, 128).tobytes()


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_domino_picture_matches_the_scm(n: int) -> None:
    """Every domino is inside the picture, and a fallen domino reaches the next one exactly
    when the step to it is narrow (the enabler is on): a wide gap is visibly unbridged."""
    from icml_cage.scenes import domino_layout

    for exo in itertools.product([False, True], repeat=n):
        states = chain(n, exo).factual()
        for size in (64, 128):
            xs, polys = domino_layout(exo, states, size)
            covered = domino_layout(exo, states, size, hidden=n - 1)[0]
            flipped = tuple(not u if i == n - 1 else u for i, u in enumerate(exo))
            assert covered == domino_layout(flipped, states, size, hidden=n - 1)[0]
            assert all(0 <= x <= size and 0 <= y <= size for p in polys for x, y in p)
            for i in range(n - 1):
                if states[i]:
                    tip = max(x for x, _ in polys[i])
                    assert (tip > xs[i + 1]) == exo[i + 1], (exo, i)
