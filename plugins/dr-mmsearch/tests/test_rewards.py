"""MMSearch-R1's reward (its table), answer normalisation, format checks, the Gaussian turn
reward and the dynamic mu."""

import math

import pytest
from icml_dr_mmsearch.rewards import (
    TurnTarget,
    answer_correct,
    em_check,
    extract_answer,
    format_check,
    gaussian,
    gaussian_turn_reward,
    mmsearch_r1_reward,
    normalize_answer,
    subem_check,
)

ANSWER = "<reason> ok </reason> <answer> Paris </answer>"
IMG = "<reason> look </reason> <search><img></search>"
TXT = "<reason> look </reason> <text_search> paris country </text_search>"


@pytest.mark.parametrize("responses, gold, kw, expected", [
    ([ANSWER], "paris", {}, 1.0),                                   # correct, no search
    ([IMG, ANSWER], "paris", {}, 0.91),                             # correct, searched
    ([IMG, TXT, ANSWER], "paris", {}, 0.91),                        # flat penalty: once
    (["<answer> Paris </answer>"], "paris", {}, 0.9),               # correct, bad format
    ([ANSWER], "london", {}, 0.1),                                  # wrong, valid format
    (["paris"], "paris", {}, 0.0),                                  # answer outside tags
    ([IMG, TXT, ANSWER], "paris", {"per_call_penalty": True}, 0.9 * 0.81 + 0.1),  # 0.829
    ([IMG, TXT, "<reason> x </reason> <answer> rome </answer>"], "paris", {}, 0.1),
])
@pytest.mark.parametrize("mode", ["official", "general"])
def test_mmsearch_r1_reward_table(responses, gold, kw, expected, mode):
    assert mmsearch_r1_reward(responses, gold, format_mode=mode, **kw) == pytest.approx(expected)


def test_table_values_of_the_notes():
    assert mmsearch_r1_reward([IMG, TXT, ANSWER], "paris", per_call_penalty=True,
                              format_mode="official") == pytest.approx(0.829)


def test_official_and_general_formats_differ_only_on_text_text_answer():
    assert format_check([TXT, TXT, ANSWER], mode="official")[0] == 0
    assert format_check([TXT, TXT, ANSWER], mode="general")[0] == 1
    for rs in ([TXT, IMG, ANSWER], [IMG, IMG, ANSWER], [ANSWER, ANSWER], [IMG, TXT]):
        assert format_check(rs, mode="official")[0] == format_check(rs, mode="general")[0] == 0
    assert format_check([IMG, TXT, TXT, ANSWER], mode="general") == (1, 3)
    assert format_check([IMG, TXT, TXT, TXT, ANSWER], mode="general")[0] == 0  # over the limit
    with pytest.raises(ValueError, match="1-3 turns"):
        format_check([IMG, TXT, TXT, ANSWER], mode="official")


def test_search_count_follows_the_baseline():
    # a one-turn trajectory that ended on a search call counts it; the last turn never counts
    assert format_check([IMG])[1] == 1
    assert format_check([IMG, IMG + " <answer> x </answer>"])[1] == 1


def test_malformed_calls_get_format_zero():
    bad = ["<reason> x </reason> <web_search> q </web_search>",          # unknown tool
           "<reason> x </reason> <text_search> q",                        # unclosed call
           "<reason> x <answer> a </answer>",                            # unclosed reason
           "<reason> x </reason> <answer> a </answer> <answer> b </answer>"]
    for b in bad:
        assert format_check([b])[0] == 0


@pytest.mark.parametrize("s", ["  The  Eiffel, Tower! ", "an apple a day", "A.B.C", "the the",
                               "Paris\n\tFrance", "", "théâtre  L'Opéra"])
def test_normalisation_is_idempotent(s):
    once = normalize_answer(s)
    assert normalize_answer(once) == once
    assert once == once.strip() and "  " not in once


def test_normalisation_and_matching():
    assert normalize_answer("The Eiffel Tower!") == "eiffel tower"
    assert em_check("  the PARIS. ", ["london", "Paris"])
    assert not em_check("paris france", "paris")
    assert subem_check("paris france", "paris")


def test_last_answer_is_used():
    text = "<answer> london </answer> then <answer> paris </answer>"
    assert extract_answer(text) == "paris"
    assert extract_answer("no tags") is None
    assert answer_correct([text], "paris") and not answer_correct([text], "london")
    # only the last turn's answer counts
    assert not answer_correct(["<answer> paris </answer>", "<answer> rome </answer>"], "paris")


def test_gaussian_properties():
    mu = 3.0
    assert gaussian(mu, mu, 0.7) == 1.0
    for d in (0.5, 1.0, 2.5):
        assert gaussian(mu + d, mu, 0.7) == pytest.approx(gaussian(mu - d, mu, 0.7))
    vals = [gaussian(mu + d, mu, 0.7) for d in (0, 0.5, 1, 2, 4)]
    assert all(a > b for a, b in zip(vals, vals[1:]))
    assert gaussian(10, mu, math.inf) == 1.0
    assert gaussian(10, mu, 1e9) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        gaussian(1, 1, 0)


def test_gaussian_turn_reward_shape():
    right = [IMG, TXT, ANSWER]                       # 3 turns, correct
    assert gaussian_turn_reward(right, "paris", mu=3) == pytest.approx(0.9 + 0.1)
    # correct but off-target: loses at most gamma of the accuracy part
    short = gaussian_turn_reward([ANSWER], "paris", mu=3)
    assert 0.9 * 0.7 + 0.1 - 1e-9 <= short < 1.0
    # wrong: format + gamma_neg * G(T; mu, sigma_neg), largest at T = mu
    wrong = [IMG, TXT, "<reason> x </reason> <answer> rome </answer>"]
    assert gaussian_turn_reward(wrong, "paris", mu=3) == pytest.approx(0.1 + 0.1)
    assert gaussian_turn_reward(wrong, "paris", mu=5) < gaussian_turn_reward(wrong, "paris", mu=3)
    # sigma_neg < sigma_pos: wrong trajectories are less tolerant of off-target lengths
    pos = gaussian_turn_reward(right, "paris", mu=4.5, format_weight=0, gamma=1)
    neg = gaussian_turn_reward(wrong, "paris", mu=4.5, format_weight=0, gamma_neg=1)
    assert neg < pos
    # sigma -> inf removes the turn dependence: the correct reward is flat in T
    flat = [gaussian_turn_reward(r, "paris", mu=3, sigma_pos=math.inf)
            for r in ([ANSWER], [IMG, ANSWER], right)]
    assert max(flat) - min(flat) < 1e-12


def test_turn_target_modes():
    from icml_dr_mmsearch.knowledge import Question

    t = TurnTarget("ema", init=2.0, momentum=0.5)
    assert t.update([4, 1, 4], [True, False, True]) == pytest.approx(3.0)
    assert t.update([1], [False]) == pytest.approx(3.0)         # no correct: unchanged
    q = Question(0, "x", "y", hops=3, required_searches=3)
    assert TurnTarget("hop").mu(q) == 4.0
    assert TurnTarget().mode == "question"                      # default: never the annotation
    assert TurnTarget("fixed", init=2.5).mu(q) == 2.5
    with pytest.raises(ValueError, match="mu mode"):
        TurnTarget("median")


def test_mu_from_question_text_never_reads_the_annotation(kb):
    from icml_dr_mmsearch.knowledge import Question
    from icml_dr_mmsearch.rewards import question_turns

    # the same text gives the same mu whatever the item's annotated depth says
    text = "<image> where was the founder of the company in the image born ?"
    for hops in (1, 2, 3):
        assert TurnTarget("question").mu(Question(0, text, "a", hops=hops,
                                                  required_searches=hops)) == 4.0
    assert question_turns("<image> who founded the company in the image ?") == 3.0
    assert question_turns("where was konidi born ?") == 2.0       # annotated 1 (memorised)
    assert question_turns("what is this ?") == 1.0
    got = {q.hops: question_turns(q.text) for q in kb.questions}
    assert got == {1: 2.0, 2: 3.0, 3: 4.0}
    with pytest.raises(ValueError, match="question"):
        TurnTarget("question").mu(None)


def test_gaussian_reward_can_keep_the_search_penalty():
    right = ["<reason> r </reason> <search><img></search>",
             "<reason> r </reason> <text_search> a b </text_search>",
             "<reason> r </reason> <answer> paris </answer>"]
    free = gaussian_turn_reward(right, "paris", mu=3)
    once = gaussian_turn_reward(right, "paris", mu=3, search_penalty=0.1)
    per = gaussian_turn_reward(right, "paris", mu=3, search_penalty=0.1, per_call_penalty=True)
    assert free == pytest.approx(1.0)
    assert once == pytest.approx(0.9 * 0.9 + 0.1)
    assert per == pytest.approx(0.9 * 0.81 + 0.1)


def test_penalty_arms_set_only_the_penalty(env, play):
    from icml_dr_mmsearch.config import RewardConfig
    from icml_dr_mmsearch.experiment import ARM_REWARD, ARMS
    from icml_dr_mmsearch.grpo import TrajectoryReward

    assert ARMS["baseline_nopen"] == ARMS["baseline"] and ARMS["gaussian_pen"] == ARMS["gaussian"]
    assert ARM_REWARD == {"baseline_nopen": {"search_penalty": 0.0},
                          "gaussian_pen": {"gaussian_penalty": True}}
    q = env.kb.questions_by_hops(3)[0]
    t = play(env, q, env.gold_responses(q))
    cfg = RewardConfig(per_call_penalty=True)
    base = TrajectoryReward(cfg)([t])[0]
    nopen = TrajectoryReward(RewardConfig(search_penalty=0.0, per_call_penalty=True))([t])[0]
    gpen = TrajectoryReward(RewardConfig(kind="gaussian", gaussian_penalty=True,
                                         per_call_penalty=True))([t])[0]
    gfree = TrajectoryReward(RewardConfig(kind="gaussian", per_call_penalty=True))([t])[0]
    assert nopen == pytest.approx(1.0) and base == pytest.approx(0.9 * 0.9 ** 3 + 0.1)
    assert gfree == pytest.approx(1.0) and gpen == pytest.approx(base)   # at T = mu
