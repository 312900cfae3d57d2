"""Speculative decoding with draft heads: one backbone call verifies a chain (or a small tree)
of K drafted tokens against the KV cache, then the cache is cropped to the accepted prefix.

Acceptance rules (``acceptance=``):

- ``"topk"`` (default, the paper's "quality criterion" as reconstructed): a draft is kept when
  it lies in the backbone's top-k (and top-p) set at its position; a rejected draft is resampled
  from the backbone's filtered distribution.
- ``"greedy"``: a draft is kept when it equals the backbone's argmax; lossless, the output is the
  autoregressive greedy output token for token.
- ``"exact"``: rejection sampling (Leviathan et al. 2023; Chen et al. 2023): drafts are sampled
  from the heads' distribution q, kept with probability min(1, p/q), a rejection resamples from
  norm(max(p - q, 0)); the output has the autoregressive sampling distribution exactly.

Every iteration emits between 1 and K+1 tokens; the first token comes from the prefill call.
``heads=None`` is plain autoregressive decoding through the same loop (the baseline).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from icml_xspecmesh.config import DecodeConfig
from icml_xspecmesh.kvcache import crop_cache, forward_with_cache

ACCEPTANCE_RULES = ("topk", "greedy", "exact")


@dataclass
class SpeculativeOutput:
    """Result of :func:`speculative_generate`.

    ``sequences``: ``(B, prompt + new)`` ids (right-padded with ``pad_token_id``), like
    ``generate``. ``n_backbone_calls``: backbone forwards per row (prefill included).
    ``accepted_lengths``: per row, tokens emitted by each verification call (1..K+1).
    ``kv_lengths``: per row, the KV-cache length after each crop (equals the emitted prefix).
    """

    sequences: torch.Tensor
    n_backbone_calls: list[int]
    n_new_tokens: list[int]
    accepted_lengths: list[list[int]]
    n_drafted: list[int]
    n_accepted: list[int]
    kv_lengths: list[list[int]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def tokens_per_call(self) -> float:
        """Generated tokens per backbone call, over the batch."""
        return sum(self.n_new_tokens) / max(sum(self.n_backbone_calls), 1)

    @property
    def acceptance_rate(self) -> float:
        """Accepted drafts over drafted tokens."""
        return sum(self.n_accepted) / max(sum(self.n_drafted), 1)


def filtered_probs(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int = 0,
                   top_p: float = 1.0) -> torch.Tensor:
    """Softmax of ``logits / temperature`` restricted to the top-k and top-p (nucleus) set,
    renormalised. ``top_k=0`` and ``top_p=1`` disable the filters. Last dimension = vocab."""
    logits = logits.float() / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sp, si = torch.sort(probs, dim=-1, descending=True)
        before = torch.cumsum(sp, dim=-1) - sp  # mass strictly above each token
        drop = before >= top_p
        sp = sp.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, si, sp)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def _on(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Probabilities on the generator's device (a CPU generator may drive a CUDA model)."""
    return probs if generator is None or probs.device == generator.device else probs.to(
        generator.device)


def _sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(_on(probs, generator), 1, generator=generator).item())


class Sampler:
    """The backbone's sampler and the acceptance rule of one decoding call, with the settings
    of ``config`` (kept as ``self.config``); ``acceptance`` is the rule, ``generator`` the
    random stream."""

    def __init__(self, config: DecodeConfig, acceptance: str = "topk",
                 generator: torch.Generator | None = None) -> None:
        if acceptance not in ACCEPTANCE_RULES:
            raise ValueError(f"acceptance={acceptance!r} is not a rule: use one of "
                             f"{', '.join(ACCEPTANCE_RULES)}")
        if acceptance == "topk" and not config.acceptance_top_k and \
                config.acceptance_top_p >= 1:
            raise ValueError("acceptance='topk' with top_k=0 and top_p=1 accepts every draft: "
                             "set top_k (e.g. 5) or top_p (e.g. 0.9)")
        if config.tree_width > 1 and acceptance == "exact":
            raise ValueError("tree_width > 1 is not supported with acceptance='exact' "
                             "(multi-draft rejection sampling is not implemented): use "
                             "tree_width=1")
        self.config, self.acceptance, self.generator = config, acceptance, generator
        self.temperature, self.top_k, self.top_p = config.temperature, config.top_k, \
            config.top_p
        self.accept_top_k, self.accept_top_p = config.acceptance_top_k, \
            config.acceptance_top_p

    def accepts(self, logits: torch.Tensor, token: int) -> bool:
        """The quality criterion: ``token`` lies in the backbone's acceptance set."""
        p = filtered_probs(logits, temperature=self.temperature, top_k=self.accept_top_k,
                           top_p=self.accept_top_p)
        return bool(p[token] > 0)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return filtered_probs(logits, temperature=self.temperature, top_k=self.top_k,
                              top_p=self.top_p)

    def next_token(self, logits: torch.Tensor) -> int:
        """The backbone's own choice (AR step, resample after a rejection, bonus token)."""
        if self.acceptance == "greedy":
            return int(logits.argmax().item())
        return _sample(self.probs(logits), self.generator)

    def propose(self, head_logits: torch.Tensor) -> tuple[list[int], torch.Tensor | None]:
        """Drafts from head logits ``(K, V)``; for ``exact`` also the proposal q."""
        if self.acceptance == "exact":
            q = self.probs(head_logits)
            draws = torch.multinomial(_on(q, self.generator), 1, generator=self.generator)
            return draws[:, 0].tolist(), q
        return head_logits.argmax(dim=-1).tolist(), None

    def n_matching(self, drafts: list[int], logits: torch.Tensor) -> int:
        """Accepted-prefix length under a deterministic rule (greedy, topk), no sampling."""
        for j, c in enumerate(drafts):
            if self.acceptance == "greedy":
                if c != int(logits[j].argmax().item()):
                    return j
            elif not self.accepts(logits[j], c):
                return j
        return len(drafts)

    def verify(self, drafts: list[int], q: torch.Tensor | None,
               logits: torch.Tensor) -> tuple[int, int]:
        """Number of accepted drafts m and the token emitted after them (resample or bonus)."""
        for j, c in enumerate(drafts):
            row = logits[j]
            if self.acceptance == "greedy":
                best = int(row.argmax().item())
                if c != best:
                    return j, best
            elif self.acceptance == "topk":
                if not self.accepts(row, c):
                    return j, _sample(self.probs(row), self.generator)
            else:  # exact
                p = self.probs(row)
                ratio = float(p[c] / q[j, c])
                dev = self.generator.device if self.generator is not None else "cpu"
                u = float(torch.rand((), generator=self.generator, device=dev))
                if u >= min(1.0, ratio):
                    resid = torch.clamp(p - q[j], min=0)
                    total = float(resid.sum())
                    return j, _sample(resid / total if total > 0 else p, self.generator)
        return len(drafts), self.next_token(logits[len(drafts)])


def _forward(model: Any, ids: torch.Tensor, cache: Any) -> tuple[Any, Any]:
    return forward_with_cache(model, ids, cache)


def _max_positions(model: Any) -> int | None:
    cfg = getattr(model, "config", None)
    return getattr(cfg, "max_position_embeddings", None)


def _generate_row(model: Any, heads: Any, prompt: torch.Tensor, *, max_new_tokens: int,
                  sampler: Sampler, eos: set[int], tree_width: int) -> dict[str, Any]:
    seq = prompt.tolist()
    out, cache = _forward(model, prompt[None], None)
    calls = 1
    last_hidden = out.hidden_states[-1]
    cond = last_hidden if heads is not None and heads.cross_attention else None
    h = last_hidden[0, -1]
    tok = sampler.next_token(out.logits[0, -1])
    seq.append(tok)
    new, accepted, kv, drafted, acc = 1, [], [], 0, 0
    K = 0 if heads is None else heads.num_heads
    while new < max_new_tokens and tok not in eos:
        k_eff = min(K, max_new_tokens - new - 1)
        base = cache.get_seq_length()
        if k_eff == 0:
            out, cache = _forward(model, torch.tensor([[tok]], device=prompt.device), cache)
            calls += 1
            m, nxt, drafts = 0, sampler.next_token(out.logits[0, -1]), []
            h = out.hidden_states[-1][0, -1]
        else:
            with torch.no_grad():
                hl = heads(h[None], cond, num_heads=k_eff)[0]  # (k_eff, V)
            chains, qs = _draft_chains(hl, sampler, tree_width)
            inp = torch.tensor([[tok] + c for c in chains], device=prompt.device)
            if len(chains) > 1:
                cache.batch_repeat_interleave(len(chains))
            out, cache = _forward(model, inp, cache)
            calls += 1
            best = 0 if len(chains) == 1 else max(
                range(len(chains)), key=lambda i: sampler.n_matching(chains[i], out.logits[i]))
            drafts = chains[best]
            m, nxt = sampler.verify(drafts, qs[best], out.logits[best])
            if len(chains) > 1:
                cache.batch_select_indices(torch.tensor([best], device=prompt.device))
            h = out.hidden_states[-1][best, m]
            drafted += len(drafts)
            acc += m
        emitted = drafts[:m] + [nxt]
        for i, t in enumerate(emitted):
            if t in eos:
                emitted = emitted[:i + 1]
                break
        # the cache keeps every emitted token but the last one, which is the next input
        crop_cache(cache, base + len(emitted))
        seq.extend(emitted)
        new += len(emitted)
        tok = seq[-1]
        accepted.append(len(emitted))
        kv.append(cache.get_seq_length())
    return {"seq": seq, "calls": calls, "new": new, "accepted": accepted, "kv": kv,
            "drafted": drafted, "acc": acc}


def _verify_rows(sampler: Sampler, drafts: list[list[int]], qs: list[torch.Tensor | None],
                 logits: torch.Tensor, rows: list[int]) -> list[tuple[int, int]]:
    """Per-row acceptance of a batched verification call: row ``rows[i]``'s drafts are checked
    against that row's logits only (each row keeps its own accepted length)."""
    return [sampler.verify(drafts[i], qs[i], logits[b]) for i, b in enumerate(rows)]


def _generate_batch(model: Any, heads: Any, prompts: list[torch.Tensor], *,
                    max_new_tokens: int, sampler: Sampler, eos: set[int],
                    pad: int) -> list[dict[str, Any]]:
    """Every row in one backbone call per iteration (chain drafts), each row accepting its own
    drafts. The batch shares one cache: rows are left-padded in the prefill, every row feeds
    ``[last token, drafts]`` each call, and positions a row rejected stay in the cache but are
    masked out (``attention_mask``) and skipped by the row's position ids; trailing positions
    that every row rejected are cropped. Rows that finished feed masked padding."""
    dev = prompts[0].device
    B, P = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((B, P), pad, dtype=torch.long, device=dev)
    amask = torch.zeros((B, P), dtype=torch.long, device=dev)
    for b, p in enumerate(prompts):
        ids[b, P - len(p):] = p
        amask[b, P - len(p):] = 1
    pos = (amask.cumsum(1) - 1).clamp(min=0)
    out, cache = forward_with_cache(model, ids, None, attention_mask=amask, position_ids=pos)
    last = out.hidden_states[-1]
    cond, cond_mask = (last, amask.clone()) if heads is not None and heads.cross_attention \
        else (None, None)
    rows = [{"seq": p.tolist(), "calls": 1, "new": 1, "accepted": [], "kv": [], "drafted": 0,
             "acc": 0} for p in prompts]
    n_real = [len(p) for p in prompts]  # valid cache positions = the next position id
    h = last[:, -1]
    for b, r in enumerate(rows):
        r["seq"].append(sampler.next_token(out.logits[b, -1]))
    K = 0 if heads is None else heads.num_heads
    while True:
        active = [b for b, r in enumerate(rows)
                  if r["new"] < max_new_tokens and r["seq"][-1] not in eos]
        if not active:
            break
        k = min([K] + [max_new_tokens - rows[b]["new"] - 1 for b in active])
        drafts: list[list[int]] = [[] for _ in active]
        qs: list[torch.Tensor | None] = [None] * len(active)
        if k > 0:
            with torch.no_grad():
                hl = heads(h[active], None if cond is None else cond[active],
                           None if cond is None else cond_mask[active], num_heads=k)
            for i in range(len(active)):
                drafts[i], qs[i] = sampler.propose(hl[i])
        inp = torch.full((B, k + 1), pad, dtype=torch.long, device=dev)
        step_mask = torch.zeros((B, k + 1), dtype=torch.long, device=dev)
        for i, b in enumerate(active):
            inp[b] = torch.tensor([rows[b]["seq"][-1]] + drafts[i], device=dev)
            step_mask[b] = 1
        base = amask.shape[1]
        amask = torch.cat([amask, step_mask], dim=1)
        pos = torch.tensor(n_real, device=dev)[:, None] + torch.arange(k + 1, device=dev)[None]
        out, cache = forward_with_cache(model, inp, cache, attention_mask=amask,
                                        position_ids=pos)
        hidden = out.hidden_states[-1]
        h = h.clone()
        for i, ((m, nxt), b) in enumerate(zip(_verify_rows(sampler, drafts, qs, out.logits,
                                                           active), active, strict=True)):
            r = rows[b]
            emitted = drafts[i][:m] + [nxt]
            for j, t in enumerate(emitted):
                if t in eos:
                    emitted = emitted[:j + 1]
                    break
            # the cache keeps the last token and the accepted drafts; the rest is masked
            amask[b, base + m + 1:] = 0
            n_real[b] += m + 1
            h[b] = hidden[b, m]
            r["seq"].extend(emitted)
            r["new"] += len(emitted)
            r["calls"] += 1
            r["drafted"] += len(drafts[i])
            r["acc"] += m
            r["accepted"].append(len(emitted))
            r["kv"].append(n_real[b])
        keep = int(amask.any(dim=0).nonzero().max()) + 1
        if keep < amask.shape[1]:
            crop_cache(cache, keep)
            amask = amask[:, :keep]
    return rows


def _draft_chains(head_logits: torch.Tensor, sampler: Sampler,
                  tree_width: int) -> tuple[list[list[int]], list[torch.Tensor | None]]:
    drafts, q = sampler.propose(head_logits)
    if tree_width <= 1:
        return [drafts], [q]
    # a tree of depth K: the top-w first tokens, each followed by the other heads' argmax
    firsts = torch.topk(head_logits[0], min(tree_width, head_logits.shape[-1])).indices.tolist()
    return [[f] + drafts[1:] for f in firsts], [None] * len(firsts)


@torch.no_grad()
def _vocab_size(model: Any) -> int | None:
    emb = getattr(model, "get_input_embeddings", lambda: None)()
    n = getattr(emb, "num_embeddings", None)
    return int(n) if n is not None else getattr(getattr(model, "config", None), "vocab_size",
                                                 None)


def _checked_ids(model: Any, input_ids: Any) -> torch.Tensor:
    """``input_ids`` as a 2-D integer tensor of valid token ids, or a one-line ``ValueError``
    (float ids and ids past the vocabulary otherwise end in raw torch index errors)."""
    if not isinstance(input_ids, torch.Tensor):
        raise ValueError(f"input_ids must be a torch tensor of token ids, got "
                         f"{type(input_ids).__name__}")
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex \
            or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype} "
                         "(use .long())")
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be 1-D or 2-D (batch, tokens), got shape "
                         f"{tuple(input_ids.shape)}")
    if input_ids.shape[1] == 0:
        raise ValueError("input_ids is empty: give at least one prompt token (e.g. BOS)")
    vocab = _vocab_size(model)
    lo, hi = int(input_ids.min()), int(input_ids.max())
    if lo < 0 or (vocab is not None and hi >= vocab):
        raise ValueError(f"input_ids must lie in [0, {vocab}) (the backbone's vocabulary), got "
                         f"ids from {lo} to {hi}")
    return input_ids.long()


@torch.no_grad()
def speculative_generate(model: Any, heads: Any, input_ids: torch.Tensor,
                         config: DecodeConfig | None = None, *,
                         attention_mask: torch.Tensor | None = None, max_new_tokens: int = 128,
                         acceptance: str = "topk", eos_token_id: int | list[int] | None = None,
                         pad_token_id: int | None = None,
                         generator: torch.Generator | None = None,
                         **settings: Any) -> SpeculativeOutput:
    """Generate with draft ``heads`` verified by ``model`` (any transformers causal LM).

    ``config`` (a :class:`~icml_xspecmesh.config.DecodeConfig`, default ``DecodeConfig()``)
    holds the sampler's and the ``topk`` rule's settings; ``settings`` are fields of it to
    change for this call (``top_k=5``, ``accept_top_k=None``, ``tree_width=2``): unknown names
    raise, values are checked by the config. ``heads=None`` decodes autoregressively with the
    same sampler (the baseline). Rows of a batch (``attention_mask`` marks left or right
    padding) are decoded one after the other, each with its own cache, or with
    ``batch_rows=True`` together, one backbone call per iteration for all rows, each row
    accepting its own drafts (``n_backbone_calls`` then counts the calls a row took part in).
    ``tree_width > 1``
    verifies that many alternative first drafts in the same backbone call (a batch of chains
    sharing the cache); it needs ``greedy`` or ``topk``. ``top_k``/``top_p``/``temperature``
    filter every token the backbone samples (and the heads' proposal in ``exact`` mode);
    ``accept_top_k``/``accept_top_p`` define the ``topk`` rule's acceptance set (none: the
    same as sampling; smaller = stricter, closer to AR quality, fewer accepted drafts).
    ``eos_token_id`` defaults to the model's generation config.
    """
    from dataclasses import replace

    config = config if config is not None else DecodeConfig()
    if settings:
        config = replace(config, **settings)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    sampler = Sampler(config, acceptance, generator)
    tree_width = config.tree_width
    input_ids = _checked_ids(model, input_ids)
    limit = _max_positions(model)
    K = 0 if heads is None else heads.num_heads
    if limit is not None and K + 1 > limit:
        raise ValueError(f"{K} heads draft {K + 1} positions per call but the backbone allows "
                         f"{limit} positions: use fewer heads")
    if limit is not None and input_ids.shape[1] + max_new_tokens > limit:
        raise ValueError(f"prompt ({input_ids.shape[1]}) + max_new_tokens ({max_new_tokens}) "
                         f"exceeds the backbone's max_position_embeddings ({limit}): lower "
                         "max_new_tokens")
    gen_cfg = getattr(model, "generation_config", None)
    if eos_token_id is None and gen_cfg is not None:
        eos_token_id = gen_cfg.eos_token_id
    eos = set() if eos_token_id is None else (
        {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id))
    if pad_token_id is None:
        pad_token_id = getattr(gen_cfg, "pad_token_id", None)
        pad_token_id = pad_token_id if pad_token_id is not None else (min(eos) if eos else 0)
    if heads is not None:
        heads.eval()
    prompts = [input_ids[b] if attention_mask is None else
               input_ids[b][attention_mask[b].bool()] for b in range(input_ids.shape[0])]
    t0 = time.perf_counter()
    if config.batch_rows and len(prompts) > 1:
        rows = _generate_batch(model, heads, prompts, max_new_tokens=max_new_tokens,
                               sampler=sampler, eos=eos, pad=pad_token_id)
    else:
        rows = [_generate_row(model, heads, prompt, max_new_tokens=max_new_tokens,
                              sampler=sampler, eos=eos, tree_width=tree_width)
                for prompt in prompts]
    seconds = time.perf_counter() - t0
    L = max(len(r["seq"]) for r in rows)
    seqs = torch.full((len(rows), L), pad_token_id, dtype=torch.long, device=input_ids.device)
    for i, r in enumerate(rows):
        seqs[i, :len(r["seq"])] = torch.tensor(r["seq"], device=input_ids.device)
    return SpeculativeOutput(sequences=seqs, n_backbone_calls=[r["calls"] for r in rows],
                             n_new_tokens=[r["new"] for r in rows],
                             accepted_lengths=[r["accepted"] for r in rows],
                             n_drafted=[r["drafted"] for r in rows],
                             n_accepted=[r["acc"] for r in rows],
                             kv_lengths=[r["kv"] for r in rows], seconds=seconds)


@torch.no_grad()
def autoregressive_generate(model: Any, input_ids: torch.Tensor,
                            **kwargs: Any) -> SpeculativeOutput:
    """The baseline: one backbone call per token, same sampler and accounting."""
    return speculative_generate(model, None, input_ids, **kwargs)
