"""A scripted stochastic "LLM" for simulation: it reads the same prompts a real model gets,
answers as each role with seeded errors, and sleeps a token-dependent latency on the loop clock.

Error model (reconstructed, notes section 4): each tool step goes wrong with probability
``eps0 + beta * context_tokens / 1000`` (long contexts err more; wrong arguments come from a
small per-fact distractor set, so wrong answers collide across replicas); the planner drops a
fact with probability ``plan_err * (leaf_subtasks - 1)``; the synthesizer garbles the answer with
probability ``synth_err * n_results``; the judge verifies the right candidate with probability
``judge_skill`` and otherwise picks the most voted one. At temperature 0 a reply depends on the
prompt only, so replicas without other diversity are identical."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import threading
from _random import Random as _CRandom
from asyncio.futures import _set_result_unless_cancelled
from dataclasses import dataclass
from typing import Any

from icml_tipex.chat import Completion, Message, approx_tokens, messages_tokens
from icml_tipex.roles import payload_of, role_of
from icml_tipex.synthgaia import ATTRS, SynthGAIA, Task

_FV = re.compile(r"f(\d+)=(-?\d+)")
_INT = re.compile(r"-?\d+")
_seed = _CRandom.seed


class _LazyRandom:
    """Stands for the reply's ``random.Random`` and seeds it on first use only (hashing the
    prompt and seeding cost more than the rest of a reply; answer steps draw nothing)."""

    __slots__ = ("_args", "_r")

    def __init__(self, model: ScriptedModel, messages: list[Message], temperature: float,
                 seed: int) -> None:
        self._args: tuple[Any, ...] | None = (model, messages, temperature, seed)
        self._r: random.Random | None = None

    def _get(self) -> random.Random:
        if self._r is None:
            model, messages, temperature, seed = self._args  # type: ignore[misc]
            self._r, self._args = model._rng(messages, temperature, seed), None
        return self._r

    def random(self) -> float:
        return self._get().random()

    def randrange(self, *args: int) -> int:
        return self._get().randrange(*args)

    def choice(self, seq: Any) -> Any:
        return self._get().choice(seq)


_M64 = (1 << 64) - 1


class _SplitMix:
    """A counter-based generator (SplitMix64 over the reply's 64-bit key): the ``rng="counter"``
    option. Drawing is a few integer operations and there is no state to seed, against about
    4 us for seeding the Mersenne Twister per reply; its draws differ from ``random.Random``'s,
    so replies (and every result) differ from the default ``rng="mt"``."""

    __slots__ = ("s",)

    def __init__(self, key: int) -> None:
        self.s = key & _M64

    def _next(self) -> int:
        self.s = z = (self.s + 0x9E3779B97F4A7C15) & _M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        return z ^ (z >> 31)

    def random(self) -> float:
        return (self._next() >> 11) * 1.1102230246251565e-16  # 53 bits / 2**53

    def randrange(self, start: int, stop: int | None = None) -> int:
        if stop is None:
            start, stop = 0, start
        n = stop - start
        if n <= 0:
            raise ValueError(f"empty range for randrange({start}, {stop})")
        return start + ((self._next() * n) >> 64)  # multiply-shift: bias below n / 2**64

    def choice(self, seq: Any) -> Any:
        return seq[self.randrange(len(seq))]


RNGS = ("mt", "counter")


@dataclass(frozen=True)
class SimParams:
    """Error and latency parameters of the scripted model."""

    eps0: float = 0.0
    beta: float = 0.27
    plan_err: float = 0.012
    synth_err: float = 0.008
    judge_skill: float = 0.5
    base_latency: float = 0.2     # s per call
    prefill_s: float = 0.0002     # s per prompt token
    decode_s: float = 0.01        # s per completion token

    def __post_init__(self) -> None:
        for k in ("eps0", "beta", "plan_err", "synth_err", "judge_skill", "base_latency",
                  "prefill_s", "decode_s"):
            if getattr(self, k) < 0:
                raise ValueError(f"SimParams.{k}={getattr(self, k)} must be >= 0")


class ScriptedModel:
    """Implements :class:`~icml_tipex.chat.AsyncChatModel` over a :class:`SynthGAIA` suite."""

    virtual_time = True

    def __init__(self, suite: SynthGAIA, params: SimParams | None = None, seed: int = 0,
                 latency_scale: float = 1.0, name: str = "scripted", rng: str = "mt") -> None:
        if rng not in RNGS:
            raise ValueError(f"rng={rng!r} is not one of {RNGS} ('mt': random.Random seeded per "
                             "reply, the default; 'counter': SplitMix64, cheaper, other draws)")
        self.rng = rng
        self.suite, self.p, self.seed, self.name = suite, params or SimParams(), seed, name
        self.latency_scale = latency_scale
        self.calls = 0
        self._last_count: tuple[list[Message], int, int] | None = None
        self._payloads: dict[str, dict[str, Any]] = {}  # read-only parsed prompt payloads
        self._local = threading.local()
        # caches that make a reply cheaper without changing it (bounded; cleared when full)
        self._roles: dict[str, str] = {}                # system prompt -> role
        self._heads: dict[tuple[int, float], bytes] = {}  # (seed, T) -> the key's head
        self._prefix: dict[tuple[bytes, str, str], Any] = {}  # head + system + user hashed
        self._tokens: dict[int, tuple[list[Message], int]] = {}  # id(last msg) -> (chat, n)
        self._plans: dict[tuple[str, int, int], str] = {}  # (task, g, dropped fact) -> JSON

    def count_tokens(self, messages: list[Message]) -> int:
        """``messages_tokens(messages)``, counted incrementally: a worker's next prompt is its
        previous one plus two messages, so the count of the prefix is reused (found by the
        identity of its last message and checked equal to this prompt's head)."""
        last = self._last_count
        k = len(messages)
        if last is not None and last[0] is messages and last[1] == k:
            return last[2]
        n = None
        if k > 2:
            hit = self._tokens.get(id(messages[-3]))
            if hit is not None and len(hit[0]) == k - 2 and hit[0] == messages[:-2]:
                a, b = messages[-2]["content"], messages[-1]["content"]
                n = hit[1] + ((len(a) + 3) // 4 or 1) + ((len(b) + 3) // 4 or 1) + 6
        if n is None:
            n = messages_tokens(messages)
        if k:
            if len(self._tokens) >= 8192:
                self._tokens.clear()
            self._tokens[id(messages[-1])] = (messages, n)
        self._last_count = (messages, k, n)
        return n

    def latency(self, prompt_tokens: int, completion_tokens: int) -> float:
        p = self.p
        return self.latency_scale * (p.base_latency + p.prefill_s * prompt_tokens
                                     + p.decode_s * completion_tokens)

    def _rng(self, messages: list[Message], temperature: float, seed: int) -> random.Random:
        """The reply's generator, seeded by a hash of the model seed, the replica seed (when
        sampling), the temperature and every message. One generator per thread is reseeded
        (the same state as ``random.Random(key)``, at half the cost); with ``rng="counter"``
        a SplitMix64 stream over the same key instead."""
        hk = (seed if temperature > 0 else 0, temperature)
        head = self._heads.get(hk)
        if head is None:
            if len(self._heads) >= 4096:
                self._heads.clear()
            head = self._heads[hk] = f"{self.seed}|{hk[0]}|{temperature}\x00".encode()
        # blake2b(head + "\x00".join(contents)), with the state after head + system + user
        # kept: a worker's steps (and a task's replicas) share those two messages
        if len(messages) >= 2:
            pk = (head, messages[0]["content"], messages[1]["content"])
            pre = self._prefix.get(pk)
            if pre is None:
                if len(self._prefix) >= 4096:
                    self._prefix.clear()
                pre = self._prefix[pk] = hashlib.blake2b(
                    head + (pk[1] + "\x00" + pk[2]).encode(), digest_size=8)
            h = pre.copy()
            if len(messages) > 2:
                h.update(("\x00" + "\x00".join([m["content"] for m in messages[2:]])).encode())
        else:
            h = hashlib.blake2b(head + "\x00".join([m["content"] for m in messages]).encode(),
                                digest_size=8)
        if self.rng == "counter":
            return _SplitMix(int.from_bytes(h.digest(), "little"))  # type: ignore[return-value]
        rng = getattr(self._local, "rng", None)
        if rng is None:
            rng = self._local.rng = random.Random()
        _seed(rng, int.from_bytes(h.digest(), "little"))  # = rng.seed(int): no type checks
        rng.gauss_next = None
        return rng

    def _payload(self, messages: list[Message]) -> dict[str, Any]:
        # a worker's steps (and a task's replicas) share their first user message: parse once
        if len(messages) > 1 and messages[1]["role"] == "user" and messages[0]["role"] != "user":
            text = messages[1]["content"]  # the usual system + user head
        else:
            text = next(m["content"] for m in messages if m["role"] == "user")
        data = self._payloads.get(text)
        if data is None:
            if len(self._payloads) >= 4096:
                self._payloads.clear()
            data = self._payloads[text] = payload_of(messages)
        return data

    def reply(self, messages: list[Message], temperature: float = 0.0, seed: int = 0) -> str:
        """The reply text (no latency): what :meth:`generate` returns."""
        rng = _LazyRandom(self, messages, temperature, seed)  # answer steps draw nothing
        first = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
        role = self._roles.get(first)
        if role is None:
            if len(self._roles) >= 256:
                self._roles.clear()
            role = self._roles[first] = role_of(messages)
        data = self._payload(messages)
        task = self.suite.task(data["task_id"])
        if role == "planner":
            return self._plan(task, int(data["max_subtasks"]), rng)
        if role == "worker":
            return self._work(task, data, messages, rng)
        if role == "synthesizer":
            return self._synth(data, rng)
        if role == "judge":
            return self._judge(task, data, rng)
        raise ValueError(f"the scripted model does not know the role {role!r}")

    async def generate(self, messages: list[Message], *, temperature: float = 0.0,
                       seed: int = 0, max_tokens: int = 256) -> Completion:
        text = self.reply(messages, temperature, seed)
        n_in, n_out = self.count_tokens(messages), approx_tokens(text)
        finish = "stop"
        if n_out > max_tokens:
            text, n_out, finish = text[:4 * max_tokens], max_tokens, "length"
        self.calls += 1
        dt = self.latency(n_in, n_out)
        if dt > 0:  # asyncio.sleep(dt) inlined: the same future and timer, one frame fewer
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            h = loop.call_later(dt, _set_result_unless_cancelled, fut, None)
            try:
                await fut
            finally:
                h.cancel()
        return Completion(text, n_in, n_out, finish)

    # -- roles -------------------------------------------------------------------------------
    def _plan(self, task: Task, g: int, rng: random.Random) -> str:
        facts = list(range(len(task.facts)))
        n_leaf = min(g, len(facts))
        dropped = -1
        if rng.random() < self.p.plan_err * (n_leaf - 1):
            dropped = rng.randrange(len(facts))
            facts.pop(dropped)  # mis-decomposition: a fact is forgotten
        key = (task.task_id, g, dropped)
        text = self._plans.get(key)  # the same plan for every replica that draws the same
        if text is None:
            if len(self._plans) >= 4096:
                self._plans.clear()
            text = self._plans[key] = self._plan_json(task, g, facts)
        return text

    @staticmethod
    def _plan_json(task: Task, g: int, facts: list[int]) -> str:
        steps = sum(2 if task.facts[i].query else 1 for i in facts)
        subs: list[dict[str, Any]] = []
        leaves: list[str] = []
        if steps <= g:
            for i in facts:
                f = task.facts[i]
                deps: list[str] = []
                if f.query:
                    sid = f"s{len(subs) + 1}"
                    subs.append({"id": sid, "goal": f"search the {f.query}", "tool": "search",
                                 "deps": [], "facts": [i], "step": "search"})
                    deps = [sid]
                sid = f"s{len(subs) + 1}"
                subs.append({"id": sid, "goal": f"look up the {f.attr} of "
                             + ("the search result" if f.query else f.entity),
                             "tool": "lookup", "deps": deps, "facts": [i], "step": "lookup"})
                leaves.append(sid)
        else:
            groups = [facts[j::g] for j in range(g)]
            for grp in (x for x in groups if x):
                sid = f"s{len(subs) + 1}"
                what = ", ".join(f"the {task.facts[i].attr} of "
                                 + (f"the {task.facts[i].query}" if task.facts[i].query
                                    else task.facts[i].entity) for i in grp)
                subs.append({"id": sid, "goal": f"find {what}", "tool": "lookup", "deps": [],
                             "facts": grp, "step": "fact"})
                leaves.append(sid)
        subs.append({"id": "c", "goal": "combine the values as the task says", "tool": "calc",
                     "deps": leaves, "step": "combine"})
        return json.dumps({"subtasks": subs})

    def _eps(self, messages: list[Message]) -> float:
        return self.p.eps0 + self.p.beta * self.count_tokens(messages) / 1000

    def _work(self, task: Task, data: dict[str, Any], messages: list[Message],
              rng: random.Random) -> str:
        script = data.get("\x00script")
        if script is None:  # what this subtask's prompt asks for, parsed once per prompt
            script = data["\x00script"] = self._script(task, data)
        step, actions, parent_vals, parent = script
        results = [m["content"].removeprefix("RESULT: ").strip() for m in messages[2:]
                   if m["role"] == "user"]
        done = len(results)
        values = dict(parent_vals)  # = _values(actions, results, parents)
        for (kind, i), r in zip(actions, results):
            if kind.startswith("lookup"):
                values[i] = r
        if done < len(actions):
            return self._action(task, actions[done], results, values, rng,
                                rng.random() < self._eps(messages), parent)
        if step == "search":
            return f"ANSWER: {results[0]}"
        if step in ("combine", "all"):
            return f"ANSWER: {results[-1]}"
        return "ANSWER: " + "; ".join(f"f{i}={values[i]}" for i in sorted(values))

    @staticmethod
    def _script(task: Task, data: dict[str, Any]
                ) -> tuple[str, list[tuple[str, int]], dict[int, str], str]:
        """A worker prompt's step kind, its tool actions, the fact values its parents found,
        and the first parent's result."""
        sub = data["subtask"]
        step = sub.get("step", "all")
        facts = sub.get("facts", list(range(len(task.facts))))
        if step == "search":
            actions = [("search", facts[0])]
        elif step == "lookup":
            kind = "lookup_from_parent" if task.facts[facts[0]].query else "lookup"
            actions = [(kind, facts[0])]
        elif step == "combine":
            actions = [("calc", -1)]
        else:  # "fact" or "all" (the bare agent): every fact, then the sum for "all"
            actions = []
            for i in facts:
                if task.facts[i].query:
                    actions.append(("search", i))
                    actions.append(("lookup_from_prev", i))
                else:
                    actions.append(("lookup", i))
            if step == "all":
                actions.append(("calc", -1))
        parents = data.get("parents", {})
        parent_vals: dict[int, str] = {}
        for p in parents.values():
            parent_vals.update((int(i), v) for i, v in _FV.findall(p))
        return step, actions, parent_vals, str(next(iter(parents.values()), ""))

    def _action(self, task: Task, action: tuple[str, int], results: list[str],
                values: dict[int, str], rng: random.Random, err: bool, parent: str) -> str:
        kind, i = action
        if kind == "calc":
            vals = {k: v for k, v in values.items() if _INT.fullmatch(v)}
            expr = task.expression(vals)
            if err and len(vals) > 1:  # a flipped sign
                terms = expr.split(" ")
                j = 2 * rng.randrange(1, len(vals))
                if j - 1 < len(terms):
                    terms[j - 1] = "-" if terms[j - 1] == "+" else "+"
                expr = " ".join(terms)
            return f"CALL calc({expr})"
        f = task.facts[i]
        if kind == "search":
            anchor = rng.choice(f.distractors) if err else f.anchor
            return f"CALL search(sister city of {anchor})"
        attr = f.attr
        if kind == "lookup":
            ent = rng.choice(f.distractors) if err else f.entity
        else:
            ent = results[-1] if kind == "lookup_from_prev" else parent
            if err:
                attr = ATTRS[(ATTRS.index(f.attr) + 1) % len(ATTRS)]
        return f"CALL lookup({ent}, {attr})"

    def _synth(self, data: dict[str, Any], rng: random.Random) -> str:
        results = data["results"]
        final = str(results.get(data["final"], ""))
        if _INT.fullmatch(final) and rng.random() < self.p.synth_err * len(results):
            final = str(int(final) + rng.choice((10, -10)))
        return f"FINAL ANSWER: {final}"

    def _judge(self, task: Task, data: dict[str, Any], rng: random.Random) -> str:
        cands, votes = data["candidates"], data["votes"]
        if task.answer in cands and rng.random() < self.p.judge_skill:
            return f"CHOICE: {cands.index(task.answer) + 1}"
        best = max(range(len(cands)), key=lambda k: (votes[k], -k))
        return f"CHOICE: {best + 1}"
