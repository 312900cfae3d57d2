"""Agent metrics on hand-built trajectories (closed forms)."""

import math

import pytest
from icml_dr_mmsearch.metrics import agent_metrics, diverse_rate

IMG = "<reason> r </reason> <search><img></search>"


def test_diverse_rate_closed_form():
    # group 0: rewards (1, 1, 0.1, 0.1) with turns (1, 4, 1, 1): rows 0, 1 differ in length
    # under the same reward; rows 2, 3 share reward and length -> 2 of 4
    assert diverse_rate([1, 1, 0.1, 0.1], [1, 4, 1, 1], [0] * 4) == 0.5
    # the same rows split into two groups: no pair of the same group matches
    assert diverse_rate([1, 1, 0.1, 0.1], [1, 4, 1, 1], [0, 1, 0, 1]) == 0.0
    assert math.isnan(diverse_rate([], [], []))
    with pytest.raises(ValueError):
        diverse_rate([1], [1, 2], [0])


def test_agent_metrics_on_played_trajectories(env, kb, play):
    q1, q3 = kb.questions_by_hops(1)[0], kb.questions_by_hops(3)[0]
    wrong = "<reason> r </reason> <answer> nobody </answer>"
    trajs = [
        play(env, q1, env.gold_responses(q1)),                       # 1-hop, direct, right
        play(env, q3, env.gold_responses(q3), group=1),              # 3-hop gold: 4 turns
        play(env, q3, [wrong], group=1),                             # collapse + premature
        play(env, q3, [IMG, wrong], group=1),                        # premature
        play(env, q3, [f"<reason> r </reason> <text_search> {q3.gold_queries[0]} "
                       "</text_search>"] * 2 + [wrong], group=1),    # redundant
    ]
    m = agent_metrics(trajs, [1.0, 0.91, 0.1, 0.1, 0.1])
    assert m["accuracy_hop1"] == 1.0 and m["accuracy_hop3"] == 0.25
    assert m["turns_hop3"] == pytest.approx((4 + 1 + 2 + 3) / 4)
    assert m["collapse_rate"] == 0.25
    assert m["premature_rate"] == 0.75   # the 3 wrong answers searched < 3 times; gold did not
    assert m["redundant_rate"] == pytest.approx(1 / 5)
    # group 1: three rewards 0.1 with turns 1, 2, 3 -> all three diverse; the 0.91 one not
    assert m["diverse_rate"] == pytest.approx(3 / 5)
    with pytest.raises(ValueError, match="no trajectories"):
        agent_metrics([])
