"""The structured fast path for simulated models: the model receives what a call is about
(task, role, subtask, step, replica seed) instead of a rendered chat, and returns what the
runner needs (a plan, a tool action, an answer, a choice) with its token counts and latency.
No prompt is rendered, counted or hashed per call; the text a real model would see is rendered
lazily, only on request (:meth:`StructuredModel.messages`).

:class:`StructuredModel` is the scripted model of :mod:`icml_tipex.scripted` (same roles, same
error model, same token counts, same latencies) with one difference: its random draws come from
a counter-based generator (SplitMix64) keyed by ``(model seed, replica seed when T > 0, T, task,
role/subtask, step)`` instead of a hash of the whole prompt. So its replies differ draw by draw
from ``ScriptedModel``'s (same distributions), and without errors (all error rates 0) they are
identical, tokens and latencies included (tested).

Token counts are the text path's, computed without rendering: a worker's prompt is its head
(system + first user message, whose length is the rendering without parent results plus the
exact length the parent results add to the prose and to the JSON block) plus, per step, the
assistant reply and the ``RESULT:`` message, counted as :func:`~icml_tipex.chat.messages_tokens`
counts them. Results that JSON would escape fall back to rendering.

Both engines run this model: the asyncio runner (``TipexRunner`` with a structured model) and
the discrete-event engine (:mod:`icml_tipex.des`); they call the same methods in the same
order, so a run is the same on both wherever no two events of different replicas fall at the
same virtual time (``tie_jitter`` makes sure of that in the equality tests)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from icml_tipex import roles
from icml_tipex.chat import Message, messages_tokens
from icml_tipex.plan import Plan, PlanError, Subtask, parse_plan
from icml_tipex.scripted import _FV, _INT, _M64, ScriptedModel, SimParams, _SplitMix
from icml_tipex.synthgaia import SynthGAIA, Task, _calc_cached

CALL, ANSWER = 0, 1  # worker reply kinds
FAULTS = ("raise", "hang")
_CACHE = 1 << 16  # entries per cache before it is cleared (bounded memory)
_M61, _M53, _U53 = (1 << 61) - 1, (1 << 53) - 1, 2.0 ** -53
_NSC = 1024
_new = object.__new__


class InjectedFault(RuntimeError):
    """The error a structured model's ``"raise"`` fault raises."""


def _h64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


_SC = [_h64(f"step {i}") & ((1 << 61) - 1) for i in range(_NSC + 1)]  # per-step constants
_SCP = [(_SC[i], _SC[i + 1]) for i in range(_NSC)]


def _step_key(kb: int, step: int) -> int:
    """The draws' key of step ``step`` under base key ``kb``: a tuple hash (fast in C; its
    first 53 bits are the step's first uniform draw, the rest come from SplitMix64 over it)."""
    if step < _NSC:
        return hash((kb ^ _SC[step], _SC[step + 1])) & _M64
    return hash((kb ^ _h64(f"step {step}"), step)) & _M64


def _wkey(w: WorkerState, step: int) -> int:
    """The draws' key of a worker's step ``step``, unmasked as the hot path computes it."""
    if step < _NSC:
        a, b = _SCP[step]
        return hash((w.kbase ^ a, b))
    return _step_key(w.kbase, step)


def _tok(n_chars: int) -> int:  # approx_tokens by length
    return (n_chars + 3) // 4 or 1


def _arity2(entity: str, attr: str) -> str:  # lookup's arity, for roles.parse_call
    return ""


def _arity1(arg: str) -> str:
    return ""


_ARITY = {"lookup": _arity2, "search": _arity1, "calc": _arity1}  # SynthGAIA's tool arities


def _plain(s: str) -> bool:
    """True if JSON writes ``s`` as ``"s"`` (no escapes), so its length is ``len(s) + 2``."""
    return s.isascii() and s.isprintable() and '"' not in s and "\\" not in s


def _fixed(task: Task, action: tuple[str, int]
           ) -> tuple[str, tuple[str, list[str]], int] | None:
    """The right reply to a tool step that does not depend on earlier results (search, or
    lookup of a named entity): (text, (tool, args), completion tokens); None otherwise."""
    kind, i = action
    if kind == "search":
        q = f"sister city of {task.facts[i].anchor}"
        text = f"CALL search({q})"
        return text, ("search", [q]), (len(text) + 3) >> 2
    if kind == "lookup":
        f = task.facts[i]
        ent = f.entity
        if "," in ent or "\n" in ent or ent.strip().strip("'\"") != ent:
            return None
        text = f"CALL lookup({ent}, {f.attr})"
        return text, ("lookup", [ent, f.attr]), (len(text) + 3) >> 2
    return None


class WorkerState:
    """One worker's ReAct loop on one subtask: its script (what the subtask asks for), the
    values found so far, the tool results, and the prompt's token count so far."""

    __slots__ = ("task", "step", "actions", "values", "parent", "results", "ctx", "seed",
                 "kbase", "fixed", "lookups", "akind")

    def observe(self, text: str, result: str) -> None:
        """The worker's reply ``text`` and the tool's ``result`` join its context (the model
        reads the result stripped, as the text path's ``RESULT:`` parser does)."""
        results = self.results
        r = result.strip()
        results.append(r)
        n = len(results)
        if n <= len(self.actions):
            kind, i = self.actions[n - 1]
            if kind[0] == "l":  # lookup*
                self.values[i] = r
        self.ctx += ((len(text) + 3) >> 2 or 1) + ((len(result) + 11) >> 2) + 6


class StructuredModel(ScriptedModel):
    """The scripted model on the structured fast path (see the module docstring).

    ``tie_jitter``: adds up to this many seconds to each call's latency, a fixed amount per
    (replica seed, role/subtask, step), so that no two replicas' events coincide (0: off, the
    default; the engines' equality tests use it). ``faults``: role -> "raise" (the call fails
    at once) or "hang" (the call never returns; only a timeout ends it), optionally only for
    the replica seeds in ``fault_seeds``."""

    structured = True

    # the latency's constants, kept with the attributes they come from (the hot path reads one
    # tuple): ``latency_scale * (base_latency + prefill_s * pt + decode_s * ct)``
    @property
    def latency_scale(self) -> float:
        return self._ls

    @latency_scale.setter
    def latency_scale(self, v: float) -> None:
        self._ls = v
        self._latc_update()

    @property
    def p(self) -> SimParams:
        return self._p

    @p.setter
    def p(self, v: SimParams) -> None:
        self._p = v
        self._latc_update()

    def _latc_update(self) -> None:
        p, ls = self.__dict__.get("_p"), self.__dict__.get("_ls")
        if p is not None and ls is not None:
            self._latc = (ls, p.base_latency, p.prefill_s, p.decode_s, p.eps0, p.beta)

    def __init__(self, suite: SynthGAIA, params: SimParams | None = None, seed: int = 0,
                 latency_scale: float = 1.0, name: str = "scripted-structured",
                 tie_jitter: float = 0.0, faults: Mapping[str, str] | None = None,
                 fault_seeds: Iterable[int] | None = None) -> None:
        super().__init__(suite, params, seed, latency_scale, name, rng="counter")
        if tie_jitter < 0:
            raise ValueError(f"tie_jitter={tie_jitter} must be >= 0")
        self.tie_jitter = tie_jitter
        self.faults = dict(faults or {})
        for role, action in self.faults.items():
            if action not in FAULTS:
                raise ValueError(f"faults[{role!r}]={action!r}: choose one of {FAULTS}")
        self.fault_seeds = None if fault_seeds is None else frozenset(fault_seeds)
        self._tkey: dict[str, int] = {}
        self._skey: dict[str, int] = {}
        self._hkey: dict[tuple[int, float], int] = {}
        self._splans: dict[tuple[str, int, int, tuple[str, ...]], tuple[Plan, str, int]] = {}
        self._ptok: dict[tuple[str, int], int] = {}
        self._wsys = _tok(len(roles.WORKER_SYSTEM))
        self._whead: dict[int, tuple[Subtask, int, str, tuple[Any, ...]]] = {}
        self._wpar: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._exprs: dict[tuple[Any, ...], str] = {}
        self._shead: dict[str, int] = {}
        self._psinks: dict[int, tuple[Plan, list[str], str]] = {}
        self._ssys = _tok(len(roles.SYNTH_SYSTEM))
        self._agents: dict[str, Subtask] = {}

    def agent_subtask(self, task: Task) -> Subtask:
        """The bare agent's one subtask (``planner="chain"``), one object per task."""
        a = self._agents.get(task.task_id)
        if a is None:
            if len(self._agents) >= _CACHE:
                self._agents.clear()
            a = self._agents[task.task_id] = Subtask("agent", task.question,
                                                     meta={"step": "all"})
        return a

    # -- keys, draws, latency -------------------------------------------------------------------
    def base_key(self, task_id: str, what: str, seed: int, temperature: float) -> int:
        """The key of one (task, role or subtask, replica seed when T > 0, T): a tuple hash of
        three cached 61-bit digests (CPython hashes ints, and tuples of them, the same in
        every process: no PYTHONHASHSEED)."""
        t = self._tkey.get(task_id)
        if t is None:
            t = self._tkey[task_id] = _h64(f"{self.seed}|{task_id}") & _M61
        s = self._skey.get(what)
        if s is None:
            s = self._skey[what] = _h64(what) & _M61
        hk = (seed if temperature > 0 else 0, temperature)
        h = self._hkey.get(hk)
        if h is None:
            h = self._hkey[hk] = _h64(f"{hk[0]}|{temperature}") & _M61
        return hash((t, s, h))

    def key(self, task_id: str, what: str, step: int, seed: int, temperature: float) -> int:
        """The 64-bit key of one reply's draws (step ``step`` of ``what``)."""
        return _step_key(self.base_key(task_id, what, seed, temperature), step)

    def _lat(self, pt: int, ct: int, key: int, seed: int) -> float:
        p = self.p
        dt = self.latency_scale * (p.base_latency + p.prefill_s * pt + p.decode_s * ct)
        if self.tie_jitter:  # per (call, replica seed), also at T = 0
            u = _SplitMix(key ^ ((seed + 1) * 0xD1B54A32D192ED03)).random()
            dt += self.tie_jitter * u
        return dt

    def fault(self, role: str, seed: int) -> str | None:
        """The fault injected on this call, if any."""
        if not self.faults:
            return None
        f = self.faults.get(role)
        if f is None or (self.fault_seeds is not None and seed not in self.fault_seeds):
            return None
        return f

    # -- planner --------------------------------------------------------------------------------
    def plan_tokens(self, task: Task, g: int) -> int:
        k = (task.task_id, g)
        n = self._ptok.get(k)
        if n is None:
            n = self._ptok[k] = messages_tokens(roles.planner_messages(task.task_id,
                                                                       task.question, g))
        return n

    def plan(self, task: Task, g: int, tools: tuple[str, ...], seed: int, temperature: float,
             max_tokens: int, pt: int) -> tuple[Plan | PlanError, int, float]:
        """(the plan, or the PlanError its text raises; completion tokens; latency)."""
        key = self.key(task.task_id, "\x00plan", 0, seed, temperature)
        rng = _SplitMix(key)
        n_facts = len(task.facts)
        n_leaf = min(g, n_facts)
        dropped = -1
        if rng.random() < self.p.plan_err * (n_leaf - 1):
            dropped = rng.randrange(n_facts)
        ck = (task.task_id, g, dropped, tools)
        hit = self._splans.get(ck)
        if hit is None:
            if len(self._splans) >= _CACHE:
                self._splans.clear()
            facts = [i for i in range(n_facts) if i != dropped]
            text = self._plan_json(task, g, facts)
            hit = self._splans[ck] = (parse_plan(text, tools=tools, max_subtasks=g + 1),
                                      text, _tok(len(text)))
        plan, text, ct = hit
        self.calls += 1
        if ct > max_tokens:  # cut off: what the text path parses from the truncated reply
            ct = max_tokens
            try:
                plan = parse_plan(text[:4 * max_tokens], tools=tools, max_subtasks=g + 1)
            except PlanError as e:
                plan = e
        return plan, ct, self._lat(pt, ct, key, seed)

    # -- worker ---------------------------------------------------------------------------------
    def worker_state(self, task: Task, sub: Subtask, parents: Mapping[str, str], seed: int,
                     temperature: float) -> WorkerState:
        """A worker's state at its first call on ``sub`` with its parents' results (replica
        seed ``seed``, temperature ``temperature``)."""
        hit = self._whead.get(id(sub))
        if hit is None or hit[0] is not sub:
            if len(self._whead) >= _CACHE:
                self._whead.clear()
            meta = sub.meta
            step = meta.get("step", "all")
            data = {"subtask": {"step": step, "facts": meta.get(
                "facts", list(range(len(task.facts))))}, "parents": {}}
            _, actions, _, _ = self._script(task, data)
            user = roles.worker_messages(task.task_id, task.question, sub, {})[1]["content"]
            base = len(user) - 4 - 2  # without "none" and "{}"
            # (sub, base, step, actions, fixed replies, lookups, base keys by (replica seed,
            # T), the first prompt's tokens without parents (the text has "none" and "{}"),
            # the answer's kind)
            hit = self._whead[id(sub)] = (sub, base, step, tuple(actions),
                                          tuple(_fixed(task, a) for a in actions),
                                          tuple(i if k.startswith("lookup") else -1
                                                for k, i in actions), {},
                                          self._wsys + ((base + 9) >> 2) + 6,
                                          0 if step == "search" else 1 if step in (
                                              "combine", "all") else 2)
        _, base, step, actions, fixed, lookups, kbs, ctx0, w_akind = hit
        w = _new(WorkerState)
        w.task = task
        w.step = step
        w.akind = w_akind  # the answer: 0 the first result, 1 the last, 2 the values found
        w.actions = actions
        w.results = []
        w.fixed = fixed
        w.lookups = lookups
        w.seed = seed
        kb = kbs.get((seed, temperature))
        if kb is None:
            if len(kbs) >= 256:
                kbs.clear()
            kb = kbs[(seed, temperature)] = self.base_key(task.task_id, sub.id, seed,
                                                          temperature)
        w.kbase = kb
        if not parents:
            w.values = {}
            w.parent = ""
            w.ctx = ctx0
            return w
        pk = (id(sub), *parents.values())
        hit2 = self._wpar.get(pk)
        if hit2 is None or hit2[0] is not sub:
            if len(self._wpar) >= _CACHE:
                self._wpar.clear()
            hit2 = self._wpar[pk] = (sub, *self._parents(task, sub, parents, base))
        _, values, w.parent, w.ctx = hit2
        w.values = dict(values)
        return w

    def _parents(self, task: Task, sub: Subtask, parents: Mapping[str, str], base: int
                 ) -> tuple[dict[int, str], str, int]:
        values: dict[int, str] = {}
        first = None
        extra, plain, n = 0, True, len(parents)
        for k in sorted(parents):  # the JSON block's order (sort_keys), as the text path
            v = parents[k]
            if first is None:
                first = v
            values.update((int(i), x) for i, x in _FV.findall(v))
            extra += 2 * (len(k) + len(v)) + 8
            plain = plain and _plain(k) and _plain(v)
        if plain:
            length = base + extra + 4 * (n - 1) + 2
        else:
            length = len(roles.worker_messages(task.task_id, task.question, sub,
                                               parents)[1]["content"])
        return values, str(first), self._wsys + _tok(length) + 6

    def work(self, w: WorkerState, max_tokens: int) -> tuple[int, Any, str, int, float]:
        """One worker step: (CALL, (tool, args)) or (ANSWER, answer), the reply text,
        completion tokens and latency. The prompt's tokens are ``w.ctx``.

        The hot path: the step's draw only where it is used (a tool step's error draw; an
        answer step draws nothing unless ``tie_jitter`` or the general path needs its key),
        the right reply of a fixed tool step prebuilt per subtask, the answer's kind per
        state; anything unusual (an error, a cut-off reply) takes the general path below,
        which is the text path's parser."""
        results = w.results
        done = len(results)
        self.calls += 1
        ls, lb, lp, ld, eps0, beta = self._latc
        actions = w.actions
        if done >= len(actions):  # the answer step
            ak = w.akind
            if ak == 2:
                v = w.values
                if len(v) == 1:  # (the usual case: one fact per subtask; the same string)
                    for i, x in v.items():
                        x = f"f{i}={x}"
                else:
                    x = "; ".join([f"f{i}={v[i]}" for i in sorted(v)])
            elif ak:
                x = results[-1]
            else:
                x = results[0]
            text = f"ANSWER: {x}"
            ct = (len(text) + 3) >> 2
            if ct <= max_tokens and "CALL" not in x:
                if not self.tie_jitter:
                    return ANSWER, x.strip(), text, ct, ls * (lb + lp * w.ctx + ld * ct)
                return ANSWER, x.strip(), text, ct, self._lat(w.ctx, ct, _wkey(w, done),
                                                              w.seed)
            return self._general(w, text, _wkey(w, done), max_tokens)
        try:  # = _step_key(w.kbase, done), inlined (the low 53 bits are the first draw)
            a, b = _SCP[done]
            key = hash((w.kbase ^ a, b))  # (& _M64 below, where the whole key is used)
        except IndexError:
            key = _step_key(w.kbase, done)
        ctx = w.ctx
        if (key & _M53) * _U53 < eps0 + beta * ctx / 1000:  # this step goes wrong
            key &= _M64
            rng = _SplitMix(key)
            rng.random()  # (the draw just made)
            return self._general(w, self._action(w.task, actions[done], results, w.values,
                                                 rng, True, w.parent), key, max_tokens)
        fx = w.fixed[done]
        if fx is not None:  # the right action, known in advance
            text, call, ct = fx
            if ct <= max_tokens:
                if not self.tie_jitter:
                    return CALL, call, text, ct, ls * (lb + lp * ctx + ld * ct)
                return CALL, call, text, ct, self._lat(ctx, ct, key, w.seed)
            return self._general(w, text, key, max_tokens)
        # the right action (ScriptedModel._action, err False), args direct
        kind, i = actions[done]
        task = w.task
        if kind == "calc":
            ek = (task.task_id, *w.values.items())
            expr = self._exprs.get(ek)
            if expr is None:
                if len(self._exprs) >= _CACHE:
                    self._exprs.clear()
                vals = {k: v for k, v in w.values.items() if _INT.fullmatch(v)}
                expr = self._exprs[ek] = task.expression(vals)
            text, args = f"CALL calc({expr})", (expr,)
            name = "calc"
        else:
            f = task.facts[i]
            if kind == "search":
                q = f"sister city of {f.anchor}"
                text, args, name = f"CALL search({q})", (q,), "search"
            else:
                ent = (f.entity if kind == "lookup" else results[-1]
                       if kind == "lookup_from_prev" else w.parent)
                text, args, name = f"CALL lookup({ent}, {f.attr})", (ent, f.attr), "lookup"
                if "," in ent or "\n" in ent or ent.strip().strip("'\"") != ent:
                    args = None  # type: ignore[assignment]  # (the text parser decides)
        ct = (len(text) + 3) >> 2
        if args is not None and ct <= max_tokens:
            return CALL, (name, list(args)), text, ct, (
                ls * (lb + lp * ctx + ld * ct) if not self.tie_jitter
                else self._lat(ctx, ct, key, w.seed))
        return self._general(w, text, key, max_tokens)

    def _general(self, w: WorkerState, text: str, key: int, max_tokens: int
                 ) -> tuple[int, Any, str, int, float]:
        """A reply the hot path does not shortcut: cut to ``max_tokens``, then what
        ``roles.work`` parses from it (a CALL split to the tool's arity, or the answer)."""
        ct = _tok(len(text))
        if ct > max_tokens:
            text, ct = text[:4 * max_tokens], max_tokens
        text = text.strip()
        tc = roles.parse_call(text, _ARITY)
        if tc is not None:
            return CALL, tc, text, ct, self._lat(w.ctx, ct, key, w.seed)
        m = roles._ANSWER.search(text)
        answer = (m.group(1) if m else text).strip()
        return ANSWER, answer, text, ct, self._lat(w.ctx, ct, key, w.seed)

    # -- synthesizer ----------------------------------------------------------------------------
    def synth_inputs(self, task: Task, plan: Plan, results: Mapping[str, str]
                     ) -> tuple[dict[str, str], str, int]:
        """(results in topological order, the final subtask, the prompt's tokens)."""
        hit = self._psinks.get(id(plan))
        if hit is None or hit[0] is not plan:
            if len(self._psinks) >= _CACHE:
                self._psinks.clear()
            children = plan.children()
            sinks = [s.id for s in plan.subtasks if not children[s.id]]
            topo = plan.topological()
            final = sinks[-1]
            # what the ids and the final add to the prompt, and whether JSON writes them plain
            fixed = len(final) + sum(2 * len(k) + 8 for k in topo) + (3 * (len(topo) - 1)
                                                                      if topo else 0)
            hit = self._psinks[id(plan)] = (plan, topo, final, fixed,
                                            all(_plain(k) for k in (*topo, final)))
        _, topo, final, fixed, plain = hit
        vals = [results[v] for v in topo]
        ordered = dict(zip(topo, vals))
        base = self._shead.get(task.task_id)
        if base is None:
            user = roles.synth_messages(task.task_id, task.question, {}, "")[1]["content"]
            base = self._shead[task.task_id] = len(user)
        joined = "".join(vals)
        if plain and _plain(joined):
            length = base + fixed + 2 * len(joined)
        else:
            length = len(roles.synth_messages(task.task_id, task.question, ordered,
                                              final)[1]["content"])
        return ordered, final, self._ssys + _tok(length) + 6

    def synth(self, task: Task, ordered: Mapping[str, str], final_id: str, seed: int,
              temperature: float, max_tokens: int, pt: int) -> tuple[str, int, float]:
        """(the path's answer, completion tokens, latency)."""
        key = self.key(task.task_id, "\x00synth", 0, seed, temperature)
        final = str(ordered.get(final_id, ""))
        if _INT.fullmatch(final):
            rng = _SplitMix(key)
            if rng.random() < self.p.synth_err * len(ordered):
                final = str(int(final) + rng.choice((10, -10)))
        text = f"FINAL ANSWER: {final}"
        ct = _tok(len(text))
        self.calls += 1
        if ct > max_tokens:
            text, ct = text[:4 * max_tokens], max_tokens
        m = roles._FINAL.search(text)
        return (m.group(1) if m else text).strip(), ct, self._lat(pt, ct, key, seed)

    # -- judge ----------------------------------------------------------------------------------
    def judge_tokens(self, task: Task, answers: list[str], votes: list[int]) -> int:
        return messages_tokens(roles.judge_messages(task.task_id, task.question, answers, votes))

    def judge(self, task: Task, answers: list[str], votes: list[int], seed: int,
              temperature: float, max_tokens: int, pt: int) -> tuple[int | None, int, float]:
        """(the 0-based choice or None, completion tokens, latency)."""
        key = self.key(task.task_id, "\x00judge", 0, seed, temperature)
        text = self._judge(task, {"candidates": answers, "votes": votes}, _SplitMix(key))
        ct = _tok(len(text))
        self.calls += 1
        if ct > max_tokens:
            text, ct = text[:4 * max_tokens], max_tokens
        return roles.parse_choice(text, len(answers)), ct, self._lat(pt, ct, key, seed)

    # -- the text a real model would see, rendered on request -----------------------------------
    @staticmethod
    def messages(role: str, task: Task, **kw: Any) -> list[Message]:
        """The chat the text path sends for this call (``planner``: ``g``; ``worker``:
        ``sub``, ``parents``, and the ``steps`` so far as (reply, result) pairs;
        ``synthesizer``: ``results``, ``final``; ``judge``: ``answers``, ``votes``)."""
        if role == "planner":
            return roles.planner_messages(task.task_id, task.question, kw["g"])
        if role == "worker":
            msgs = roles.worker_messages(task.task_id, task.question, kw["sub"], kw["parents"])
            for text, result in kw.get("steps", ()):
                msgs = msgs + [{"role": "assistant", "content": text},
                               {"role": "user", "content": f"RESULT: {result}"}]
            return msgs
        if role == "synthesizer":
            return roles.synth_messages(task.task_id, task.question, kw["results"], kw["final"])
        if role == "judge":
            return roles.judge_messages(task.task_id, task.question, kw["answers"], kw["votes"])
        raise ValueError(f"role={role!r}: one of planner, worker, synthesizer, judge")


SyncTool = tuple[Callable[..., str], float]


def sync_tools(suite: SynthGAIA) -> dict[str, SyncTool]:
    """SynthGAIA's tools as (function, latency s) for the discrete-event engine: the same
    results as :meth:`SynthGAIA.tools` after the same latency."""
    kb, lat = suite.kb, suite.tool_latency

    values, index = kb.values, kb.index
    # the answers to exact keys, as strings (the knowledge base is fixed once made): a hit
    # returns what the slow path returns for that key, anything else takes the slow path
    exact = {(e, a): str(v) for (e, a), v in values.items()
             if e.strip() == e and a.strip().lower() == a}
    plain = {q: v for q, v in index.items() if q.strip() == q and isinstance(v, str)}

    def lookup(entity: str = "", attr: str = "") -> str:
        v = exact.get((entity, attr))
        if v is not None:
            return v
        v = values.get((entity.strip(), attr.strip().lower()))
        return "not found" if v is None else str(v)

    def search(query: str = "") -> str:
        v = plain.get(query)
        if v is not None:
            return v
        return index.get(query.strip(), "no result")

    def calc(expr: str = "") -> str:
        return _calc_cached(expr)

    return {"lookup": (lookup, lat["lookup"]), "search": (search, lat["search"]),
            "calc": (calc, lat["calc"])}
