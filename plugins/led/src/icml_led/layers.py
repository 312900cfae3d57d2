"""Layer-wise posteriors: logit-lens logits of the final layer and of intermediate layers.

Indices are positions in transformers' ``outputs.hidden_states`` (length ``L + 1``): ``0`` is the
embedding output, ``i`` the residual stream after block ``i`` and ``L`` the final hidden state,
which transformers has *already* passed through the final norm (never normalise it twice).

The official LED code uses the final state plus ``depth - 1`` intermediate states taken from the
top down while skipping the state after block ``L - 1``: ``{L} + {L-2, ..., L-depth}``. The paper's
figure draws ``{L} + {L-1, ..., L-depth+1}``; both are available (``skip_penultimate``).
"""

from __future__ import annotations

from typing import Any

LAYER_SETS = ("official", "figure")


def num_layers_of(model: Any) -> int:
    """The number of decoder blocks of a transformers causal LM."""
    cfg = getattr(model, "config", None)
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    n = getattr(cfg, "num_hidden_layers", None)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"{type(model).__name__} has no config.num_hidden_layers: LED needs a "
                         "decoder-only transformers model (Llama, Qwen2, ...) with hidden states")
    return n


def layer_indices(num_layers: int, depth: int, skip_penultimate: bool = True,
                  layers: list[int] | tuple[int, ...] | None = None) -> list[int]:
    """Hidden-state indices of the ``depth`` posteriors, final layer first.

    ``skip_penultimate=True`` is the official code's set ``[L, L-2, ..., L-depth]``; ``False`` is
    the paper's figure, ``[L, L-1, ..., L-depth+1]``. An explicit ``layers`` list (intermediate
    indices, top down) replaces both; the final layer ``L`` is always index 0.
    """
    L = int(num_layers)
    if layers is not None:
        inter = [int(i) for i in layers]
        bad = [i for i in inter if not 0 <= i < L]
        if bad:
            raise ValueError(f"layers {bad} are outside the model's intermediate hidden states "
                             f"0..{L - 1} (it has {L} layers; index {L} is the final layer, "
                             "which is always included)")
        return [L, *inter]
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
    first = L - 2 if skip_penultimate else L - 1
    inter = [first - j for j in range(depth - 1)]
    max_depth = L if skip_penultimate else L + 1
    if inter and inter[-1] < 0:
        raise ValueError(f"depth {depth} is larger than the model allows: it has {L} layers, so "
                         f"depth <= {max_depth} with skip_penultimate={skip_penultimate}; "
                         "lower depth or pass explicit layers")
    return [L, *inter]


def lm_head_of(model: Any) -> Any:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        raise ValueError(f"{type(model).__name__} has no output embeddings (lm_head): LED needs a "
                         "causal LM head to read out intermediate layers")
    return head


def final_norm_of(model: Any) -> Any:
    """The final norm of a Llama/Qwen2-style model (``model.model.norm``), also through a PEFT
    wrapper (an unmerged LoRA model: ``get_base_model()``)."""
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base):
        model = get_base()
    base = getattr(model, "model", None) or getattr(model, "base_model", None)
    norm = getattr(base, "norm", None) or getattr(base, "final_layernorm", None)
    if norm is None:
        raise ValueError(f"could not find the final norm of {type(model).__name__} (looked for "
                         "model.model.norm): use use_final_norm=False")
    return norm


READER = "LED's layer read-out"


def changes_basis(model: Any) -> bool:
    """Whether a producer marked ``model``'s residual stream as being in another basis
    (``icml.compose``): its intermediate states must then be mapped before the head reads them."""
    from icml.compose import transforms

    return any(t.changes_residual_basis for t in transforms(model))


def check_readout(model: Any, use_final_norm: bool) -> None:
    """Refuse (one-line ``icml.compose.CompositionError`` naming the pair) a read-out that a
    transformed model cannot give honestly. The final-norm read-out (``lm_head(norm(h_i))``)
    is mapped with ``icml.compose.readout_basis``. The un-normed read-out (``lm_head(h_i)``,
    official ``ln=0``) depends on how the model is parametrised, not only on its function (a
    producer may fold the final norm's gains into ``lm_head``): it reads ``to_original(h_i)``
    through the head of the producer's unwrapped model (``icml.compose.unwrap``), and is
    refused where a basis-changing transform cannot be unwrapped (a quantized model)."""
    from icml.compose import CompositionError, transforms

    if use_final_norm:
        return
    for t in transforms(model):
        if t.changes_residual_basis and (t.unwrap is None or not t.maps):
            raise CompositionError(
                f"{READER} without the final norm (use_final_norm=false) on {t.label()}: the "
                "un-normed read-out of a re-based residual stream needs the producer's maps "
                "and its unwrapped model's head, and this transform gives "
                f"{'no map' if not t.maps else 'no unwrap'}; use use_final_norm=true (mapped)")


def original_head(model: Any) -> Any:
    """``lm_head`` of the plain model ``icml.compose.unwrap(model)`` returns (the original basis
    and parametrisation), cached on ``model`` until its own head or final norm changes (a
    training step bumps their tensors' versions)."""
    from icml.compose import unwrap

    key = (lm_head_of(model).weight._version, final_norm_of(model).weight._version)
    cached = getattr(model, "_icml_led_original_head", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    head = lm_head_of(unwrap(model))
    object.__setattr__(model, "_icml_led_original_head", (key, head))
    return head


def readout_state(model: Any, hidden_states: Any, index: int,
                  use_final_norm: bool = False) -> Any:
    """The full ``(B, T, H)`` state ``hidden_states[index]`` as the read-out's head expects it:
    through the final norm, in the basis the model's own norm and ``lm_head`` expect
    (``icml.compose.readout_basis``); without it, in the original basis (``to_original``, read
    by :func:`readout_head`). Identity on a plain model; a one-line ``CompositionError`` where
    the producer gives no map. The whole sequence is mapped (not one position): a producer's
    map or norm may carry per-token state of the same forward."""
    from icml.compose import readout_basis, to_original

    check_readout(model, use_final_norm)
    if not use_final_norm:
        return to_original(model, hidden_states[index], index, reader=READER)
    return final_norm_of(model)(readout_basis(model, hidden_states[index], index, reader=READER))


def readout_head(model: Any, use_final_norm: bool) -> Any:
    """The head that reads :func:`readout_state`: the model's own with the final norm, the
    unwrapped model's without it (on a re-based model; the model's own on a plain one)."""
    if use_final_norm or not changes_basis(model):
        return lm_head_of(model)
    return original_head(model)


def intermediate_logits(model: Any, hidden_states: Any, indices: list[int],
                        use_final_norm: bool = False, position: int = -1,
                        rows: Any = None) -> Any:
    """Logit-lens logits ``lm_head(h_i)`` (optionally ``lm_head(norm(h_i))``) at ``position`` for
    each hidden-state index in ``indices``: a float32 tensor ``(B, len(indices), V)``; with
    ``rows`` (an index tensor) only those batch rows are projected. On a model whose residual
    basis a producer changed (``icml.compose``), each state is first mapped with
    :func:`readout_state`."""
    import torch

    if not indices:
        ref = hidden_states[-1]
        n = ref.shape[0] if rows is None else len(rows)
        return torch.empty(n, 0, lm_head_of(model).out_features, device=ref.device)
    if changes_basis(model):
        states = [readout_state(model, hidden_states, i, use_final_norm) for i in indices]
        sel = (lambda s: s[:, position]) if rows is None else (lambda s: s[rows, position])
        head = readout_head(model, use_final_norm)
        return head(torch.stack([sel(s) for s in states], dim=1)).float()
    if rows is None:
        h = torch.stack([hidden_states[i][:, position] for i in indices], dim=1)
    else:
        h = torch.stack([hidden_states[i][rows, position] for i in indices], dim=1)
    if use_final_norm:
        h = final_norm_of(model)(h)
    return lm_head_of(model)(h).float()


def layerwise_from_outputs(model: Any, outputs: Any, indices: list[int],
                           use_final_norm: bool = False) -> Any:
    """``(B, d, V)`` float32 logits from one forward's outputs: index 0 is the model's own
    last-position logits (exactly), then the intermediate indices ``indices[1:]``."""
    import torch

    hs = getattr(outputs, "hidden_states", None)
    if hs is None:
        raise ValueError("the model's outputs carry no hidden_states: LED needs a model whose "
                         "forward accepts output_hidden_states=True")
    final = outputs.logits[:, -1].float()
    inter = intermediate_logits(model, hs, list(indices[1:]), use_final_norm)
    return torch.cat([final[:, None], inter.to(final.device)], dim=1)


def layerwise_logits(model: Any, input_ids: Any, attention_mask: Any = None, *, depth: int = 8,
                     skip_penultimate: bool = True, use_final_norm: bool = False,
                     layers: list[int] | None = None) -> Any:
    """Run ``model`` once on ``input_ids`` and return the next-token logits of the final layer
    and ``depth - 1`` intermediate layers, ``(B, d, V)``, final layer first."""
    import torch

    idx = layer_indices(num_layers_of(model), depth, skip_penultimate, layers)
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    output_hidden_states=True, return_dict=True)
    return layerwise_from_outputs(model, out, idx, use_final_norm)


def entropy(logits: Any, temperature: float = 1.0) -> Any:
    """Shannon entropy (nats) of ``softmax(logits / temperature)`` over the last dimension."""
    import torch

    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def entropy_profiles(model: Any, input_ids: Any, mask: Any, use_final_norm: bool = False,
                     temperatures: tuple[float, ...] = (1.0,), attention_mask: Any = None
                     ) -> dict[float, list[float]]:
    """:func:`entropy_profile` for several temperatures from one forward pass:
    ``{T: [entropy of layer 1, ..., layer L]}``."""
    import torch

    L = num_layers_of(model)
    m = mask.bool()
    prof: dict[float, list[float]] = {float(t): [] for t in temperatures}
    mapped = changes_basis(model)
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    output_hidden_states=True, return_dict=True)
        for i in range(1, L + 1):
            if i == L:
                lg = out.logits[m].float()
            elif mapped:
                lg = readout_head(model, use_final_norm)(
                    readout_state(model, out.hidden_states, i, use_final_norm)[m]).float()
            else:
                h = out.hidden_states[i][m]
                lg = lm_head_of(model)(final_norm_of(model)(h) if use_final_norm else h).float()
            for t in prof:
                prof[t].append(float(entropy(lg, t).mean()))
    return prof


def entropy_profile(model: Any, input_ids: Any, mask: Any, use_final_norm: bool = False,
                    temperature: float = 1.0, attention_mask: Any = None) -> list[float]:
    """Mean logit-lens entropy of ``softmax(lm_head(h_i) / temperature)`` at the positions where
    ``mask`` is true, for every hidden-state index ``1..L`` (``L`` = the final layer, which is
    the model's own logits; the embeddings, index 0, are left out). ``use_final_norm=False`` is
    what LED reads (official ``ln=0``); ``True`` is the standard logit lens."""
    return entropy_profiles(model, input_ids, mask, use_final_norm, (temperature,),
                            attention_mask)[float(temperature)]
