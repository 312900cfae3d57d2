import pytest
from icml_lalm_judge import CATEGORIES, make_dialogues, make_variant, validate_dialogue
from icml_lalm_judge.config import DialogueConfig
from icml_lalm_judge.dialogue import make_base, turn_data, unsafe_text


def test_factorisation_and_one_turn_differs(bench):
    assert len(bench.variants) == 6 * len(CATEGORIES) * 5
    for v in bench.variants:
        validate_dialogue(v)
        base = bench.base_of(v)
        assert 3 <= v.n_turns <= 10 and v.n_turns == base.n_turns
        diff = [i for i, (a, b) in enumerate(zip(base.turns, v.turns)) if a != b]
        assert diff == [v.position - 1]
        assert v.turns[v.position - 1].text in turn_data()["unsafe"][v.category][str(v.severity)]
        assert [t.speaker for t in v.turns] == [t.speaker for t in base.turns]
    for b in bench.bases:
        validate_dialogue(b)
        assert all(t.severity == 0 for t in b.turns)


def test_per_base_position_shared_and_modes():
    b = make_dialogues(3, seed=1)
    for base in b.bases:
        assert len({v.position for v in b.variants if v.base_id == base.id}) == 1
    last = make_dialogues(3, seed=1, dialogues=DialogueConfig(position="last"))
    assert all(v.position == v.n_turns for v in last.variants)
    per = make_dialogues(4, seed=1, dialogues=DialogueConfig(per_base_position=False))
    assert len({v.position for v in per.variants}) > 1


def test_seeded_and_sizes():
    a, b = make_dialogues(2, seed=5), make_dialogues(2, seed=5)
    assert [v.turns for v in a.variants] == [v.turns for v in b.variants]
    small = make_dialogues(2, categories=["hate"], severities=[1, 5],
                           dialogues=DialogueConfig(min_turns=4, max_turns=4))
    assert len(small) == 4 and all(v.n_turns == 4 for v in small.variants)


def test_unsafe_text_is_shipped_data():
    lines = turn_data()["unsafe"]["violence"]["5"]
    assert unsafe_text("violence", 5, 0) == lines[0] and unsafe_text("violence", 5, 1) == lines[1]
    assert unsafe_text("violence", 5, len(lines)) == lines[0]
    assert "Written by hand" in turn_data()["provenance"]


@pytest.mark.parametrize("kw, match", [({"categories": ["weather"]}, "unknown category"),
                                       ({"severities": [0]}, "severity"),
                                       ({"severities": [6]}, "severity"),
                                       ({"dialogues": (2, 5)}, "3 <= min"),
                                       ({"n_base": 0}, "n_base")])
def test_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        if "dialogues" in kw:  # the turn range is DialogueConfig's, checked where it is built
            kw["dialogues"] = DialogueConfig(*kw["dialogues"])
        make_dialogues(**kw)


def test_short_dialogue_rejected():
    from dataclasses import replace

    import numpy as np

    base = make_base("x", 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="3-10"):
        validate_dialogue(replace(base, turns=base.turns[:2]))
    with pytest.raises(ValueError, match="position"):
        make_variant(base, "hate", 2, 4)
