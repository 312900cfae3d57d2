"""The knowledge base, BM25 and image search tools, and the environment's baseline rules."""

import random

import pytest
from icml_dr_mmsearch.env import SearchEnv, parse_action
from icml_dr_mmsearch.knowledge import KnowledgeBase
from icml_dr_mmsearch.tools import TEXT_ERROR, ImageSearch, TextSearch

IMG = "<reason> r </reason> <search><img></search>"


def _txt(q):
    return f"<reason> r </reason> <text_search> {q} </text_search>"


def test_world_is_deterministic_and_consistent():
    a, b = KnowledgeBase.generate(40, seed=3), KnowledgeBase.generate(40, seed=3)
    assert a.documents == b.documents and [q.text for q in a.questions] == \
        [q.text for q in b.questions]
    assert KnowledgeBase.generate(40, seed=4).documents != a.documents
    facts = {(f.subject, f.relation): f.object for f in a.facts}
    for q in a.questions_by_hops(3):
        company, founder, city = q.chain
        assert facts[(company, "founded_by")] == founder
        assert facts[(founder, "born_in")] == city == q.answer
    with pytest.raises(ValueError, match="n_entities"):
        KnowledgeBase.generate(3)


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_bm25_is_deterministic(kb, backend):
    pytest.importorskip("bm25s" if backend == "bm25s" else "rank_bm25")
    queries = [f"{q.chain[0]} founded" for q in kb.questions_by_hops(2)] + ["was born in",
                                                                              "zzz", ""]
    s1 = TextSearch(kb.documents, topk=3, backend=backend)
    s2 = TextSearch(list(kb.documents), topk=3, backend=backend)
    runs = [[s.search(q) for q in queries] for s in (s1, s1, s2)]
    assert runs[0] == runs[1] == runs[2]
    # the gold fact is ranked first for the gold queries
    for q in kb.questions_by_hops(3):
        assert s1.search(q.gold_queries[0])[0] == f"{q.chain[0]} was founded by {q.chain[1]}"
        assert s1.search(q.gold_queries[1])[0] == f"{q.chain[1]} was born in {q.chain[2]}"


def test_bm25_backends_agree_on_the_top_hit(kb):
    pytest.importorskip("rank_bm25")
    a, b = TextSearch(kb.documents, backend="bm25s"), TextSearch(kb.documents, backend="rank_bm25")
    for q in kb.questions_by_hops(3):
        for g in q.gold_queries:
            assert a.search(g)[0] == b.search(g)[0]


def test_empty_retrieval_gives_the_baseline_error(kb):
    s = TextSearch(kb.documents, result_format="baseline")
    res = s("qqqq xxxx")
    assert not res.ok and res.hits == [] and res.text == TEXT_ERROR
    assert TextSearch(kb.documents)("").text == "none"
    with pytest.raises(ValueError, match="non-empty"):
        TextSearch([])
    with pytest.raises(ValueError, match="backend"):
        TextSearch(kb.documents, backend="lucene")


def test_image_search_finds_the_pictured_company(kb, env):
    qs = [q for q in kb.questions if q.has_image]
    top1 = [env.tools["image"].search(env.image_of(q))[0] == q.image_entity for q in qs]
    assert sum(top1) == len(qs)
    res = env.tools["image"](env.image_of(qs[0]))
    assert len(res.hits) == 3 and len(set(res.hits)) == 3 and res.ok
    with pytest.raises(ValueError, match="PIL"):
        env.tools["image"].search("not an image")
    with pytest.raises(ValueError, match="gallery"):
        ImageSearch({})


def test_question_images_are_noisy_copies(kb):
    import numpy as np

    q = kb.questions_by_hops(2)[0]
    a = np.asarray(kb.image(q.image_entity), dtype=float)
    b = np.asarray(kb.question_image(q), dtype=float)
    assert a.shape == b.shape == (32, 32, 3) and 0 < np.abs(a - b).mean() < 40


def test_parse_action_follows_the_baseline_triggers():
    assert parse_action(IMG) == ("image", "")
    assert parse_action("<text_search> a </text_search> <text_search> b </text_search>") == \
        ("text", "b")
    assert parse_action("<reason> r </reason> <answer> x </answer>") == ("answer", "")
    assert parse_action("<search><img></search> trailing")[0] == "invalid"
    assert parse_action("just prose")[0] == "invalid"


def test_limits_and_round_rules(kb, env, play):
    q = kb.questions_by_hops(3)[0]
    t = play(env, q, [IMG, IMG])                  # second image call: over the image limit
    assert t.episode.done and t.episode.end_reason == "image limit" and t.episode.image_calls == 1
    t = play(env, q, [_txt("a"), _txt("b"), _txt("c")])       # third text call
    assert t.episode.end_reason == "text limit" and t.episode.text_calls == 2
    env3 = SearchEnv(kb, max_rounds=3)
    t = play(env3, q, [IMG, _txt("a"), _txt("b")])            # a call in the last round
    assert t.episode.end_reason == "round limit" and t.episode.searches == 2
    t = play(env, q, [_txt("   ")])
    assert t.episode.end_reason == "empty query"
    t = play(env, q, ["<reason> r </reason> <web_search> x </web_search>"])
    assert t.episode.end_reason == "invalid" and t.actions == "X"


def test_random_turns_never_exceed_the_limits(kb, play):
    rng = random.Random(0)
    for rounds, limits in ((3, {"image": 1, "text": 2}), (4, {"image": 1, "text": 2}),
                           (6, {"image": 2, "text": 1}), (2, {"image": 0, "text": 5})):
        env = SearchEnv(kb, max_rounds=rounds, tool_limits=limits)
        for _ in range(200):
            q = rng.choice(kb.questions)
            turns = [rng.choice([IMG, _txt(rng.choice(["a", "b founded", ""])),
                                 "<reason> r </reason> <answer> x </answer>", "junk"])
                     for _ in range(rounds + 3)]
            t = play(env, q, turns)
            ep = t.episode
            assert ep.done and ep.turns <= rounds
            assert ep.image_calls <= limits["image"] and ep.text_calls <= limits["text"]
            assert len(ep.observations) == ep.searches < rounds


def test_bad_env_settings(kb):
    with pytest.raises(ValueError, match="unknown tools"):
        SearchEnv(kb, tool_limits={"web": 1})
    with pytest.raises(ValueError, match="max_rounds"):
        SearchEnv(kb, max_rounds=0)
    with pytest.raises(ValueError, match="named"):
        SearchEnv(kb, tools=[object()])


def test_dedupe_option_replaces_repeated_results(kb, play):
    q = kb.questions_by_hops(3)[0]
    plain = play(SearchEnv(kb), q, [_txt(q.gold_queries[0]), _txt(q.gold_queries[0])])
    dedup = play(SearchEnv(kb, dedupe_repeats=True), q,
                 [_txt(q.gold_queries[0]), _txt(q.gold_queries[0])])
    assert plain.episode.redundant and dedup.episode.redundant
    assert plain.episode.observations[1] == plain.episode.observations[0]
    assert "repeated" in dedup.episode.observations[1]


def test_split_holds_out_whole_companies(kb):
    train, held = kb.split(0.3, seed=0)
    assert {q.id for q in train} | {q.id for q in held} == {q.id for q in kb.questions}
    assert not {q.id for q in train} & {q.id for q in held}
    held_companies = {q.image_entity for q in held}
    assert held and None not in held_companies
    assert not held_companies & {q.image_entity for q in train}      # disjoint entities
    n_comp = len(kb.of_type("company"))
    assert len(held_companies) == round(0.3 * n_comp)
    assert {q.hops for q in held} == {2, 3} and len(held) == 2 * len(held_companies)
    assert all(q.hops == 1 for q in train if q.image_entity is None)
    assert len([q for q in train if q.hops == 1]) == len(kb.questions_by_hops(1))
    assert kb.split(0.3, seed=0) == (train, held)                     # deterministic
    assert {q.image_entity for q in kb.split(0.3, seed=1)[1]} != held_companies or n_comp < 4
    assert kb.split(0.0) == (list(kb.questions), [])
    for bad in (-0.1, 1.0, 0.01):
        with pytest.raises(ValueError, match="holdout"):
            kb.split(bad)


def test_split_by_question_keeps_every_name_in_training(kb):
    train, held = kb.split(1.0, seed=0, by="question")
    n_comp = len(kb.of_type("company"))
    assert len(held) == n_comp and not {q.id for q in train} & {q.id for q in held}
    assert sorted(q.hops for q in held) == [2] * (n_comp // 2) + [3] * (n_comp - n_comp // 2)
    trained = {q.image_entity for q in train if q.image_entity}
    assert {q.image_entity for q in held} <= trained           # the other question is trained
    assert {(q.image_entity, q.hops) for q in held}.isdisjoint(
        {(q.image_entity, q.hops) for q in train})
    assert kb.split(1.0, seed=0, by="question") == (train, held)       # deterministic
    small = kb.split(0.3, seed=0, by="question")[1]
    assert len(small) == round(0.3 * n_comp)
    with pytest.raises(ValueError, match="holdout_by"):
        kb.split(0.3, by="entity")
    with pytest.raises(ValueError, match="holdout"):
        kb.split(1.0)                                                  # company mode: < 1
