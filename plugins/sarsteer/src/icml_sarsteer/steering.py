"""SARSteer: fit per-layer refusal steering vectors with safe-space ablation, and apply them
with forward hooks that add alpha * beta_l * v_l at the last position of every chosen decoder
layer, on the prefill and on every cached decode step."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from icml_sarsteer.config import POSITIONS, SteerConfig
from icml_sarsteer.layers import find_decoder_layers, hidden_size, residual_maps, resolve_layers
from icml_sarsteer.refusal import refusal_text, with_refusal

FORMAT_VERSION = 1


@contextlib.contextmanager
def steering_hooks(model: Any, vectors: dict[int, Any], *, alpha: float = 0.1,
                   beta: dict[int, float] | None = None, position: str = "last",
                   layer_path: str | None = None) -> Iterator[list[Any]]:
    """Add ``alpha * beta[l] * vectors[l]`` to the output of decoder layer ``l`` at the last
    position (``position="all"``: every position) on every forward pass while the context is
    open; all hooks are removed on exit, also when the body raises. Yields the hook handles.

    The output is not modified in place (the official hook edits it in place; the numbers are
    the same). Vectors move to the hidden state's device and dtype once per (device, dtype).
    """
    if position not in POSITIONS:
        raise ValueError(f"position={position!r}: use one of {POSITIONS}")
    _, mods = find_decoder_layers(model, layer_path)
    for i in vectors:
        if not 0 <= i < len(mods):
            raise ValueError(f"steering vector for layer {i}, but the model has {len(mods)} "
                             "decoder layers")
    dim = hidden_size(model)
    for i, v in vectors.items():
        if v.shape[-1] != dim:
            raise ValueError(f"steering vector for layer {i} has size {v.shape[-1]} but the "
                             f"model's hidden size is {dim}: these vectors were fitted on "
                             "another model")
    # a producer's re-based residual stream (icml.compose): steer in the original basis
    owner = residual_maps(model, "sarsteer: steering vectors")
    handles = []
    try:
        for i, v in vectors.items():
            coef = float(alpha) * float((beta or {}).get(i, 1.0))
            cache: dict[tuple[Any, Any], Any] = {}

            def delta_of(h: Any, v: Any = v, coef: float = coef) -> Any:
                return (coef * v.float()).to(device=h.device)

            def hook(module: Any, args: Any, output: Any, v: Any = v, coef: float = coef,
                     cache: dict = cache, i: int = i, delta_of: Any = delta_of) -> Any:
                h = output[0] if isinstance(output, tuple) else output
                if owner is not None:
                    h = _steer_mapped(owner, h, i, delta_of(h), position)
                    return (h, *output[1:]) if isinstance(output, tuple) else h
                key = (h.device, h.dtype)
                delta = cache.get(key)
                if delta is None:
                    delta = cache[key] = (coef * v.float()).to(device=h.device, dtype=h.dtype)
                if position == "last":
                    h = h.clone()
                    h[..., -1, :] += delta
                else:
                    h = h + delta
                return (h, *output[1:]) if isinstance(output, tuple) else h

            hook._sarsteer = True  # type: ignore[attr-defined]
            handles.append(mods[i].register_forward_hook(hook))
        yield handles
    finally:
        for h in handles:
            h.remove()


def _steer_mapped(owner: Any, h: Any, i: int, delta: Any, position: str) -> Any:
    """Add ``delta`` (original basis) to the output ``h`` of decoder layer ``i`` of a model
    whose residual basis a producer changed: map to the original basis (index ``i + 1``), add,
    map back (exact for any invertible map, per-token state included)."""
    from icml.compose import from_original, to_original

    reader = "sarsteer: steering vectors"
    x = to_original(owner, h, i + 1, reader=reader).clone()
    if position == "last":
        x[..., -1, :] += delta.to(x.dtype)
    else:
        x = x + delta.to(x.dtype)
    return from_original(owner, x, i + 1, reader=reader).to(h.dtype)


def hook_count(model: Any, layer_path: str | None = None) -> int:
    """Steering hooks currently registered on the decoder layers (0 when nothing steers).
    Hooks of others (e.g. transformers' own output recorders) are not counted."""
    _, mods = find_decoder_layers(model, layer_path)
    return sum(getattr(h, "_sarsteer", False) for m in mods for h in m._forward_hooks.values())


@dataclass
class SARSteer(SteerConfig):
    """Safe-Ablated Refusal Steering: the settings are :class:`SteerConfig`'s fields (its
    defaults are the official code's), the rest is fitted state.

    ``fit`` runs, per harmful query, the forward pass with ``instruction`` and with
    ``instruction + refusal`` and per benign query the one with ``instruction``; then
    ``d_l = mean(h_refused - h_base)`` over harmful queries, ``U_k`` = top-k principal
    directions of the benign activations, ``v_l = d_l - lam U_k U_k^T d_l``.
    """

    name: str = field(default="sarsteer", init=False)
    # fitted state
    layer_ids: list[int] = field(default_factory=list, init=False)
    directions: Any = field(default=None, init=False)      # d, [L, D]
    vectors: Any = field(default=None, init=False)         # v, [L, D]
    bases: Any = field(default=None, init=False)           # U_k, [L, D, k]
    benign_means: Any = field(default=None, init=False)    # mu, [L, D]
    num_layers: int = field(default=0, init=False)
    dim: int = field(default=0, init=False)
    n_harmful: int = field(default=0, init=False)
    n_benign: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.refusal is None:
            self.refusal = refusal_text(self.exp)

    @classmethod
    def from_config(cls, config: SteerConfig, **changes: Any) -> SARSteer:
        """The method with the settings of ``config`` (the jobs' ``steer`` section), with
        ``changes`` (other fields of ``cls``, e.g. ``lam=0.0``) on top."""
        values = {f.name: getattr(config, f.name) for f in fields(SteerConfig)}
        values.update(changes)
        return cls(**values)

    # -- prompts -------------------------------------------------------------------------
    @property
    def refusal_instruction(self) -> str:
        """T0 + R as the official code builds it."""
        return with_refusal(self.instruction, self.refusal or "", self.separator)

    def transform_instruction(self, instruction: str) -> str:
        """Steering leaves the prompt alone (the prompt defense changes it)."""
        return instruction

    @property
    def fitted(self) -> bool:
        return self.vectors is not None

    # -- fitting -------------------------------------------------------------------------
    def fit(self, model: Any, harmful: Iterable[Any], benign: Iterable[Any],
            prompt: Callable[[Any, str], dict[str, Any]], *,
            progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
            **_: Any) -> SARSteer:
        """Collect the paired activations with ``prompt(example, text) -> model inputs`` and
        compute the steering vectors. Returns ``self``."""
        from icml_sarsteer.activations import collect_activations

        harmful, benign = list(harmful), list(benign)
        if not harmful:
            raise ValueError("the harmful set is empty: fit needs at least one harmful query")
        if not benign:
            raise ValueError("the benign set is empty: fit needs benign queries for U_k")
        _, mods = find_decoder_layers(model, self.layer_path)
        ids = resolve_layers(self.layers, len(mods))
        if self.lam != 0 and self.k > len(benign):
            raise ValueError(f"k={self.k} exceeds the number of benign samples ({len(benign)}):"
                             " lower k or add benign samples")
        kw = dict(layers=ids, layer_path=self.layer_path, progress=progress)
        base = collect_activations(model, prompt, harmful, self.instruction, **kw)
        refused = collect_activations(model, prompt, harmful, self.refusal_instruction, **kw)
        ben = collect_activations(model, prompt, benign, self.instruction, **kw)
        return self.fit_hidden(base, refused, ben, layer_ids=ids, num_layers=len(mods))

    def fit_hidden(self, harmful_base: Any, harmful_refused: Any, benign_base: Any, *,
                   layer_ids: Sequence[int] | None = None, num_layers: int | None = None
                   ) -> SARSteer:
        """Compute the vectors from recorded activations, each ``[N, L, D]`` (layer axis in
        the order of ``layer_ids``)."""
        import torch

        from icml_sarsteer.safe_space import benign_subspace, refusal_direction, safe_ablate

        if harmful_base.ndim != 3 or benign_base.ndim != 3:
            raise ValueError("activations must be [N, L, D]")
        n_l, dim = harmful_base.shape[1:]
        if benign_base.shape[1:] != harmful_base.shape[1:]:
            raise ValueError(f"benign activations {tuple(benign_base.shape)} do not match the "
                             f"harmful ones {tuple(harmful_base.shape)} in layers/hidden size")
        ids = list(layer_ids) if layer_ids is not None else list(range(n_l))
        if len(ids) != n_l:
            raise ValueError(f"{len(ids)} layer ids for activations of {n_l} layers")
        k = self.k if self.lam != 0 else min(self.k, benign_base.shape[0], dim)
        d = refusal_direction(harmful_base, harmful_refused)            # [L, D]
        mus, bases, vs = [], [], []
        for j in range(n_l):
            mu, u = benign_subspace(benign_base[:, j], k, center=self.center)
            mus.append(mu)
            bases.append(u)
            vs.append(safe_ablate(d[j], u, self.lam))
        self.layer_ids, self.directions = ids, d
        self.benign_means, self.bases, self.vectors = torch.stack(mus), torch.stack(bases), \
            torch.stack(vs)
        self.num_layers = int(num_layers or max(ids) + 1)
        self.dim = int(dim)
        self.n_harmful, self.n_benign = int(harmful_base.shape[0]), int(benign_base.shape[0])
        return self

    # -- steering ------------------------------------------------------------------------
    def _betas(self) -> dict[int, float]:
        if isinstance(self.beta, (int, float)):
            return {i: float(self.beta) for i in self.layer_ids}
        betas = list(self.beta)
        if len(betas) != len(self.layer_ids):
            raise ValueError(f"beta has {len(betas)} values for {len(self.layer_ids)} steered "
                             "layers: give one per steered layer or a single number")
        return {i: float(b) for i, b in zip(self.layer_ids, betas, strict=True)}

    def vector_dict(self) -> dict[int, Any]:
        """``{layer index: v_l}``."""
        self._require_fitted()
        return {i: self.vectors[j] for j, i in enumerate(self.layer_ids)}

    def apply(self, model: Any, alpha: float | None = None) -> contextlib.AbstractContextManager:
        """Context manager steering ``model`` (the one it was fitted on, or one with the same
        decoder depth and hidden size) while open; ``alpha`` overrides ``self.alpha``."""
        self._require_fitted()
        _, mods = find_decoder_layers(model, self.layer_path)
        if len(mods) != self.num_layers:
            raise ValueError(f"the vectors were fitted on a model with {self.num_layers} "
                             f"decoder layers; this one has {len(mods)}")
        return steering_hooks(model, self.vector_dict(),
                              alpha=self.alpha if alpha is None else alpha, beta=self._betas(),
                              position=self.position, layer_path=self.layer_path)

    def _require_fitted(self) -> None:
        if self.vectors is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(...) or "
                               "load(path) first")

    # -- persistence ---------------------------------------------------------------------
    _SETTINGS = ("alpha", "k", "lam", "layers", "beta", "position", "exp", "refusal",
                 "instruction", "separator", "center", "layer_path")

    def settings(self) -> dict[str, Any]:
        """The settings the vectors were fitted with (plain values)."""
        out = {}
        for key in self._SETTINGS:
            v = getattr(self, key)
            out[key] = list(v) if isinstance(v, (tuple, list)) else v
        return out

    def save(self, path: str | Path) -> Path:
        """Write the vectors, directions, bases and settings to one ``torch.save`` file."""
        import torch

        self._require_fitted()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"format": FORMAT_VERSION, "class": type(self).__name__,
                    "settings": self.settings(), "layer_ids": list(self.layer_ids),
                    "num_layers": self.num_layers, "dim": self.dim,
                    "n_harmful": self.n_harmful, "n_benign": self.n_benign,
                    "directions": self.directions, "vectors": self.vectors,
                    "bases": self.bases, "benign_means": self.benign_means}, path)
        return path

    @classmethod
    def load(cls, path: str | Path, model: Any = None) -> SARSteer:
        """Read a file written by :meth:`save`; with ``model``, check that its decoder depth
        and hidden size match the vectors."""
        import torch

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no saved steering vectors at {path}")
        if path.stat().st_size == 0:
            raise ValueError(f"{path} is empty: expected a sarsteer vectors file written by "
                             "SARSteer.save (train writes sarsteer_vectors.pt)")
        try:
            blob = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - torch's unpickling errors are many paragraphs
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            raise ValueError(f"{path} is not a readable sarsteer vectors file (expected one "
                             f"written by SARSteer.save; torch.load said: {first})") from None
        if not isinstance(blob, dict) or blob.get("format") != FORMAT_VERSION:
            raise ValueError(f"{path} is not a sarsteer vectors file (format "
                             f"{FORMAT_VERSION})")
        # files of 0.1.3 and earlier also hold the class's name (a fixed label, not a setting)
        obj = cls(**{k: v for k, v in blob["settings"].items() if k != "name"})
        obj.layer_ids = list(blob["layer_ids"])
        for key in ("num_layers", "dim", "n_harmful", "n_benign", "directions", "vectors",
                    "bases", "benign_means"):
            setattr(obj, key, blob[key])
        if model is not None:
            dim = hidden_size(model)
            if dim != obj.dim:
                raise ValueError(f"{path} holds vectors of size {obj.dim}, but the model's "
                                 f"hidden size is {dim}: they were fitted on another model")
            _, mods = find_decoder_layers(model, obj.layer_path)
            if len(mods) != obj.num_layers:
                raise ValueError(f"{path} was fitted on {obj.num_layers} decoder layers; the "
                                 f"model has {len(mods)}")
        return obj
