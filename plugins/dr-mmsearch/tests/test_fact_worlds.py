"""Fact worlds (``world.fact_worlds``, ``holdout_by=world``): held-out questions that only
searching answers. Every extra world re-draws the companies' founders; its questions have the
same text as world 0's and its own corpus, so a policy that memorised the training chains
answers the held-out ones wrong unless it reads the search results."""

import pytest
from icml_dr_mmsearch.config import TrainConfig, WorldConfig
from icml_dr_mmsearch.experiment import build_world
from icml_dr_mmsearch.knowledge import KnowledgeBase


@pytest.fixture(scope="module")
def world3():
    return build_world(WorldConfig(n_entities=24, world_seed=0, fact_worlds=3))


def test_world_zero_is_the_one_world_kb():
    one = KnowledgeBase.generate(24, seed=0)
    three = KnowledgeBase.generate(24, seed=0, fact_worlds=3)
    assert one.n_worlds == 1 and three.n_worlds == 3
    assert [f for f in three.facts if f.world == 0] == one.facts
    assert [q for q in three.questions if q.world == 0] == one.questions
    assert three.documents == one.documents and three.words() == one.words()
    assert len({q.id for q in three.questions}) == len(three.questions)


def test_extra_worlds_redraw_founders_behind_the_same_question_text(world3):
    kb, env, _ = world3
    n_comp = len(kb.of_type("company"))
    for w in (1, 2):
        qs = [q for q in kb.questions if q.world == w]
        assert sorted(q.hops for q in qs) == [2] * n_comp + [3] * n_comp
        docs = kb.documents_of(w)
        assert len(docs) == len(kb.documents)             # one founder sentence per company
        for q in qs:
            founder = q.chain[1]
            assert f"{q.image_entity} was founded by {founder}" in docs
            assert q.text == next(p.text for p in kb.questions
                                  if p.world == 0 and p.hops == q.hops)
    base = {q.image_entity: q.answer for q in kb.questions if q.world == 0 and q.hops == 2}
    moved = [q for q in kb.questions if q.world == 1 and q.hops == 2
             and q.answer != base[q.image_entity]]
    assert len(moved) >= n_comp // 2       # most held-out answers differ from the memorised


def test_each_question_searches_its_own_worlds_corpus(world3, play):
    kb, env, _ = world3
    for q in [q for q in kb.questions if q.hops == 3][:: 5]:
        t = play(env, q, env.gold_responses(q))
        assert t.episode.actions == ["I", "T", "T", "A"]
        # the first text search returns this world's founder, the second their birthplace
        assert q.chain[1] in t.episode.tool_hits[1][0] and q.answer in t.episode.tool_hits[2][0]


def test_split_by_world_holds_out_the_last_worlds(world3):
    kb = world3[0]
    train, held = kb.split(1 / 3, by="world")
    assert {q.world for q in held} == {2} and {q.world for q in train} == {0, 1}
    assert all(q.hops in (2, 3) for q in held)
    assert {q.text for q in held} <= {q.text for q in train}        # same templates, trained
    assert kb.split(0, by="world") == (kb.questions, [])
    with pytest.raises(ValueError, match="fact worlds"):
        kb.split(1.0, by="world")                                     # world 0 stays in training
    with pytest.raises(ValueError, match="fact worlds"):
        KnowledgeBase.generate(24, seed=0).split(0.5, by="world")


def test_bad_fact_world_settings_fail_before_any_work():
    with pytest.raises(ValueError, match="world.fact_worlds"):
        TrainConfig(holdout=0.3, holdout_by="world")                  # one world: nothing held
    with pytest.raises(ValueError, match="fact_worlds"):
        KnowledgeBase.generate(24, seed=0, fact_worlds=0)
    TrainConfig(holdout=0.2, holdout_by="world", world=WorldConfig(fact_worlds=5))
