"""Record h_l, the output of decoder layer l at the last position, for every chosen layer in
one forward pass (the official ``hook_hidden_states``/``get_hidden_states``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from icml_sarsteer.layers import find_decoder_layers, residual_maps, resolve_layers

READER = "sarsteer: activation reads"


def _hidden(output: Any) -> Any:
    return output[0] if isinstance(output, tuple) else output


def last_position_hidden(model: Any, inputs: dict[str, Any], layers: str | Sequence[int] = "all",
                         layer_path: str | None = None) -> Any:
    """Run ``model(**inputs)`` once (no grad) and return ``[B, L, D]`` float32 on the CPU: the
    output of each chosen decoder layer at the last position (use left padding for batches).
    On a model whose residual basis a producer changed (``icml.compose``) the states are mapped
    to the original basis (``to_original``), or refused when the producer gives no map."""
    import torch

    from icml.compose import to_original

    _, mods = find_decoder_layers(model, layer_path)
    ids = resolve_layers(layers, len(mods))
    owner = residual_maps(model, READER)
    store: dict[int, Any] = {}
    handles = []
    for i in ids:
        def hook(module: Any, args: Any, output: Any, i: int = i) -> None:
            h = _hidden(output)
            if owner is not None:
                h = to_original(owner, h, i + 1, reader=READER)
            store[i] = h[..., -1, :].detach().float().cpu()
        handles.append(mods[i].register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(**inputs, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    missing = [i for i in ids if i not in store]
    if missing:
        raise RuntimeError(f"decoder layers {missing} did not run in the forward pass")
    return torch.stack([store[i] for i in ids], 1)


def collect_activations(model: Any, prompt: Callable[[Any, str], dict[str, Any]],
                        examples: Iterable[Any], text: str, layers: str | Sequence[int] = "all",
                        layer_path: str | None = None,
                        progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None) -> Any:
    """``[N, L, D]``: :func:`last_position_hidden` for each example, one forward pass per
    example (batch 1, as the official code), with the inputs built by ``prompt(example, text)``.
    """
    import torch

    examples = list(examples)
    if not examples:
        raise ValueError("no examples: the set to collect activations from is empty")
    it = progress(examples) if progress else examples
    rows = [last_position_hidden(model, prompt(ex, text), layers, layer_path)[0] for ex in it]
    return torch.stack(rows, 0)
