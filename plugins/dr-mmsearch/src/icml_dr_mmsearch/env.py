"""The search environment: MMSearch-R1's tag formats, round and tool limits, and the turn logic
of its rollout (``vllm_rollout_spmd.py``), over the offline tools.

After each model turn the response decides what happens, exactly as in the baseline:

* it ends with ``<search><img></search>`` -> image search on the question's image, unless the
  image limit is used up or this was the last round, in which case the trajectory ends;
* else it ends with ``<text_search>q</text_search>`` -> text search for the *last* such query,
  unless the text limit is used up, it is the last round, or the query is empty (trajectory
  ends);
* anything else (an answer, prose, a malformed call) ends the trajectory.

A tool result is injected as the next user turn, ``Searched results: <information>...
</information>`` (baseline) or `` <information> ... </information> `` (compact), and is masked
from the loss by the rollout. ``dedupe_repeats=True`` (an option, not the baseline) replaces the
results of a query the trajectory already issued by a one-word notice -- a guess at the paper's
unpublished "redundant context" fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from icml_dr_mmsearch.config import IMAGE_CALL, STOP_STRINGS, TAGS  # noqa: E402,F401
from icml_dr_mmsearch.knowledge import KnowledgeBase, Question
from icml_dr_mmsearch.tools import ImageSearch, TextSearch, ToolResult

ACTIONS = {"image": "I", "text": "T", "answer": "A", "invalid": "X"}

_IMG_RE = re.compile(re.escape(IMAGE_CALL) + r"$")
_TEXT_END_RE = re.compile(r"<text_search>.*</text_search>$")
_TEXT_Q_RE = re.compile(r"<text_search>(.*?)</text_search>")
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)

DEFAULT_INSTRUCTION = (
    "Answer the question. First think inside <reason> </reason>. Then either answer as "
    "<answer> ... </answer>, or search: <search><img></search> searches the question's image "
    "(once), <text_search> query </text_search> searches text (at most twice). Results come "
    "back inside <information> </information>.\nQuestion: ")


def parse_action(response: str) -> tuple[str, str]:
    """``(kind, query)`` of a model turn, using the baseline's trigger rules: kind is
    ``"image"``, ``"text"`` (query = the last ``<text_search>`` content), ``"answer"`` (contains
    an ``<answer>...</answer>``) or ``"invalid"`` (anything else)."""
    r = response.strip()
    if _IMG_RE.search(r):
        return "image", ""
    if _TEXT_END_RE.search(r):
        qs = _TEXT_Q_RE.findall(r)
        return "text", (qs[-1].strip() if qs else "")
    if _ANSWER_RE.search(r):
        return "answer", ""
    return "invalid", ""


@dataclass
class Episode:
    """One trajectory's interaction state. ``actions`` is the tool sequence (``I``/``T``/``A``/
    ``X``), ``responses`` the model turns and ``observations`` the injected tool texts."""

    question: Question
    responses: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    tool_hits: list[list[str]] = field(default_factory=list)
    image_calls: int = 0
    text_calls: int = 0
    done: bool = False
    end_reason: str = ""

    @property
    def turns(self) -> int:
        return len(self.responses)

    @property
    def searches(self) -> int:
        return self.image_calls + self.text_calls

    @property
    def redundant(self) -> bool:
        """The trajectory issued the same text query twice (normalised whitespace/case)."""
        qs = [" ".join(q.lower().split()) for q in self.queries]
        return len(qs) != len(set(qs))


class SearchEnv:
    """The offline multimodal search environment.

    ``SearchEnv(kb, max_rounds=4, tool_limits={"image": 1, "text": 2})``. ``max_rounds`` is
    the number of model turns (MMSearch-R1 trains with 3; the 3-hop questions here need 4).
    ``tools`` defaults to a BM25 :class:`TextSearch` (top-2) over ``kb.documents`` and an
    :class:`ImageSearch` (top-3) over the companies' pictures."""

    def __init__(self, kb: KnowledgeBase, tools: list[Any] | None = None, *, max_rounds: int = 4,
                 tool_limits: dict[str, int] | None = None, result_format: str = "compact",
                 instruction: str = "", obs_prefix: str = "", obs_suffix: str = "",
                 dedupe_repeats: bool = False, after_search_prompt: str = "") -> None:
        if not isinstance(max_rounds, int) or max_rounds < 1:
            raise ValueError(f"max_rounds must be an int >= 1, got {max_rounds!r}")
        limits = {"image": 1, "text": 2} if tool_limits is None else dict(tool_limits)
        bad = set(limits) - {"image", "text"}
        if bad:
            raise ValueError(f"tool_limits has unknown tools {sorted(bad)}: the tools are "
                             "'image' and 'text'")
        for k, v in limits.items():
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"tool_limits[{k!r}] must be an int >= 0, got {v!r}")
        self.kb, self.max_rounds, self.result_format = kb, max_rounds, result_format
        self.limits = {"image": limits.get("image", 0), "text": limits.get("text", 0)}
        self.instruction, self.obs_prefix, self.obs_suffix = instruction, obs_prefix, obs_suffix
        self.dedupe_repeats, self.after_search_prompt = dedupe_repeats, after_search_prompt
        if tools is None:
            tools = [ImageSearch(result_format=result_format),
                     TextSearch(topk=2, result_format=result_format)]
        self.tools: dict[str, Any] = {}
        for t in tools:
            name = getattr(t, "name", None)
            if name not in ("image", "text"):
                raise ValueError(f"tool {t!r} has name {name!r}: tools must be named 'image' "
                                 "or 'text' (ImageSearch / TextSearch or objects like them)")
            self.tools[name] = t
        if "text" in self.tools and not getattr(self.tools["text"], "documents", None):
            self.tools["text"].index(kb.documents)
        self._text_by_world: dict[int, Any] = {}
        if "text" in self.tools and kb.n_worlds > 1:   # one corpus per fact version
            import copy

            for w in range(1, kb.n_worlds):
                self._text_by_world[w] = copy.copy(self.tools["text"]).index(kb.documents_of(w))
        if "image" in self.tools and not getattr(self.tools["image"], "titles", None):
            self.tools["image"].index({e.name: kb.image(e.name) for e in kb.of_type("company")})
        self._images: dict[int, Any] = {}

    # ---- prompts ------------------------------------------------------------------------
    def prompt(self, q: Question) -> str:
        """The first user turn for question ``q``."""
        return self.instruction + q.text

    def image_of(self, q: Question) -> Any:
        if q.image_entity is None:
            return None
        if q.id not in self._images:
            self._images[q.id] = self.kb.question_image(q)
        return self._images[q.id]

    def reset(self, q: Question) -> Episode:
        return Episode(q)

    # ---- one turn -----------------------------------------------------------------------
    def step(self, ep: Episode, response: str) -> str | None:
        """Record model turn ``response``; return the observation text to inject, or ``None``
        when the trajectory ends (answer, invalid turn, limit reached, last round)."""
        if ep.done:
            raise RuntimeError("step() on a finished episode")
        ep.responses.append(response)
        kind, query = parse_action(response)
        last_round = ep.turns >= self.max_rounds
        if kind in ("answer", "invalid"):
            ep.actions.append(ACTIONS[kind])
            return self._end(ep, kind)
        ep.actions.append(ACTIONS[kind])
        used = ep.image_calls if kind == "image" else ep.text_calls
        if kind not in self.tools:
            return self._end(ep, f"unknown tool {kind}")
        if used >= self.limits[kind]:
            return self._end(ep, f"{kind} limit")
        if last_round:
            return self._end(ep, "round limit")
        if kind == "text" and not query:
            return self._end(ep, "empty query")
        if kind == "image":
            ep.image_calls += 1
            res: ToolResult = self.tools["image"](self.image_of(ep.question))
        else:
            ep.text_calls += 1
            seen = [" ".join(x.lower().split()) for x in ep.queries]
            ep.queries.append(query)
            if self.dedupe_repeats and " ".join(query.lower().split()) in seen:
                res = ToolResult("repeated", [], False)
            else:
                res = self._text_by_world.get(ep.question.world, self.tools["text"])(query)
        ep.tool_hits.append(res.hits)
        obs = self.format_observation(res.text, ep.question)
        ep.observations.append(obs)
        return obs

    def _end(self, ep: Episode, reason: str) -> None:
        ep.done, ep.end_reason = True, reason
        return None

    def format_observation(self, result: str, q: Question) -> str:
        """The injected user turn around a tool result (baseline or compact)."""
        if self.result_format == "baseline":
            body = (f"Searched results: <information>{result}</information>\n"
                    f"Original user's question: {q.text}\n{self.after_search_prompt}")
        else:
            body = f" <information> {result} </information> "
        return self.obs_prefix + body + self.obs_suffix

    # ---- gold trajectories --------------------------------------------------------------
    def gold_responses(self, q: Question) -> list[str]:
        """The model turns of a correct trajectory for ``q`` (direct answer for 1-hop; image
        search, text searches, answer for image questions)."""
        turns = []
        if q.has_image:
            turns.append(f"<reason> identify the image </reason> {IMAGE_CALL}")
        for g in q.gold_queries:
            turns.append(f"<reason> look up {g.split()[0]} </reason> <text_search> {g} "
                         "</text_search>")
        reason = "recall" if not q.has_image else "found it"
        turns.append(f"<reason> {reason} </reason> <answer> {q.answer} </answer>")
        return turns

    def vocabulary(self) -> list[str]:
        """Every whitespace-separated word the environment can produce or expect (compact
        format): the knowledge base's words, the tags, result numbering, reason words."""
        words = set(self.kb.words()) | set(TAGS) | {"<image>", "none", "repeated"}
        words |= {str(i) for i in range(1, 11)}
        for q in self.kb.questions[:3]:
            for r in self.gold_responses(q):
                words.update(r.split())
        words |= {"identify", "image", "look", "up", "recall", "found", "it"}
        words.update(self.instruction.split())
        return sorted(words)
