"""Batched multi-turn agent rollout for any transformers causal LM.

Every (question, generation) row runs the baseline's loop: the model writes a turn until a stop
string (``</answer>``, ``<search><img></search>``, ``</text_search>``), EOS or the per-turn token
limit; the environment parses it, calls a tool or ends the trajectory; the tool result is
appended as the next user turn; at most ``env.max_rounds`` turns.

All rows share one KV cache that lives across turns (``kv_reuse=True``): prompts are prefilled
once (left-padded), sampled tokens and tool results are appended, finished rows are dropped
from the cache, so no token is encoded twice. ``kv_reuse=False`` re-encodes each row's whole
context at the start of every turn (what a stateless ``generate`` call per turn does); the
sampled trajectories are the same up to floating point.

Each :class:`Trajectory` keeps its token segments with a mask (1 = model-written, 0 = prompt or
tool output), so the loss never trains on tool outputs. An optional ``adapter``
(:class:`~icml_dr_mmsearch.vision.VisionPrefix`) prepends image embeddings to the prompt of
image questions (the VLM path).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from icml_dr_mmsearch.advantages import Structure
from icml_dr_mmsearch.config import RolloutConfig
from icml_dr_mmsearch.env import Episode, SearchEnv
from icml_dr_mmsearch.knowledge import Question


@dataclass
class Trajectory:
    """One rollout: the episode (turns, actions, tool results), the token segments and their
    loss mask, and the log-probs of the model tokens at sampling time."""

    question: Question
    episode: Episode
    group: int
    segments: list[tuple[list[int], bool]] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    image: Any = None
    truncated: bool = False

    @property
    def responses(self) -> list[str]:
        return self.episode.responses

    @property
    def turns(self) -> int:
        return self.episode.turns

    @property
    def actions(self) -> str:
        return "".join(self.episode.actions)

    @property
    def token_ids(self) -> list[int]:
        return [t for ids, _ in self.segments for t in ids]

    @property
    def loss_mask(self) -> list[int]:
        """1 on model-written tokens, 0 on the prompt and tool outputs."""
        return [int(m) for ids, m in self.segments for _ in ids]

    @property
    def length(self) -> int:
        return sum(len(ids) for ids, m in self.segments if m)

    @property
    def structure(self) -> Structure:
        return Structure(self.turns, self.actions, self.length)


def _cache_kwarg(model: Any) -> str:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


class _Contexts:
    """The rows' contexts behind one KV cache. ``pending[r]`` holds tokens (and, for the first
    block, an optional embedding prefix) not yet encoded; :meth:`feed` encodes them for all live
    rows in one call (left-padded within the block, pads masked)."""

    def __init__(self, model: Any, n: int, pad_id: int) -> None:
        import torch

        self.model, self.pad_id = model, pad_id
        self.device = next(model.parameters()).device
        self.cache_kw = _cache_kwarg(model)
        self.embed = model.get_input_embeddings()
        self.reset(list(range(n)))
        self.pending: list[list[int]] = [[] for _ in range(n)]
        self.prefix: list[Any] = [None] * n
        self.tokens_encoded = 0
        self._torch = torch

    def reset(self, live: list[int]) -> None:
        import torch

        self.cache = None
        self.live = list(live)
        self.index = {r: i for i, r in enumerate(self.live)}
        self.mask = torch.zeros((len(self.live), 0), dtype=torch.long,
                                device=next(self.model.parameters()).device)
        self.pos = {r: 0 for r in self.live}

    def feed(self) -> Any:
        """Encode all pending input of the live rows; ``[len(live), vocab]`` last logits."""
        torch = self._torch
        lens = [len(self.pending[r]) + (0 if self.prefix[r] is None else
                                        int(self.prefix[r].shape[0])) for r in self.live]
        n, m = len(self.live), max(lens)
        ids = torch.full((n, m), self.pad_id, dtype=torch.long)
        blk = torch.zeros((n, m), dtype=torch.long)
        pos = torch.zeros((n, m), dtype=torch.long)
        use_embeds = any(self.prefix[r] is not None for r in self.live)
        emb_rows = []
        for i, r in enumerate(self.live):
            ln = lens[i]
            if ln:
                p = self.pending[r]
                ids[i, m - len(p):] = torch.tensor(p, dtype=torch.long) if p else ids[i, :0]
                blk[i, m - ln:] = 1
                pos[i, m - ln:] = torch.arange(self.pos[r], self.pos[r] + ln)
                self.pos[r] += ln
            emb_rows.append(self.prefix[r])
        self.tokens_encoded += int(sum(lens))
        self.mask = torch.cat([self.mask, blk.to(self.device)], dim=1)
        kw = {self.cache_kw: self.cache} if self.cache is not None else {}
        if use_embeds:
            e = self.embed(ids.to(self.device))
            for i, pre in enumerate(emb_rows):
                if pre is not None:
                    k = pre.shape[0]
                    start = m - lens[i]
                    e[i, start:start + k] = pre.to(e.dtype)
            out = self.model(inputs_embeds=e, attention_mask=self.mask,
                             position_ids=pos.to(self.device), use_cache=True, **kw)
        else:
            out = self.model(input_ids=ids.to(self.device), attention_mask=self.mask,
                             position_ids=pos.to(self.device), use_cache=True, **kw)
        for r in self.live:
            self.pending[r] = []
            self.prefix[r] = None
        keys = out.keys() if hasattr(out, "keys") else ()
        self.cache = out["cache"] if "cache" in keys else getattr(out, "past_key_values", None)
        return out.logits[:, -1]

    def drop(self, rows: Sequence[int]) -> None:
        """Remove ``rows`` from the batch (rows left behind stay masked if the cache cannot)."""
        torch = self._torch
        gone = set(rows)
        keep = [i for i, r in enumerate(self.live) if r not in gone]
        if len(keep) == len(self.live) or not keep:
            if not keep:
                self.live, self.index = [], {}
            return
        if self.cache is not None and not hasattr(self.cache, "batch_select_indices"):
            return
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        if self.cache is not None:
            self.cache.batch_select_indices(idx)
        self.mask = self.mask[idx]
        self.live = [self.live[i] for i in keep]
        self.index = {r: i for i, r in enumerate(self.live)}


def _sample(logits: Any, cfg: RolloutConfig, generator: Any) -> tuple[Any, Any]:
    import torch

    z = logits.float() / cfg.temperature
    if cfg.top_k and cfg.top_k < z.shape[-1]:
        kth = torch.topk(z, cfg.top_k, dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    logp = torch.log_softmax(z, dim=-1)
    nxt = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
    return nxt, logp.gather(1, nxt[:, None]).squeeze(1)


def _gt_ids(tokenizer: Any) -> set[int]:
    """Token ids whose text contains '>' (only those can complete a stop string)."""
    cached = getattr(tokenizer, "_icml_drmm_gt_ids", None)
    if cached is not None:
        return cached
    toks = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    out = {i for i, t in enumerate(toks) if t is not None and ">" in t}
    try:
        tokenizer._icml_drmm_gt_ids = out
    except AttributeError:  # pragma: no cover
        pass
    return out


def agent_rollout(model: Any, tokenizer: Any, env: SearchEnv,
                  questions: Question | Sequence[Question], *, num_generations: int = 1,
                  config: RolloutConfig | None = None, generator: Any = None,
                  adapter: Any = None) -> list[Trajectory]:
    """Roll out ``num_generations`` trajectories per question (each question's group is
    consecutive; ``Trajectory.group`` is the question's position). Raises ``ValueError`` on an
    empty question list, ``num_generations < 1``, or a tokenizer that cannot write the tags."""
    import torch

    from icml_dr_mmsearch.tokenizer import check_tokenizer

    cfg = config or RolloutConfig()
    qs = [questions] if isinstance(questions, Question) else list(questions)
    if not qs:
        raise ValueError("questions is empty: pass at least one Question")
    for q in qs:
        if not isinstance(q, Question):
            raise ValueError(f"questions must be Question objects, got {type(q).__name__}")
    if not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(f"num_generations must be an int >= 1, got {num_generations!r}")
    if cfg.check_tags:
        check_tokenizer(tokenizer)
    eos = int(tokenizer.eos_token_id)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    gt = _gt_ids(tokenizer)
    stops = tuple(cfg.stop_strings)
    n = len(qs) * num_generations
    trajs: list[Trajectory] = []
    prompt_cache: dict[int, list[int]] = {}
    for r in range(n):
        g = r // num_generations
        q = qs[g]
        if g not in prompt_cache:
            ids = tokenizer(env.prompt(q), add_special_tokens=cfg.add_special_tokens)["input_ids"]
            if not ids:
                raise ValueError(f"question #{q.id} tokenises to nothing")
            prompt_cache[g] = list(ids)
        t = Trajectory(q, env.reset(q), g, segments=[(list(prompt_cache[g]), False)],
                       image=env.image_of(q))
        trajs.append(t)
    prefixes: list[Any] = [None] * n
    if adapter is not None:
        with torch.no_grad():
            for r, t in enumerate(trajs):
                if t.image is not None:
                    prefixes[r] = adapter.embed_image(t.image)

    was_training = model.training
    model.eval()
    state = _Contexts(model, n, pad)
    for r, t in enumerate(trajs):
        state.pending[r] = list(t.segments[0][0])
        state.prefix[r] = prefixes[r]
    running = list(range(n))
    try:
        with torch.no_grad():
            for _turn in range(env.max_rounds):
                if not running:
                    break
                if not cfg.kv_reuse and _turn > 0:
                    state.reset(running)
                    for r in running:
                        state.pending[r] = trajs[r].token_ids
                        state.prefix[r] = prefixes[r]
                budget = {r: min(cfg.max_turn_tokens, cfg.max_total_tokens
                                 - len(trajs[r].token_ids)) for r in running}
                turn_ids: dict[int, list[int]] = {r: [] for r in running}
                turn_lp: dict[int, list[float]] = {r: [] for r in running}
                active = [r for r in running if budget[r] > 0]
                for r in running:
                    if budget[r] <= 0:
                        trajs[r].truncated = True
                while active:
                    logits = state.feed()
                    rows = torch.tensor([state.index[r] for r in active], device=state.device)
                    nxt, lp = _sample(logits[rows], cfg, generator)
                    still = []
                    for j, (r, tok) in enumerate(zip(active, nxt.tolist(), strict=True)):
                        turn_ids[r].append(tok)
                        turn_lp[r].append(float(lp[j]))
                        state.pending[r] = [tok]
                        stop = tok == eos
                        if not stop and tok in gt:
                            text = tokenizer.decode(turn_ids[r], skip_special_tokens=True)
                            stop = text.rstrip().endswith(stops)
                        if not stop and len(turn_ids[r]) >= budget[r]:
                            stop = True
                        if not stop:
                            still.append(r)
                    active = still
                nxt_running, finished = [], []
                for r in running:
                    t = trajs[r]
                    ids = turn_ids[r]
                    t.segments.append((ids, True))
                    t.logprobs.extend(turn_lp[r])
                    text = tokenizer.decode([i for i in ids if i != eos],
                                            skip_special_tokens=True)
                    obs = None if not ids else env.step(t.episode, text)
                    if not ids:
                        t.episode.done, t.episode.end_reason = True, "length"
                    if obs is None:
                        finished.append(r)
                        state.pending[r] = []
                        continue
                    obs_ids = list(tokenizer(obs, add_special_tokens=False)["input_ids"])
                    t.segments.append((obs_ids, False))
                    if len(t.token_ids) >= cfg.max_total_tokens:
                        t.truncated = True
                        t.episode.done, t.episode.end_reason = True, "length"
                        finished.append(r)
                        state.pending[r] = []
                        continue
                    state.pending[r] = state.pending[r] + obs_ids
                    nxt_running.append(r)
                if cfg.kv_reuse:
                    state.drop(finished)
                running = nxt_running
        for r in running:   # ran out of rounds while expecting another turn (cannot happen:
            trajs[r].episode.done = True        # env.step ends the episode at the last round)
    finally:
        model.train(was_training)
    rollout_stats = {"tokens_encoded": state.tokens_encoded}
    for t in trajs:
        t.stats = rollout_stats  # type: ignore[attr-defined]
    return trajs


def trajectory_batch(trajs: Sequence[Trajectory], pad_id: int, device: Any = None) -> dict:
    """Right-padded training tensors: ``input_ids``, ``attention_mask`` and ``loss_mask``
    (``[N, L]``; ``loss_mask`` 1 on model tokens only)."""
    import torch

    seqs = [t.token_ids for t in trajs]
    masks = [t.loss_mask for t in trajs]
    width = max(len(s) for s in seqs)
    n = len(seqs)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    att = torch.zeros((n, width), dtype=torch.long)
    lm = torch.zeros((n, width), dtype=torch.long)
    for i, (s, m) in enumerate(zip(seqs, masks, strict=True)):
        ids[i, :len(s)] = torch.tensor(s)
        att[i, :len(s)] = 1
        lm[i, :len(s)] = torch.tensor(m)
    out = {"input_ids": ids, "attention_mask": att, "loss_mask": lm}
    if device is not None:
        out = {k: v.to(device) for k, v in out.items()}
    return out
