"""Evaluation: pass@k of several decoders on the verifiable task, entropy profiles, timing."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from icml_led.metrics import distinct_fraction, mean_pass_at_k
from icml_led.task import Problem, encode, is_correct


@dataclass
class Method:
    """A decoder to compare: ``make(generator)`` builds the ``custom_generate`` callable (None =
    transformers' own sampler) and ``generate_kwargs`` go to ``model.generate``."""

    name: str
    make: Any
    generate_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class MethodResult:
    name: str
    correct: list[int]
    num_samples: int
    pass_at: dict[int, float]
    distinct_answers: float
    distinct_traces: float
    seconds: float
    tokens: int
    explored_fraction: float = float("nan")

    @property
    def ms_per_token(self) -> float:
        return 1000.0 * self.seconds / max(self.tokens, 1)


def standard_methods(*, temperature: float, led_config: Any, dola_layers: Any = "high",
                     relative_top: float = 0.1, sampling_top_k: int = 20,
                     sampling_top_p: float = 0.95, include_base: bool = True,
                     include_dola: bool = True) -> list[Method]:
    """Temperature sampling (the configured top-k / top-p), DoLa (unless ``include_dola`` is
    false: it reads un-normed layers, refused on a re-based model), LED and (optionally) LED's
    base path alone (final-layer top-k sampling, i.e. LED with depth 1)."""
    from dataclasses import replace

    from icml_led.generate import DoLaDecoding, LEDDecoding, SamplingDecoding

    samp = {"do_sample": True, "temperature": temperature, "top_k": sampling_top_k,
            "top_p": sampling_top_p}
    methods = [
        Method("sampling", lambda g: SamplingDecoding(g), samp),
    ]
    if include_dola:
        methods.append(Method("dola", lambda g: DoLaDecoding(dola_layers, relative_top, g),
                              samp))
    if include_base:
        base_cfg = replace(led_config, depth=1, layers=None)
        methods.append(Method(f"top-{led_config.top_k} (LED d=1)",
                              lambda g: LEDDecoding(base_cfg, g),
                              {"do_sample": True, "temperature": temperature}))
    methods.append(Method("led", lambda g: LEDDecoding(led_config, g),
                          {"do_sample": True, "temperature": temperature}))
    return methods


def run_method(model: Any, tokenizer: Any, problems: list[Problem], method: Method, *,
               num_samples: int, ks: list[int], seed: int, max_new_tokens: int,
               chunk: int = 512) -> MethodResult:
    """Draw ``num_samples`` completions per problem with ``method`` and score them."""
    import torch

    bad = [k for k in ks if not 1 <= k <= num_samples]
    if bad:
        raise ValueError(f"pass@k values {bad} need 1 <= k <= num_samples ({num_samples})")
    device = next(model.parameters()).device
    prompts = [p.prompt for p in problems for _ in range(num_samples)]
    gen = torch.Generator(device=device).manual_seed(seed)
    texts: list[str] = []
    tokens, explored, think = 0, 0, 0
    start = time.perf_counter()
    for i in range(0, len(prompts), chunk):
        ids, att = encode(tokenizer, prompts[i:i + chunk], device)
        dec = method.make(gen)
        out = model.generate(ids, attention_mask=att, max_new_tokens=max_new_tokens,
                             pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id, custom_generate=dec,
                             **method.generate_kwargs)
        new = out[:, ids.shape[1]:]
        texts += tokenizer.batch_decode(new, skip_special_tokens=True)
        stats = getattr(dec, "stats", {})
        tokens += int(stats.get("tokens", new.numel()))
        explored += int(stats.get("explored", 0))
        think += int(stats.get("think_tokens", 0))
    seconds = time.perf_counter() - start
    correct, answers, traces = [], [], []
    for j, p in enumerate(problems):
        mine = texts[j * num_samples:(j + 1) * num_samples]
        correct.append(sum(is_correct(p, t) for t in mine))
        answers.append(distinct_fraction([t.split("}")[-1][:1] for t in mine]))
        traces.append(distinct_fraction(mine))
    res = MethodResult(method.name, correct, num_samples,
                       {k: mean_pass_at_k(correct, num_samples, k) for k in ks},
                       sum(answers) / len(answers), sum(traces) / len(traces), seconds, tokens)
    if think:
        res.explored_fraction = explored / think
    return res


@dataclass
class ChatResult:
    """Samples of one decoder on a chat suite: per-problem correct counts out of ``num_samples``,
    the completions, and the decoding cost."""

    name: str
    correct: list[int]
    num_samples: int
    texts: list[list[str]]
    seconds: float
    tokens: int
    steps: int
    explored: int = 0
    think_tokens: int = 0

    def pass_at(self, k: int) -> list[float]:
        """Per-problem pass@k (unbiased estimator)."""
        from icml_led.metrics import pass_at_k

        return [pass_at_k(self.num_samples, c, k) for c in self.correct]

    @property
    def explored_fraction(self) -> float:
        return self.explored / self.think_tokens if self.think_tokens else float("nan")


def shared_prefix_cache(model: Any, ids: Any, att: Any, repeats: int,
                        memo: dict | None = None) -> Any:
    """A KV cache of ``ids[:, :-1]`` (left-padded prompts) computed once per prompt and repeated
    ``repeats`` times per row (``Cache.batch_repeat_interleave``), for ``generate(..., cache=)``
    on ``ids.repeat_interleave(repeats, 0)``: the samples of a prompt share its prefill. Position
    ids follow the attention mask, as ``generate`` computes them.

    ``memo``: a dict kept by the caller across calls with the same model; a prompt batch seen
    before gets a copy of its stored cache instead of a new forward pass (the same tensors: the
    forward is deterministic, so decoders see identical inputs; tested)."""
    import copy

    if memo is None:
        return _prefix_cache(model, ids, att, repeats)
    key = (id(model), tuple(ids.shape), str(ids.device), ids.cpu().numpy().tobytes(),
           att.cpu().numpy().tobytes())
    if key not in memo:
        memo[key] = _prefix_cache(model, ids, att, 1)
    cache = copy.deepcopy(memo[key])
    if repeats > 1:
        cache.batch_repeat_interleave(repeats)
    return cache


def _prefix_cache(model: Any, ids: Any, att: Any, repeats: int) -> Any:
    import torch

    pos = (att.long().cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        out = model(input_ids=ids[:, :-1], attention_mask=att[:, :-1], position_ids=pos[:, :-1],
                    use_cache=True, return_dict=True, logits_to_keep=1)
    cache = out.get("cache", None) if hasattr(out, "get") else None
    cache = cache if cache is not None else getattr(out, "past_key_values", None)
    if cache is None or not hasattr(cache, "batch_repeat_interleave"):
        raise RuntimeError("the model returned no repeatable KV cache: run with "
                           "share_prefix=False")
    if repeats > 1:
        cache.batch_repeat_interleave(repeats)
    return cache


def generate_compacting(model: Any, ids: Any, att: Any, method: Method, gens: list[Any], *,
                        max_new_tokens: int, segment: int, pad: int, eos: int,
                        cache: Any = None) -> tuple[Any, dict[str, int]]:
    """``model.generate`` in segments of ``segment`` new tokens; after each segment the rows
    that emitted ``eos`` leave the batch (their KV cache rows too, ``batch_select_indices``),
    so a batch costs the tokens its rows write, not its longest row times its size.

    Each row keeps its own generator (``gens[j]``, one per row, carried across segments), so
    its draws are those of one uninterrupted call; what can differ is only the floating point
    of a matmul over fewer rows. Returns ``(new_tokens (B, max_new_tokens), stats)``: finished
    rows are padded with ``pad``, stats are the decoders' counters summed over segments."""
    import torch

    if segment < 1:
        raise ValueError(f"segment must be >= 1, got {segment}")
    B = ids.shape[0]
    out = torch.full((B, max_new_tokens), pad, dtype=ids.dtype, device=ids.device)
    alive = torch.arange(B, device=ids.device)
    stats: dict[str, int] = {}
    done = 0
    cur, cur_att = ids, att
    while done < max_new_tokens and alive.numel():
        n = min(segment, max_new_tokens - done)
        dec = method.make([gens[j] for j in alive.tolist()])
        extra = {} if cache is None else {"cache": cache}
        res = model.generate(cur, attention_mask=cur_att, max_new_tokens=n, pad_token_id=pad,
                             eos_token_id=eos, custom_generate=dec, **extra,
                             **method.generate_kwargs)
        new = res[:, cur.shape[1]:]
        out[alive, done:done + new.shape[1]] = new
        for k, v in getattr(dec, "stats", {}).items():
            stats[k] = stats.get(k, 0) + int(v)
        if "tokens" not in getattr(dec, "stats", {}):
            stats["tokens"] = stats.get("tokens", 0) + int(new.numel())
        done += new.shape[1]
        keep = (~(new == eos).any(1)).nonzero().squeeze(1)
        if done >= max_new_tokens or keep.numel() == 0:
            break
        cur_att = torch.cat([cur_att, cur_att.new_ones(new.shape)], dim=1)[keep]
        cur = res[keep]
        alive = alive[keep]
        if cache is not None and keep.numel() < res.shape[0]:
            cache.batch_select_indices(keep)
    return out, stats


def run_chat_method(model: Any, tokenizer: Any, problems: list[Any], method: Method, *,
                    num_samples: int, seed: int, max_new_tokens: int,
                    problems_per_batch: int = 4, share_prefix: bool = True,
                    progress: Any = None, prefill_memo: dict | None = None,
                    compact_every: int = 0) -> ChatResult:
    """Draw ``num_samples`` replies per problem of a chat suite (:mod:`icml_led.suite`) with
    ``method``: each batch holds all samples of ``problems_per_batch`` problems (left-padded),
    sampled with one generator per row seeded from ``(seed, problem index, sample index)``, so
    a problem's samples do not depend on the batching. Replies stop at the tokenizer's eos.
    ``share_prefix``: prefill each prompt once and repeat its KV cache over its samples (the
    decoders see the same inputs; only the prompt's forward pass is shared). ``prefill_memo``:
    a dict shared by several calls (decoders, temperatures) on the same model and suite, so each
    prompt batch is prefilled once in all (see :func:`shared_prefix_cache`). ``compact_every``:
    when > 0, decode in segments of that many tokens and drop finished rows between them
    (:func:`generate_compacting`): the same per-row draws, at the cost of the tokens written;
    ``steps`` then counts the steps of all segments."""
    import torch

    device = next(model.parameters()).device
    if getattr(tokenizer, "padding_side", "left") != "left":
        tokenizer.padding_side = "left"
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    texts: list[list[str]] = []
    correct: list[int] = []
    tokens = steps = explored = think = 0
    seconds = 0.0
    batches = range(0, len(problems), problems_per_batch)
    for i in (progress(batches) if progress else batches):
        chunk = problems[i:i + problems_per_batch]
        enc = tokenizer([p.prompt(tokenizer) for p in chunk], return_tensors="pt",
                        padding=True, add_special_tokens=False)
        ids_u, att_u = enc["input_ids"].to(device), enc["attention_mask"].to(device)
        ids = ids_u.repeat_interleave(num_samples, 0)
        att = att_u.repeat_interleave(num_samples, 0)
        gens = [torch.Generator(device=device).manual_seed(
            (seed * 1_000_003 + (i + j // num_samples) * 1009 + j % num_samples) % (2 ** 63))
            for j in range(ids.shape[0])]
        start = time.perf_counter()
        extra = {}
        if share_prefix:
            extra["cache"] = shared_prefix_cache(model, ids_u, att_u, num_samples,
                                                 prefill_memo)
        if compact_every:
            new, stats = generate_compacting(model, ids, att, method, gens,
                                             max_new_tokens=max_new_tokens,
                                             segment=compact_every, pad=pad, eos=eos,
                                             cache=extra.get("cache"))
        else:
            dec = method.make(gens)
            out = model.generate(ids, attention_mask=att, max_new_tokens=max_new_tokens,
                                 pad_token_id=pad, eos_token_id=eos, custom_generate=dec,
                                 **extra, **method.generate_kwargs)
            new = out[:, ids.shape[1]:]
            stats = getattr(dec, "stats", {})
        seconds += time.perf_counter() - start
        dec_texts = tokenizer.batch_decode(new, skip_special_tokens=True)
        tokens += int(stats.get("tokens", new.numel()))
        steps += int(stats.get("steps", new.shape[1]))
        explored += int(stats.get("explored", 0))
        think += int(stats.get("think_tokens", 0))
        for j, p in enumerate(chunk):
            mine = dec_texts[j * num_samples:(j + 1) * num_samples]
            texts.append(mine)
            correct.append(sum(p.is_correct(t) for t in mine))
    return ChatResult(method.name, correct, num_samples, texts, seconds, tokens, steps,
                      explored, think)
