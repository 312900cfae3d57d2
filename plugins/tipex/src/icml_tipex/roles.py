"""The four roles of one solution path (planner, worker with tools, synthesizer) and the LLM
judge: each builds its chat prompt and parses the reply. They call the model only through the
``call`` coroutine the runner hands them, which applies the shared limits and records the trace."""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from icml_tipex.chat import Completion, Message
from icml_tipex.plan import Plan, Subtask, parse_plan

Call = Callable[[str, str, list[Message]], Awaitable[Completion]]
ToolRunner = Callable[[str, str, str, list[str]], Awaitable[str]]

TOOL_DOC = ("lookup(entity, attr) -> the attribute's value; search(query) -> an entity name; "
            "calc(expr) -> the value of an arithmetic expression")

PLANNER_SYSTEM = (
    "ROLE: planner\nBreak the task into independent subtasks that workers with tools solve in "
    "parallel, followed by one final subtask that combines their results. Reply with JSON only: "
    '{"subtasks": [{"id": "s1", "goal": "...", "tool": "lookup", "deps": []}, ...]}. '
    "deps lists the ids whose results a subtask needs; tool is lookup, search, calc or null.")
WORKER_SYSTEM = (
    "ROLE: worker\nSolve the subtask. To use a tool reply with exactly one line "
    "CALL tool(arguments); you then get RESULT: ... . When done reply ANSWER: <result>.")
SYNTH_SYSTEM = ("ROLE: synthesizer\nCombine the subtask results into the final answer to the "
                "task. Reply FINAL ANSWER: <answer>.")
JUDGE_SYSTEM = ("ROLE: judge\nSeveral agents answered the task. Pick the correct answer. Reply "
                "CHOICE: <number>.")

_CALL = re.compile(r"CALL\s+([A-Za-z_]\w*)\s*\((.*)\)\s*$", re.S | re.M)
_ANSWER = re.compile(r"ANSWER:\s*(.*)", re.S)
_FINAL = re.compile(r"FINAL ANSWER:\s*(.*)", re.S)
_CHOICE = re.compile(r"CHOICE:\s*(\d+)")


_ENCODE = json.JSONEncoder(sort_keys=True).encode  # = json.dumps(data, sort_keys=True), one
# encoder for all prompts instead of a new one per call


def _payload(data: Mapping[str, Any]) -> str:
    return "```json\n" + _ENCODE(data) + "\n```"


def payload_of(messages: list[Message]) -> dict[str, Any]:
    """The structured block of a prompt's first user message (what a scripted model reads)."""
    text = next(m["content"] for m in messages if m["role"] == "user")
    start = text.rindex("```json\n") + 8
    return json.loads(text[start:text.rindex("\n```")])


def role_of(messages: list[Message]) -> str:
    first = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    return first.split("\n", 1)[0].removeprefix("ROLE: ").strip()


@functools.lru_cache(maxsize=1024)  # every replica of a task asks the planner the same
def _planner_user(task_id: str, question: str, max_subtasks: int) -> str:
    return (f"Task: {question}\nTools: {TOOL_DOC}\nUse at most {max_subtasks} subtasks before "
            f"the combining one.\n"
            + _payload({"task_id": task_id, "question": question, "max_subtasks": max_subtasks}))


def planner_messages(task_id: str, question: str, max_subtasks: int) -> list[Message]:
    user = _planner_user(task_id, question, max_subtasks)
    return [{"role": "system", "content": PLANNER_SYSTEM}, {"role": "user", "content": user}]


async def plan(call: Call, task_id: str, question: str, granularity: int,
               tools: Mapping[str, Any]) -> Plan:
    """Ask the planner for a DAG; raises :class:`~icml_tipex.plan.PlanError` if unusable."""
    c = await call("planner", "plan", planner_messages(task_id, question, granularity))
    key = (c.text, tuple(tools), granularity)
    p = _PLANS.get(key)
    if p is None:  # replicas often get the same plan text: parse and validate it once
        p = parse_plan(c.text, tools=tools, max_subtasks=granularity + 1)  # raises if unusable
        if len(_PLANS) >= 1024:
            _PLANS.clear()
        _PLANS[key] = p
    return p


_PLANS: dict[tuple[str, tuple[str, ...], int], Plan] = {}  # plans are immutable


def worker_messages(task_id: str, question: str, sub: Subtask,
                    parents: Mapping[str, str]) -> list[Message]:
    ptxt = "; ".join(f"{k}: {v}" for k, v in parents.items()) or "none"
    user = (f"Task: {question}\nSubtask {sub.id}: {sub.goal}\nResults of earlier subtasks: "
            f"{ptxt}\nTools: {TOOL_DOC}\n"
            + _payload({"task_id": task_id, "subtask": sub.to_dict(), "parents": dict(parents)}))
    return [{"role": "system", "content": WORKER_SYSTEM}, {"role": "user", "content": user}]


_ARITY: dict[Any, int] = {}


def _arity(fn: Callable[..., Any]) -> int:
    n = _ARITY.get(fn)
    if n is None:
        try:
            n = max(1, len(inspect.signature(fn).parameters))
        except (TypeError, ValueError):
            n = 1
        if len(_ARITY) < 4096:
            _ARITY[fn] = n
    return n


def parse_call(text: str, tools: Mapping[str, Any]) -> tuple[str, list[str]] | None:
    """``CALL name(a, b)`` -> (name, args) split to the tool's arity; None if no call."""
    m = _CALL.search(text)
    if not m:
        return None
    name, argstr = m.group(1), m.group(2)
    n = _arity(tools[name]) if name in tools else 1
    args = [a.strip().strip("'\"") for a in argstr.split(",", n - 1)] if argstr.strip() else []
    return name, args


async def work(call: Call, run_tool: ToolRunner, tools: Mapping[str, Any], task_id: str,
               question: str, sub: Subtask, parents: Mapping[str, str], max_steps: int) -> str:
    """A ReAct loop: the model calls tools until it answers (or ``max_steps`` model calls)."""
    messages = worker_messages(task_id, question, sub, parents)
    for _ in range(max_steps):
        c = await call("worker", sub.id, messages)
        text = c.text.strip()
        tc = parse_call(text, tools)
        if tc is None:
            m = _ANSWER.search(text)
            return (m.group(1) if m else text).strip()
        result = await run_tool(sub.id, tc[0], text, tc[1])
        messages = messages + [{"role": "assistant", "content": text},
                               {"role": "user", "content": f"RESULT: {result}"}]
    raise RuntimeError(f"worker on subtask {sub.id!r} made {max_steps} model calls without an "
                       "ANSWER (raise max_worker_steps)")


def synth_messages(task_id: str, question: str, results: Mapping[str, str],
                   final: str) -> list[Message]:
    rtxt = "\n".join(f"{k}: {v}" for k, v in results.items())
    user = (f"Task: {question}\nSubtask results:\n{rtxt}\n"
            + _payload({"task_id": task_id, "results": dict(results), "final": final}))
    return [{"role": "system", "content": SYNTH_SYSTEM}, {"role": "user", "content": user}]


async def synthesize(call: Call, task_id: str, question: str, plan_: Plan,
                     results: Mapping[str, str]) -> str:
    """The path's answer from every subtask result (``final`` names the plan's last sink)."""
    children = plan_.children()
    sinks = [s.id for s in plan_.subtasks if not children[s.id]]
    ordered = {v: results[v] for v in plan_.topological()}
    c = await call("synthesizer", "synth", synth_messages(task_id, question, ordered, sinks[-1]))
    m = _FINAL.search(c.text)
    return (m.group(1) if m else c.text).strip()


def judge_messages(task_id: str, question: str, candidates: list[str],
                   votes: list[int]) -> list[Message]:
    lines = "\n".join(f"{i + 1}. {a} ({v} votes)" for i, (a, v) in
                      enumerate(zip(candidates, votes)))
    user = (f"Task: {question}\nCandidate answers:\n{lines}\n"
            + _payload({"task_id": task_id, "candidates": candidates, "votes": votes}))
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def parse_choice(text: str, n: int) -> int | None:
    """The 0-based candidate index of ``CHOICE: k``; None if missing or out of range."""
    m = _CHOICE.search(text)
    if not m or not 1 <= int(m.group(1)) <= n:
        return None
    return int(m.group(1)) - 1
