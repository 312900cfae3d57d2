"""The LED step: one token from layer-wise posteriors.

For a batch of layer-wise logits ``(B, d, V)`` (final layer first):

1. ``P = softmax(logits / T)`` for every layer; the candidates are the final layer's top-k.
2. The base path is ordinary top-k sampling from the final layer (argmax when greedy).
3. The candidates' probabilities are aggregated from the top down, ``C_j = sum_{i<=j} Q_i``
   (renormalised), and the configuration ``j*`` with maximal entropy is chosen (``j = 0`` is
   allowed, so the chosen entropy is never below the final layer's).
4. With probability ``1 - p_top1`` (``exploit_by_confidence``) and only inside the thinking span
   (``think_only``) the token is drawn from ``C_{j*}`` instead of the base path. In greedy mode
   both paths take their argmax, but the gate stays a random draw as in the official code
   (``LEDConfig.greedy_gate`` makes it a deterministic threshold).

Randomness: one uniform per row drives both the base and the LED draw (inverse CDF over the
candidates in descending final-layer order), and a second uniform per row drives the exploration
gate. With ``depth == 1`` the two candidate distributions coincide, so no gate is drawn and the
random stream equals that of plain top-k sampling (:func:`sample_sorted`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from icml_led.config import LEDConfig


class LEDStepInfo(NamedTuple):
    """What one LED step decided, per row.

    ``candidates (B, k)``: the final layer's top-k ids (descending). ``candidate_probs
    (B, d, k)``: every depth's tempered probability of those candidates, ``softmax(logits_j /
    T)`` gathered at the candidates (final layer first, before the ``eps`` floor).
    ``aggregated (B, d, k)``: the top-down cumulative, renormalised distributions and
    ``entropies (B, d)`` their entropies; ``chosen_depth (B,)`` the max-entropy configuration.
    ``explore_prob (B,)``: the probability that the row explores (``1 - p_top1`` with the
    confidence gate, 1 without it, 0 outside the thinking span or with ``d = 1``); ``explore``
    the drawn mask; ``base_tokens`` / ``led_tokens`` / ``tokens`` the base path's, the LED
    path's and the emitted ids."""

    candidates: Any
    aggregated: Any
    entropies: Any
    chosen_depth: Any
    explore: Any
    base_tokens: Any
    led_tokens: Any
    tokens: Any
    candidate_probs: Any = None
    explore_prob: Any = None


def _inverse_cdf(probs: Any, u: Any) -> Any:
    """Index drawn from each row of ``probs`` (unnormalised, >= 0) with uniforms ``u``."""
    import torch

    cdf = probs.cumsum(-1)
    target = (u * cdf[:, -1]).unsqueeze(-1)
    idx = (cdf <= target).sum(-1)
    # guard against float round-off at the top end and against zero-probability tails
    last_pos = (probs > 0).long().cumsum(-1).argmax(-1)
    return torch.minimum(idx, last_pos)


def _uniform(n: int, device: Any, generator: Any) -> Any:
    """``n`` uniforms: from one generator (or the global stream), or one per row from a list of
    ``n`` generators (then each row's stream does not depend on the batch it sits in)."""
    import torch

    if isinstance(generator, (list, tuple)):
        if len(generator) != n:
            raise ValueError(f"got {len(generator)} generators for a batch of {n} rows: pass one "
                             "torch.Generator per row (or a single generator)")
        return torch.cat([torch.rand(1, generator=g, device=g.device).to(device)
                          for g in generator])
    return torch.rand(n, generator=generator, device=device if generator is None else
                      generator.device).to(device)


def sample_sorted(probs: Any, generator: Any = None, greedy: bool = False) -> Any:
    """Draw one token per row of ``probs (B, V)`` with the same random protocol as LED's base
    path: candidates in descending probability order, one uniform per row, inverse CDF.
    ``generator`` is a ``torch.Generator``, a list of one per row, or None (global stream).

    After top-k / top-p (or DoLa's relative-top filter) a row has few positive entries; then
    only those are sorted (:func:`_sorted_support`), which gives the same token as the stable
    sort of the whole vocabulary (tested): the inverse CDF never reaches past the last positive
    entry, and the cumulative sums of the positive prefix are the same numbers."""
    import torch

    if greedy:
        return probs.argmax(-1)
    small = _sorted_support(probs)
    if small is None:
        sp, si = torch.sort(probs, dim=-1, descending=True, stable=True)
    else:
        sp, si = small
    u = _uniform(probs.shape[0], probs.device, generator)
    return si.gather(1, _inverse_cdf(sp, u)[:, None]).squeeze(1)


def _sorted_support(probs: Any, max_fraction: float = 0.125) -> tuple[Any, Any] | None:
    """``(values, indices)`` of each row's positive entries in the order of a stable
    descending sort of the whole row (ties by index), padded with zeros to the largest support
    of the batch; None when a row has no positive entry, a NaN, a support above
    ``max_fraction`` of the vocabulary (then the full sort is as cheap), or off CPU (the
    equality rests on CPU's sequential cumulative sum)."""
    import torch

    B, V = probs.shape
    if probs.device.type != "cpu":
        return None           # accelerators sort fast, and their parallel scans differ by size
    pos = probs > 0
    count = pos.sum(-1)
    n = int(count.max()) if B else 0
    if B == 0 or int(count.min()) == 0 or n > max_fraction * V or bool(
            torch.isnan(probs.amax())):
        return None
    # positive columns in increasing order (keys unique per row; the padding key V sorts last)
    key = torch.where(pos, torch.arange(V, device=probs.device), V)
    cols = key.topk(n, dim=-1, largest=False, sorted=True).values
    valid = cols < V
    cols = cols.clamp_max(V - 1)
    vals = torch.where(valid, probs.gather(1, cols), torch.zeros((), dtype=probs.dtype,
                                                                 device=probs.device))
    sp, order = torch.sort(vals, dim=-1, descending=True, stable=True)
    return sp, cols.gather(1, order)


def _temperature(temperature: Any, B: int, greedy: bool, device: Any) -> Any:
    """``(B, 1)`` float temperatures (1 when greedy); a scalar or a per-row tensor ``(B,)``."""
    import torch

    if greedy:
        return torch.ones(B, 1, device=device)
    t = torch.as_tensor(temperature, dtype=torch.float32, device=device)
    if t.dim() == 2 and t.shape[1] == 1:
        t = t[:, 0]
    if t.dim() > 1 or (t.dim() == 1 and t.shape[0] not in (1, B)):
        raise ValueError(f"temperature must be a number or a tensor of shape ({B},) (one per "
                         f"row), got shape {tuple(t.shape)}")
    if not bool(torch.all(t > 0)):
        raise ValueError(f"temperature must be > 0 for sampling, got {temperature!r}: use "
                         "greedy=True (do_sample=False) for greedy decoding")
    return t.reshape(-1, 1).expand(B, 1)


def expected_depth(config: LEDConfig) -> int | None:
    """The number of posteriors ``config`` describes: ``1 + len(layers)`` with explicit layers,
    else ``depth``."""
    return 1 + len(config.layers) if config.layers is not None else config.depth


def draw_uniforms(B: int, config: LEDConfig, d: int, greedy: bool, generator: Any,
                  device: Any) -> tuple[Any, Any]:
    """The step's random numbers, in the fixed order of the protocol: the path uniform (not in
    greedy mode), then the gate uniform (only when a random gate is used)."""
    u = None if greedy else _uniform(B, device, generator)
    random_gate = d > 1 and config.exploit_by_confidence and (
        not greedy or config.greedy_gate is None)
    g = _uniform(B, device, generator) if random_gate else None
    return u, g


def gate(p_top1: Any, config: LEDConfig, d: int, greedy: bool, gate_u: Any,
         in_think: Any) -> tuple[Any, Any]:
    """``(explore_prob, explore)`` for rows with final-layer top-1 probability ``p_top1``."""
    import torch

    if d == 1:
        prob = torch.zeros_like(p_top1)
        explore = torch.zeros_like(p_top1, dtype=torch.bool)
    elif not config.exploit_by_confidence:
        prob = torch.ones_like(p_top1)
        explore = torch.ones_like(p_top1, dtype=torch.bool)
    else:
        prob = 1.0 - p_top1
        if greedy and config.greedy_gate is not None:
            explore = prob > config.greedy_gate
        else:
            explore = gate_u < prob
    if in_think is not None:
        inside = in_think.to(p_top1.device).bool()
        explore = explore & inside
        prob = torch.where(inside, prob, torch.zeros_like(prob))
    return prob, explore


def led_core(layer_logits: Any, config: LEDConfig, temperature: Any, u: Any, explore: Any,
             explore_prob: Any, greedy: bool) -> LEDStepInfo:
    """The deterministic part of a step, given the path uniforms ``u`` and the gate's
    decision: candidates, per-depth probabilities, aggregation, max-entropy depth, tokens."""
    import torch

    B, d, V = layer_logits.shape
    k = config.top_k
    T = _temperature(temperature, B, greedy, layer_logits.device)
    probs = torch.softmax(layer_logits.float() / T[:, :, None], dim=-1)
    p_top, ids = probs[:, 0].topk(k, dim=-1)                       # (B, k), descending
    alive = p_top > 0                                              # masked-out tokens stay out
    cand = probs.gather(2, ids[:, None, :].expand(B, d, k))        # (B, d, k)
    q = torch.where(alive[:, None, :], cand.clamp_min(config.eps), torch.zeros_like(cand))
    agg = q.cumsum(dim=1)
    agg = agg / agg.sum(-1, keepdim=True)
    ent = -(agg * torch.log(agg.clamp_min(1e-30))).sum(-1)         # (B, d)
    chosen = ent.argmax(dim=1)
    led_dist = agg[torch.arange(B, device=agg.device), chosen]     # (B, k)
    if greedy:
        base_idx = p_top.argmax(-1)
        led_idx = led_dist.argmax(-1)
    else:
        base_idx = _inverse_cdf(p_top, u)
        led_idx = _inverse_cdf(led_dist, u)
    if d == 1:
        led_idx = base_idx
    base_tok = ids.gather(1, base_idx[:, None]).squeeze(1)
    led_tok = ids.gather(1, led_idx[:, None]).squeeze(1)
    tokens = torch.where(explore, led_tok, base_tok)
    return LEDStepInfo(ids, agg, ent, chosen, explore, base_tok, led_tok, tokens, cand,
                       explore_prob)


def check_step_inputs(layer_logits: Any, config: LEDConfig, temperature: Any,
                      greedy: bool) -> None:
    if layer_logits.dim() != 3:
        raise ValueError(f"layer_logits must have shape (batch, depth, vocab), got "
                         f"{tuple(layer_logits.shape)}")
    B, d, V = layer_logits.shape
    want = expected_depth(config)
    if d != want:
        what = (f"1 + len(layers) = {want}" if config.layers is not None else
                f"depth={config.depth}")
        raise ValueError(f"layer_logits has {d} posteriors (dim 1) but the LEDConfig says "
                         f"{what}: pass LEDConfig(depth={d}) or the logits of {want} layers")
    if config.top_k > V:
        raise ValueError(f"top_k={config.top_k} is larger than the vocabulary ({V} tokens): use "
                         f"top_k <= {V}")
    _temperature(temperature, B, greedy, "cpu" if not hasattr(temperature, "device") else
                 temperature.device)


def led_step(layer_logits: Any, config: LEDConfig = LEDConfig(), temperature: Any = 0.6,
             generator: Any = None, greedy: bool = False, in_think: Any = None) -> LEDStepInfo:
    """One LED decision for ``layer_logits (B, d, V)`` (final layer first).

    ``d`` must equal ``config.depth`` (or ``1 + len(config.layers)``): a mismatch is an error.
    ``temperature`` scales every layer: a number or a per-row tensor ``(B,)`` (ignored when
    ``greedy``, where ``T = 1``); ``in_think`` is a bool tensor ``(B,)`` (None = everywhere);
    ``generator`` a ``torch.Generator``, a list of one per row, or None for the global stream.
    Returns a :class:`LEDStepInfo` whose ``tokens`` are the emitted ids, with the per-depth
    candidate probabilities and the exploration probability.
    """
    import torch

    check_step_inputs(layer_logits, config, temperature, greedy)
    B, d, _ = layer_logits.shape
    dev = layer_logits.device
    u, g = draw_uniforms(B, config, d, greedy, generator, dev)
    T = _temperature(temperature, B, greedy, dev)
    p_top1 = torch.softmax(layer_logits[:, 0].float() / T, dim=-1).max(-1).values
    prob, explore = gate(p_top1, config, d, greedy, g, in_think)
    return led_core(layer_logits, config, temperature, u, explore, prob, greedy)
