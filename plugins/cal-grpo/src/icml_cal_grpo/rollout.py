"""Multi-attempt rollout: up to K attempts per prompt with a hard verifier after each, a fixed
feedback text appended after each failure, and a stop at the first success.

Works with any transformers causal LM and tokenizer. Rollouts are batched behind one KV cache
that lives across attempts: the prompts are prefilled once (left-padded), then sampled tokens and
feedback texts are appended to the cache, so no token is encoded twice. Token spans are
recorded per attempt so the loss can give each attempt its own advantage while prompt and
feedback tokens stay masked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Verifier = Callable[[str, str, list[str]], bool]
"""``verifier(prompt, attempt_text, earlier_attempts) -> bool`` (a hard pass/fail)."""


class VerifierError(RuntimeError):
    """The verifier raised or returned a non-boolean. ``partial`` holds the rollouts finished
    so far (a :class:`RolloutBatch` whose unfinished rows are marked in ``complete``)."""

    def __init__(self, message: str, partial: RolloutBatch | None = None) -> None:
        super().__init__(message)
        self.partial = partial


@dataclass
class MultiAttemptConfig:
    """How attempts are generated and verified."""

    max_attempts: int = 3
    feedback: str = "\nIncorrect. Try again.\n"
    max_attempt_tokens: int = 64
    on_length: str = "fail"
    temperature: float = 1.0
    top_k: int = 0
    allowed_token_ids: tuple[int, ...] | None = None  # constrained decoding; add EOS to end
    add_special_tokens: bool = True
    backend: str = "cache"   # "cache": our sampler, one KV cache across attempts; "generate"

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"max_attempts (K) must be an int >= 1, got {self.max_attempts!r}")
        if self.max_attempt_tokens < 1:
            raise ValueError(f"max_attempt_tokens must be >= 1, got {self.max_attempt_tokens}")
        if self.on_length not in ("fail", "verify"):
            raise ValueError(f"on_length {self.on_length!r} is not known: use 'fail' (an attempt "
                             "cut by max_attempt_tokens counts as failed) or 'verify'")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.backend not in ("cache", "generate"):
            raise ValueError(f"backend {self.backend!r} is not known: use 'cache' (our sampler "
                             "with one KV cache across attempts) or 'generate' (transformers "
                             "generate, one call per attempt)")


@dataclass
class RolloutBatch:
    """Rollouts of ``N = len(prompts) * num_generations`` rows (each prompt's group is
    consecutive). ``rewards``/``reached``/``truncated`` are ``[N, K]`` tensors; ``input_ids``,
    ``attention_mask`` and ``attempt_index`` are right-padded ``[N, L]`` training sequences
    (prompt, attempt 1, feedback, attempt 2, ...), where ``attempt_index`` is the 0-based
    attempt of each token and -1 for prompt, feedback and padding. ``attempt_logprobs`` are
    full-vocabulary log-probs at the rollout temperature (what TRL computes), not renormalised
    over ``allowed_token_ids``; ``sequence_logprobs(..., allowed_token_ids=)`` gives the score
    of the constrained sampling distribution."""

    prompts: list[str]
    prompt_index: list[int]
    num_generations: int
    attempts: list[list[str]]
    attempt_ids: list[list[list[int]]]
    rewards: Any
    reached: Any
    truncated: Any
    complete: list[bool] = field(default_factory=list)
    attempt_logprobs: list[list[list[float]]] = field(default_factory=list)
    input_ids: Any = None
    attention_mask: Any = None
    attempt_index: Any = None

    @property
    def success(self) -> Any:
        """``[N]`` bool: some attempt passed."""
        return ((self.rewards > 0.5) & self.reached).any(dim=1)


def _is_bool(x: Any) -> bool:
    return isinstance(x, bool) or type(x).__name__ in ("bool_", "bool")


def _sample(logits: Any, cfg: MultiAttemptConfig, allowed: Any, generator: Any) -> Any:
    import torch

    logits = logits.float() / cfg.temperature
    if allowed is not None:
        logits = logits + allowed
    if cfg.top_k and cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def _cache_kwarg(model: Any) -> str:
    """``cache`` on transformers >= 5.x (where ``past_key_values`` is deprecated), else
    ``past_key_values``."""
    import inspect

    try:
        params = inspect.signature(_inner(model).forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _inner(model: Any) -> Any:
    """The transformers model under a PEFT wrapper (which passes keyword arguments through)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def _accepts(model: Any, name: str) -> bool:
    import inspect

    try:
        return name in inspect.signature(_inner(model).forward).parameters
    except (TypeError, ValueError):
        return False


def _get_cache(out: Any) -> Any:
    if "cache" in out:
        return out["cache"]
    return out["past_key_values"] if "past_key_values" in out else None


class _CachedContexts:
    """All rollout contexts of a batch behind one KV cache. Tokens added to a row's context go
    to ``pending[row]``; :meth:`feed` runs them through the model in one call (rows
    left-padded within the block, pads masked), so prompts, attempts and feedback are each
    encoded once across all attempts. :meth:`drop` removes finished rows from the cache."""

    def __init__(self, model: Any, prompts: list[list[int]], pad_id: int) -> None:
        import torch

        self.model, self.pad_id = model, pad_id
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.cache_kw = _cache_kwarg(model)
        self.keep_last = _accepts(model, "logits_to_keep")
        self.cache: Any = None
        self.live = list(range(len(prompts)))          # row id at each cache batch position
        self.index = {r: i for i, r in enumerate(self.live)}
        self.mask = torch.zeros((len(prompts), 0), dtype=torch.long, device=self.device)
        self.pos = [0] * len(prompts)
        self.pending = [list(p) for p in prompts]

    def _keep_last(self, m: int) -> Any:
        """``logits_to_keep`` for the last of ``m`` positions. For a reduced-precision model an
        index tensor: transformers then gathers a contiguous ``[n, 1, H]`` block for the output
        layer, where the strided slice that ``1`` gives sends bf16 ``F.linear`` to a batched
        matmul that copies the ``[H, V]`` weight once per row (13 rows of SmolLM2: 1.7 s instead
        of 0.013 s, the same values). float32 keeps ``1`` (its kernels differ in the last bit,
        and its numbers stay as they were)."""
        import torch

        if m > 1 and self.dtype not in (torch.float32, torch.float64):
            return torch.tensor([m - 1], device=self.device)
        return 1

    def feed(self) -> Any:
        """Encode every pending token of the live rows; returns ``[len(live), vocab]`` logits
        after each row's last token (index rows with ``self.index``)."""
        if self.cache is None:
            return self._prefill()
        return self._feed_all()

    def _feed_all(self) -> Any:
        import torch

        n, m = len(self.live), max(len(self.pending[r]) for r in self.live)
        ids = torch.full((n, m), self.pad_id, dtype=torch.long)
        blk = torch.zeros((n, m), dtype=torch.long)
        pos = torch.zeros((n, m), dtype=torch.long)
        for i, r in enumerate(self.live):
            p = self.pending[r]
            if p:
                ln = len(p)
                ids[i, m - ln:] = torch.tensor(p, dtype=torch.long)
                blk[i, m - ln:] = 1
                pos[i, m - ln:] = torch.arange(self.pos[r], self.pos[r] + ln)
                self.pos[r] += ln
            self.pending[r] = []
        self.mask = torch.cat([self.mask, blk.to(self.device)], dim=1)
        kw = {self.cache_kw: self.cache} if self.cache is not None else {}
        if self.keep_last:                               # no [n, m, V] block on prefill
            kw["logits_to_keep"] = self._keep_last(m)
        out = self.model(input_ids=ids.to(self.device), attention_mask=self.mask,
                         position_ids=pos.to(self.device), use_cache=True, **kw)
        self.cache = _get_cache(out)
        return out.logits[:, -1]

    def _prefill(self) -> Any:
        """The first :meth:`feed`: each distinct prompt is encoded once and its cache rows are
        copied to the rows that share it (a group of ``num_generations`` rollouts of one
        prompt costs one prompt's prefill), when the cache can select batch rows; else every
        row is encoded."""
        import torch

        uniq: dict[tuple[int, ...], int] = {}
        owner = [uniq.setdefault(tuple(self.pending[r]), len(uniq)) for r in self.live]
        if len(uniq) == len(self.live):
            return self._feed_all()
        rows = list(self.live)
        reps = []
        seen: set[int] = set()
        for r, u in zip(rows, owner, strict=True):
            if u not in seen:
                seen.add(u)
                reps.append(r)
        saved = {r: self.pending[r] for r in rows}
        self.live = reps
        self.mask = self.mask[:len(reps)]                       # [len(reps), 0]
        logits = self._feed_all()
        self.live = rows
        if self.cache is None or not hasattr(self.cache, "batch_select_indices"):
            self.cache = None                                   # cannot copy: encode every row
            self.mask = torch.zeros((len(rows), 0), dtype=torch.long, device=self.device)
            self.pos = [0] * len(self.pos)
            for r in rows:
                self.pending[r] = saved[r]
            return self._feed_all()
        idx = torch.tensor(owner, dtype=torch.long, device=self.device)
        self.cache.batch_select_indices(idx)
        self.mask = self.mask[idx]
        for r, u in zip(rows, owner, strict=True):
            self.pos[r] = self.pos[reps[u]]
            self.pending[r] = []
        return logits[idx]

    def drop(self, rows: Sequence[int]) -> None:
        """Remove finished ``rows`` from the batch (when the cache supports it)."""
        import torch

        gone = set(rows)
        keep = [i for i, r in enumerate(self.live) if r not in gone]
        if len(keep) == len(self.live) or not keep:
            return
        if self.cache is None or not hasattr(self.cache, "batch_select_indices"):
            return                                       # finished rows just stay, masked
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.cache.batch_select_indices(idx)
        self.mask = self.mask[idx]
        self.live = [self.live[i] for i in keep]
        self.index = {r: i for i, r in enumerate(self.live)}


def _generate_attempt(state: _CachedContexts, rows: list[int], cfg: MultiAttemptConfig,
                      eos_ids: set[int], allowed: Any,
                      generator: Any) -> tuple[list[list[int]], list[bool], list[list[float]]]:
    """Sample one attempt for each row in ``rows``: (tokens incl. a final EOS,
    ended_by_eos, the model's log-probs of the sampled tokens at ``cfg.temperature``)."""
    import torch

    tokens: dict[int, list[int]] = {r: [] for r in rows}
    lps: dict[int, list[float]] = {r: [] for r in rows}
    active = list(rows)
    for _ in range(cfg.max_attempt_tokens):
        logits = state.feed()
        logits = logits[torch.tensor([state.index[r] for r in active], device=state.device)]
        nxt = _sample(logits, cfg, allowed, generator)
        lp = torch.log_softmax(logits.float() / cfg.temperature, dim=-1)
        lp = lp.gather(1, nxt[:, None]).squeeze(1).tolist()
        for j, (r, t) in enumerate(zip(active, nxt.tolist(), strict=True)):
            tokens[r].append(t)
            lps[r].append(lp[j])
            state.pending[r] = [t]
        active = [r for r in active if tokens[r][-1] not in eos_ids]
        if not active:
            break
    return ([tokens[r] for r in rows], [tokens[r][-1] in eos_ids for r in rows],
            [lps[r] for r in rows])


def _generate_attempt_hf(model: Any, contexts: list[list[int]], cfg: MultiAttemptConfig,
                         eos_ids: set[int], pad_id: int, allowed: Any,
                         generator: Any) -> tuple[list[list[int]], list[bool], list[list[float]]]:
    """One attempt for each context through ``model.generate`` (left-padded batch, explicit
    sampling settings so the model's own generation_config cannot change them). The RNG stream
    is seeded from ``generator``, inside ``fork_rng`` so the global one is left alone."""
    import torch
    from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

    dev = next(model.parameters()).device
    width = max(len(c) for c in contexts)
    ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, c in enumerate(contexts):
        ids[i, width - len(c):] = torch.tensor(c, dtype=torch.long)
        att[i, width - len(c):] = 1
    gcfg = GenerationConfig(do_sample=True, temperature=cfg.temperature, top_k=cfg.top_k or None,
                            top_p=1.0, max_new_tokens=cfg.max_attempt_tokens,
                            eos_token_id=sorted(eos_ids), pad_token_id=pad_id,
                            return_dict_in_generate=True, output_logits=True)
    procs = LogitsProcessorList()
    if allowed is not None:
        class _Allowed(LogitsProcessor):
            def __call__(self, input_ids: Any, scores: Any) -> Any:
                return scores + allowed.to(scores.dtype)

        procs.append(_Allowed())
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device)) \
        if generator is not None else int(torch.randint(0, 2**62, (1,)))
    devices = [dev] if dev.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        out = model.generate(input_ids=ids.to(dev), attention_mask=att.to(dev),
                             generation_config=gcfg, logits_processor=procs)
    new = out.sequences[:, width:]
    logits = torch.stack(out.logits, dim=1).float() / cfg.temperature         # [n, T, V]
    lp_all = torch.log_softmax(logits, dim=-1).gather(2, new[:, :, None]).squeeze(2)
    toks, ended, lps = [], [], []
    for i in range(new.shape[0]):
        row = new[i].tolist()
        end = next((j for j, t in enumerate(row) if t in eos_ids), None)
        cut = len(row) if end is None else end + 1
        toks.append(row[:cut])
        ended.append(end is not None)
        lps.append(lp_all[i, :cut].tolist())
    return toks, ended, lps


def multi_attempt_rollout(model: Any, tokenizer: Any, prompts: Sequence[str],
                          verifier: Verifier, config: MultiAttemptConfig | None = None, *,
                          num_generations: int = 1, generator: Any = None) -> RolloutBatch:
    """Roll out up to ``config.max_attempts`` attempts per (prompt, generation).

    After each attempt the verifier is called as ``verifier(prompt, attempt_text,
    earlier_attempt_texts)`` and must return a bool. A failed attempt gets ``config.feedback``
    appended to its context before the next one; a success ends the rollout. An attempt cut by
    ``max_attempt_tokens`` (no EOS) counts as failed when ``on_length="fail"`` (the verifier is
    not called). Returns a :class:`RolloutBatch`. Raises :class:`VerifierError` (naming the
    prompt, with the finished rollouts in ``.partial``) if the verifier raises or returns a
    non-boolean, and ``ValueError`` on empty prompts.
    """
    import torch

    cfg = config or MultiAttemptConfig()
    if isinstance(prompts, str):
        raise ValueError("prompts must be a list of strings, not one string: wrap it in [...]")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts is empty: pass at least one prompt")
    if num_generations < 1:
        raise ValueError(f"num_generations must be >= 1, got {num_generations}")
    if not callable(verifier):
        raise ValueError("verifier must be callable as verifier(prompt, attempt, earlier) -> bool")
    prompt_ids = []
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise ValueError(f"prompt #{i} is {type(p).__name__}, not str")
        toks = tokenizer(p, add_special_tokens=cfg.add_special_tokens)["input_ids"]
        if not p.strip() or not toks:
            raise ValueError(f"prompt #{i} ({p!r}) is empty: every prompt needs some text")
        prompt_ids.append(list(toks))
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token_id: set tokenizer.eos_token")
    eos_ids = {int(eos)}
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else int(eos)
    fb_ids = list(tokenizer(cfg.feedback, add_special_tokens=False)["input_ids"]) \
        if cfg.feedback else []
    device = next(model.parameters()).device
    allowed = None
    if cfg.allowed_token_ids is not None:
        vocab = int(getattr(model.config, "vocab_size", 0) or 0)
        out_emb = model.get_output_embeddings()
        if out_emb is not None and hasattr(out_emb, "weight"):
            vocab = out_emb.weight.shape[0]
        ids = [int(t) for t in cfg.allowed_token_ids]
        if not ids or min(ids) < 0 or max(ids) >= vocab:
            raise ValueError(f"allowed_token_ids {ids[:8]} must be non-empty ids in [0, {vocab})")
        allowed = torch.full((vocab,), float("-inf"), device=device)
        allowed[ids] = 0.0

    k_max = cfg.max_attempts
    n = len(prompts) * num_generations
    row_prompt = [i // num_generations for i in range(n)]
    attempts: list[list[str]] = [[] for _ in range(n)]
    attempt_ids: list[list[list[int]]] = [[] for _ in range(n)]
    rewards = torch.zeros((n, k_max), dtype=torch.float32)
    reached = torch.zeros((n, k_max), dtype=torch.bool)
    truncated = torch.zeros((n, k_max), dtype=torch.bool)
    running = list(range(n))
    batch = RolloutBatch([prompts[row_prompt[r]] for r in range(n)], row_prompt,
                         num_generations, attempts, attempt_ids, rewards, reached, truncated,
                         complete=[False] * n, attempt_logprobs=[[] for _ in range(n)])
    was_training = model.training
    model.eval()
    state = _CachedContexts(model, [prompt_ids[row_prompt[r]] for r in range(n)], pad_id)
    contexts = [list(prompt_ids[row_prompt[r]]) for r in range(n)]   # for backend="generate"
    try:
        for k in range(k_max):
            if not running:
                break
            with torch.no_grad():
                if cfg.backend == "generate":
                    toks, ended, lps = _generate_attempt_hf(
                        model, [contexts[r] for r in running], cfg, eos_ids, pad_id, allowed,
                        generator)
                else:
                    toks, ended, lps = _generate_attempt(state, running, cfg, eos_ids, allowed,
                                                         generator)
            still = []
            for j, r in enumerate(running):
                body = [t for t in toks[j] if t not in eos_ids]
                text = tokenizer.decode(body, skip_special_tokens=True)
                reached[r, k] = True
                truncated[r, k] = not ended[j]
                if truncated[r, k] and cfg.on_length == "fail":
                    ok = False
                else:
                    prompt = prompts[row_prompt[r]]
                    try:
                        ok = verifier(prompt, text, list(attempts[r]))
                    except Exception as exc:
                        raise VerifierError(
                            f"verifier raised {type(exc).__name__}: {exc} on prompt "
                            f"#{row_prompt[r]} ({prompt[:60]!r}), attempt {k + 1}; the finished "
                            "rollouts are in .partial", batch) from exc
                    if not _is_bool(ok):
                        raise VerifierError(
                            f"verifier returned {type(ok).__name__} {ok!r} on prompt "
                            f"#{row_prompt[r]} ({prompt[:60]!r}), attempt {k + 1}: it must "
                            "return True or False; the finished rollouts are in .partial", batch)
                    ok = bool(ok)
                attempts[r].append(text)
                attempt_ids[r].append(list(toks[j]))
                batch.attempt_logprobs[r].append(lps[j])
                rewards[r, k] = float(ok)
                if ok or k + 1 == k_max:
                    batch.complete[r] = True
                    state.pending[r] = []
                else:
                    state.pending[r] = state.pending[r] + fb_ids
                    contexts[r] = contexts[r] + list(toks[j]) + fb_ids
                    still.append(r)
            if cfg.backend == "cache":
                state.drop([r for r in running if r not in set(still)])
            running = still
    finally:
        model.train(was_training)
    _build_sequences(batch, prompt_ids, fb_ids, pad_id)
    return batch


def _build_sequences(batch: RolloutBatch, prompt_ids: list[list[int]], fb_ids: list[int],
                     pad_id: int) -> None:
    import torch

    seqs, labels = [], []
    for r, atts in enumerate(batch.attempt_ids):
        s = list(prompt_ids[batch.prompt_index[r]])
        lab = [-1] * len(s)
        for k, a in enumerate(atts):
            if k > 0:
                s += fb_ids
                lab += [-1] * len(fb_ids)
            s += a
            lab += [k] * len(a)
        seqs.append(s)
        labels.append(lab)
    width = max(len(s) for s in seqs)
    n = len(seqs)
    batch.input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    batch.attention_mask = torch.zeros((n, width), dtype=torch.long)
    batch.attempt_index = torch.full((n, width), -1, dtype=torch.long)
    for r, (s, lab) in enumerate(zip(seqs, labels, strict=True)):
        batch.input_ids[r, :len(s)] = torch.tensor(s)
        batch.attention_mask[r, :len(s)] = 1
        batch.attempt_index[r, :len(s)] = torch.tensor(lab)
