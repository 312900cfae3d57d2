"""Presses: KV-cache eviction policies that hook a transformers model's attention layers.

Same protocol as NVIDIA kvpress (no dependency on it)::

    press = CapKVPress(compression_ratio=0.5)
    cache = CapKVCache()
    with press(model):
        model(context_ids, cache=cache)       # prefill: every layer's cache is compressed
    out = model.generate(torch.cat([context_ids, question_ids], 1), cache=cache, ...)

``press(model)`` registers a forward hook on every ``layer.self_attn``. When a forward fills an
empty cache layer (the prefill), the hook scores the layer's tokens (``score``), keeps the top
``int(T * (1 - ratio))`` per KV head (sinks always kept, kept entries stay in position order) and
writes the smaller keys/values back into the cache. With per-layer ratios the layers hold
different lengths; the press then also hands each layer its own attention mask, so keep the
``with press(model)`` block around the continuation too (:func:`generate_with_press` does).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import torch

from icml_capkv import scorers
from icml_capkv.capacity import greedy_logdet_select
from icml_capkv.config import PressConfig
from icml_capkv.scorers import ScoreInputs

__all__ = ["POLICIES", "CapKVPress", "GreedyLogDetPress", "H2OPress", "KVPress", "KnormPress",
           "LeveragePress", "RandomPress", "SnapKVPress", "StreamingLLMPress", "attention_layers",
           "make_press", "n_kept"]


def n_kept(T: int, ratio: float) -> int:
    """Entries kept out of ``T`` at compression ratio ``ratio`` (kvpress convention)."""
    return int(T * (1.0 - ratio))


def decoder_of(model: Any) -> Any:
    """The decoder (``model.model``) of a causal LM, also through a PEFT wrapper (an unmerged
    LoRA model: ``get_base_model()``)."""
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base):
        model = get_base()
    return getattr(model, "model", model)


def attention_layers(model: Any) -> list[Any]:
    """The ``self_attn`` modules of a Llama/Qwen2/Mistral-style decoder, checked for the parts a
    press needs. Raises ``ValueError`` naming what is missing."""
    base = decoder_of(model)
    layers = getattr(base, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no .model.layers: presses support "
                         "Llama-, Qwen2- and Mistral-style decoders (LlamaForCausalLM, ...)")
    out = []
    for i, layer in enumerate(layers):
        attn = getattr(layer, "self_attn", None)
        missing = [n for n in ("q_proj", "k_proj", "v_proj", "head_dim", "layer_idx")
                   if not hasattr(attn, n)]
        if attn is None or missing:
            raise ValueError(f"layer {i} of {type(model).__name__} lacks the expected attention "
                             f"module (self_attn with q_proj/k_proj/v_proj/head_dim/layer_idx; "
                             f"missing {missing or ['self_attn']}): use a Llama/Qwen2/Mistral-"
                             "style model")
        out.append(attn)
    if getattr(base, "rotary_emb", None) is None:
        raise ValueError(f"{type(model).__name__} has no .model.rotary_emb: presses need a RoPE "
                         "model (Llama/Qwen2/Mistral style)")
    return out


@dataclass
class KVPress(PressConfig):
    """Base press: subclasses implement :meth:`score` (``(B, H_kv, T)``, higher = keep).

    A press *is* its configuration: it subclasses :class:`~icml_capkv.config.PressConfig` (the
    job configs' ``press`` section, where every default is written and validated once) and adds
    only what is not a setting: ``compression_ratio`` in ``[0, 1)``, the fraction of prefill
    entries evicted (the first positional argument), and ``layer_ratios`` (one per layer),
    which overrides it per layer. The first ``n_sink`` tokens are always kept. ``press_keys``
    names the ``PressConfig`` keys the policy reads (the others it holds but ignores).
    """

    compression_ratio: float = 0.5
    layer_ratios: list[float] | None = None
    needs: tuple[str, ...] = field(default=(), init=False, repr=False)
    name: str = field(default="press", init=False, repr=False)
    # what the policy reads of individual keys/values (key norms, cosines, value leverage):
    # such a policy refuses a model whose per-head key/value spaces a transform re-parametrised
    # (icml.compose.require_original_heads); "" for policies that read only attention scores,
    # positions or nothing (their choice is the same on any function-preserving transform)
    reads_heads: ClassVar[str] = ""
    press_keys: ClassVar[tuple[str, ...]] = ("n_sink",)

    def __post_init__(self) -> None:
        super().__post_init__()  # the settings: validated once, by PressConfig
        for r in [self.compression_ratio, *(self.layer_ratios or [])]:
            if not (isinstance(r, (int, float)) and 0.0 <= r < 1.0):
                raise ValueError(f"compression ratio must be in [0, 1) (fraction evicted), got "
                                 f"{r!r}")
        self.last_scoring_s = 0.0

    @classmethod
    def from_config(cls, config: PressConfig, compression_ratio: float = 0.5,
                    **options: Any) -> KVPress:
        """This press with ``config``'s settings (a job's ``press`` section) at
        ``compression_ratio``; ``options`` set the press's own arguments (``layer_ratios``,
        SnapKV's ``kernel``/``pooling``, ``seed``) or override a setting."""
        if not isinstance(config, PressConfig):
            raise TypeError(f"config must be a PressConfig (the press section), got "
                            f"{type(config).__name__}")
        init = {f.name for f in fields(cls) if f.init}
        kw = {f.name: getattr(config, f.name) for f in fields(PressConfig) if f.name in init}
        return cls(compression_ratio=compression_ratio, **{**kw, **options})

    def _query_window(self) -> int | None:
        """How many of the last prefill queries ``queries`` holds (None = all)."""
        return None

    # -- policy ---------------------------------------------------------------------------
    def score(self, inputs: ScoreInputs) -> torch.Tensor:
        raise TypeError(f"{type(self).__name__} defines no score(): subclass KVPress and "
                        "implement score(inputs) -> (B, H_kv, T), or override select()")

    def ratio_for(self, layer_idx: int) -> float:
        if self.layer_ratios is None:
            return self.compression_ratio
        if layer_idx >= len(self.layer_ratios):
            raise ValueError(f"layer_ratios has {len(self.layer_ratios)} entries but the model "
                             f"has a layer {layer_idx}: give one ratio per layer")
        return self.layer_ratios[layer_idx]

    def select(self, inputs: ScoreInputs, ratio: float) -> torch.Tensor | None:
        """Sorted indices ``(B, H_kv, K)`` of the entries to keep, or None to keep all."""
        T = inputs.keys.shape[2]
        k = n_kept(T, ratio)
        if k >= T:
            return None
        n_sink = min(self.n_sink, T)
        if k < n_sink:
            raise ValueError(f"budget {k} (= int({T} * (1 - {ratio}))) is below the {n_sink} "
                             "sink tokens: lower the compression ratio or n_sink")
        s = self.score(inputs).float()
        if n_sink:
            s = s.clone()
            s[..., :n_sink] = math.inf
        return s.topk(k, dim=-1).indices.sort(-1).values

    # -- tensor-level use -----------------------------------------------------------------
    def compress_tensors(self, keys: torch.Tensor, values: torch.Tensor, ratio: float | None = None,
                         queries: torch.Tensor | None = None,
                         query_anchor: torch.Tensor | None = None):
        """Compress ``(B, H_kv, T, d)`` keys/values directly: returns ``(keys, values, idx)``."""
        inputs = ScoreInputs(keys, values, queries, query_anchor)
        idx = self.select(inputs, self.compression_ratio if ratio is None else ratio)
        if idx is None:
            T = keys.shape[2]
            idx = torch.arange(T, device=keys.device).expand(*keys.shape[:2], T)
            return keys, values, idx
        g = idx.unsqueeze(-1).expand(*idx.shape, keys.shape[-1])
        return keys.gather(2, g), values.gather(2, g), idx

    # -- model hooks ----------------------------------------------------------------------
    @contextmanager
    def __call__(self, model: Any) -> Iterator[KVPress]:
        if self.reads_heads:
            from icml.compose import require_original_heads

            require_original_heads(model, reader=f"{self.name}: {self.reads_heads}")
        attns = attention_layers(model)
        base = decoder_of(model)
        self._rotary = base.rotary_emb
        self._rope_cache: dict = {}
        self._config = model.config
        self.last_scoring_s = 0.0
        handles = []
        try:
            # The attention layers only see the model's 4D (or no) mask, so padding in the user's
            # 2D attention_mask is caught where it enters the decoder.
            handles.append(base.register_forward_pre_hook(self._padding_hook, with_kwargs=True))
            for attn in attns:
                handles.append(attn.register_forward_pre_hook(self._pre_hook, with_kwargs=True))
                handles.append(attn.register_forward_hook(self._hook, with_kwargs=True))
            yield self
        finally:
            for h in handles:
                h.remove()

    @staticmethod
    def _cache_of(kwargs: dict) -> Any:
        return kwargs.get("cache", kwargs.get("past_key_values"))

    @staticmethod
    def _padding_hook(module: Any, args: tuple, kwargs: dict) -> None:
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        if isinstance(mask, torch.Tensor) and mask.ndim == 2 and not bool(mask.bool().all()):
            raise ValueError("the attention mask has padding: presses need unpadded inputs "
                             "(run one sequence at a time or equal-length batches)")

    def _pre_hook(self, module: Any, args: tuple, kwargs: dict):
        cache = self._cache_of(kwargs)
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        from icml_capkv.cache import CapKVCache

        if cache is None or hidden is None:
            return None
        mask = kwargs.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.ndim == 2 and not bool(mask.all()):
            raise ValueError("the attention mask has padding: presses need unpadded inputs "
                             "(run one sequence at a time or equal-length batches)")
        if not isinstance(cache, CapKVCache):
            raise ValueError(f"press hooks need a CapKVCache, got {type(cache).__name__}: pass "
                             "cache=icml_capkv.CapKVCache() to the model (positions and masks "
                             "stay correct after eviction only with it)")
        lens = cache.physical_lengths()
        i = module.layer_idx
        if len(set(lens)) <= 1 or i >= len(lens):
            return None  # uniform lengths: the model's own mask is right
        from transformers.masking_utils import create_causal_mask

        kwargs = dict(kwargs)
        kwargs["attention_mask"] = create_causal_mask(
            config=self._config, inputs_embeds=hidden, attention_mask=None, cache=cache,
            position_ids=kwargs.get("position_ids"), layer_idx=i, allow_is_causal_skip=False)
        return args, kwargs

    def _hook(self, module: Any, args: tuple, kwargs: dict, output: Any):
        import time

        cache = self._cache_of(kwargs)
        i = module.layer_idx
        layer = cache.layers[i]
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        T = hidden.shape[1]
        if layer.n_compressions or layer.physical_length != T:
            return output  # not a prefill: the cache had entries before this forward
        ratio = self.ratio_for(i)
        if n_kept(T, ratio) >= T:
            return output
        t0 = time.perf_counter()
        inputs = self._inputs(module, hidden, kwargs, layer)
        idx = self.select(inputs, ratio)
        if idx is not None:
            layer.keep(idx)
        self.last_scoring_s += time.perf_counter() - t0
        return output

    def _inputs(self, module: Any, hidden: torch.Tensor, kwargs: dict, layer: Any) -> ScoreInputs:
        queries = anchor = None
        if "queries" in self.needs:
            queries = post_rope_queries(module, hidden, kwargs["position_embeddings"],
                                        self._query_window())
        if "query_anchor" in self.needs:
            anchor = query_anchor(module, hidden, self._rotary, self.n_future_positions,
                                  min(self.n_sink, hidden.shape[1]),
                                  getattr(self, "_rope_cache", None))
        return ScoreInputs(layer.keys, layer.values, queries, anchor)



def _pre_rope_queries(module: Any, hidden: torch.Tensor) -> torch.Tensor:
    B, T, _ = hidden.shape
    q = module.q_proj(hidden).view(B, T, -1, module.head_dim)
    if getattr(module, "q_norm", None) is not None:  # Qwen3-style per-head norm before RoPE
        q = module.q_norm(q)
    return q.transpose(1, 2)  # (B, H_q, T, d)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """HF RoPE convention: pairs are (j, j + d/2)."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def post_rope_queries(module: Any, hidden: torch.Tensor, position_embeddings: tuple,
                      window: int | None = None) -> torch.Tensor:
    """Queries after RoPE of the last ``window`` tokens (all when None): ``(B, H_q, w, d)``."""
    if window is not None:
        hidden = hidden[:, -window:]
    cos, sin = position_embeddings
    cos, sin = cos[:, -hidden.shape[1]:].unsqueeze(1), sin[:, -hidden.shape[1]:].unsqueeze(1)
    q = _pre_rope_queries(module, hidden)
    return q * cos + rotate_half(q) * sin


def query_anchor(module: Any, hidden: torch.Tensor, rotary: Any,
                 n_future: int = 512, n_sink: int = 0,
                 rope_cache: dict | None = None) -> torch.Tensor:
    """CapKV's anchor ``R_bar mu_q``: the mean pre-RoPE query over the context tokens after the
    first ``n_sink`` (sinks are left out, as in the authors' kvpress code), rotated by the
    average RoPE matrix of the next ``n_future`` positions ``T, ..., T + n_future - 1``.
    ``hidden`` is the attention layer's input (after its RMSNorm). ``rope_cache`` (a dict) keeps
    the averaged rotation between layers of one prefill. ``(B, H_q, d)``."""
    B, T, _ = hidden.shape
    h = hidden[:, n_sink:] if T > n_sink else hidden
    if getattr(module, "q_norm", None) is None:
        # q_proj is affine, so the mean query is q_proj of the mean hidden state: O(1) in T.
        mu = _pre_rope_queries(module, h.mean(1, keepdim=True))[:, :, 0].float()
    else:
        mu = _pre_rope_queries(module, h).float().mean(2)  # (B, H_q, d)
    if n_future <= 0:
        return mu
    key = (T, n_future, hidden.device, id(rotary))
    if rope_cache is None or key not in rope_cache:
        pos = torch.arange(T, T + n_future, device=hidden.device).unsqueeze(0)
        cos, sin = rotary(hidden[:, :1].float(), pos)
        cs = (cos.float().mean(1)[:, None], sin.float().mean(1)[:, None])  # averaged rotation
        if rope_cache is not None:
            rope_cache[key] = cs
    else:
        cs = rope_cache[key]
    return mu * cs[0] + rotate_half(mu) * cs[1]


# -- policies ---------------------------------------------------------------------------------
@dataclass
class CapKVPress(KVPress):
    """CapKV: relevance-weighted ridge leverage of the values (see :func:`scorers.capkv_scores`).

    ``tau`` sharpens the query relevance (0 = pure leverage); ``ridge`` is the noise variance;
    ``normalize`` uses cosine relevance (authors' kvpress code) instead of raw logits;
    ``n_future_positions`` sizes the averaged future RoPE (0 = no rotation of the anchor);
    ``capacity_vectors`` picks the vectors u (values as in the paper, or keys). All of them,
    defaults and checks included, are :class:`~icml_capkv.config.PressConfig`'s.
    """

    reads_heads: ClassVar[str] = "value leverage and key-cosine relevance"
    press_keys: ClassVar[tuple[str, ...]] = ("n_sink", "tau", "ridge", "normalize",
                                             "n_future_positions", "capacity_vectors")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.needs = ("query_anchor",)
        self.name = "capkv"

    def score(self, inputs: ScoreInputs) -> torch.Tensor:
        return scorers.capkv_scores(inputs, self.tau, self.ridge, self.normalize,
                                    min(self.n_sink, inputs.keys.shape[2]),
                                    self.capacity_vectors)


@dataclass
class LeveragePress(CapKVPress):
    """Pure geometric leverage: CapKV with ``tau = 0`` (no query relevance). ``tau`` is fixed
    by the definition, not a setting: the press takes no ``tau`` (a config's is not read)."""

    tau: float = field(default=0.0, init=False)
    press_keys: ClassVar[tuple[str, ...]] = tuple(k for k in CapKVPress.press_keys
                                                  if k != "tau")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.name = "leverage"


@dataclass
class GreedyLogDetPress(CapKVPress):
    """Exact greedy log-det selection (the reference CapKV's leverage approximates), per query
    head group: ``u`` = values, ``w`` = CapKV relevance averaged over the group."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.name = "greedy_logdet"

    def select(self, inputs: ScoreInputs, ratio: float) -> torch.Tensor | None:
        keys, values = inputs.keys, inputs.values
        T = keys.shape[2]
        k = n_kept(T, ratio)
        if k >= T:
            return None
        n_sink = min(self.n_sink, T)
        if k < n_sink:
            raise ValueError(f"budget {k} is below the {n_sink} sink tokens: lower the "
                             "compression ratio or n_sink")
        w = scorers.capkv_relevance(keys, inputs.need("query_anchor", "greedy_logdet"),
                                    self.tau, self.normalize, n_sink).mean(2)
        u = values if self.capacity_vectors == "values" else keys
        forced = torch.zeros(T, dtype=torch.bool, device=keys.device)
        forced[:n_sink] = True
        return greedy_logdet_select(u.to(w.dtype), w, k, self.ridge, forced)


@dataclass
class StreamingLLMPress(KVPress):
    """StreamingLLM: the ``n_sink`` first tokens plus the most recent window."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.name = "streaming"

    def score(self, inputs: ScoreInputs) -> torch.Tensor:
        return scorers.streaming_scores(inputs)


@dataclass
class SnapKVPress(KVPress):
    """SnapKV: attention from the observation window (last ``window`` prefill queries).

    ``pooling="kvpress"`` with ``n_sink=0`` and ``window=64`` is kvpress's ``SnapKVPress``
    (see :func:`scorers.snapkv_scores`); the default pools over the window edge and keeps sinks.
    ``window`` is a setting (``PressConfig``); ``kernel`` and ``pooling`` are SnapKV's own.
    """

    kernel: int = scorers.SNAPKV_KERNEL
    pooling: str = scorers.SNAPKV_POOLING
    press_keys: ClassVar[tuple[str, ...]] = ("n_sink", "window")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kernel < 1:
            raise ValueError(f"kernel must be >= 1, got {self.kernel}")
        if self.pooling not in ("full", "kvpress"):
            raise ValueError(f"pooling must be 'full' or 'kvpress', got {self.pooling!r}")
        self.needs = ("queries",)
        self.name = "snapkv"

    def _query_window(self) -> int | None:
        return self.window

    def score(self, inputs: ScoreInputs) -> torch.Tensor:
        return scorers.snapkv_scores(inputs, self.window, self.kernel, self.pooling)


@dataclass
class H2OPress(KVPress):
    """H2O-style accumulated attention over all prefill queries (heavy hitters)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.needs = ("queries",)
        self.name = "h2o"

    def score(self, inputs: ScoreInputs) -> torch.Tensor:
        return scorers.h2o_scores(inputs)


@dataclass
class KnormPress(KVPress):
    """Key-norm: keep the smallest-norm keys."""

    reads_heads: ClassVar[str] = "key norms"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.name = "knorm"

    def score(self, inputs: ScoreInputs) -> torch.Tensor:
        return scorers.knorm_scores(inputs)


@dataclass
class RandomPress(KVPress):
    """Uniformly random eviction (seeded)."""

    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.name = "random"
        self._gen = torch.Generator().manual_seed(self.seed)

    def score(self, inputs: ScoreInputs) -> torch.Tensor:
        return scorers.random_scores(inputs, self._gen)


POLICIES: dict[str, type[KVPress]] = {
    "capkv": CapKVPress, "greedy_logdet": GreedyLogDetPress, "leverage": LeveragePress,
    "snapkv": SnapKVPress, "h2o": H2OPress, "streaming": StreamingLLMPress,
    "knorm": KnormPress, "random": RandomPress,
}


def make_press(policy: str, compression_ratio: float, config: PressConfig | None = None,
               **options: Any) -> KVPress:
    """Build a press by name (see ``POLICIES``) from ``config`` (a job's ``press`` section, one
    for every policy of a table: each reads its ``press_keys``; default ``PressConfig()``) at
    ``compression_ratio``. ``options`` set a press key the policy reads or one of its own
    arguments (``layer_ratios``, SnapKV's ``kernel``/``pooling``, ``seed``); any other raises
    ``ValueError`` naming it."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: use one of {', '.join(POLICIES)}")
    cls = POLICIES[policy]
    settings = {f.name for f in fields(PressConfig)}
    own = {f.name for f in fields(cls) if f.init} - settings - {"compression_ratio"}
    allowed = set(cls.press_keys) | own
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(f"policy {policy!r} takes no option(s) {', '.join(unknown)}: its "
                         f"options are {', '.join(sorted(allowed))}")
    return cls.from_config(PressConfig() if config is None else config, compression_ratio,
                           **options)
