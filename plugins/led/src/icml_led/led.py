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

from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True)
class LEDConfig:
    """LED hyper-parameters; every default is the official code's.

    ``depth``: number of posteriors (final + ``depth - 1`` intermediate). ``top_k``: final-layer
    candidates. ``use_final_norm``: apply the final norm to intermediate states (official: no).
    ``exploit_by_confidence``: explore with probability ``1 - p_top1`` (official ``do_exploit=1``).
    ``think_only``: explore only inside the thinking span delimited by ``think_start_id`` /
    ``think_end_id`` (with neither id given, the whole generation counts as thinking; with only the
    end id, thinking runs from the start until it appears). ``skip_penultimate``: the official
    layer set ``{L, L-2..L-depth}``; ``False`` gives the figure's ``{L, L-1..L-depth+1}``.
    ``layers``: explicit intermediate hidden-state indices (top down), overriding ``depth``.
    ``eps``: floor of the candidates' probabilities before aggregation (official: ``1e-6``).
    ``greedy_gate``: the gate in greedy mode. ``None`` (official): the same Bernoulli draw
    ``explore ~ Bernoulli(1 - p_top1)`` as when sampling, so greedy LED is still random. A float
    makes it deterministic: explore when ``1 - p_top1`` exceeds it (0.5 = the Bernoulli's mode),
    which gives reproducible, batch-invariant greedy decoding.
    """

    depth: int = 8
    top_k: int = 8
    use_final_norm: bool = False
    exploit_by_confidence: bool = True
    think_only: bool = True
    think_start_id: int | None = None
    think_end_id: int | None = None
    skip_penultimate: bool = True
    layers: tuple[int, ...] | None = None
    eps: float = 1e-6
    greedy_gate: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.depth, int) or self.depth < 1:
            raise ValueError(f"LEDConfig.depth must be an integer >= 1, got {self.depth!r}")
        if not isinstance(self.top_k, int) or self.top_k < 1:
            raise ValueError(f"LEDConfig.top_k must be an integer >= 1, got {self.top_k!r}")
        if not 0.0 < self.eps < 1.0:
            raise ValueError(f"LEDConfig.eps must lie in (0, 1), got {self.eps!r}")
        if self.greedy_gate is not None and not 0.0 <= self.greedy_gate <= 1.0:
            raise ValueError(f"LEDConfig.greedy_gate must be None (official random gate) or lie "
                             f"in [0, 1], got {self.greedy_gate!r}")
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(int(i) for i in self.layers))


class LEDStepInfo(NamedTuple):
    """What one LED step decided, per row: the candidates (final-layer top-k ids), the
    aggregated candidate distributions ``(B, d, k)``, their entropies ``(B, d)``, the chosen
    depth configuration, the exploration mask, and the base / LED / emitted tokens."""

    candidates: Any
    aggregated: Any
    entropies: Any
    chosen_depth: Any
    explore: Any
    base_tokens: Any
    led_tokens: Any
    tokens: Any


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
    import torch

    return torch.rand(n, generator=generator, device=device if generator is None else
                      generator.device)


def sample_sorted(probs: Any, generator: Any = None, greedy: bool = False) -> Any:
    """Draw one token per row of ``probs (B, V)`` with the same random protocol as LED's base
    path: candidates in descending probability order, one uniform per row, inverse CDF."""
    import torch

    if greedy:
        return probs.argmax(-1)
    sp, si = torch.sort(probs, dim=-1, descending=True, stable=True)
    u = _uniform(probs.shape[0], probs.device, generator).to(probs.device)
    return si.gather(1, _inverse_cdf(sp, u)[:, None]).squeeze(1)


def led_step(layer_logits: Any, config: LEDConfig = LEDConfig(), temperature: float = 0.6,
             generator: Any = None, greedy: bool = False, in_think: Any = None) -> LEDStepInfo:
    """One LED decision for ``layer_logits (B, d, V)`` (final layer first).

    ``temperature`` scales every layer (ignored when ``greedy``, where ``T = 1``); ``in_think``
    is a bool tensor ``(B,)`` (None = everywhere); ``generator`` a ``torch.Generator`` or None
    for the global stream. Returns a :class:`LEDStepInfo` whose ``tokens`` are the emitted ids.
    """
    import torch

    if layer_logits.dim() != 3:
        raise ValueError(f"layer_logits must have shape (batch, depth, vocab), got "
                         f"{tuple(layer_logits.shape)}")
    B, d, V = layer_logits.shape
    k = config.top_k
    if k > V:
        raise ValueError(f"top_k={k} is larger than the vocabulary ({V} tokens): use top_k <= {V}")
    if not greedy and not temperature > 0:
        raise ValueError(f"temperature must be > 0 for sampling, got {temperature!r}: use "
                         "greedy=True (do_sample=False) for greedy decoding")
    T = 1.0 if greedy else float(temperature)
    probs = torch.softmax(layer_logits.float() / T, dim=-1)
    p_top, ids = probs[:, 0].topk(k, dim=-1)                       # (B, k), descending
    alive = p_top > 0                                              # masked-out tokens stay out
    q = probs.gather(2, ids[:, None, :].expand(B, d, k)).clamp_min(config.eps)
    q = torch.where(alive[:, None, :], q, torch.zeros_like(q))
    agg = q.cumsum(dim=1)
    agg = agg / agg.sum(-1, keepdim=True)
    ent = -(agg * torch.log(agg.clamp_min(1e-30))).sum(-1)         # (B, d)
    chosen = ent.argmax(dim=1)
    led_dist = agg[torch.arange(B, device=agg.device), chosen]     # (B, k)
    dev = layer_logits.device
    if greedy:
        base_idx = p_top.argmax(-1)
        led_idx = led_dist.argmax(-1)
        if d == 1:
            explore = torch.zeros(B, dtype=torch.bool, device=dev)
        elif config.exploit_by_confidence and config.greedy_gate is None:
            explore = _uniform(B, dev, generator).to(dev) < (1.0 - p_top[:, 0])
        elif config.exploit_by_confidence:
            explore = (1.0 - p_top[:, 0]) > config.greedy_gate
        else:
            explore = torch.ones(B, dtype=torch.bool, device=dev)
    else:
        u = _uniform(B, dev, generator).to(dev)
        base_idx = _inverse_cdf(p_top, u)
        led_idx = _inverse_cdf(led_dist, u)
        if d == 1:
            explore = torch.zeros(B, dtype=torch.bool, device=dev)
        elif config.exploit_by_confidence:
            explore = _uniform(B, dev, generator).to(dev) < (1.0 - p_top[:, 0])
        else:
            explore = torch.ones(B, dtype=torch.bool, device=dev)
    if in_think is not None:
        explore = explore & in_think.to(dev).bool()
    if d == 1:
        led_idx = base_idx
    base_tok = ids.gather(1, base_idx[:, None]).squeeze(1)
    led_tok = ids.gather(1, led_idx[:, None]).squeeze(1)
    tokens = torch.where(explore, led_tok, base_tok)
    return LEDStepInfo(ids, agg, ent, chosen, explore, base_tok, led_tok, tokens)
