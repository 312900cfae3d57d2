"""Run one capability of one plugin: build its config, make a fresh run folder, call the hook
through a caller that reaches only that plugin (plus wrappers), write ``result.json`` and
``report.md`` -- also when the run fails, so nothing written so far is lost."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import importlib.metadata as md
import importlib.util
import logging
import platform
import re
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from icml.config import ConfigError, build_config, load_toml, to_dict, validate
from icml.hookspecs import CAPABILITY_HOOKS
from icml.loader import PluginHost, load_plugins
from icml.types import RunContext, RunResult


class Terminated(KeyboardInterrupt):
    """SIGTERM during a run: handled as Ctrl-C (``status: interrupted``, finished arms kept)."""


def interruption(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or SIGTERM) behind ``exc``, also when Python wrapped it: a KeyboardInterrupt
    raised inside ``__set_name__`` during an import arrives as ``RuntimeError`` whose
    ``__cause__`` is the interrupt."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


class _SigtermState:
    """What :func:`_sigterm_as_interrupt` saw: ``shielded`` once the hook has returned (a SIGTERM
    then only sets ``pending``, so the finished result is still written)."""

    def __init__(self) -> None:
        self.shielded = False
        self.pending = False


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[_SigtermState]:
    """Turn SIGTERM into :class:`Terminated` for the run (main thread only; restored after).

    Only the first SIGTERM raises: the kernel may deliver a parent-death signal more than once
    (once per thread of the dying parent), and a second one must not kill the process while it
    writes the interrupted result. The handler stays installed until the result is on disk."""
    state = _SigtermState()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum: int, frame: Any) -> None:
        if state.shielded or state.pending:
            state.pending = True
            return
        state.pending = True
        raise Terminated("terminated (SIGTERM)")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # no signals here (an embedded interpreter)
        yield state
        return
    try:
        yield state
    finally:
        signal.signal(signal.SIGTERM, previous)


class RunFailed(RuntimeError):
    """The plugin raised or returned something invalid; ``result`` was still written."""

    def __init__(self, message: str, result: RunResult) -> None:
        super().__init__(message)
        self.result = result


def resolve_capability(host: PluginHost, slug: str, capability: str | None) -> str:
    info = host.loaded(slug).info
    assert info is not None
    if capability is None:
        return info.primary
    if capability not in info.capabilities:
        allowed = ", ".join(info.capabilities)
        raise ConfigError(f"plugin {slug!r} has no capability {capability!r}: it offers {allowed}")
    return capability


def make_config(host: PluginHost, slug: str, capability: str, config: Any = None,
                config_file: str | Path | None = None, overrides: list[str] | None = None) -> Any:
    """The validated config instance for a run (from an instance, a dict, a TOML file and
    ``--set`` overrides, in that order of precedence: overrides win)."""
    info = host.loaded(slug).info
    assert info is not None
    schema = info.configs[capability]
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        if type(config) is not schema:
            raise ConfigError(f"config for {slug} {capability} must be a {schema.__name__}, "
                              f"got {type(config).__name__}")
        if not config_file and not overrides:
            return validate(config)
        config = to_dict(config)
    data = dict(config or {})
    if config_file:
        data = {**data, **load_toml(config_file)}
    return build_config(schema, data, overrides)


DTYPES = ("float32", "bfloat16", "float16", "float64")
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def check_device(device: str) -> None:
    """A clear error for a device string torch would reject, or CUDA asked for but absent."""
    if not _DEVICE.match(device):
        raise ConfigError(f"device {device!r} is not valid: use auto, cpu, cuda, cuda:N or mps")
    if device == "mps" and importlib.util.find_spec("torch") is not None:
        import torch

        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ConfigError("device 'mps' asked for, but torch sees no Apple MPS device "
                              "(it exists only on macOS with Apple silicon): use --device cpu "
                              "(or auto)")
    if device.startswith("cuda") and importlib.util.find_spec("torch") is not None:
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"device {device!r} asked for, but torch sees no CUDA device: "
                              "use --device cpu (or auto)")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(f"device {device!r}: only {torch.cuda.device_count()} CUDA "
                              "device(s) visible")


def fresh_run_dir(out: str | Path, slug: str, capability: str) -> Path:
    """A new folder under ``out`` that no previous run used. Raises :class:`ConfigError` (one
    line) when ``out`` is a file, lies under a file or cannot be written."""
    root = Path(out)
    where = f"output folder {str(root)!r} (--out)"
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{where} is a file, not a folder: pass a folder path")
    for parent in root.parents:
        if parent.exists() and not parent.is_dir():
            raise ConfigError(f"{where} lies under {str(parent)!r}, which is a file: pass a "
                              "folder path")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{where} cannot be created: {exc.strerror or exc}; pass a writable "
                          "folder") from None
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        path = root / f"{slug}-{capability}-{stamp}" if i == 0 else \
            root / f"{slug}-{capability}-{stamp}-{i}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(f"{where} is not writable: {exc.strerror or exc}; pass a "
                              "writable folder") from None
    raise ConfigError(f"could not create a fresh run folder under {root}: 1000 runs started "
                      "in this second; use another --out")


SEED_MAX = 2**32 - 1


def check_seed(seed: object) -> int:
    """The seed as an int, or a :class:`ConfigError` naming ``--seed`` and the allowed range
    (NumPy's legacy seeding, which many libraries still call, accepts only 0 .. 2**32-1)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise ConfigError(f"--seed {seed!r} is not valid: use an integer from 0 to {SEED_MAX}")
    return seed


def versions(distribution: str) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("icml-core", distribution, "torch", "transformers", "numpy"):
        try:
            out[name] = md.version(name)
        except (md.PackageNotFoundError, ValueError):
            pass
    return out


def run(slug: str, capability: str | None = None, *, config: Any = None,
        config_file: str | Path | None = None, overrides: list[str] | None = None,
        out: str | Path = "runs", seed: int = 0, device: str = "auto",
        dtype: str = "float32", host: PluginHost | None = None,
        show_progress: bool = True, threads: int | None = None,
        on_run_dir: Callable[[Path], None] | None = None) -> RunResult:
    """Run ``capability`` (default: the plugin's primary one) of plugin ``slug``.

    Raises :class:`~icml.loader.UnknownPluginError`, :class:`~icml.loader.PluginLoadError` or
    :class:`~icml.config.ConfigError` before anything is written (a bad seed, device, dtype,
    config value or ``out`` folder), and :class:`RunFailed` (after writing ``result.json`` with
    ``status: failed`` and the traceback in ``run.log``) when the plugin itself fails. A hook may
    raise ``ConfigError`` for a setting only it can check (a value out of range for the model,
    a missing file): it is re-raised after the failed result is written. ``KeyboardInterrupt``
    is re-raised after writing ``status: interrupted``. On failure and interruption the result
    keeps everything the plugin recorded with :meth:`RunContext.record` (``partial: true``).
    ``on_run_dir`` is called with the run folder as soon as it exists.
    """
    check_seed(seed)
    check_device(device)
    if threads is not None and (isinstance(threads, bool) or threads < 1):
        raise ConfigError(f"threads must be >= 1, got {threads!r} (--threads N)")
    if dtype not in DTYPES:
        raise ConfigError(f"dtype {dtype!r} is not supported: use one of {', '.join(DTYPES)}")
    host = host or load_plugins(only=[slug])
    rec = host.loaded(slug)
    capability = resolve_capability(host, slug, capability)
    cfg = make_config(host, slug, capability, config, config_file, overrides)
    if threads is None:  # `icml reproduce --threads N` asks through the environment
        from icml.results import ResultsError, env_threads

        try:
            threads = env_threads()
        except ResultsError as exc:
            raise ConfigError(str(exc)) from None
    if threads is None and rec.info is not None:
        threads = rec.info.default_threads
    run_dir = fresh_run_dir(out, slug, capability)
    logger, handler = _run_logger(run_dir)
    if on_run_dir is not None:
        on_run_dir(run_dir)

    def fill(result: RunResult) -> RunResult:
        result.plugin, result.capability = slug, capability
        result.plugin_version = rec.version or (rec.info.version if rec.info else "")
        result.seed, result.device, result.dtype, result.threads = seed, device, dtype, threads
        result.config = to_dict(cfg)
        result.versions = versions(rec.distribution)
        result.run_dir = str(run_dir)
        return result

    def on_record(partial: RunResult) -> None:
        try:
            _write_json(run_dir, fill(partial))
        except Exception as exc:  # noqa: BLE001 - a progress snapshot must never stop the run
            logger.warning("could not write the running result: %s", exc)

    ctx = RunContext(out_dir=run_dir, seed=seed, device=device, dtype=dtype, logger=logger,
                     show_progress=show_progress, threads=threads, on_record=on_record)
    hook_name = CAPABILITY_HOOKS[capability]
    others = [m for m in host.method_plugins() if m is not rec.module]
    caller = host.pm.subset_hook_caller(hook_name, remove_plugins=others)
    error, interrupted, config_error = "", None, None
    logger.info("run %s %s seed=%s device=%s threads=%s -> %s", slug, capability, seed, device,
                threads if threads is not None else "torch default", run_dir)
    result: RunResult | None = None
    start = time.perf_counter()
    with _sigterm_as_interrupt() as sigterm:
        try:
            returned = caller(ctx=ctx, config=cfg)
            sigterm.shielded = True  # from here a SIGTERM waits until the result is written
            if not isinstance(returned, RunResult):
                raise TypeError(f"{hook_name} of {slug!r} returned {type(returned).__name__}, "
                                "not icml.RunResult")
            result = returned
            if ctx.calls_problem():  # a setup failure is not a measurement of zero
                raise RuntimeError(ctx.calls_problem())
            problems = result.problems()
            if problems:
                raise TypeError(f"{hook_name} of {slug!r} returned an invalid result: "
                                + "; ".join(problems))
        except BaseException as exc:  # noqa: BLE001 - keep what was written, then report
            sigterm.shielded = True
            exc = interruption(exc) or exc
            if isinstance(exc, SystemExit):
                error = f"the plugin called sys.exit({exc.code!r})"
            else:
                error = f"{type(exc).__name__}: {exc}"
            logger.error("run failed: %s", error)
            handler.stream.write(traceback.format_exc())
            handler.flush()
            if result is None:  # nothing returned: keep what the plugin recorded as it went
                result = ctx.partial
                result.partial = bool(result.metrics or result.tables or result.artifacts
                                      or result.notes)
            result.status, result.error = "failed", error
            if isinstance(exc, KeyboardInterrupt):
                result.status, interrupted = "interrupted", exc
            elif isinstance(exc, ConfigError):  # a setting only the hook could check
                config_error = exc
            result.timings.setdefault("total_s", round(time.perf_counter() - start, 4))
        fill(result)
        _write(run_dir, result, logger)
        if sigterm.pending and interrupted is None:  # SIGTERM while writing a finished run
            interrupted = Terminated("terminated (SIGTERM) after the run finished")
    logger.removeHandler(handler)
    handler.close()
    if interrupted is not None:
        raise interrupted
    if config_error is not None:
        raise config_error
    if error:
        raise RunFailed(f"{slug} {capability} failed: {error} (details: {run_dir / 'run.log'})",
                        result)
    return result


def _write_json(run_dir: Path, result: RunResult) -> None:
    try:
        text = result.to_json()
    except (TypeError, ValueError):
        text = result.to_json(strict=False)
    tmp = run_dir / "result.json.tmp"
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(run_dir / "result.json")  # atomic: a reader never sees half a file


def _write(run_dir: Path, result: RunResult, logger: logging.Logger) -> None:
    """Write ``result.json`` then ``report.md``; an unserialisable value is written as its repr
    (and logged) rather than losing the run."""
    try:
        result.to_json()
    except (TypeError, ValueError) as exc:
        logger.warning("result has values JSON cannot hold, written as text: %s", exc)
    _write_json(run_dir, result)
    try:
        report = result.to_markdown()
    except Exception as exc:  # noqa: BLE001 - result.json is already safe on disk
        logger.warning("report.md could not be rendered: %s", exc)
        report = f"# {result.plugin} {result.capability}\n\n- status: {result.status}\n\n" \
                 f"report could not be rendered ({exc}); see result.json\n"
    (run_dir / "report.md").write_text(report, encoding="utf-8")


def _run_logger(run_dir: Path) -> tuple[logging.Logger, logging.Handler]:
    logger = logging.getLogger(f"icml.run.{run_dir.name}")
    logger.setLevel(logging.INFO)
    logger.propagate = True
    handler = logging.FileHandler(run_dir / "run.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    return logger, handler


def load_result(path: str | Path) -> RunResult:
    """Read a ``result.json`` (or a run folder) back into a :class:`RunResult`, non-finite
    floats restored."""
    p = Path(path)
    if p.is_dir():
        p = p / "result.json"
    return RunResult.from_json(p.read_text(encoding="utf-8"))


__all__ = ["run", "RunFailed", "check_seed", "load_result", "fresh_run_dir", "make_config"]
