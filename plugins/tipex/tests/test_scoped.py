"""The scoped constrained vocabulary (``vocab="scoped"``, 0.3.3) and ``tool_first="first"``:
the plan's structure read from the question's wording (one leaf per listed item, a combining
subtask), worker arguments scoped to the worker's own subtask, no call made twice, the bare
agent walking the same items, and label-blindness: nothing a grammar admits comes from the
gold (the answer, the facts' entities behind a search, the distractors)."""

from __future__ import annotations

import pytest
import regex
from icml_tipex import roles
from icml_tipex.constrain import (
    COMBINE_GOAL,
    SYNTHGAIA_TOOLS,
    ContextVocab,
    grammar_for,
    question_items,
)
from icml_tipex.plan import Subtask, parse_plan
from icml_tipex.runner import ExecutionConfig, TipexRunner


def _rx(messages, tool_first="first", max_tokens=768):
    return regex.compile(grammar_for(messages, SYNTHGAIA_TOOLS, max_tokens, tool_first,
                                     "scoped"))

def _level2(suite):
    task = suite.tasks(2, 1)[0]
    direct = next(f for f in task.facts if not f.query)
    searched = next(f for f in task.facts if f.query)
    return task, direct, searched

def test_question_items_read_the_wording_only() -> None:
    assert question_items("Compute the area of A plus the age of B minus the age of C.") == [
        "Compute the area of A", "the age of B", "the age of C"]
    assert question_items("Name x, y and z?") == ["Name x", "y", "z"]
    assert question_items("What is the capital of Foo?") == ["What is the capital of Foo"]

def test_the_scoped_plan_has_one_leaf_per_item_and_a_combining_subtask(suite) -> None:
    task, _, _ = _level2(suite)
    items = question_items(task.question)
    assert len(items) == len(task.facts)  # SynthGAIA lists one item per fact
    rx = _rx(roles.planner_messages(task.task_id, task.question, 6))
    k = len(items)
    subs = [{"id": f"s{i + 1}", "goal": x, "tool": "lookup", "deps": []}
            for i, x in enumerate(items)]
    subs.append({"id": f"s{k + 1}", "goal": COMBINE_GOAL, "tool": "calc",
                 "deps": [f"s{i + 1}" for i in range(k)]})

    def text(ss):
        return '{"subtasks": [' + ", ".join(
            '{{"id": "{}", "goal": "{}", "tool": "{}", "deps": [{}]}}'.format(
                s["id"], s["goal"], s["tool"], ", ".join(f'"{d}"' for d in s["deps"]))
            for s in ss) + "]}"

    ok = text(subs)
    assert rx.fullmatch(ok)
    plan = parse_plan(ok, tools=suite.tools(), max_subtasks=7)
    assert plan.width() == k
    assert rx.fullmatch(text(subs[:-1])) is None  # no combining subtask
    assert rx.fullmatch(text(subs[1:])) is None  # an item left out
    swapped = [dict(s) for s in subs]
    swapped[0]["goal"], swapped[1]["goal"] = swapped[1]["goal"], swapped[0]["goal"]
    assert rx.fullmatch(text(swapped)) is None  # items in the question's order
    # the model picks each tool
    assert rx.fullmatch(ok.replace('"lookup"', '"search"', 1))
    # a granularity below the item count: 0.3.2's context grammar instead
    small = grammar_for(roles.planner_messages(task.task_id, task.question, 2),
                        SYNTHGAIA_TOOLS, 768, "first", "scoped")
    assert small == grammar_for(roles.planner_messages(task.task_id, task.question, 2),
                                SYNTHGAIA_TOOLS, 768, "first", "context")

def test_a_worker_draws_names_from_its_own_subtask(suite) -> None:
    task, direct, searched = _level2(suite)
    goal = f"the {direct.attr} of {direct.entity}"
    msgs = roles.worker_messages(task.task_id, task.question,
                                 Subtask("s2", goal, tool="search"), {})
    cv = ContextVocab.of(msgs, "subtask")
    assert cv.names == [direct.entity]
    rx = _rx(msgs)
    assert rx.fullmatch(f"CALL lookup({direct.entity}, {direct.attr})")
    assert rx.fullmatch(f"CALL search({searched.anchor})") is None  # another item's name
    assert rx.fullmatch("ANSWER: 5") is None  # `first`: some tool first
    # a number came back: the subtask answers with what it has seen
    num = msgs + [{"role": "assistant", "content": f"CALL lookup({direct.entity}, "
                   f"{direct.attr})"}, {"role": "user", "content": "RESULT: 512"}]
    rx = _rx(num)
    assert rx.fullmatch("ANSWER: 512") and rx.fullmatch("CALL search(x)") is None
    assert rx.fullmatch(f"ANSWER: {task.answer}") is None or task.answer == "512"
    # a name came back (a search's entity): it may look it up, but not repeat the call
    sgoal = f"the {searched.attr} of the {searched.query}"
    s_msgs = roles.worker_messages(task.task_id, task.question,
                                   Subtask("s1", sgoal, tool="search"), {})
    s_msgs = s_msgs + [{"role": "assistant", "content": f"CALL search({searched.query})"},
                       {"role": "user", "content": f"RESULT: {searched.entity}"}]
    rx = _rx(s_msgs)
    assert rx.fullmatch(f"CALL lookup({searched.entity}, {searched.attr})")
    assert rx.fullmatch(f"CALL search({searched.query})") is None  # made already
    assert rx.fullmatch(f"ANSWER: {searched.entity}")

def test_the_combining_subtask_uses_each_parent_once_in_order(suite) -> None:
    task, _, _ = _level2(suite)
    msgs = roles.worker_messages(task.task_id, task.question,
                                 Subtask("s3", COMBINE_GOAL, ("s1", "s2"), tool="calc"),
                                 {"s1": "512", "s2": "40"})
    rx = _rx(msgs)
    for ok in ("CALL calc(512 - 40)", "CALL calc(512 + 40)"):
        assert rx.fullmatch(ok), ok
    for bad in ("CALL calc(40 - 512)", "CALL calc(512)", "CALL calc(512 - 40 + 40)",
                f"CALL lookup({task.facts[0].entity}, area)", "ANSWER: 512"):
        assert rx.fullmatch(bad) is None, bad
    synth = roles.synth_messages(task.task_id, task.question,
                                 {"s1": "512", "s2": "40", "s3": "472"}, "s3")
    sx = _rx(synth)
    assert sx.fullmatch("FINAL ANSWER: 472") and not sx.fullmatch("FINAL ANSWER: 512")

def test_the_bare_agent_walks_the_same_items(suite) -> None:
    task = suite.tasks(1, 1)[0]
    a, b = task.facts
    msgs = roles.worker_messages(task.task_id, task.question,
                                 Subtask("agent", task.question, meta={"step": "all"}), {})
    rx = _rx(msgs)
    assert rx.fullmatch(f"CALL lookup({a.entity}, {a.attr})")
    assert rx.fullmatch(f"CALL lookup({b.entity}, {b.attr})") is None  # item 2 comes later
    step = msgs + [{"role": "assistant", "content": f"CALL lookup({a.entity}, {a.attr})"},
                   {"role": "user", "content": "RESULT: 300"}]
    rx = _rx(step)
    assert rx.fullmatch(f"CALL lookup({b.entity}, {b.attr})")
    assert rx.fullmatch(f"CALL lookup({a.entity}, {a.attr})") is None
    assert rx.fullmatch("ANSWER: 300") is None and rx.fullmatch("CALL calc(300)") is None
    step = step + [{"role": "assistant", "content": f"CALL lookup({b.entity}, {b.attr})"},
                   {"role": "user", "content": "RESULT: 45"}]
    rx = _rx(step)
    assert rx.fullmatch("CALL calc(300 - 45)") and rx.fullmatch("CALL calc(300 + 45)")
    assert rx.fullmatch("CALL calc(45 - 300)") is None and rx.fullmatch("ANSWER: 300") is None
    step = step + [{"role": "assistant", "content": "CALL calc(300 - 45)"},
                   {"role": "user", "content": "RESULT: 255"}]
    rx = _rx(step)
    assert rx.fullmatch("ANSWER: 255") and rx.fullmatch("ANSWER: 300") is None

def test_the_scoped_decoder_never_sees_the_gold(suite) -> None:
    """Every grammar is a function of the chat's visible text: the same chats for a task whose
    gold (answer, facts, distractors, task id) is replaced give the same grammars, and no
    grammar of the first replies admits the gold answer or a distractor."""
    import dataclasses

    for lvl in (1, 2, 3):
        for task in suite.tasks(lvl, 3):
            fake = dataclasses.replace(task, task_id="other", answer="999999", facts=(),
                                       signs=())
            for t in (task, fake):
                chats = [roles.planner_messages(t.task_id, t.question, 6),
                         roles.worker_messages(t.task_id, t.question,
                                               Subtask("agent", t.question), {}),
                         roles.worker_messages(t.task_id, t.question,
                                               Subtask("s1", question_items(t.question)[0],
                                                       tool="lookup"), {})]
                grams = [grammar_for(c, SYNTHGAIA_TOOLS, 768, "first", "scoped")
                         for c in chats]
                if t is task:
                    first = grams
                else:
                    assert grams == first
            for g in first:
                rx = regex.compile(g)
                assert task.answer not in g or task.answer in task.question
                for f in task.facts:
                    for d in f.distractors:
                        assert rx.fullmatch(f"CALL lookup({d}, {f.attr})") is None
                    if f.query:  # the entity behind a search is not shown before it
                        assert f.entity not in g

@pytest.mark.parametrize("temperature, seed", [(0.0, 0), (1.0, 3)])
def test_a_random_model_runs_the_scoped_protocol(suite, temperature, seed) -> None:
    """The tiny random Llama, scoped and ``first``: every DAG plan is the item plan (parses,
    one leaf per fact, a combining subtask), every path ends with an answer or at the step
    limit (a random model may wander), never with a protocol error."""
    from icml_tipex.hf import load_chat_model

    m = load_chat_model("tiny", constrained=True, tool_first="first", vocab="scoped")
    runner = TipexRunner(m, suite.tools(), clock="wall")
    task = suite.tasks(1, 1)[0]
    for planner in ("dag", "chain"):
        cfg = ExecutionConfig(n_replicas=1, width=4, granularity=2, planner=planner,
                              temperature=temperature, seed=seed, max_tokens=400,
                              max_worker_steps=8, max_inflight=None)
        res = runner.run([task], cfg, trace=True)[0]
        p = res.replicas[0]
        assert p.status == "ok" or "max_worker_steps" in (p.error or ""), p.error
        if planner == "dag":
            plan = next(e for e in res.trace.events if e["kind"] == "plan")
            assert len(plan["subtasks"]) == len(task.facts) + 1
