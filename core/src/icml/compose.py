"""Methods that stack on one model: the composition contract (issue 50).

A user quantizes a model, then evicts its KV cache, decodes it with a new sampler, steers it or
reads its layers. This module is what a model that one plugin returns guarantees to the next,
and how the CLI passes models between runs. It is light (no torch at import) and holds no
method logic: producers describe what they did, consumers ask.

**What a model returned by a ``quantize`` or ``train`` plugin guarantees**

1. It is a ``transformers`` ``PreTrainedModel`` (or behaves as one): ``model(input_ids)``
   returns logits, ``model.generate`` works, ``output_hidden_states=True`` returns one tensor per
   decoder layer plus the embeddings, ``past_key_values`` is a transformers ``Cache``.
2. If the producer changed anything a later reader could see besides the weights' values, it
   says so with :func:`mark` and a :class:`Transform`: whether the final logits are unchanged
   (``preserves_function``), whether the **residual stream** is now in another basis
   (``changes_residual_basis``: a rotation, a per-channel scaling folded into the weights), and
   the maps between the two bases. ``output_hidden_states`` of a marked model are in the
   *transformed* basis: that is what its own layers compute on.
3. A reader of intermediate layers (a logit lens, LED's layer read-outs, representation
   extraction, steering vectors) never reads a transformed basis as if it were the original:
   it maps with :func:`to_original` / :func:`readout_basis`, or, where it hooks module internals
   and cannot map, calls :func:`require_original_basis`, which refuses with one line naming the
   pair. A basis-changing transform without maps is refused, never silently misread.

Indices: ``index`` ``i`` is the residual stream after ``i`` decoder layers, ``0`` the embeddings'
output and ``L = config.num_hidden_layers`` the stream after the last layer, *before* the final
norm (``hidden_states[L]`` of most transformers models has the norm applied: a reader that wants
the pre-norm stream takes it from a hook, as logit lenses do).

A third party's transform meets the contract by calling :func:`mark` with its maps; nothing in
the core knows any plugin.

**Passing models between runs**

A plugin that produces a model saves it with :func:`save_model` into its run folder (``model/``:
``save_pretrained`` files plus ``icml-model.json``) and puts the folder in
``RunResult.artifacts["model"]``. A plugin that takes a model has a ``model`` setting and calls
:func:`load_model`, which accepts a packaged model name, a local HF folder, such a saved folder,
or the previous run's folder::

    icml run fptquant --set model=smollm2-135m-instruct --out runs
    icml run led --set model=runs/fptquant-quantize-<time>
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from icml.config import ConfigError

MANIFEST = "icml-model.json"
MODEL_DIRNAME = "model"
FORMAT = "icml.model/1"

__all__ = [
    "CompositionError", "Transform", "MANIFEST", "MODEL_DIRNAME", "mark", "transforms",
    "to_original", "from_original", "readout_basis", "require_original_basis",
    "require_original_heads", "unwrap",
    "describe", "save_model", "load_model", "resolve_model_dir", "is_model_spec",
]


class CompositionError(ConfigError):
    """A consumer cannot honestly use what a producer returned; one line names the pair."""


@dataclasses.dataclass
class Transform:
    """What a producer did to a model that later readers can see.

    ``changes_head_bases``: each attention head's key/value spaces were re-parametrised (e.g.
    trained pre-RoPE or value transforms): attention scores and outputs are unchanged, but a
    reader of individual keys or values (their norms, cosines, leverage) sees other numbers and
    must refuse (:func:`require_original_heads`).

    ``to_original(hidden, index)`` maps the residual stream after ``index`` decoder layers from
    this transform's basis to the model's basis before it; ``from_original`` is its inverse.
    ``unwrap()`` returns a plain model computing the same function with no transform left
    (``None`` where there is none, e.g. a quantized model). ``attrs`` holds JSON-safe details
    the producer wants in the saved manifest (bits, group size, ranks).

    ``unwrap`` and the maps are kept on the model: a closure over the model itself makes a
    reference cycle that keeps the model alive until the garbage collector runs; hold a
    :func:`weakref.ref` to the model in them (as fptquant does)."""

    name: str
    producer: str
    preserves_function: bool = False
    changes_residual_basis: bool = False
    changes_head_bases: bool = False
    quantized: bool = False
    to_original: Callable[[Any, int], Any] | None = None
    from_original: Callable[[Any, int], Any] | None = None
    unwrap: Callable[[], Any] | None = None
    notes: str = ""
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or not self.producer:
            raise ValueError("a Transform needs a name and the producer that made it")
        if (self.to_original is None) != (self.from_original is None):
            raise ValueError(f"transform {self.name!r}: give both to_original and from_original "
                             "or neither")

    @property
    def maps(self) -> bool:
        return self.to_original is not None

    def label(self) -> str:
        return f"{self.name} (from {self.producer})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe description (no callables): what :func:`save_model` writes."""
        return {"name": self.name, "producer": self.producer,
                "preserves_function": self.preserves_function,
                "changes_residual_basis": self.changes_residual_basis,
                "changes_head_bases": self.changes_head_bases,
                "quantized": self.quantized, "maps": self.maps, "notes": self.notes,
                "attrs": dict(self.attrs)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Transform:
        """The description read back (maps and unwrap are gone: only the producer's loader can
        restore them, so a basis-changing transform read this way is refused by readers)."""
        return cls(name=str(data.get("name") or "transform"),
                   producer=str(data.get("producer") or "unknown"),
                   preserves_function=bool(data.get("preserves_function", False)),
                   changes_residual_basis=bool(data.get("changes_residual_basis", False)),
                   changes_head_bases=bool(data.get("changes_head_bases", False)),
                   quantized=bool(data.get("quantized", False)),
                   notes=str(data.get("notes", "")), attrs=dict(data.get("attrs") or {}))


_ATTR = "icml_transforms"


# -- marking and reading transforms -------------------------------------------------------------
def mark(model: Any, transform: Transform, *, replace: bool = False) -> Any:
    """Record ``transform`` on ``model`` (appended: transforms stack in the order applied).

    ``replace=True``: the producer's own earlier marks on the model are replaced by this one,
    in the place of the first (a producer that goes on transforming the same model, e.g.
    transformed -> merged -> quantized, describes one transform, not three)."""
    if not isinstance(transform, Transform):
        raise TypeError(f"mark() takes an icml.compose.Transform, not {type(transform).__name__}")
    existing = list(getattr(model, _ATTR, None) or [])
    if replace and any(t.producer == transform.producer for t in existing):
        at = next(i for i, t in enumerate(existing) if t.producer == transform.producer)
        existing = [t for t in existing if t.producer != transform.producer]
        existing.insert(at, transform)
    else:
        existing.append(transform)
    object.__setattr__(model, _ATTR, existing)  # plain attribute, not an nn.Module child
    return model


def transforms(model: Any) -> list[Transform]:
    """The transforms recorded on ``model``, oldest first (empty for a plain model)."""
    return list(getattr(model, _ATTR, None) or [])


def _basis_changers(model: Any) -> list[Transform]:
    return [t for t in transforms(model) if t.changes_residual_basis]


def _refuse(t: Transform, reader: str) -> CompositionError:
    who = f"{reader} reads" if reader else "this reader reads"
    return CompositionError(
        f"{who} the residual stream, but {t.label()} changed its basis and gives no map back: "
        f"use the producer's unwrapped/merged model, or a producer that marks its maps")


def to_original(model: Any, hidden: Any, index: int, *, reader: str = "") -> Any:
    """``hidden`` (the residual stream after ``index`` layers of ``model``) in the basis of the
    model before any transform; identity for a plain model. Raises :class:`CompositionError`
    where a basis-changing transform has no map."""
    for t in reversed(_basis_changers(model)):
        if t.to_original is None:
            raise _refuse(t, reader)
        hidden = t.to_original(hidden, index)
    return hidden


def from_original(model: Any, hidden: Any, index: int, *, reader: str = "") -> Any:
    """The inverse of :func:`to_original`: an original-basis state into ``model``'s basis."""
    for t in _basis_changers(model):
        if t.from_original is None:
            raise _refuse(t, reader)
        hidden = t.from_original(hidden, index)
    return hidden


def num_layers(model: Any) -> int:
    """``L``: the decoder layers of a transformers causal LM (``config.num_hidden_layers``)."""
    cfg = getattr(model, "config", None)
    n = getattr(cfg, "num_hidden_layers", None)
    if n is None:
        n = getattr(getattr(cfg, "text_config", None), "num_hidden_layers", None)
    if n is None:
        raise CompositionError(f"{type(model).__name__} has no config.num_hidden_layers: not a "
                               "transformers causal LM")
    return int(n)


def readout_basis(model: Any, hidden: Any, index: int, *, reader: str = "") -> Any:
    """An intermediate residual state moved into the basis the model's own final norm and
    ``lm_head`` expect (the stream after the last layer): what a logit lens or LED's layer
    read-out applies before ``norm`` + ``lm_head``. Identity for a plain model."""
    if not _basis_changers(model):
        return hidden
    return from_original(model, to_original(model, hidden, index, reader=reader),
                         num_layers(model), reader=reader)


def require_original_basis(model: Any, reader: str) -> None:
    """Refuse (one line naming the pair) when ``model``'s residual stream is not in its original
    basis and the reader, which hooks module internals, cannot map it."""
    changers = _basis_changers(model)
    if changers:
        raise CompositionError(
            f"{reader} reads the residual stream inside the layers, but {changers[0].label()} "
            "changed its basis: run it on the producer's unwrapped/merged model instead")


def require_original_heads(model: Any, reader: str) -> None:
    """Refuse (one line naming the pair) when a transform re-parametrised the per-head key/value
    spaces that ``reader`` scores individually (key norms, key cosines, value leverage)."""
    changers = [t for t in transforms(model) if t.changes_head_bases]
    if changers:
        raise CompositionError(
            f"{reader} scores individual keys/values, but {changers[0].label()} re-parametrised "
            "each head's key/value spaces (attention unchanged, keys and values not): use a "
            "press that reads attention scores, or the model before that transform")


def unwrap(model: Any) -> Any:
    """A plain model computing the same function, every transform undone by its ``unwrap``;
    raises :class:`CompositionError` for a transform that cannot be undone (a quantized one)."""
    for t in reversed(transforms(model)):
        if t.unwrap is None:
            raise CompositionError(f"{t.label()} cannot be unwrapped into a plain model")
        model = t.unwrap()
    return model


def describe(model: Any) -> str:
    """One line: the model's class and its transforms (for logs and results)."""
    ts = transforms(model)
    name = type(model).__name__
    if not ts:
        return f"{name} (plain)"
    parts = []
    for t in ts:
        flags = [f for f, on in (("function-preserving", t.preserves_function),
                                 ("basis-changing", t.changes_residual_basis),
                                 ("head-bases-changing", t.changes_head_bases),
                                 ("quantized", t.quantized)) if on]
        parts.append(f"{t.label()}" + (f" [{', '.join(flags)}]" if flags else ""))
    return f"{name} + " + " + ".join(parts)


# -- saving and loading between runs ------------------------------------------------------------
def save_model(run_dir: str | Path, model: Any, tokenizer: Any = None, *, producer: str,
               base: str = "",
               transform: dict[str, Any] | list[dict[str, Any]] | None = None,
               loader: str | None = None, dirname: str = MODEL_DIRNAME) -> Path:
    """Save ``model`` (and ``tokenizer``) into ``run_dir/<dirname>`` so that :func:`load_model`
    reads it back with one call; return that folder (put it in ``artifacts["model"]``).

    ``transform`` describes what was done to the model, oldest first: one dict, a list of them
    (earlier producers' too), or by default the :class:`Transform` marks on the model as dicts.
    ``loader`` (``"module:function"``) is needed when plain ``from_pretrained`` cannot rebuild
    the model (custom wrappers, quantizers): it is called as ``fn(folder, device=...,
    dtype=...)`` and returns ``(model, tokenizer)`` with its own marks (live maps);
    :func:`load_model` then puts the other described transforms back around them."""
    folder = Path(run_dir) / dirname
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    if transform is None:
        described = [t.to_dict() for t in transforms(model)]
    else:
        described = [transform] if isinstance(transform, dict) else list(transform)
    manifest = {"format": FORMAT, "producer": producer, "base": base,
                "transforms": described, "loader": loader or ""}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return folder


def _packaged_names() -> list[str]:
    from icml.pretrained import PACKAGED_MODELS

    return sorted(PACKAGED_MODELS)


def _expected(spec: str) -> str:
    return (f"model={spec!r}: expected a packaged model name ({', '.join(_packaged_names())}), "
            "a local transformers folder (with config.json), or a previous run folder whose "
            "plugin saved a model")


def resolve_model_dir(spec: str | Path) -> Path:
    """The model folder ``spec`` names (a run folder resolves to its saved model); raises
    :class:`icml.ConfigError` naming the spec when it names none."""
    spec_s = str(spec)
    path = Path(spec_s).expanduser()
    if not path.exists():
        raise ConfigError(_expected(spec_s) + ": no such folder")
    if path.is_file():
        raise ConfigError(_expected(spec_s) + ": it is a file")
    result = path / "result.json"
    if result.is_file() and not (path / "config.json").is_file():
        try:
            saved = (json.loads(result.read_text(encoding="utf-8")).get("artifacts") or {}) \
                .get("model")
        except (OSError, ValueError) as exc:
            raise ConfigError(f"model={spec_s!r}: the run's result.json is unreadable ({exc})") \
                from None
        if saved:
            cand = Path(saved)
            cand = cand if cand.is_absolute() else path / cand
            if not cand.is_dir():  # the run folder was moved: try the same name inside it
                cand = path / Path(saved).name
            if cand.is_dir():
                return cand
        if (path / MODEL_DIRNAME).is_dir():
            return path / MODEL_DIRNAME
        raise ConfigError(f"model={spec_s!r}: this run folder holds no saved model (its plugin "
                          "does not produce one, or the run failed before saving it)")
    if (path / MANIFEST).is_file() or (path / "config.json").is_file():
        return path
    if (path / MODEL_DIRNAME / MANIFEST).is_file():
        return path / MODEL_DIRNAME
    raise ConfigError(_expected(spec_s) + ": the folder has no config.json, icml-model.json "
                      "or result.json")


def is_model_spec(value: str) -> bool:
    """Whether ``value`` could name a model (cheap: no loading): a packaged name or a path
    that exists."""
    if not isinstance(value, str) or not value:
        return False
    return value in _packaged_names() or Path(value).expanduser().exists()


def _torch_dtype(dtype: Any) -> Any:
    if dtype is None or not isinstance(dtype, str):
        return dtype
    import torch

    got = getattr(torch, dtype, None)
    if not isinstance(got, torch.dtype):
        raise ConfigError(f"dtype={dtype!r} is not a torch dtype (float32, bfloat16, float16)")
    return got


def load_model(spec: str | Path, *, device: Any = "cpu", dtype: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a packaged model name, a local transformers folder, a folder
    :func:`save_model` wrote, or a previous run folder (``tokenizer`` is ``None`` for a folder
    without tokenizer files). The producer's ``loader`` rebuilds
    models plain ``from_pretrained`` cannot (and restores their :class:`Transform` marks); a
    saved model without one gets its transforms back as descriptions, so a basis-changing one
    is refused by readers rather than misread. Errors are one-line :class:`icml.ConfigError`."""
    spec_s = str(spec)
    if spec_s in _packaged_names() and not Path(spec_s).exists():
        from icml.models import load_pretrained

        return load_pretrained(spec_s, dtype=_torch_dtype(dtype), device=device)
    folder = resolve_model_dir(spec_s)
    manifest: dict[str, Any] = {}
    if (folder / MANIFEST).is_file():
        try:
            manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"model={spec_s!r}: {folder / MANIFEST} is unreadable ({exc})") \
                from None
        if manifest.get("format") != FORMAT:
            raise ConfigError(f"model={spec_s!r}: {folder / MANIFEST} is format "
                              f"{manifest.get('format')!r}, this icml-core reads {FORMAT!r}")
    loader = manifest.get("loader") or ""
    described = [d for d in manifest.get("transforms") or [] if isinstance(d, dict)]
    if loader:
        fn = _import_loader(loader, manifest.get("producer") or "", spec_s)
        model, tok = fn(folder, device=device, dtype=_torch_dtype(dtype))
        _restore_marks(model, described)
        return model, tok
    from icml.models import load_causal_lm

    try:
        if any((folder / f).is_file() for f in _TOKENIZER_FILES):
            model, tok = load_causal_lm(str(folder), device=device, dtype=_torch_dtype(dtype))
        else:  # a model without an HF tokenizer (e.g. a mesh backbone): no tokenizer
            model, tok = _load_model_only(folder, device, _torch_dtype(dtype)), None
    except ValueError as exc:
        raise ConfigError(f"model={spec_s!r}: {str(exc).splitlines()[0]}") from None
    _restore_marks(model, described)
    return model, tok


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _load_model_only(folder: Path, device: Any, dtype: Any) -> Any:
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    except (OSError, ValueError) as exc:
        raise ValueError(f"could not load a causal LM from {str(folder)!r}: {exc}") from None
    return model.to(device).eval()


def _restore_marks(model: Any, described: list[dict[str, Any]]) -> None:
    """The manifest's transforms back on a loaded model, oldest first: a live mark the loader
    restored (same name and producer) is kept as it is (its maps work); the others come back
    as descriptions (no maps: a basis-changing one is refused by readers, never misread)."""
    live = transforms(model)
    rebuilt: list[Transform] = []
    for data in described:
        match = next((t for t in live if t.name == data.get("name")
                      and t.producer == data.get("producer")), None)
        if match is not None:
            live.remove(match)
            rebuilt.append(match)
        else:
            rebuilt.append(Transform.from_dict(data))
    object.__setattr__(model, _ATTR, rebuilt + live)


def _import_loader(loader: str, producer: str, spec: str) -> Callable[..., tuple[Any, Any]]:
    module, _, func = loader.partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError:
        dist = f"icml-{producer}" if producer else module.split(".")[0]
        raise ConfigError(f"model={spec!r} was saved by {producer or module}, whose loader "
                          f"{loader!r} is not installed: pip install {dist}") from None
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise ConfigError(f"model={spec!r}: loader {loader!r} names no function")
    return fn
