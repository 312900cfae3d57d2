"""Long-context tasks for a real chat model, generated offline (RULER / LongBench in spirit), and
an engine that scores every policy on one full prefill.

Tasks (``TASKS``), each an item ``(context_ids, question_ids, answer_ids)`` in the model's chat
template; filler is natural text (the core's evaluation text, the Jargon File), needles are put
at random depths between paragraphs:

* ``niah_single``: one "special magic number" for a key; asked for it.
* ``niah_multikey``: four needles with different keys; asked for one.
* ``niah_multivalue``: two numbers for the same key (and distractor keys); asked for both, in the
  order of the text.
* ``vartrack``: variable tracking: ``VAR A = 51230.`` ... ``VAR B = VAR A.`` ... (two chains);
  asked for the value of the chain's last variable.
* ``docqa``: a generated staff report (people, cities, years among filler); one question.

The question ends with the assistant turn and an answer prefix ("The special magic number for X
mentioned in the provided text is"), as RULER does, so the answer is the next tokens.

**Grading is exact**: an item is correct when greedy decoding on the (compressed) cache produces
exactly the answer tokens. That is computed teacher-forced in one forward: greedy decoding emits
the answer iff the argmax at every answer position, given the gold prefix, is the gold token.

**Engine** (:func:`evaluate_item`): kvpress's presses compress the cache at the end of each
layer's attention, so the prefill's hidden states (and hence every layer's keys, values and
queries) do not depend on the policy. One full prefill therefore gives every policy's inputs; each
policy scores them once (scores do not depend on the ratio), keeps its top ``int(T(1-r))`` per
KV head at each ratio, and all policies at one ratio, which keep the same number of entries, are
decoded together as one batch. ``question_aware=False`` compresses the context only (then the
question and answer run on the compressed cache); ``True`` compresses context + question (all but
its last token, as in kvpress's pipeline and :func:`generate_with_press`).
"""

from __future__ import annotations

import math
import random
import re
import time
from dataclasses import dataclass
from typing import Any

import torch

from icml_capkv.cache import CapKVCache
from icml_capkv.config import PressConfig
from icml_capkv.presses import KVPress, make_press, post_rope_queries, query_anchor
from icml_capkv.scorers import ScoreInputs

__all__ = ["KVPRESS_ARMS", "TASKS", "LongItem", "capture_prefill", "check_policies",
           "continuation_fidelity_text", "evaluate_item", "make_items", "tau_of"]

# kvpress's own settings for the presses where ours differ on purpose (same kept positions as
# kvpress 0.5.5, see tests/test_kvpress_parity.py): usable as policy names here.
KVPRESS_ARMS = {"snapkv_kvpress": ("snapkv", {"n_sink": 0, "window": 64, "pooling": "kvpress"}),
                "knorm_kvpress": ("knorm", {"n_sink": 0})}


# CapKV at another relevance temperature, as an arm of one table: ``capkv_tau2`` is CapKV with
# ``tau = 2`` (the tau sweep; ``leverage`` is ``tau = 0``, ``capkv`` the configured tau).
_TAU_ARM = re.compile(r"capkv_tau(\d+(?:\.\d+)?)")


def tau_of(policy: str) -> float | None:
    """The tau of a CapKV tau-sweep arm (``capkv_tau10`` -> 10.0; ``leverage`` -> 0.0), else
    None."""
    if policy == "leverage":
        return 0.0
    m = _TAU_ARM.fullmatch(policy)
    return float(m.group(1)) if m else None


def check_policies(policies: list[str]) -> None:
    """Raise ``ValueError`` naming the first policy that is neither a press (``POLICIES``), a
    kvpress arm (``KVPRESS_ARMS``) nor a tau arm (``capkv_tau<t>``): before any model work."""
    from icml_capkv.presses import POLICIES

    for p in policies:
        if p not in POLICIES and p not in KVPRESS_ARMS and not _TAU_ARM.fullmatch(p):
            raise ValueError(f"unknown policy {p!r}: use one of {', '.join(POLICIES)}, "
                             f"{', '.join(KVPRESS_ARMS)} or capkv_tau<t> (e.g. capkv_tau2)")


def _press(policy: str, press: PressConfig | None) -> KVPress:
    """The policy's press from the table's settings ``press``; a kvpress arm keeps kvpress's
    own settings (the default ones with ``KVPRESS_ARMS``'s options); ``capkv_tau<t>`` is CapKV
    with the table's settings but ``tau = t``."""
    if policy in KVPRESS_ARMS:
        name, opts = KVPRESS_ARMS[policy]
        return make_press(name, 0.5, **opts)
    m = _TAU_ARM.fullmatch(policy)
    if m:
        return make_press("capkv", 0.5, press, tau=float(m.group(1)))
    return make_press(policy, 0.5, press)


TASKS = ("niah_single", "niah_multikey", "niah_multivalue", "vartrack", "docqa")

_WORDS = ("amber", "basil", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "indigo",
          "juniper", "kelp", "lagoon", "marble", "nectar", "onyx", "pepper", "quartz", "raven",
          "saffron", "tundra", "umber", "velvet", "willow", "yarrow", "zephyr", "cedar", "delta",
          "falcon", "glacier", "hazel", "island", "jasper", "lotus", "meadow", "nova", "orchid")
_NAMES = ("Alice Moreau", "Bruno Keller", "Chiara Rossi", "Dmitri Volkov", "Elena Garcia",
          "Farid Haddad", "Greta Lund", "Hiroshi Sato", "Ines Duarte", "Jonas Berg",
          "Kavya Rao", "Liam O'Neill", "Maya Cohen", "Nils Eriksen", "Olga Petrova",
          "Pablo Ruiz")
_CITIES = ("Lisbon", "Oslo", "Nairobi", "Lima", "Kyoto", "Dublin", "Quito", "Tunis", "Perth",
           "Riga", "Hanoi", "Porto", "Turin", "Leeds", "Malmo", "Graz")
_VARS = ("QXR", "BLM", "TZK", "WFA", "HNP", "JDC", "VGE", "KSO", "MUY", "RIB")


@dataclass
class LongItem:
    """One task item: token ids of the context, the question (ending in the answer prefix) and
    the answer; ``answer_text`` for reading."""

    task: str
    context_ids: list[int]
    question_ids: list[int]
    answer_ids: list[int]
    answer_text: str


def _filler_paragraphs(tokenizer: Any) -> list[list[int]]:
    from icml.data import eval_text

    paras = [p.strip() for p in eval_text().splitlines() if len(p.strip()) > 80]
    return [tokenizer("\n" + p, add_special_tokens=False)["input_ids"] for p in paras[:4000]]


class _Builder:
    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.paras = _filler_paragraphs(tokenizer)
        tmpl = tokenizer.apply_chat_template([{"role": "user", "content": "\x00"}],
                                             tokenize=False, add_generation_prompt=True)
        self.pre, self.post = tmpl.split("\x00")

    def ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def item(self, task: str, length: int, needles: list[str], question: str, prefix: str,
             answer: str, rng: random.Random) -> LongItem:
        head = self.ids(self.pre + "Read the text below and answer the question after it.\n")
        tail = self.ids("\n\n" + question + self.post + prefix)
        needle_ids = [self.ids("\n" + n) for n in needles]
        budget = length - len(head) - sum(map(len, needle_ids))
        if budget < 50:
            raise ValueError(f"context length {length} is too short for task {task!r}")
        start = rng.randrange(len(self.paras))
        body: list[list[int]] = []
        n = 0
        i = start
        while n < budget:
            p = self.paras[i % len(self.paras)]
            body.append(p[: budget - n])
            n += len(body[-1])
            i += 1
        # needles at random paragraph boundaries (depths), in the given order
        slots = sorted(rng.sample(range(len(body) + 1), min(len(needle_ids), len(body) + 1)))
        while len(slots) < len(needle_ids):
            slots.append(slots[-1])
        out: list[int] = list(head)
        k = 0
        for j in range(len(body) + 1):
            while k < len(needle_ids) and slots[k] == j:
                out += needle_ids[k]
                k += 1
            if j < len(body):
                out += body[j]
        ans = self.ids(" " + answer)
        if len(ans) > 1 and not self.tok.decode(ans[:1]).strip():
            tail, ans = tail + ans[:1], ans[1:]  # a lone leading space goes to the prefix
        return LongItem(task, out, tail, ans, answer)


def _number(rng: random.Random) -> str:
    return str(rng.randrange(10000, 100000))


def make_items(tokenizer: Any, task: str, length: int, n: int, seed: int = 0) -> list[LongItem]:
    """``n`` items of ``task`` (see ``TASKS``) with ``length`` context tokens (the question and
    answer come on top), generated from ``seed``. Deterministic."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}: use one of {', '.join(TASKS)}")
    if n < 1 or length < 128:
        raise ValueError(f"need n >= 1 and length >= 128 (got n={n}, length={length})")
    b = _Builder(tokenizer)
    rng = random.Random(f"{task}-{length}-{seed}")
    items = []
    for _ in range(n):
        magic = "The special magic number for {} is: {}."
        ask = "What is the special magic number for {} mentioned in the provided text?"
        pre = "The special magic number for {} mentioned in the provided text is"
        if task == "niah_single":
            key, val = rng.choice(_WORDS), _number(rng)
            items.append(b.item(task, length, [magic.format(key, val)], ask.format(key),
                                pre.format(key), val, rng))
        elif task == "niah_multikey":
            keys = rng.sample(_WORDS, 4)
            vals = [_number(rng) for _ in keys]
            q = rng.randrange(4)
            items.append(b.item(task, length, [magic.format(k, v) for k, v in zip(keys, vals)],
                                ask.format(keys[q]), pre.format(keys[q]), vals[q], rng))
        elif task == "niah_multivalue":
            keys = rng.sample(_WORDS, 3)
            v1, v2, d1, d2 = (_number(rng) for _ in range(4))
            needles = [magic.format(keys[0], v1), magic.format(keys[1], d1),
                       magic.format(keys[0], v2), magic.format(keys[2], d2)]
            items.append(b.item(
                task, length, needles,
                f"What are the two special magic numbers for {keys[0]} mentioned in the provided "
                "text? Give them in the order they appear.",
                f"The two special magic numbers for {keys[0]} mentioned in the provided text are",
                f"{v1} and {v2}", rng))
        elif task == "vartrack":
            names = rng.sample(_VARS, 6)
            a, b2 = _number(rng), _number(rng)
            c1, c2 = names[:3], names[3:]
            needles = [f"VAR {c1[0]} = {a}.", f"VAR {c2[0]} = {b2}.", f"VAR {c1[1]} = VAR {c1[0]}.",
                       f"VAR {c2[1]} = VAR {c2[0]}.", f"VAR {c1[2]} = VAR {c1[1]}.",
                       f"VAR {c2[2]} = VAR {c2[1]}."]
            items.append(b.item(task, length, needles,
                                f"Follow the assignments: what is the value of VAR {c1[2]}?",
                                f"The value of VAR {c1[2]} is", a, rng))
        else:  # docqa
            people = rng.sample(range(len(_NAMES)), 5)
            cities = rng.sample(_CITIES, 5)
            years = [str(rng.randrange(1990, 2024)) for _ in people]
            needles = [f"Staff report: {_NAMES[p]} joined the company in {y} and works at the "
                       f"{c} office." for p, c, y in zip(people, cities, years)]
            q = rng.randrange(5)
            if rng.random() < 0.5:
                items.append(b.item(task, length, needles,
                                    f"According to the staff report, at which office does "
                                    f"{_NAMES[people[q]]} work?",
                                    f"{_NAMES[people[q]]} works at the", cities[q], rng))
            else:
                items.append(b.item(task, length, needles,
                                    f"According to the staff report, in which year did "
                                    f"{_NAMES[people[q]]} join the company?",
                                    f"{_NAMES[people[q]]} joined the company in", years[q], rng))
    return items


# -- engine -----------------------------------------------------------------------------------
@dataclass
class Prefill:
    """What one full prefill leaves: the full cache and, per layer, the attention input and its
    rotary embeddings (enough for every press's scores)."""

    cache: CapKVCache
    hidden: list[torch.Tensor]
    rope: list[tuple[torch.Tensor, torch.Tensor]]
    seconds: float


@torch.no_grad()
def capture_prefill(model: Any, ids: torch.Tensor) -> Prefill:
    """One full prefill of ``ids`` (``(1, T)``) into a :class:`CapKVCache`, recording every
    attention layer's input hidden states and position embeddings."""
    from icml_capkv.presses import attention_layers

    attns = attention_layers(model)
    hidden: list = [None] * len(attns)
    rope: list = [None] * len(attns)

    def hook(module, args, kwargs):
        h = kwargs.get("hidden_states", args[0] if args else None)
        hidden[module.layer_idx] = h
        rope[module.layer_idx] = kwargs["position_embeddings"]

    handles = [a.register_forward_pre_hook(hook, with_kwargs=True) for a in attns]
    cache = CapKVCache()
    try:
        t0 = time.perf_counter()
        model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        secs = time.perf_counter() - t0
    finally:
        for h in handles:
            h.remove()
    return Prefill(cache, hidden, rope, secs)


def _layer_inputs(press: KVPress, model: Any, pre: Prefill, layer: int, T: int) -> ScoreInputs:
    from icml_capkv.presses import attention_layers

    module = attention_layers(model)[layer]
    lay = pre.cache.layers[layer]
    h = pre.hidden[layer][:, :T]
    cos, sin = pre.rope[layer]
    queries = anchor = None
    if "queries" in press.needs:
        queries = post_rope_queries(module, h, (cos[:, :T], sin[:, :T]),
                                    getattr(press, "window", None))
    if "query_anchor" in press.needs:
        base = getattr(model, "model", model)
        anchor = query_anchor(module, h, base.rotary_emb, getattr(press, "n_future_positions", 512),
                              min(press.n_sink, T), press.__dict__.setdefault("_rope_cache", {}))
    return ScoreInputs(lay.keys[:, :, :T], lay.values[:, :, :T], queries, anchor)


def keep_indices(press: KVPress, scores: torch.Tensor, ratio: float) -> torch.Tensor | None:
    """The selection rule of :meth:`KVPress.select` applied to precomputed scores."""
    from icml_capkv.presses import n_kept

    T = scores.shape[-1]
    k = n_kept(T, ratio)
    if k >= T:
        return None
    s = scores.float().clone()
    s[..., : min(press.n_sink, T)] = math.inf
    return s.topk(k, dim=-1).indices.sort(-1).values


def _kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    p = p_logits.float().log_softmax(-1)
    q = q_logits.float().log_softmax(-1)
    return (p.exp() * (p - q)).sum(-1)


@torch.no_grad()
def _decode_batch(model: Any, pre: Prefill, T: int, idx: list[torch.Tensor | None],
                  tail: torch.Tensor) -> torch.Tensor:
    """Logits of ``tail`` on ``len(idx)`` caches made from the first ``T`` entries of the full
    cache (kept entries ``idx[b][layer]``; None = all), as one batch."""
    n = len(idx)
    cache = CapKVCache()
    for li, lay in enumerate(pre.cache.layers):
        k, v = lay.keys[:, :, :T], lay.values[:, :, :T]
        cache.update(k.expand(n, *k.shape[1:]), v.expand(n, *v.shape[1:]), li)
        if idx[0] is not None:
            cache.layers[li].keep(torch.cat([i[li] for i in idx]))
    return model(input_ids=tail.expand(n, -1), cache=cache, use_cache=True).logits


@torch.no_grad()
def evaluate_item(model: Any, item: LongItem, policies: list[str], ratios: list[float],
                  modes: tuple[bool, ...] = (False, True), press: PressConfig | None = None,
                  ) -> list[dict]:
    """Every policy x ratio x mode on one item. Rows: ``{policy, ratio, question_aware, correct,
    kl, top1, scoring_s}`` plus a ``full`` row per mode; ``kl``/``top1`` compare the
    next-token distributions at the answer positions (teacher-forced, mean over the answer's
    tokens) with the full cache's; ``correct`` is exact greedy
    match of the whole answer. ``scoring_s`` is the policy's scoring time (all layers), the
    full row's ``prefill_s`` the full prefill's and its ``decode_s`` the time of all policies'
    decodes in that mode. ``policies`` may be empty (the full cache's grade only).
    ``policies`` may hold tau arms (``capkv_tau2``, see :func:`check_policies`)."""
    check_policies(policies)
    dev = next(model.parameters()).device
    ctx = torch.tensor([item.context_ids], device=dev)
    q = torch.tensor([item.question_ids], device=dev)
    a = torch.tensor([item.answer_ids], device=dev)
    seq = torch.cat([ctx, q[:, :-1]], 1)
    pre = capture_prefill(model, seq)
    n_layers = len(pre.cache.layers)
    rows: list[dict] = []
    na = a.shape[1]
    for aware in modes:
        T = seq.shape[1] if aware else ctx.shape[1]
        tail = torch.cat([q[:, -1:], a], 1) if aware else torch.cat([q, a], 1)
        # logits predicting the answer tokens: the last na+1 positions but the final one
        full = _decode_batch(model, pre, T, [None], tail)[:, -na - 1:-1]
        full_ok = bool((full.argmax(-1) == a).all())
        full_row = {"policy": "full", "ratio": 0.0, "question_aware": aware,
                    "correct": float(full_ok), "kl": 0.0, "top1": 1.0,
                    "scoring_s": 0.0, "prefill_s": pre.seconds, "T": T}
        rows.append(full_row)
        scores: dict[str, list[torch.Tensor]] = {}
        secs: dict[str, float] = {}
        presses = {p: _press(p, press) for p in policies}
        for p, press in presses.items():
            t0 = time.perf_counter()
            scores[p] = [press.score(_layer_inputs(press, model, pre, li, T))
                         for li in range(n_layers)]
            secs[p] = time.perf_counter() - t0
        t_dec = time.perf_counter()
        for r in ratios if policies else []:
            idx = [[keep_indices(presses[p], s, r) for s in scores[p]] for p in policies]
            if idx[0][0] is None:
                logits = full.expand(len(policies), -1, -1)
            else:
                logits = _decode_batch(model, pre, T, idx, tail)[:, -na - 1:-1]
            ok = (logits.argmax(-1) == a).all(-1)
            kl = _kl(full.expand_as(logits), logits).mean(-1)
            top1 = (logits.argmax(-1) == full.argmax(-1)).float().mean(-1)
            for b, p in enumerate(policies):
                rows.append({"policy": p, "ratio": float(r), "question_aware": aware,
                             "correct": float(ok[b]), "kl": float(kl[b]),
                             "top1": float(top1[b]), "scoring_s": secs[p], "T": T})
        full_row["decode_s"] = time.perf_counter() - t_dec  # every policy x ratio, batched
    return rows


@torch.no_grad()
def continuation_fidelity_text(model: Any, tokenizer: Any, context_len: int, n_docs: int,
                               policies: list[str], ratios: list[float], cont_len: int = 32,
                               press: PressConfig | None = None, offset: int = 0) -> list[dict]:
    """Continuation fidelity on the core's evaluation text: ``n_docs`` windows of
    ``context_len + cont_len`` tokens; the context is compressed (question-agnostic), the
    continuation teacher-forced; per document the mean KL(full || compressed) and top-1
    agreement over the continuation's next-token distributions. Rows ``{policy, ratio, kl,
    top1, doc}``."""
    from icml.data import eval_token_ids

    check_policies(policies)
    L = context_len + cont_len
    ids = torch.tensor(eval_token_ids(tokenizer, n_docs * L, offset=offset)).view(n_docs, L)
    dev = next(model.parameters()).device
    rows: list[dict] = []
    for d in range(n_docs):
        ctx, cont = ids[d: d + 1, :context_len].to(dev), ids[d: d + 1, context_len:].to(dev)
        pre = capture_prefill(model, ctx)
        full = _decode_batch(model, pre, context_len, [None], cont)
        presses = {p: _press(p, press) for p in policies}
        scores = {p: [pr.score(_layer_inputs(pr, model, pre, li, context_len))
                      for li in range(len(pre.cache.layers))] for p, pr in presses.items()}
        for r in ratios:
            idx = [[keep_indices(presses[p], s, r) for s in scores[p]] for p in policies]
            lg = _decode_batch(model, pre, context_len, idx, cont)
            kl = _kl(full.expand_as(lg), lg).mean(-1)
            top1 = (lg.argmax(-1) == full.argmax(-1)).float().mean(-1)
            for b, p in enumerate(policies):
                rows.append({"policy": p, "ratio": float(r), "kl": float(kl[b]),
                             "top1": float(top1[b]), "doc": d})
    return rows


def summarize_items(records: list[dict], n_boot: int = 1000, seed: int = 0) -> dict:
    """Pool :func:`evaluate_item` rows of many items (``records``: dicts with ``task``,
    ``length`` and ``rows``) into ``{(task, length, question_aware): {"n", "full_accuracy",
    "correct": {(policy, ratio): (mean, lo, hi)}, "kl": {...}, "top1": {...}}}`` with 95%
    percentile-bootstrap intervals over items."""
    from icml_capkv.fidelity import bootstrap_ci

    cells: dict = {}
    for rec in records:
        for r in rec["rows"]:
            key = (rec["task"], rec["length"], r["question_aware"])
            cells.setdefault(key, {}).setdefault((r["policy"], r["ratio"]), []).append(r)
    out: dict = {}
    for key, by in cells.items():
        full = by.get(("full", 0.0), [])
        s: dict = {"n": len(full), "full_accuracy": (sum(r["correct"] for r in full) /
                                                     max(len(full), 1))}
        for metric in ("correct", "kl", "top1"):
            s[metric] = {pr: bootstrap_ci([[r[metric] for r in rows]], n_boot, seed=seed)
                         for pr, rows in by.items() if pr[0] != "full"}
        out[key] = s
    return out


def capkv_verdicts(summary: dict, ratios: list[float]) -> list[tuple[float, str, str, str]]:
    """``(ratio, metric, verdict, best other)`` for CapKV by the README's tied-best rule;
    ``verdict`` is ``"no signal"`` for accuracy where every policy has the same mean."""
    from icml_capkv.fidelity import verdict

    out = []
    for r in ratios:
        for metric, lower in (("correct", False), ("kl", True)):
            s = summary[metric]
            if ("capkv", float(r)) not in s:
                continue
            v, best = verdict(s, r, lower=lower, exclude=("full",))
            means = {round(m[0], 9) for (p, rr), m in s.items() if rr == float(r)}
            if metric == "correct" and len(means) == 1:
                v = "no signal"
            out.append((float(r), "accuracy" if metric == "correct" else "KL", v, best))
    return out


# -- paired comparisons (the powered tables) -------------------------------------------------
#: The baselines every CapKV arm is compared with (pure leverage too, for the arms with tau > 0).
BASELINES = ("snapkv", "streaming", "h2o", "knorm", "random", "snapkv_kvpress", "knorm_kvpress")


def cell_values(records: list[dict]) -> dict:
    """Per-item values of :func:`evaluate_item` records, paired across policies:
    ``{(task, length, question_aware): {(policy, ratio): {"correct": [...], "kl": [...],
    "top1": [...]}}}``, one entry per item in record order (every record holds every policy,
    so position ``i`` is the same item for all policies of a cell); the full cache's grades
    under ``("full", 0.0)``."""
    out: dict = {}
    for rec in records:
        for r in rec["rows"]:
            cell = out.setdefault((rec["task"], rec["length"], r["question_aware"]), {})
            v = cell.setdefault((r["policy"], r["ratio"]), {"correct": [], "kl": [], "top1": []})
            for m in v:
                v[m].append(float(r[m]))
    return out


def competitors(arm: str, present: set[str]) -> list[str]:
    """Whom ``arm`` is compared with: the baselines present, plus pure leverage unless ``arm``
    is leverage itself (tau arms never compete with each other)."""
    return [p for p in (*BASELINES, "leverage") if p in present and p != arm]


def compare_arm(values: dict, arm: str, ratio: float, metric: str, lower: bool,
                seed: int = 0) -> dict:
    """``arm`` against the competitor with the best mean at ``ratio`` on ``metric``
    (``values``: one cell of :func:`cell_values`), paired over items: the difference
    ``arm - best`` with its 95% bootstrap interval (``icml.stats.paired_diff_ci``) and its
    minimum detectable effect (``icml.stats.mde_from_samples`` of the per-item differences,
    80% power at the 5% level; a difference without spread, e.g. both arms always right, gets
    the MDE of one discordant item, ``mde_proportion(n, paired=True, discordant=1/n)``).
    ``verdict``: ``"ahead"`` / ``"behind"`` when the interval excludes 0 (on the better /
    worse side), else ``"tied"``; ``"no signal"`` for accuracy when every policy of the cell
    has the same per-item grades (e.g. all fail); ``"one item"`` when there is only one."""
    from icml import stats

    r = float(ratio)
    present = {p for p, rr in values if rr == r}
    others = competitors(arm, present)
    if (arm, r) not in values or not others:
        raise ValueError(f"no {arm!r} row or no competitor at ratio {r}")
    mean = {p: sum(values[p, r][metric]) / len(values[p, r][metric]) for p in [arm, *others]}
    sign = 1.0 if lower else -1.0
    best = min(others, key=lambda p: sign * mean[p])
    a, b = values[arm, r][metric], values[best, r][metric]
    diff = stats.paired_diff_ci(a, b, seed=seed)
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    if max(d) - min(d) > 0:
        mde = stats.mde_from_samples(d, seed=seed)
    else:
        mde = stats.mde_proportion(n, paired=True, discordant=1 / n) if n > 1 else math.inf
    if n < 2:
        verdict = "one item"
    elif metric == "correct" and len({tuple(values[p, r][metric]) for p in [arm, *others]}) == 1:
        verdict = "no signal"
    elif diff.contains(0.0):
        verdict = "tied"
    else:
        verdict = "ahead" if sign * diff.value < 0 else "behind"
    return {"arm": arm, "best": best, "mean": mean[arm], "best_mean": mean[best],
            "diff": diff.to_dict(), "mde": float(mde), "verdict": verdict, "n": n}
