"""Find the decoder layers of a transformers model: plain causal LMs (Llama, Qwen2, ...) and
audio/vision-language wrappers whose text decoder sits under ``language_model``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# attribute paths tried in order; the multimodal ones first so a wrapper's *text* decoder wins
LAYER_PATHS: tuple[str, ...] = (
    "model.language_model.layers",        # transformers 5: Qwen2Audio, LLaVA, Qwen2-VL, ...
    "language_model.model.layers",        # transformers 4: Qwen2Audio, LLaVA
    "language_model.layers",              # a bare decoder as language_model
    "model.thinker.model.layers",         # Qwen2.5-Omni thinker
    "thinker.model.layers",
    "base_model.model.model.layers",      # a PEFT (LoRA, unmerged) wrapper of a causal LM
    "model.layers",                       # LlamaForCausalLM, Qwen2ForCausalLM, ...
    "layers",                             # LlamaModel, Qwen2Model
    "transformer.h",                      # GPT-2 / Qwen-Audio-Chat style
    "gpt_neox.layers",
)


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def find_decoder_layers(model: Any, path: str | None = None) -> tuple[str, Any]:
    """``(path, layers)``: the ``torch.nn.ModuleList`` of decoder layers of ``model``.

    ``path`` (e.g. ``"model.language_model.layers"``) overrides the search. Raises
    ``ValueError`` naming the paths tried when none holds a non-empty ``ModuleList``.
    """
    import torch

    tried = (path,) if path else LAYER_PATHS
    for p in tried:
        layers = _get(model, p)
        if isinstance(layers, torch.nn.ModuleList) and len(layers) > 0:
            return p, layers
    raise ValueError(
        f"cannot find the decoder layers of {type(model).__name__}: none of "
        f"{', '.join(tried)} is a non-empty torch.nn.ModuleList; pass layer_path='<dotted "
        "attribute path to the ModuleList of decoder layers>'")


def hidden_size(model: Any) -> int:
    """The text decoder's hidden size (``text_config.hidden_size`` for multimodal wrappers)."""
    cfg = getattr(model, "config", None)
    for c in (getattr(cfg, "text_config", None), getattr(cfg, "thinker_config", None), cfg):
        if c is not None and getattr(c, "hidden_size", None):
            return int(c.hidden_size)
    raise ValueError(f"{type(model).__name__} has no config.hidden_size (nor text_config): "
                     "cannot check the steering vectors' size")


def resolve_layers(spec: str | int | Sequence[int], num_layers: int) -> list[int]:
    """Layer indices from ``"all"``, one index, a list of indices (negative counts from the
    end) or a ``"a:b"`` range string. Raises ``ValueError`` for an index out of range."""
    if isinstance(spec, str):
        s = spec.strip()
        if s == "all":
            return list(range(num_layers))
        if ":" in s:
            a, b = (int(x) if x else None for x in s.split(":", 1))
            out = list(range(num_layers))[slice(a, b)]
            if not out:
                raise ValueError(f"layers={spec!r} selects no layer of {num_layers}")
            return out
        try:
            spec = [int(x) for x in s.split(",")]
        except ValueError:
            raise ValueError(f"layers={spec!r}: use 'all', 'a:b', an index or a list of "
                             "indices") from None
    if isinstance(spec, int):
        spec = [spec]
    out = []
    for i in spec:
        j = int(i) + num_layers if int(i) < 0 else int(i)
        if not 0 <= j < num_layers:
            raise ValueError(f"layer index {i} is out of range: the model has {num_layers} "
                             f"decoder layers (valid: 0..{num_layers - 1} or negative)")
        out.append(j)
    if not out:
        raise ValueError("layers is empty: name at least one layer or use 'all'")
    return sorted(set(out))


# -- composition (icml.compose): models whose residual basis a producer changed ---------------
def compose_owner(model: Any) -> Any:
    """The object carrying ``icml.compose`` transform marks: the model itself, or the text
    decoder of an audio/vision wrapper (``language_model``) that a producer transformed."""
    from icml.compose import transforms

    for path in ("", "language_model", "model.language_model"):
        obj = _get(model, path) if path else model
        if obj is not None and transforms(obj):
            return obj
    return model


def residual_maps(model: Any, reader: str) -> Any:
    """``None`` for a model in its original basis; else the object whose ``icml.compose``
    maps the reads/writes go through (the output of decoder layer ``l`` is the residual stream
    at index ``l + 1``). A basis-changing transform without maps is refused here, before any
    forward pass, with one line naming the pair (``require_original_basis``)."""
    from icml.compose import require_original_basis, transforms

    owner = compose_owner(model)
    changers = [t for t in transforms(owner) if t.changes_residual_basis]
    if not changers:
        return None
    if any(not t.maps for t in changers):
        require_original_basis(owner, reader)
    return owner
